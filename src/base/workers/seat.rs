//! A session's place on a worker, and its move to another one.

use super::Shared;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::runtime::Handle;

/// A session's place on a worker: counted there while it lives, and the
/// way it learns that it is asked to move.
pub struct Seat {
    shared: Arc<Shared>,
    at: usize,
    epoch: u32,
}

impl Seat {
    /// A place on the worker in use with the fewest sessions (the lowest
    /// on a tie).
    pub(super) fn take(sh: &Arc<Shared>) -> Seat {
        let in_use = sh.in_use().clamp(1, sh.slots.len());
        let at = (0..in_use)
            .min_by_key(|&i| sh.slots[i].sessions.load(Relaxed))
            .unwrap_or(0);
        sh.slots[at].sessions.fetch_add(1, Relaxed);
        Seat {
            shared: sh.clone(),
            at,
            epoch: sh.epoch.load(Relaxed),
        }
    }

    /// The worker it is on.
    pub fn worker(&self) -> usize {
        self.at
    }

    /// That worker's runtime.
    pub fn handle(&self) -> Handle {
        self.shared.slots[self.at].handle.clone()
    }

    /// Called as a request comes in: counts the session as talking this
    /// period, and says whether its worker asks sessions to leave.
    pub fn asked(&mut self) -> bool {
        let slot = &self.shared.slots[self.at];
        let e = self.shared.epoch.load(Relaxed);
        if e != self.epoch {
            self.epoch = e;
            slot.talkers.fetch_add(1, Relaxed);
        }
        slot.leave.load(Relaxed) > 0
    }

    /// Take one of the worker's leave requests: the worker to move to,
    /// counted there from now on; `None` when another session took the
    /// last one.
    pub fn leave(&mut self) -> Option<usize> {
        let slot = &self.shared.slots[self.at];
        let dest = slot.dest.load(Relaxed);
        if dest == self.at || dest >= self.shared.slots.len() {
            return None;
        }
        slot.leave
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
            .ok()?;
        self.shared.slots[dest].sessions.fetch_add(1, Relaxed);
        slot.sessions.fetch_sub(1, Relaxed);
        self.shared.moves.fetch_add(1, Relaxed);
        self.at = dest;
        Some(dest)
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.shared.slots[self.at].sessions.fetch_sub(1, Relaxed);
    }
}
