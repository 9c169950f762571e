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
//! ([`crate::proto::wire::frame::leaves_no_state`]).
//!
//! Spares are kept per worker thread (the connection's tasks run on the
//! worker that made it), at most `--spare-connections` per DSA and worker.
//! A spare holds a [`Lease`] while it waits: the lease counts it as a
//! spare (dropping it uncounts it), and runs out after [`IDLE`] unused; its
//! reader's sweep then closes it, as pingora-pool's idle timeout does.
//! `/status` and `/metrics` count spares apart from the clients' own
//! connections (and `--max-own-connections` does not count them).
//!
//! Generic over the connection ([`Spare`]), so that the spares and the
//! connection that goes back to them do not name each other's files.

use crate::backend::dsa_state::{Count, DsaState};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;
use tokio::time::Instant;

/// How long a spare connection stays open unused.
pub(crate) const IDLE: Duration = Duration::from_secs(30);

/// A connection, as the spares see it.
pub(crate) trait Spare: Sized {
    fn is_alive(&self) -> bool;
    /// Alive, with nothing outstanding on it.
    fn is_idle(&self) -> bool;
    fn close(&self);
    /// Its standing with its DSA's spares.
    fn standing(&self) -> &Standing<Self>;
}

/// One DSA's spare connections.
pub(crate) struct Spares<C> {
    dsa: Arc<DsaState>,
    per_worker: Box<[Mutex<Vec<Arc<C>>>]>,
    /// Per DSA and worker.
    cap: usize,
    /// The pool is closed (its DSA removed or readdressed): keep nothing.
    closed: AtomicBool,
}

impl<C: Spare> Spares<C> {
    pub(crate) fn new(dsa: Arc<DsaState>, workers: usize, cap: usize) -> Spares<C> {
        Spares {
            dsa,
            per_worker: (0..workers.max(1)).map(|_| Mutex::default()).collect(),
            cap,
            closed: AtomicBool::new(false),
        }
    }

