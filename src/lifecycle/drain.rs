//! Graceful drain (architecture.md, "Lifecycle"): on SIGTERM, SIGINT or `ctl shutdown` the
//! router stops accepting, lets every operation in flight finish (up to
//! `--drain-timeout`), ends persistent searches with a result
//! (`unavailable`), closes each client connection at an operation boundary
//! with a Notice of Disconnection (RFC 4511 4.4.1), then exits. No request
//! the router read whole is cut before its answer (within the timeout).
//!
//! This is the router-wide part: whether a drain runs (`/status`, the
//! status page), the admin API's request, and the end the admin API waits
//! for; each session's part is in the session's read loop
//! (`session::drain`).

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use tokio_util::sync::CancellationToken;

/// The router's drain state.
#[derive(Default)]
pub struct Drain {
    draining: AtomicBool,
    /// `ctl shutdown` asked for a drain (the signal task starts it).
    asked: tokio::sync::Notify,
    /// Every session ended: the admin API stops then.
    ended: CancellationToken,
}

impl Drain {
    /// Ask for a drain (`ctl shutdown`, `POST /shutdown`): the task that
    /// handles SIGTERM starts it.
    pub fn ask(&self) {
        self.asked.notify_one();
    }

    /// A drain was asked for (by [`Drain::ask`]).
    pub async fn asked(&self) {
        self.asked.notified().await
    }

    /// The accept loop stopped: the router drains.
    pub fn begin(&self) {
        self.draining.store(true, Relaxed);
    }

    /// Whether the router is draining.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Relaxed)
    }

    /// Every session ended (or the timeout cut the rest).
    pub fn end(&self) {
        self.ended.cancel();
    }

    /// The drain is over.
    pub async fn ended(&self) {
        self.ended.cancelled().await
    }
}
