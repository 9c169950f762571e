//! The access log's line of one forwarded operation, written on the client
//! side when the operation ends: [`Logged`] wraps the operation's delivery
//! (a client's operation, or one partition's share of a spanning search)
//! and writes the line as the final response goes to the client, or as the
//! router answers instead, however the operation failed (no DSA could be
//! reached, the connection was lost, it timed out). The DSA connection only
//! says which DSA answered ([`Source`]); it writes nothing.

use crate::access::Head;
use crate::error::Error;
use crate::upstream::batch::Batch;
use crate::upstream::conn::Conn;
use crate::upstream::hedge::Race;
use crate::upstream::{Delivery, Source};
use crate::wire::frame::Header;
use crate::wire::response;
use bytes::Bytes;
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
        crate::access::line(|f| {
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
        crate::access::line(|f| {
            f.head(&self.head)
                .plain("dsa", dsa)
                .quoted_opt("affinity", self.affinity(at))
                .num("result", e.code() as u64)
                .num("latency_us", self.started.elapsed().as_micros() as u64)
                .quoted("note", &format!("answered by the router: {}", e.message()));
        });
    }
}

/// A delivery whose operation has its access-log line when it ends.
pub(super) struct Logged<D> {
    inner: D,
    log: Option<Box<LogCtx>>,
}

impl<D: Delivery> Logged<D> {
    /// `inner`, logged with `log` (`None`: the access log is off).
    pub(super) fn new(inner: D, log: Option<Box<LogCtx>>) -> Arc<Logged<D>> {
        Arc::new(Logged { inner, log })
    }
}

impl<D: Delivery> Delivery for Logged<D> {
    fn deliver(&self, pdu: &[u8], h: &Header, batch: &mut Batch) {
        self.inner.deliver(pdu, h, batch);
    }

    fn finish(&self, pdu: Bytes, h: &Header, from: Source<'_>, batch: &mut Batch) {
        if let Some(log) = &self.log {
            log.answered(from, response::result_code(&pdu, h).unwrap_or(UNREADABLE));
        }
        self.inner.finish(pdu, h, from, batch);
    }

    fn fail(&self, e: &Error, at: Source<'_>) {
        if let Some(log) = &self.log {
            log.failed(at, e);
        }
        self.inner.fail(e, at);
    }

    fn placed(&self, conn: &Arc<Conn>, id: i32) -> bool {
        self.inner.placed(conn, id)
    }

    fn expires(&self) -> bool {
        self.inner.expires()
    }

    fn raced(&self, race: &Arc<Race>, conn: &Arc<Conn>, id: i32) -> bool {
        self.inner.raced(race, conn, id)
    }
}