    fn mine(&self) -> MutexGuard<'_, Vec<Arc<C>>> {
        let i = crate::base::workers::id() % self.per_worker.len();
        self.per_worker[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The most recently given back live spare of this worker, if any,
    /// taken for a bind.
    pub(crate) fn take(&self) -> Option<Arc<C>> {
        let mut v = self.mine();
        while let Some(c) = v.pop() {
            if c.is_alive() {
                drop(v);
                c.standing().taken();
                return Some(c);
            }
        }
        None
    }

    /// Keep `c` for a later bind, leased; `false` (and `c` not kept) when
    /// full or closed.
    fn put(&self, c: Arc<C>) -> bool {
        if self.cap == 0 || self.closed.load(Ordering::Relaxed) {
            return false;
        }
        let mut v = self.mine();
        v.retain(|c| c.is_alive());
        if v.len() >= self.cap {
            return false;
        }
        c.standing().lease(Lease {
            _count: Count::new(&self.dsa, |s| &s.spare_conns),
            idle_since: Some(Instant::now()),
        });
        v.push(c);
        true
    }

    /// Close every spare and keep none from now on.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        for w in self.per_worker.iter() {
            let drained: Vec<Arc<C>> = w
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

/// A spare's lease, held while it waits among the spares and until its
/// next client's connection counts as that client's own: it counts the
/// connection as a spare (dropping the lease uncounts it), and it runs
/// out after [`IDLE`] unused.
pub(crate) struct Lease {
    _count: Count,
    /// Since when it has waited among the spares, unused (`None` once
    /// taken for a bind).
    idle_since: Option<Instant>,
}

/// What a connection counts as on its DSA.
enum Counted {
    Nothing,
    /// A client's own connection (counted while this lives).
    Own {
        _count: Count,
    },
    /// A spare.
    Spare(Lease),
}

/// A connection's standing with its DSA's spares: whether it is a client's
/// own that goes back to them, whether it may, and what it counts as.
pub(crate) struct Standing<C> {
    /// A client's own connection: where it goes back when its client is
    /// done with it.
    home: OnceLock<Weak<Spares<C>>>,
    /// Nothing sent on it may have left state on the DSA's side.
    reusable: AtomicBool,
    /// It was taken from the spares.
    reused: AtomicBool,
    counted: Mutex<Counted>,
}

impl<C: Spare> Standing<C> {
    /// A shared connection's (until [`Standing::belongs_to`]).
    pub(crate) fn new() -> Standing<C> {
        Standing {
            home: OnceLock::new(),
            reusable: AtomicBool::new(true),
            reused: AtomicBool::new(false),
            counted: Mutex::new(Counted::Nothing),
        }
    }

    fn counted(&self) -> MutexGuard<'_, Counted> {
        self.counted.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Make it a client's own connection that goes back to `spares` when
    /// its client is done with it.
    pub(crate) fn belongs_to(&self, spares: &Arc<Spares<C>>) {
        let _ = self.home.set(Arc::downgrade(spares));
    }

    /// Something was sent on it: `leaves_state` says whether that may have
    /// left state on the DSA's side (asked of a client's own connection
    /// only).
    #[inline]
    pub(crate) fn sent(&self, leaves_state: impl FnOnce() -> bool) {
        if self.home.get().is_some() && leaves_state() {
            self.reusable.store(false, Ordering::Relaxed);
        }
    }

    /// An operation on it was abandoned: its answer may still come, to
    /// nobody, so it is not to serve another client.
    pub(crate) fn taint(&self) {
        self.reusable.store(false, Ordering::Relaxed);
    }

    /// Its client is done with `c`: kept among its DSA's spares when it is
    /// a client's own connection, idle, and nothing sent on it may have
    /// left state behind. `false` when not kept (then to be closed).
    pub(crate) fn give_back(&self, c: &Arc<C>) -> bool {
        match self.home.get().and_then(Weak::upgrade) {
            Some(spares) if self.reusable.load(Ordering::Relaxed) && c.is_idle() => {
                spares.put(c.clone())
            }
            _ => false,
        }
    }

    /// Counted as a client's own connection while it lives (with the count
    /// reserved for it), no longer as a spare.
    pub(crate) fn count_as_own(&self, count: Count) {
        *self.counted() = Counted::Own { _count: count };
    }

    /// Counted as nothing (the connection is dead; one that was a spare
    /// may wait in its list until the list is next used).
    pub(crate) fn uncount(&self) {
        *self.counted() = Counted::Nothing;
    }

    fn lease(&self, lease: Lease) {
        *self.counted() = Counted::Spare(lease);
    }

    /// Taken from the spares for a bind: no longer idle (still counted as
    /// a spare until it counts as its new client's own).
    fn taken(&self) {
        if let Counted::Spare(lease) = &mut *self.counted() {
            lease.idle_since = None;
        }
        self.reused.store(true, Ordering::Relaxed);
    }

    /// It was a spare: it served an earlier client.
    pub(crate) fn reused(&self) -> bool {
        self.reused.load(Ordering::Relaxed)
    }

    /// Whether its lease ran out: it waited among the spares, unused, for
    /// over [`IDLE`].
    pub(crate) fn expired(&self) -> bool {
        matches!(&*self.counted(), Counted::Spare(Lease { idle_since: Some(t), .. }) if t.elapsed() > IDLE)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A connection with no socket: alive until closed, `pending`
    /// operations outstanding.
    struct Fake {
        closed: AtomicBool,
        pending: AtomicUsize,
        standing: Standing<Fake>,
    }

    impl Spare for Fake {
        fn is_alive(&self) -> bool {
            !self.closed.load(Ordering::Relaxed)
        }
        fn is_idle(&self) -> bool {
            self.is_alive() && self.pending.load(Ordering::Relaxed) == 0
        }
        fn close(&self) {
            self.closed.store(true, Ordering::Relaxed);
        }
        fn standing(&self) -> &Standing<Fake> {
            &self.standing
        }
    }

    /// A client's own connection to `dsa`, going back to `spares`.
    fn own(dsa: &Arc<DsaState>, spares: &Arc<Spares<Fake>>) -> Arc<Fake> {
        let c = Arc::new(Fake {
            closed: AtomicBool::new(false),
            pending: AtomicUsize::new(0),
            standing: Standing::new(),
        });
        c.standing.belongs_to(spares);
        c.standing.count_as_own(Count::new(dsa, |s| &s.own_conns));
        c
    }

    fn counts(dsa: &DsaState) -> (i64, i64) {
        (
            dsa.own_conns.load(Ordering::Relaxed),
            dsa.spare_conns.load(Ordering::Relaxed),
        )
    }

    /// Given back, a connection is leased: counted as a spare, not as its
    /// client's own, until taken; unused for IDLE, its lease runs out.
    /// Taken, it is no longer idle but stays a spare until it counts as
    /// its next client's own.
    #[tokio::test(start_paused = true)]
    async fn a_spare_is_leased_until_taken_and_runs_out_unused() {
        let dsa = Arc::new(DsaState::new("D1"));
        let spares = Arc::new(Spares::new(dsa.clone(), 1, 1));
        let a = own(&dsa, &spares);
        assert_eq!(counts(&dsa), (1, 0));
        assert!(a.standing.give_back(&a));
        assert_eq!(counts(&dsa), (0, 1));
        // One spare per DSA and worker here: a second is not kept.
        let b = own(&dsa, &spares);
        assert!(!b.standing.give_back(&b));

        tokio::time::advance(IDLE - Duration::from_secs(1)).await;
        assert!(!a.standing.expired());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(a.standing.expired());

        let t = spares.take().unwrap();
        assert!(Arc::ptr_eq(&t, &a));
        assert!(t.standing.reused() && !t.standing.expired());
        assert_eq!(counts(&dsa), (1, 1), "b is own; a still a spare");
        t.standing.count_as_own(Count::new(&dsa, |s| &s.own_conns));
        assert_eq!(counts(&dsa), (2, 0));
        t.standing.uncount();
        drop(b);
        assert_eq!(counts(&dsa), (0, 0));
    }

    /// Only an idle connection on which nothing may have left state goes
    /// back; a shared one (no home) never does; a closed pool keeps
    /// nothing and closes the spares it had.
    #[tokio::test]
    async fn only_a_clean_idle_own_connection_goes_back() {
        let dsa = Arc::new(DsaState::new("D1"));
        let spares = Arc::new(Spares::new(dsa.clone(), 1, 4));
        let busy = own(&dsa, &spares);
        busy.pending.store(1, Ordering::Relaxed);
        assert!(!busy.standing.give_back(&busy));
        let stateful = own(&dsa, &spares);
        stateful.standing.sent(|| true);
        assert!(!stateful.standing.give_back(&stateful));
        let abandoned = own(&dsa, &spares);
        abandoned.standing.taint();
        assert!(!abandoned.standing.give_back(&abandoned));
        let shared = Arc::new(Fake {
            closed: AtomicBool::new(false),
            pending: AtomicUsize::new(0),
            standing: Standing::new(),
        });
        shared
            .standing
            .sent(|| unreachable!("asked of a shared connection"));
        assert!(!shared.standing.give_back(&shared));

        let clean = own(&dsa, &spares);
        clean.standing.sent(|| false);
        assert!(clean.standing.give_back(&clean));
        spares.close();
        assert!(!clean.is_alive(), "closed with its pool");
        let late = own(&dsa, &spares);
        assert!(!late.standing.give_back(&late));
        assert!(spares.take().is_none());
    }
}
