//! The access log's line of one forwarded operation, written on the client
//! side when the operation ends: [`Logged`] wraps the operation's delivery
//! (a client's operation, or one partition's share of a spanning search)
//! and writes the line as the final response goes to the client, or as the
//! router answers instead, however the operation failed (no DSA could be
//! reached, the connection was lost, it timed out). The DSA connection only
//! says which DSA answered ([`Source`]); it writes nothing.
//!
//! The operation's trace (`crate::observe::otel`), when it is sampled, is recorded
//! by the same wrapper: each DSA it is placed on, its hedge, its end.

use crate::backend::upstream::batch::Batch;
use crate::backend::upstream::conn::Conn;
use crate::backend::upstream::layer::Layer;
use crate::backend::upstream::{Delivery, Source};
use crate::base::error::Error;
use crate::observe::access::Head;
use crate::observe::otel::OpTrace;
use crate::proto::wire::frame::{Frame, Pdu};
use crate::proto::wire::response;
use std::sync::Arc;
// Tokio's clock: latencies follow paused time in tests.
use tokio::time::Instant;

/// The access log's result for a response whose result code cannot be
/// read (no LDAP result code is 255).
const UNREADABLE: u8 = u8::MAX;

/// What an operation's line needs, present only when the access log is on.
pub(super) struct LogCtx {
    /// The fields known when the operation is placed (client, operation,
    /// DN, partition), formatted once.
    head: Head,
    /// Why the target was chosen, when not by the usual selection
    /// (`read-your-writes`).
    affinity: Option<&'static str>,
    started: Instant,
}

impl LogCtx {
    /// The context of one operation of `client`: `op` on `dn` in
    /// `partition`.
    pub(super) fn new(
        client: &Head,
        op: &'static str,
        dn: &str,
        partition: &str,
        affinity: Option<&'static str>,
    ) -> Box<LogCtx> {
        let head = Head::new(|f| {
            f.head(client)
                .quoted("op", op)
                .plain("dn", dn)
                .plain("partition", partition);
        });
        Box::new(LogCtx {
            head,
            affinity,
            started: Instant::now(),
        })
    }

    fn affinity(&self, from: Source<'_>) -> Option<&'static str> {
        if from.hedge {
            Some("hedge")
        } else {
            self.affinity
        }
    }

    /// The DSA `from` answered with `code`.
    fn answered(&self, from: Source<'_>, code: u8) {
        crate::observe::access::line(|f| {
            f.head(&self.head)
                .plain("dsa", from.dsa)
                .quoted_opt("affinity", self.affinity(from))
                .num("result", u64::from(code))
                .num("latency_us", self.started.elapsed().as_micros() as u64);
        });
    }

    /// The router answered `e` (`at` names the DSA that let it down, if
    /// one did).
    fn failed(&self, at: Source<'_>, e: &Error) {
        let dsa = if at.dsa.is_empty() { "-" } else { at.dsa };
        crate::observe::access::line(|f| {
            f.head(&self.head)
                .plain("dsa", dsa)
                .quoted_opt("affinity", self.affinity(at))
                .num("result", e.code() as u64)
                .num("latency_us", self.started.elapsed().as_micros() as u64)
                .quoted("note", &format!("answered by the router: {}", e.message()));
        });
    }
}

/// A delivery whose operation has its access-log line and its trace
/// when it ends.
pub(super) struct Logged<D> {
    inner: D,
    log: Option<Box<LogCtx>>,
    trace: Option<Box<OpTrace>>,
}

impl<D: Delivery> Logged<D> {
    /// `inner`, logged with `log` (`None`: the access log is off) and
    /// traced with `trace` (`None`: not sampled).
    pub(super) fn new(
        inner: D,
        log: Option<Box<LogCtx>>,
        trace: Option<Box<OpTrace>>,
    ) -> Logged<D> {
        Logged { inner, log, trace }
    }
}

/// The line and the trace are written here; whether the operation
/// expires, whether it was raced and whether a write asks for post-read
/// are the wrapped delivery's to say. The trace context control is the
/// trace's, answered here.
impl<D: Delivery> Layer for Logged<D> {
    type Inner = D;

    fn inner(&self) -> &D {
        &self.inner
    }

    fn deliver(&self, r: Frame<'_>, batch: &mut Batch) {
        if let Some(t) = &self.trace {
            t.entry(r.pdu.len());
        }
        self.inner.deliver(r, batch);
    }

    fn finish(&self, done: Pdu, from: Source<'_>, batch: &mut Batch) {
        if self.log.is_some() || self.trace.is_some() {
            let code = response::result_code(&done.bytes, &done.h).unwrap_or(UNREADABLE);
            if let Some(log) = &self.log {
                log.answered(from, code);
            }
            if let Some(t) = &self.trace {
                t.answered(from.dsa, from.hedge, code);
            }
        }
        self.inner.finish(done, from, batch);
    }

    fn fail(&self, e: &Error, at: Source<'_>) {
        if let Some(log) = &self.log {
            log.failed(at, e);
        }
        if let Some(t) = &self.trace {
            t.failed(at.dsa, e.code() as u8, &e.message());
        }
        self.inner.fail(e, at);
    }

    fn placed(&self, conn: &Arc<Conn>, id: i32) -> bool {
        let placed = self.inner.placed(conn, id);
        if let (true, Some(t)) = (placed, &self.trace) {
            t.placed(&conn.dsa.name);
        }
        placed
    }

    fn hedge_placed(&self, conn: &Arc<Conn>) {
        if let Some(t) = &self.trace {
            t.hedged(&conn.dsa.name);
        }
        self.inner.hedge_placed(conn);
    }

    fn trace_control(&self, conn: &Arc<Conn>) -> Option<Vec<u8>> {
        let t = self.trace.as_ref()?;
        conn.dsa.accepts_trace_context().then(|| t.control())
    }
}

#[cfg(test)]
impl<D> Logged<D> {
    /// The operation's trace, when sampled.
    pub(super) fn trace(&self) -> Option<&OpTrace> {
        self.trace.as_deref()
    }
}
