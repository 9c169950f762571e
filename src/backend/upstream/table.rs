//! A DSA connection's pending table: its operations by the message ID it
//! gave them, the IDs it hands out, and whether it still takes operations.
//!
//! Synchronous and generic over what it holds (a connection holds
//! [`Pending`](super::pending::Pending) operations), so that it is tested
//! without sockets. Every way operations leave it without their answer (the
//! connection lost, an operation timed out, its DSA gone down, a persistent
//! search ended) is one [`Table::drain_where`].

use crate::base::fasthash::FastMap;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard};

pub(crate) struct Table<T> {
    map: Mutex<FastMap<i32, T>>,
    /// The next message ID to hand out.
    next_id: AtomicI32,
    /// `next_id` has wrapped around: from then on an unknown ID may be a
    /// late answer.
    wrapped: AtomicBool,
    /// It takes new operations: its connection is alive.
    open: AtomicBool,
}

impl<T> Table<T> {
    pub(crate) fn new() -> Table<T> {
        Table {
            map: Mutex::new(FastMap::default()),
            next_id: AtomicI32::new(1),
            wrapped: AtomicBool::new(false),
            open: AtomicBool::new(true),
        }
    }

    /// Whether it takes new operations.
    pub(crate) fn is_open(&self) -> bool {
        self.open.load(Ordering::Relaxed)
    }

    /// Take no new operations; those it holds stay until they end.
    pub(crate) fn close(&self) {
        self.open.store(false, Ordering::Relaxed);
    }

    /// The operations, locked.
    pub(crate) fn lock(&self) -> MutexGuard<'_, FastMap<i32, T>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Register an operation; returns its message ID, or gives it back
    /// when the table is closed (checked under the lock, so that an
    /// operation is either refused or seen by the drain that closed it).
    pub(crate) fn register(&self, p: T) -> Result<i32, T> {
        let mut map = self.lock();
        if !self.is_open() {
            return Err(p);
        }
        loop {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            if id <= 0 {
                // Wrapped: start again at 1 (0 is reserved for unsolicited);
                // from now on an unknown ID may be a late answer.
                self.wrapped.store(true, Ordering::Relaxed);
                self.next_id.store(1, Ordering::Relaxed);
                continue;
            }
            if let std::collections::hash_map::Entry::Vacant(v) = map.entry(id) {
                v.insert(p);
                return Ok(id);
            }
        }
    }

    /// A message ID for a request of the router's own that awaits no
    /// answer (an abandon).
    pub(crate) fn request_id(&self) -> i32 {
        self.next_id.fetch_add(1, Ordering::Relaxed).max(1)
    }

    /// Whether `id` was never handed out (not an operation that ended
    /// meanwhile: one the DSA made up).
    pub(crate) fn never_sent(&self, id: i32) -> bool {
        let next = self.next_id.load(Ordering::Relaxed);
        !self.wrapped.load(Ordering::Relaxed) && next > 0 && id >= next
    }

    pub(crate) fn remove(&self, id: i32) -> Option<T> {
        self.lock().remove(&id)
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// Remove the operations `pred` picks, under one lock; they are
    /// answered after it is released.
    pub(crate) fn drain_where(&self, mut pred: impl FnMut(i32, &T) -> bool) -> Vec<(i32, T)> {
        self.lock().extract_if(|id, p| pred(*id, p)).collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A table holding `names`, in order of their IDs (1, 2, ...).
    fn table(names: &[&'static str]) -> Table<&'static str> {
        let t = Table::new();
        for (i, n) in names.iter().enumerate() {
            assert_eq!(t.register(*n), Ok(i as i32 + 1));
        }
        t
    }

    fn sorted(mut v: Vec<(i32, &'static str)>) -> Vec<(i32, &'static str)> {
        v.sort();
        v
    }

    #[test]
    fn drain_where_removes_what_it_picks_and_nothing_else() {
        let t = table(&["read", "write", "persistent", "read"]);
        let got = t.drain_where(|_, p| *p == "read");
        assert_eq!(sorted(got), vec![(1, "read"), (4, "read")]);
        assert_eq!(t.len(), 2);
        assert!(t.drain_where(|_, p| *p == "read").is_empty());
        let by_id = t.drain_where(|id, _| id == 3);
        assert_eq!(by_id, vec![(3, "persistent")]);
        assert_eq!(t.remove(2), Some("write"));
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn drain_where_all_empties_it_and_leaves_it_open() {
        let t = table(&["a", "b", "c"]);
        assert_eq!(sorted(t.drain_where(|_, _| true)).len(), 3);
        assert_eq!(t.len(), 0);
        assert!(t.drain_where(|_, _| true).is_empty());
        // Draining does not close it: IDs go on from where they were.
        assert_eq!(t.register("d"), Ok(4));
    }

    /// A closed table refuses new operations, handing them back, and
    /// keeps those it holds until they are drained.
    #[test]
    fn a_closed_table_refuses_and_keeps_what_it_holds() {
        let t = table(&["a"]);
        t.close();
        assert!(!t.is_open());
        assert_eq!(t.register("b"), Err("b"));
        assert_eq!(t.len(), 1);
        assert_eq!(t.drain_where(|_, _| true), vec![(1, "a")]);
    }

    /// IDs the table never handed out are told apart from IDs that ended,
    /// until the IDs wrap around; an abandon's ID is never one handed out
    /// to an operation.
    #[test]
    fn ids_never_sent_are_known_until_the_ids_wrap() {
        let t = table(&["a", "b"]);
        assert!(!t.never_sent(1) && !t.never_sent(2));
        assert!(t.never_sent(3) && t.never_sent(99));
        assert_eq!(t.remove(1), Some("a"));
        assert!(!t.never_sent(1), "ended, not made up");
        let abandon = t.request_id();
        assert_eq!(abandon, 3);
        assert_eq!(t.register("c"), Ok(4));

        t.next_id.store(i32::MAX, Ordering::Relaxed);
        assert_eq!(t.register("d"), Ok(i32::MAX));
        // Wrapped: 0 is never handed out, nor an ID still in use (2, 4).
        assert_eq!(t.register("e"), Ok(1));
        assert_eq!(t.register("f"), Ok(3));
        assert_eq!(t.register("g"), Ok(5));
        assert!(!t.never_sent(99), "after a wrap any ID may be late");
    }
}
