//! An operation awaiting its responses on a DSA connection: where its
//! responses go ([`Sink`]), what kind of operation it is ([`Kind`]: what
//! may be done with it), where it stands ([`Phase`]), and the one way it
//! is failed ([`Pending::fail`]).
//!
//! The kind is fixed when it is built and carries what only that kind may
//! have: only a read has a way to be re-sent ([`Resend`]), a hedge state
//! and held entries; a write has none of these, so it cannot be re-sent
//! once it may have reached its DSA; a persistent search may be re-sent
//! while it has sent nothing, but is never hedged nor timed out.

use super::{Delivery, Resend};
use crate::backend::dsa_state::InFlight;
use crate::base::error::Error;
use crate::observe::metrics::Metrics;
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

/// What an operation is, and what that allows.
pub enum Kind {
    /// A search or compare, or a request of the router's own.
    Read {
        /// How to send it to another DSA, when it may be (reads on shared
        /// connections).
        resend: Option<Box<dyn Resend>>,
        /// Whether it may be hedged, and whether it was.
        hedge: Hedge,
        /// Hold entries until the final response (base-scope reads: at
        /// most one entry), keeping the read re-sendable to its end.
        hold: bool,
    },
    /// An update: never re-sent once it may have reached its DSA, never
    /// hedged.
    Write,
    /// It may run without end (persistent search, refreshAndPersist): it
    /// never times out, is never hedged, and its silence says nothing
    /// about the DSA. It may be re-sent while it has sent nothing.
    Persistent { resend: Option<Box<dyn Resend>> },
}

impl Kind {
    /// A read that stays where it is sent (the router's own requests, a
    /// read on a client's own connection).
    pub fn fixed() -> Kind {
        Kind::Read {
            resend: None,
            hedge: Hedge::No,
            hold: false,
        }
    }
}

/// Where a read stands with hedging (see [`super::hedge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Hedge {
    /// Never hedged (binds, pinned or affine reads, spanning parts).
    #[default]
    No,
    /// A read that may be hedged when it is slow.
    Eligible,
    /// It was slow but the hedge budget was spent.
    Refused,
    /// One leg of a hedged read.
    Raced,
}

/// Where an operation stands with its client.
enum Phase {
    /// Nothing has reached the client: it may still go elsewhere.
    Waiting,
    /// Entries held back until the final response (never empty).
    Holding(Held),
    /// Something reached the client: it can no longer be re-sent.
    Delivered,
}

/// What few pending operations need.
#[derive(Default)]
struct Extra {
    /// Counts it on its DSA while it runs (persistent searches).
    count: Option<crate::backend::dsa_state::Count>,
    /// Its DSA holds the partition under a native prefix: responses' DNs
    /// are moved back to the knowledge prefix.
    map: Option<Arc<crate::proto::wire::dnmap::PrefixMap>>,
    /// A search: where its entries must lie, as sent to its DSA (issue
    /// 37, point 9).
    scope: Option<crate::proto::wire::scope_check::ScopeCheck>,
}

/// Entries held back until a read's final response (boxed: most
/// operations hold none, and the pending operation stays small).
// The box keeps the field one pointer wide (a Vec is three).
#[allow(clippy::box_collection)]
#[derive(Default)]
pub(super) struct Held(Option<Box<Vec<Bytes>>>);

impl Held {
    fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |v| v.len())
    }

    fn push(&mut self, pdu: Bytes) {
        self.0.get_or_insert_with(Box::default).push(pdu);
    }

    /// The entries, in order.
    pub(super) fn into_vec(self) -> Vec<Bytes> {
        self.0.map(|b| *b).unwrap_or_default()
    }
}

/// Entries a base-scope read holds back at most.
const MAX_HELD: usize = 4;

/// An operation awaiting its responses.
/// `Pending::op` of the router's own requests (no operation kind).
const OWN: u8 = u8::MAX;

pub struct Pending {
    sink: Sink,
    kind: Kind,
    phase: Phase,
    started: Instant,
    /// When its DSA last sent something for it, in milliseconds after
    /// `started` (the operation timeout counts silence, not total time).
    heard_ms: u32,
    /// What few operations need (boxed: most have none).
    extra: Option<Box<Extra>>,
    /// Operation kind (index into `metrics::OPS`) and where to count it.
    op: u8,
    metrics: Option<Arc<Metrics>>,
    guard: Option<InFlight>,
}

impl Pending {
    /// An operation of `kind` delivered to `sink`, started now.
    pub fn new(sink: Sink, kind: Kind) -> Pending {
        Pending {
            sink,
            kind,
            phase: Phase::Waiting,
            started: Instant::now(),
            heard_ms: 0,
            extra: None,
            op: 0,
            metrics: None,
            guard: None,
        }
    }

