//! An operation awaiting its responses on a DSA connection: where its
//! responses go ([`Sink`]), what it needs to be logged, counted, held or
//! re-sent, and the one way it is failed ([`Pending::fail`]).

use super::{Delivery, Resend};
use crate::dsa_state::InFlight;
use crate::error::Error;
use crate::metrics::Metrics;
use bytes::Bytes;
use std::sync::Arc;
// Tokio's clock: operation timeouts follow paused time in tests.
use tokio::sync::oneshot;
use tokio::time::Instant;

/// Where a response goes.
pub enum Sink {
    /// A client's operation, or one partition's share of a spanning search.
    To(Arc<dyn Delivery>),
    /// Handed to a task of the router awaiting it (binds, probes): the
    /// final response PDU, unmodified.
    Waiter(oneshot::Sender<Bytes>),
    /// Moved elsewhere (re-sent); nothing to answer.
    Detached,
}

/// What few pending operations need.
#[derive(Default)]
pub struct Extra {
    /// Counts it on its DSA while it runs (persistent searches).
    pub count: Option<crate::dsa_state::Count>,
    /// Its DSA holds the partition under a native prefix: responses' DNs
    /// are moved back to the knowledge prefix.
    pub map: Option<Arc<crate::wire::dnmap::PrefixMap>>,
    /// A search: where its entries must lie (issue 37, point 9).
    pub scope: Option<crate::wire::scope_check::ScopeCheck>,
}

/// Access-log context, present only when the access log is on.
#[derive(Clone)]
pub struct LogCtx {
    /// The fields known when the operation is placed (client, operation,
    /// DN, partition), formatted once.
    pub head: crate::access::Head,
    /// Why the target was chosen, when not by the usual selection
    /// (`read-your-writes`).
    pub affinity: Option<&'static str>,
}

impl LogCtx {
    /// The context of one operation (boxed: it rides in [`Pending`]).
    pub fn new(
        client: &crate::access::Head,
        op: &'static str,
        dn: &str,
        partition: &str,
        affinity: Option<&'static str>,
    ) -> Box<LogCtx> {
        let head = crate::access::Head::new(|f| {
            f.head(client)
                .quoted("op", op)
                .plain("dn", dn)
                .plain("partition", partition);
        });
        Box::new(LogCtx { head, affinity })
    }
}

/// Entries held back until a read's final response (boxed: most
/// operations hold none, and the pending operation stays small).
// The box keeps the field one pointer wide (a Vec is three).
#[allow(clippy::box_collection)]
#[derive(Default)]
pub struct Held(Option<Box<Vec<Bytes>>>);

impl Held {
    pub fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|v| v.is_empty())
    }

    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |v| v.len())
    }

    pub fn push(&mut self, pdu: Bytes) {
        self.0.get_or_insert_with(Box::default).push(pdu);
    }

    pub fn clear(&mut self) {
        self.0 = None;
    }

    /// The entries, in order.
    pub fn into_vec(self) -> Vec<Bytes> {
        self.0.map(|b| *b).unwrap_or_default()
    }
}

/// Where a read stands with hedging (see [`super::hedge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Hedge {
    /// Never hedged (writes, binds, pinned or affine reads, spanning
    /// parts).
    #[default]
    No,
    /// A read that may be hedged when it is slow.
    Eligible,
    /// It was slow but the hedge budget was spent.
    Refused,
    /// One leg of a hedged read.
    Raced,
}

/// An operation awaiting its responses.
pub struct Pending {
    pub sink: Sink,
    pub is_write: bool,
    pub started: Instant,
    pub log: Option<Box<LogCtx>>,
    /// Whether any response already reached the client (then it cannot be
    /// re-sent elsewhere).
    pub delivered: bool,
    /// Present for reads that may be re-sent to another DSA.
    pub retry: Option<Box<dyn Resend>>,
    /// Hold entries until the final response (base-scope reads: at most
    /// one entry), keeping the read re-sendable to its end.
    pub hold: bool,
    pub held: Held,
    /// It may run without end (persistent search, refreshAndPersist): it
    /// never times out and its silence says nothing about the DSA.
    pub persistent: bool,
    /// Whether it may be hedged, and whether it was.
    pub hedge: Hedge,
    /// When its DSA last sent something for it, in milliseconds after
    /// `started` (the operation timeout counts silence, not total time).
    pub heard_ms: u32,
    /// What few operations need (boxed: most have none).
    pub extra: Option<Box<Extra>>,
    /// Operation kind (index into `metrics::OPS`) and where to count it.
    pub op: u8,
    pub metrics: Option<Arc<Metrics>>,
    pub _guard: Option<InFlight>,
}

impl Pending {
    /// A pending operation delivered to `sink`, with nothing else set.
    pub fn new(sink: Sink) -> Pending {
        Pending {
            sink,
            is_write: false,
            started: Instant::now(),
            log: None,
            delivered: false,
            retry: None,
            hold: false,
            held: Held::default(),
            persistent: false,
            hedge: Hedge::No,
            heard_ms: 0,
            extra: None,
            op: 0,
            metrics: None,
            _guard: None,
        }
    }

    /// Count the operation's completion with `code`, `took` after it
    /// was placed.
    pub fn record(&self, code: u8, took: std::time::Duration) {
        if let Some(m) = &self.metrics {
            m.op(self.op as usize, code, took.as_micros() as u64);
        }
    }

    /// Its DSA sent something for it (an entry, a reference).
    pub fn heard(&mut self) {
        self.heard_ms = u32::try_from(self.started.elapsed().as_millis()).unwrap_or(u32::MAX);
    }

    /// How long its DSA has sent nothing for it (since it was placed, or
    /// since its last response).
    pub fn quiet(&self) -> std::time::Duration {
        self.started
            .elapsed()
            .saturating_sub(std::time::Duration::from_millis(self.heard_ms.into()))
    }

    /// Whether its DSA has been silent on it longer than `silence`, or it
    /// has run longer than `total` (zero: no cap).
    pub fn overdue(&self, silence: std::time::Duration, total: std::time::Duration) -> bool {
        let ran = self.started.elapsed();
        self.quiet() > silence || (!total.is_zero() && ran > total)
    }

    /// The extras, made when first needed.
    pub fn extra(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Box::default)
    }

    /// The prefix map of its DSA, if any.
    pub fn map(&self) -> Option<&Arc<crate::wire::dnmap::PrefixMap>> {
        self.extra.as_ref().and_then(|e| e.map.as_ref())
    }

    pub(super) fn retryable(&self) -> bool {
        self.retry.is_some() && !self.delivered && matches!(self.sink, Sink::To(_))
    }

    /// End the operation with the router's answer `e`: re-sent elsewhere
    /// when it may be (`failed` names the DSA that let it down), else
    /// counted and answered.
    pub fn fail(mut self, failed: &str, e: Error) {
        if e.retryable() && self.retryable() {
            if let Some(r) = self.retry.take() {
                return r.resend(self, failed, e);
            }
        }
        self.record(e.code() as u8, self.started.elapsed());
        if let Sink::To(d) = &self.sink {
            d.fail(&e);
        }
        // A waiter's sender is dropped: it wakes with an error.
    }
}
