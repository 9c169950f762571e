//! The client sessions `/status` lists: per session its address (the
//! PROXY protocol header's, when it came through a balancer), its
//! identity as WhoAmI names it, TLS or not, since when this process
//! serves it, and whether it was handed over by the previous process in a
//! hot upgrade.
//!
//! Off the operations' path: a session is entered when it starts (accept
//! or handover), updated when its identity changes (a bind) or it starts
//! TLS, and removed when it ends ([`Entry`]'s drop); never per operation.
//! The table is split into shards by session number, so that sessions on
//! different workers rarely meet on one lock. `/status` lists the first
//! [`LISTED`] sessions (the oldest first) and the total.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// How many sessions `/status` lists at most (the oldest first).
pub const LISTED: usize = 100;

/// Shards of the table (a power of two).
const SHARDS: usize = 16;

/// One client session as `/status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Client {
    /// The client's address (the PROXY protocol header's source when it
    /// came through a balancer listed in `--proxy-protocol-from`).
    pub address: String,
    /// `anonymous`, or its authorization identity as WhoAmI gives it
    /// (`dn:...`, or `u:...` after a SASL bind). Never a password.
    pub identity: String,
    /// Whether the connection runs over TLS (LDAPS or after StartTLS).
    pub tls: bool,
    /// Unix seconds since this process serves the session (for a session
    /// handed over, since the handover).
    pub since_unix: u64,
    /// Handed over by the previous process in a hot upgrade.
    pub handed_over: bool,
}

/// The sessions of `/status`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Listing {
    /// Client sessions open now.
    pub total: usize,
    /// The first [`LISTED`] of them, the oldest first.
    pub listed: Vec<Client>,
}

/// The table of client sessions.
pub struct Clients {
    next: AtomicU64,
    shards: Box<[Mutex<BTreeMap<u64, Client>>]>,
}

impl Default for Clients {
    fn default() -> Self {
        Clients {
            next: AtomicU64::new(0),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Clients {
    /// Enter a session starting now (anonymous); removed when the entry
    /// is dropped.
    pub fn enter(self: &Arc<Self>, peer: SocketAddr, tls: bool, handed_over: bool) -> Entry {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let since_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let c = Client {
            address: peer.to_string(),
            identity: ANONYMOUS.to_string(),
            tls,
            since_unix,
            handed_over,
        };
        lock(self.shard(id)).insert(id, c);
        Entry(Box::new(At {
            clients: self.clone(),
            id,
        }))
    }

    fn shard(&self, id: u64) -> &Mutex<BTreeMap<u64, Client>> {
        &self.shards[(id as usize) % SHARDS]
    }

    /// The total and the first `max` sessions, the oldest first.
    pub fn list(&self, max: usize) -> Listing {
        let mut total = 0;
        let mut all: Vec<(u64, Client)> = Vec::new();
        for s in self.shards.iter() {
            let g = lock(s);
            total += g.len();
            all.extend(g.iter().take(max).map(|(k, v)| (*k, v.clone())));
        }
        all.sort_unstable_by_key(|(k, _)| *k);
        all.truncate(max);
        Listing {
            total,
            listed: all.into_iter().map(|(_, c)| c).collect(),
        }
    }

    /// Sessions open now.
    pub fn count(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }
}

/// The identity of an anonymous session.
pub const ANONYMOUS: &str = "anonymous";

/// The identity of a session bound by SASL where the DSA named none.
pub const UNNAMED: &str = "bound (no identity named by the DSA)";

/// A session's place in the table: removed when dropped. Boxed: it is
/// carried by every session's future (tests/logic future_size).
pub struct Entry(Box<At>);

struct At {
    clients: Arc<Clients>,
    id: u64,
}

impl Entry {
    fn update(&self, f: impl FnOnce(&mut Client)) {
        let at = &self.0;
        if let Some(c) = lock(at.clients.shard(at.id)).get_mut(&at.id) {
            f(c);
        }
    }

    /// The session bound as `authz` (WhoAmI's form).
    pub fn bound(&self, authz: &str) {
        let authz = if authz.is_empty() { UNNAMED } else { authz };
        self.update(|c| {
            c.identity.clear();
            c.identity.push_str(authz);
        });
    }

    /// The session is anonymous (again).
    pub fn anonymous(&self) {
        self.update(|c| {
            if c.identity != ANONYMOUS {
                c.identity = ANONYMOUS.to_string();
            }
        });
    }

    /// The session runs over TLS now (StartTLS).
    pub fn tls(&self) {
        self.update(|c| c.tls = true);
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let at = &self.0;
        lock(at.clients.shard(at.id)).remove(&at.id);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn sessions_are_listed_oldest_first_up_to_the_bound_and_leave_when_dropped() {
        let t = Arc::new(Clients::default());
        let a: SocketAddr = "127.0.0.2:1000".parse().unwrap();
        let mut held: Vec<Entry> = (0..40).map(|i| t.enter(a, i % 3 == 0, i == 1)).collect();
        held[1].bound("dn:uid=a,o=x");
        held[2].bound("u:bob");
        held[2].anonymous();
        held[3].tls();
        let l = t.list(25);
        assert_eq!(l.total, 40);
        assert_eq!(l.listed.len(), 25);
        assert_eq!(l.listed[1].identity, "dn:uid=a,o=x");
        assert!(l.listed[1].handed_over && !l.listed[0].handed_over);
        assert_eq!(l.listed[2].identity, ANONYMOUS);
        assert!(l.listed[3].tls && l.listed[0].tls && !l.listed[1].tls);
        assert_eq!(l.listed[0].address, "127.0.0.2:1000");
        held.remove(0);
        let l = t.list(LISTED);
        assert_eq!((l.total, l.listed.len(), t.count()), (39, 39, 39));
        assert_eq!(l.listed[0].identity, "dn:uid=a,o=x");
        held.clear();
        assert_eq!(t.list(LISTED).total, 0);
    }
}