    /// Counted in `metrics` as an operation of kind `op` (an index into
    /// `metrics::OPS`) when it ends.
    pub fn counted(mut self, op: u8, metrics: Arc<Metrics>) -> Pending {
        self.op = op;
        self.metrics = Some(metrics);
        self
    }

    /// A request of the router's own (a `contextCSN` reading, the
    /// advertised features): delivered like a client's, but neither its
    /// DSA's served count nor its read latencies count it.
    pub fn own(mut self) -> Pending {
        self.op = OWN;
        self.metrics = None;
        self
    }

    /// Whether it is a request of the router's own ([`Pending::own`]).
    pub fn is_own(&self) -> bool {
        self.op == OWN
    }

    /// It now holds its DSA's in-flight slot (dropped when it ends).
    pub fn hold_slot(&mut self, guard: InFlight) {
        self.guard = Some(guard);
    }

    /// It may be re-sent with `to` (reads and persistent searches on
    /// shared connections). A write takes none; a read that has none is
    /// neither hedged nor holds entries back.
    pub fn movable(&mut self, to: Option<Box<dyn Resend>>) {
        match &mut self.kind {
            Kind::Read { resend, .. } | Kind::Persistent { resend } => *resend = to,
            Kind::Write => {}
        }
    }

    /// Ready it for another DSA (re-sent, or sent for the first time after
    /// its first DSA could not be had): the old DSA's slot and native map
    /// dropped, nothing delivered or held, its silence counted from now,
    /// and `resend` (if any) as its way to be moved again.
    pub fn retarget(&mut self, resend: Option<Box<dyn Resend>>) {
        self.guard = None;
        self.phase = Phase::Waiting;
        // The failed DSA's native tree is not the next one's.
        if let Some(e) = self.extra.as_mut() {
            e.map = None;
            e.scope = None;
        }
        self.heard();
        self.movable(resend);
    }

    /// Where its responses go.
    pub fn sink(&self) -> &Sink {
        &self.sink
    }

    /// The client side's delivery, for a client's operation.
    pub fn delivery(&self) -> Option<&Arc<dyn Delivery>> {
        match &self.sink {
            Sink::To(d) => Some(d),
            _ => None,
        }
    }

    /// Whether it is a client's operation (or part of one).
    pub fn for_client(&self) -> bool {
        matches!(self.sink, Sink::To(_))
    }

    pub fn is_write(&self) -> bool {
        matches!(self.kind, Kind::Write)
    }

    pub fn is_persistent(&self) -> bool {
        matches!(self.kind, Kind::Persistent { .. })
    }

    /// Whether any response already reached the client.
    pub fn delivered(&self) -> bool {
        matches!(self.phase, Phase::Delivered)
    }

    /// Whether it holds entries back.
    pub fn holds_entries(&self) -> bool {
        matches!(self.phase, Phase::Holding(_))
    }

    /// When it was placed.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The operation kind it is counted as (index into `metrics::OPS`).
    pub fn op(&self) -> u8 {
        self.op
    }

    /// Its hedge state (`No` for anything but a read that may be
    /// re-sent).
    pub fn hedge(&self) -> Hedge {
        match &self.kind {
            Kind::Read {
                hedge,
                resend: Some(_),
                ..
            } => *hedge,
            _ => Hedge::No,
        }
    }

    /// How it may be re-sent, if it may.
    pub fn resend(&self) -> Option<&dyn Resend> {
        match &self.kind {
            Kind::Read { resend, .. } | Kind::Persistent { resend } => resend.as_deref(),
            Kind::Write => None,
        }
    }

    /// A slow read the hedge budget could not pay for.
    pub(super) fn hedge_refused(&mut self) {
        if let Kind::Read { hedge, .. } = &mut self.kind {
            if *hedge == Hedge::Eligible {
                *hedge = Hedge::Refused;
            }
        }
    }

    /// Make it leg 0 of a race (delivering to `leg0`): its former delivery
    /// and its metrics (the race counts the read once), and whether it
    /// holds entries back; `None` when it is not a client's read.
    pub(super) fn race(
        &mut self,
        leg0: impl FnOnce(Arc<dyn Delivery>, Option<Arc<Metrics>>) -> Arc<dyn Delivery>,
    ) -> Option<bool> {
        let Kind::Read { hedge, hold, .. } = &mut self.kind else {
            return None;
        };
        let Sink::To(inner) = std::mem::replace(&mut self.sink, Sink::Detached) else {
            return None;
        };
        *hedge = Hedge::Raced;
        self.sink = Sink::To(leg0(inner, self.metrics.take()));
        Some(*hold)
    }

    /// The hedge of a read (delivering to `leg1`): a leg of a race, holding
    /// entries back as the read does; placed, and made re-sendable, by the
    /// read's hedger.
    pub(super) fn hedge_leg(leg1: Arc<dyn Delivery>, op: u8, hold: bool) -> Pending {
        let kind = Kind::Read {
            resend: None,
            hedge: Hedge::Raced,
            hold,
        };
        let mut p = Pending::new(Sink::To(leg1), kind);
        p.op = op;
        p
    }

