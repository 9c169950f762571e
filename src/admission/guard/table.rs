//! The pure counting of failed binds: one bounded table of keys (a
//! normalized bind DN's or a client address's hash) to their failures in
//! the current window, binds in flight and back-off. Time is passed in,
//! so the table is tested without a clock.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// What the table counts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// Failures in one window that start a back-off (0: never).
    pub limit: u32,
    pub window: Duration,
    pub backoff: Duration,
}

/// Bytes of one slot of a table (key and entry), for the memory bound.
pub const ENTRY_BYTES: usize = std::mem::size_of::<(u64, Entry)>();

/// One key's state.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Failures since `since`.
    failures: u32,
    /// Binds admitted and not answered yet.
    in_flight: u32,
    /// Start of the window the failures count in.
    since: Instant,
    /// While set and in the future, every bind of the key is refused.
    until: Option<Instant>,
}

impl Entry {
    fn fresh(now: Instant) -> Entry {
        Entry {
            failures: 0,
            in_flight: 0,
            since: now,
            until: None,
        }
    }

    fn blocked(&self, now: Instant) -> bool {
        self.until.is_some_and(|u| now < u)
    }

    /// Forget what has expired: the back-off once over, the failures once
    /// their window has passed (binds in flight stay counted).
    fn expire(&mut self, rule: &Rule, now: Instant) {
        let over = match self.until {
            Some(u) => now >= u,
            None => now.saturating_duration_since(self.since) >= rule.window,
        };
        if over {
            self.failures = 0;
            self.until = None;
            self.since = now;
        }
    }

    /// Nothing worth keeping.
    fn idle(&self, rule: &Rule, now: Instant) -> bool {
        let mut e = *self;
        e.expire(rule, now);
        e.failures == 0 && e.in_flight == 0 && e.until.is_none()
    }
}

/// Whether a bind may go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    Yes,
    /// In back-off.
    No,
    /// Not now: failures plus binds in flight have reached the limit (the
    /// bind may go once one in flight is answered).
    Wait,
}

/// Keys to entries, at most `capacity`: a new key in a full table first
/// drops the entries with nothing left to count, then the one whose
/// window started first, preferring one not in back-off.
#[derive(Debug)]
pub struct Table {
    capacity: usize,
    map: HashMap<u64, Entry>,
}

impl Table {
    pub fn new(capacity: usize) -> Table {
        Table {
            capacity: capacity.max(1),
            map: HashMap::new(),
        }
    }

    /// Keys counted now.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// May a bind of `key` go on? If so it counts as in flight until
    /// [`Table::failed`], [`Table::succeeded`] or [`Table::abandoned`].
    /// Failures plus binds in flight stay within the limit (over it:
    /// [`Admit::Wait`]), so guesses sent at once on many connections reach
    /// the DSA no more often than guesses in a row, whether or not the key
    /// has failed yet; a service account's many binds at once go
    /// `limit` at a time.
    pub fn admit(&mut self, rule: &Rule, key: u64, now: Instant) -> Admit {
        let decided = self.peek(rule, key, now);
        if decided != Admit::Yes || rule.limit == 0 {
            return decided;
        }
        if let Some(e) = self.map.get_mut(&key) {
            e.in_flight += 1;
            return Admit::Yes;
        }
        self.make_room(rule, now);
        let mut e = Entry::fresh(now);
        e.in_flight = 1;
        self.map.insert(key, e);
        Admit::Yes
    }

    /// What [`Table::admit`] would answer, taking no place.
    pub fn peek(&mut self, rule: &Rule, key: u64, now: Instant) -> Admit {
        if rule.limit == 0 {
            return Admit::Yes;
        }
        let Some(e) = self.map.get_mut(&key) else {
            return Admit::Yes;
        };
        e.expire(rule, now);
        if e.blocked(now) {
            Admit::No
        } else if e.failures + e.in_flight >= rule.limit {
            Admit::Wait
        } else {
            Admit::Yes
        }
    }

    /// An admitted bind of `key` failed (invalid credentials): `true` when
    /// this failure starts a back-off.
    pub fn failed(&mut self, rule: &Rule, key: u64, now: Instant) -> bool {
        if rule.limit == 0 {
            return false;
        }
        if !self.map.contains_key(&key) {
            // Evicted while the bind was in flight: counted anew.
            self.make_room(rule, now);
            self.map.insert(key, Entry::fresh(now));
        }
        let Some(e) = self.map.get_mut(&key) else {
            return false;
        };
        e.in_flight = e.in_flight.saturating_sub(1);
        e.expire(rule, now);
        if e.blocked(now) {
            return false;
        }
        if e.failures == 0 {
            // The window begins with the first failure.
            e.since = now;
        }
        e.failures += 1;
        if e.failures >= rule.limit {
            e.until = Some(now + rule.backoff);
            return true;
        }
        false
    }

    /// An admitted bind of `key` succeeded: its count starts again (and a
    /// back-off begun while it was in flight ends: the password is right).
    pub fn succeeded(&mut self, key: u64) {
        if let Some(e) = self.map.get_mut(&key) {
            e.failures = 0;
            e.until = None;
            e.in_flight = e.in_flight.saturating_sub(1);
            if e.in_flight == 0 {
                self.map.remove(&key);
            }
        }
    }

    /// An admitted bind of `key` ended otherwise (another result, no
    /// answer): it is no longer in flight, and nothing else changes.
    pub fn abandoned(&mut self, key: u64) {
        if let Some(e) = self.map.get_mut(&key) {
            e.in_flight = e.in_flight.saturating_sub(1);
            if e.in_flight == 0 && e.failures == 0 && e.until.is_none() {
                self.map.remove(&key);
            }
        }
    }

    /// Whether `key` is in back-off now.
    pub fn blocked(&self, key: u64, now: Instant) -> bool {
        self.map.get(&key).is_some_and(|e| e.blocked(now))
    }

    fn make_room(&mut self, rule: &Rule, now: Instant) {
        if self.map.len() < self.capacity {
            return;
        }
        self.map.retain(|_, e| !e.idle(rule, now));
        if self.map.len() < self.capacity {
            return;
        }
        let victim = self
            .map
            .iter()
            .min_by_key(|(_, e)| (e.blocked(now), e.since))
            .map(|(k, _)| *k);
        if let Some(k) = victim {
            self.map.remove(&k);
        }
    }
}
