//! Spare connections: a DSA's connections of clients' own that their
//! clients gave back (unbound, bound again, or left) with nothing
//! outstanding and nothing kept on them, held open for the next bind to
//! that DSA, as lloadd holds its bind connections.
//!
//! A web login (connect, bind, search, close) then costs the DSA a bind on
//! an open connection, not a TCP connection of its own. A spare connection
//! is only ever used for a bind, which replaces whatever identity it had
//! (RFC 4511 4.2.1: a failed bind leaves it anonymous), so no operation
//! runs under the identity its last client bound. A connection that
//! carried anything that may leave state on the DSA's side (SASL steps,
//! extended operations, controls other than the password policy request:
//! paging, sorting, VLV, persistent searches, transactions, ...) or an
//! operation abandoned before its answer is closed instead
//! ([`crate::wire::frame::leaves_no_state`]).
//!
//! Spares are kept per worker thread (the connection's tasks run on the
//! worker that made it), at most `--spare-connections` per DSA and worker;
//! one unused for [`IDLE`] closes itself. `/status` and `/metrics` count
//! them apart from the clients' own connections (and
//! `--max-own-connections` does not count them).

use super::conn::Conn;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a spare connection stays open unused.
pub(crate) const IDLE: Duration = Duration::from_secs(30);

pub(crate) struct Spares {
    per_worker: Box<[Mutex<Vec<Arc<Conn>>>]>,
    /// Per DSA and worker.
    cap: usize,
    /// The pool is closed (its DSA removed or readdressed): keep nothing.
    closed: AtomicBool,
}

impl Spares {
    pub(crate) fn new(workers: usize, cap: usize) -> Spares {
        Spares {
            per_worker: (0..workers.max(1)).map(|_| Mutex::default()).collect(),
            cap,
            closed: AtomicBool::new(false),
        }
    }

    fn mine(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Conn>>> {
        let i = crate::workers::id() % self.per_worker.len();
        self.per_worker[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The most recently given back live spare of this worker, if any.
    pub(crate) fn take(&self) -> Option<Arc<Conn>> {
        let mut v = self.mine();
        while let Some(c) = v.pop() {
            if c.is_alive() {
                return Some(c);
            }
        }
        None
    }

    /// Keep `c` for a later bind; `false` (and `c` not kept) when full or
    /// closed.
    pub(crate) fn put(&self, c: Arc<Conn>) -> bool {
        if self.cap == 0 || self.closed.load(Ordering::Relaxed) {
            return false;
        }
        let mut v = self.mine();
        v.retain(|c| c.is_alive());
        if v.len() >= self.cap {
            return false;
        }
        c.count_as_spare();
        v.push(c);
        true
    }

    /// Close every spare and keep none from now on.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        for w in self.per_worker.iter() {
            let drained: Vec<Arc<Conn>> = w
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .drain(..)
                .collect();
            for c in drained {
                c.close();
            }
        }
    }
}