    /// A non-final response for it (entry, reference) arrived. `None`
    /// when it is held back (a base-scope read keeps its entries until its
    /// final response, so that it can still be re-sent); else it goes to
    /// the client now, after the entries held back so far.
    pub(super) fn entry(&mut self, pdu: Bytes) -> Option<(Held, Bytes)> {
        // Held only while it may still be re-sent.
        let hold = matches!(
            self.kind,
            Kind::Read {
                hold: true,
                resend: Some(_),
                ..
            }
        );
        match &mut self.phase {
            Phase::Waiting if hold => {
                let mut held = Held::default();
                held.push(pdu);
                self.phase = Phase::Holding(held);
                return None;
            }
            Phase::Holding(held) if held.len() < MAX_HELD => {
                held.push(pdu);
                return None;
            }
            _ => {}
        }
        let held = match std::mem::replace(&mut self.phase, Phase::Delivered) {
            Phase::Holding(held) => held,
            _ => Held::default(),
        };
        self.heard();
        Some((held, pdu))
    }

    /// Its sink and the entries it held back, as it ends.
    pub(super) fn end(self) -> (Sink, Held) {
        let held = match self.phase {
            Phase::Holding(held) => held,
            _ => Held::default(),
        };
        (self.sink, held)
    }

    /// Count the operation's completion with `code`, `took` after it
    /// was placed.
    pub fn record(&self, code: u8, took: std::time::Duration) {
        if let Some(m) = &self.metrics {
            m.op(self.op as usize, code, took.as_micros() as u64);
        }
    }

    /// Where it is counted, if it is.
    pub fn metrics(&self) -> Option<&Arc<Metrics>> {
        self.metrics.as_ref()
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

    fn extra(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Box::default)
    }

    /// Its DSA holds the partition under a native prefix: `map` moves
    /// responses' DNs back.
    pub fn set_map(&mut self, map: Arc<crate::proto::wire::dnmap::PrefixMap>) {
        self.extra().map = Some(map);
    }

    /// A search: the base and scope its entries must lie in, as sent to
    /// its DSA.
    pub fn set_scope(&mut self, scope: Option<crate::proto::wire::scope_check::ScopeCheck>) {
        if scope.is_some() || self.extra.is_some() {
            self.extra().scope = scope;
        }
    }

    /// Where its entries must lie, when it is a search.
    pub fn scope(&self) -> Option<&crate::proto::wire::scope_check::ScopeCheck> {
        self.extra.as_ref().and_then(|e| e.scope.as_ref())
    }

    /// Counted on its DSA while it runs.
    pub fn set_count(&mut self, count: crate::backend::dsa_state::Count) {
        self.extra().count = Some(count);
    }

    /// The prefix map of its DSA, if any.
    pub fn map(&self) -> Option<&Arc<crate::proto::wire::dnmap::PrefixMap>> {
        self.extra.as_ref().and_then(|e| e.map.as_ref())
    }

    /// Whether it may still go to another DSA: a client's, with a way to
    /// re-send it, and nothing of it reached the client.
    pub(super) fn retryable(&self) -> bool {
        self.resend().is_some() && !self.delivered() && self.for_client()
    }

    fn take_resend(&mut self) -> Option<Box<dyn Resend>> {
        match &mut self.kind {
            Kind::Read { resend, .. } | Kind::Persistent { resend } => resend.take(),
            Kind::Write => None,
        }
    }

    /// End the operation with the router's answer `e`: re-sent elsewhere
    /// when it may be (`failed` names the DSA that let it down), else
    /// counted and answered.
    pub fn fail(mut self, failed: &str, e: Error) {
        if e.retryable() && self.retryable() {
            if let Some(r) = self.take_resend() {
                return r.resend(self, failed, e);
            }
        }
        self.answer(failed, e);
    }

    /// Send it elsewhere now when it may go (`failed` names the DSA that
    /// let it down, `why` is what it answered); `Err` gives it back when
    /// it may not.
    pub(super) fn move_on(mut self, failed: &str, why: Error) -> Result<(), Pending> {
        if !self.retryable() {
            return Err(self);
        }
        match self.take_resend() {
            Some(r) => {
                r.resend(self, failed, why);
                Ok(())
            }
            None => Err(self),
        }
    }

    /// Count it and answer `e` (its re-sends spent, or none allowed).
    pub fn answer(self, failed: &str, e: Error) {
        self.record(e.code() as u8, self.started.elapsed());
        if let Sink::To(d) = &self.sink {
            d.fail(&e, super::Source::dsa(failed));
        }
        // A waiter's sender is dropped: it wakes with an error.
    }
}
