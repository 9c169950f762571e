//! A session's part of the router's drain ([`crate::lifecycle::drain`]): it reads no
//! more requests, waits for its operations in flight to end, ends its
//! persistent searches with a result, and closes with a Notice of
//! Disconnection.

use super::out::ClientOut;
use crate::proto::wire::response::Code;
use std::time::{Duration, Instant};

/// The router drains: the session has stopped reading (no request is half
/// handled: the read loop waits for the shutdown only between requests).
/// Its operations in flight, all but persistent searches (which never end
/// by themselves), may finish up to `timeout`; then the persistent
/// searches end with `unavailable`. Returns the notice the session closes
/// with, and sets `flush` to what is left of the timeout: answers already
/// queued (a slow reader's) are written, at the client's pace, until then.
/// Operations still running at the timeout are abandoned when the session
/// closes.
pub(super) async fn drain(
    out: &ClientOut,
    timeout: Duration,
    flush: &mut Duration,
) -> (Code, String) {
    let deadline = Instant::now() + timeout;
    while out.outstanding() > out.persistent() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ended = out.end_persistent();
    if ended > 0 {
        tracing::info!(client = %out.peer(), ended, "shutting down: the client's persistent searches ended");
    }
    *flush = deadline
        .saturating_duration_since(Instant::now())
        .max(LAST_WORDS);
    (Code::Unavailable, "dsa-router: shutting down".into())
}

/// At least this long to write the notice (and what is queued before it)
/// when the drain timeout has run out: the router-wide drain allows a
/// second beyond it.
const LAST_WORDS: Duration = Duration::from_millis(500);
