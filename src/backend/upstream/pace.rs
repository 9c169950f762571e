//! Pacing a DSA connection's reader to a client that reads slower than
//! its DSA sends (a large search read by a slow client).
//!
//! Responses a client has not read wait in its queue, up to
//! `--client-queue-bytes`; beyond, the client counts as stalled and is
//! disconnected. A client streaming a large result over a slow link, or
//! on a busy machine, would fill that queue while its DSA sends as fast as
//! it can: the router's memory grows by the queue's bound (16 MiB by
//! default) for each such client, and a client that is slow, not stalled,
//! could be cut off. So when a read leaves a client's backlog over its
//! soft mark ([`SOFT`], or a quarter of its bound if that is less), the
//! reader does not read again until the client's writer has brought it
//! down to a quarter of the mark: the DSA's sends then wait in TCP, as
//! they would with a client connected to the DSA directly.
//!
//! Only while nothing else is in flight on the connection: the reader
//! never holds back another operation's responses for a slow client (then
//! the backlog grows as before). And only while the client keeps reading:
//! no progress for [`STALL`] ends the pause, and the client is not waited
//! for again for [`RETRY`], so a client that stopped reading costs the
//! connection one such wait a second and is cut off when its queue is
//! full, as before. The client's progress is seen when its
//! writer takes from the queue, which it does each time the socket's
//! unsent data falls below [`NOTSENT_LOWAT`] (set on every client socket
//! by [`tune_client`]).

use super::batch::Outlet;
use super::conn::Conn;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// A client's backlog over which the reader waits for it (bytes).
pub(crate) const SOFT: usize = 256 * 1024;

/// How long without the client's writer taking anything ends a pause.
pub(crate) const STALL: Duration = Duration::from_millis(250);

/// How long a client that stopped reading is not waited for again.
const RETRY: Duration = Duration::from_secs(1);

/// Unsent bytes a client socket's kernel buffer holds before the router
/// queues the rest itself (`TCP_NOTSENT_LOWAT`; acknowledged-and-in-flight
/// data is not counted). The kernel signals room when the unsent data is
/// under half of it, so a reading client's writer takes from its queue
/// every 32 KiB the client reads. Without it a client's socket takes
/// megabytes (the send buffer grows with the connection) and signals room
/// only when a third of them are gone: the queue behind it would see a
/// reading client as stalled for seconds.
pub(crate) const NOTSENT_LOWAT: u32 = 64 * 1024;

/// Set [`NOTSENT_LOWAT`] on an accepted client connection (Linux; where
/// it cannot be set the socket keeps its default and pacing sees coarser
/// progress).
pub(crate) fn tune_client(s: &TcpStream) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Err(e) = socket2::SockRef::from(s).set_tcp_notsent_lowat(NOTSENT_LOWAT) {
        tracing::debug!(error = %e, "TCP_NOTSENT_LOWAT not set");
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = s;
}

/// A slice of a pause: how often the connection is checked for other
/// operations in flight.
const SLICE: Duration = Duration::from_millis(5);

/// What the last pause ended on: the client that stopped reading, and
/// when. It is not waited for again for [`RETRY`].
#[derive(Default)]
pub(super) struct Memo {
    stalled: Option<(usize, Instant)>,
}

/// Wait until `out`'s backlog is down to a quarter of its soft mark, while
/// `conn` carries nothing but it and the client keeps reading.
pub(super) async fn pace(conn: &Conn, out: Arc<dyn Outlet>, memo: &mut Memo) {
    let key = Arc::as_ptr(&out) as *const () as usize;
    if let Some((k, at)) = memo.stalled {
        if k == key && at.elapsed() < RETRY {
            return;
        }
    }
    memo.stalled = None;
    let mut idle = Duration::ZERO;
    loop {
        let (queued, soft) = out.backlog();
        if queued <= soft / 4 || conn.pending_count() > 1 {
            return;
        }
        if idle >= STALL {
            memo.stalled = Some((key, Instant::now()));
            return;
        }
        match tokio::time::timeout(SLICE, out.drained()).await {
            Ok(()) => idle = Duration::ZERO,
            Err(_) => idle += SLICE,
        }
    }
}
