//! Failed-bind defence: after `--failed-bind-limit` failed binds
//! (invalidCredentials from the DSA) for one bind DN from one client
//! address within `--failed-bind-window`, `--failed-bind-limit-per-dn`
//! for that DN from all addresses together, or
//! `--failed-bind-limit-per-address` from one address whatever the DNs,
//! the router answers those binds itself with invalidCredentials for
//! `--failed-bind-backoff`, without reaching a DSA, so a DSA's lockout
//! policy sees each guess once. A successful bind resets its DN's counts
//! (not its address's: a guesser holding one valid account could
//! otherwise reset its address at will).
//!
//! Counting a DN per address keeps one guesser from locking its user out
//! everywhere: the user's own address keeps binding. Guesses spread over
//! many addresses meet the per-DN ceiling, which an operator sets below
//! the DSA's own lockout (ppolicy `pwdMaxFailure`): such an attacker can
//! still have the DN refused everywhere for a back-off, from
//! ceiling / limit addresses at least, but never have the DSA lock it.
//!
//! Simple and SASL binds are counted alike: a SASL bind by the user name
//! it authenticates (`crate::proto::wire::sasl_name`), or by DN when it names
//! one.
//!
//! The tables hold hashes of the prepared DN (as routing compares DNs:
//! [`crate::proto::dn::prep`]), of the DN with the client address and of the
//! address, keyed per process, so a flood of distinct DNs costs a fixed
//! amount of memory: [`DN_CAPACITY`] and [`ADDRESS_CAPACITY`] entries in
//! shards of their own, a new key in a full shard evicting the entries
//! with nothing left to count, then the oldest window not in back-off.

pub mod table;
mod wait;

use std::hash::BuildHasher;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use table::{Admit, Rule, Table};

/// Bind DNs counted at once, from each client address (the pairs) and
/// from all addresses together (the per-DN ceiling): 64 shards of 1,024
/// each, a hash table of at most 2,048 slots of [`table::ENTRY_BYTES`]
/// (48) bytes: about 6 MiB each at most.
pub const DN_CAPACITY: usize = 65_536;
/// Client addresses counted at once: 64 shards of 256 (at most 512 slots
/// each): about 1.5 MiB at most.
pub const ADDRESS_CAPACITY: usize = 16_384;
// The memory bound the docs give: a slot of 48 bytes, and each shard's
// hash table never past twice its capacity in slots (a control byte each):
// under 16 MiB for the three tables.
const _: () = assert!(table::ENTRY_BYTES <= 48);
const _: () =
    assert!(2 * (2 * DN_CAPACITY + ADDRESS_CAPACITY) * (table::ENTRY_BYTES + 1) < 16 << 20);

/// The prefix an IPv6 client address counts by: a site is given a /64
/// and may use any of its 2^64 addresses, each of which would otherwise
/// bring fresh counts.
pub const IPV6_PREFIX: u8 = 64;

/// The key a client address counts under: an IPv4 address (an
/// IPv4-mapped IPv6 one as its IPv4 address) as it is, an IPv6 address
/// with all but its first `prefix` bits cleared.
pub fn address_key(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(_) => addr,
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let bits = u128::from(a);
                let keep = match u32::from(prefix.min(128)) {
                    0 => 0,
                    n => u128::MAX << (128 - n),
                };
                IpAddr::V6(Ipv6Addr::from(bits & keep))
            }
        },
    }
}

/// Shards of each table (one lock each; a full shard is scanned to evict).
const SHARDS: usize = 64;

/// The limits (`serve`'s `--failed-bind-*` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// One DN from one address.
    pub dn: Rule,
    /// One DN from all addresses.
    pub ceiling: Rule,
    /// One address, all DNs.
    pub address: Rule,
}

impl Config {
    /// The limits for `limit` failed binds of one DN from one address,
    /// `per_dn` of one DN from all addresses and `per_address` of one
    /// address (0: off) within `window`, refused for `backoff`. A `limit`
    /// of 0 turns the DN's counting off, its ceiling included.
    pub fn from_limits(
        limit: u32,
        per_dn: u32,
        per_address: u32,
        window: Duration,
        backoff: Duration,
    ) -> Config {
        let rule = |limit| Rule {
            limit,
            window,
            backoff,
        };
        let ceiling = match limit {
            0 => 0,
            _ => per_dn,
        };
        Config {
            dn: rule(limit),
            ceiling: rule(ceiling),
            address: rule(per_address),
        }
    }
}

impl Default for Config {
    fn default() -> Config {
        let rule = |limit| Rule {
            limit,
            window: Duration::from_secs(300),
            backoff: Duration::from_secs(300),
        };
        Config {
            dn: rule(5),
            ceiling: rule(20),
            address: rule(0),
        }
    }
}

/// Sharded tables behind locks.
struct Shards(Vec<Mutex<Table>>);

impl Shards {
    fn new(capacity: usize) -> Shards {
        Shards(
            (0..SHARDS)
                .map(|_| Mutex::new(Table::new(capacity / SHARDS)))
                .collect(),
        )
    }

    fn with<T>(&self, key: u64, f: impl FnOnce(&mut Table) -> T) -> T {
        let shard = &self.0[(key % SHARDS as u64) as usize];
        let mut t = shard.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut t)
    }

    fn len(&self) -> usize {
        self.0
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }
}

/// The router's failed-bind counts.
pub struct Guard {
    cfg: Config,
    keys: std::collections::hash_map::RandomState,
    /// (DN, address) pairs, under `cfg.dn`.
    pairs: Shards,
    /// DNs from all addresses, under `cfg.ceiling`.
    dns: Shards,
    addresses: Shards,
    refused: AtomicU64,
    backoffs: AtomicU64,
    /// Binds answered busy: over the cap of binds in flight for too long.
    busy: AtomicU64,
    /// Woken when a bind in flight ends, while `waiting` is not 0.
    freed: tokio::sync::Notify,
    waiting: AtomicUsize,
}

/// Why a bind was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The DN from this address is in back-off.
    Dn,
    /// The DN is in back-off from every address (its ceiling).
    Ceiling,
    Address,
    /// Not now: the DN's (address's) failures plus binds in flight have
    /// reached its limit.
    Busy,
}

/// One table a bind takes a place in: which, its key, its rule and the
/// refusal it gives.
type Place<'a> = (&'a Shards, u64, Rule, Refused);

impl Guard {
    pub fn new(cfg: Config) -> Guard {
        Guard {
            cfg,
            keys: Default::default(),
            pairs: Shards::new(DN_CAPACITY),
            dns: Shards::new(DN_CAPACITY),
            addresses: Shards::new(ADDRESS_CAPACITY),
            refused: AtomicU64::new(0),
            backoffs: AtomicU64::new(0),
            busy: AtomicU64::new(0),
            freed: tokio::sync::Notify::new(),
            waiting: AtomicUsize::new(0),
        }
    }

    /// The keys of `who` from `addr`: (pair, DN, address). An IPv6
    /// address counts by its /64 ([`IPV6_PREFIX`]).
    fn keys_of<K: std::hash::Hash + ?Sized>(&self, who: &K, addr: IpAddr) -> [u64; 3] {
        let addr = address_key(addr, IPV6_PREFIX);
        let dn = self.keys.hash_one(who);
        [self.keys.hash_one((dn, addr)), dn, self.keys.hash_one(addr)]
    }

    /// The tables a bind of `keys` takes a place in, in order.
    fn places(&self, k: [u64; 3]) -> [Place<'_>; 3] {
        [
            (&self.pairs, k[0], self.cfg.dn, Refused::Dn),
            (&self.dns, k[1], self.cfg.ceiling, Refused::Ceiling),
            (&self.addresses, k[2], self.cfg.address, Refused::Address),
        ]
    }

    /// May a bind as `who` (a DN, normalized as routing compares DNs, or
    /// a SASL user, `crate::proto::wire::sasl_name::User`) from `addr` go to a
    /// DSA now? The ticket says how it
    /// ended. [`Guard::admit_within`] waits while it is [`Refused::Busy`].
    pub fn admit<K: std::hash::Hash + ?Sized>(
        self: &Arc<Self>,
        who: &K,
        addr: IpAddr,
    ) -> Result<Ticket, Refused> {
        let keys = self.keys_of(who, addr);
        let now = Instant::now();
        let places = self.places(keys);
        // The DN's back-offs first, taking nothing: a bind refused there
        // takes no address place it would give back (a give-back wakes
        // those waiting, who would wake each other in turn).
        for (t, k, rule, why) in &places[..2] {
            match t.with(*k, |t| t.peek(rule, *k, now)) {
                Admit::Yes => {}
                Admit::No => {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    return Err(*why);
                }
                Admit::Wait => return Err(Refused::Busy),
            }
        }
        // Then a place in each, the address first; what was taken is
        // given back when one refuses.
        let order = [2, 0, 1];
        for (n, &i) in order.iter().enumerate() {
            let (t, k, rule, why) = &places[i];
            let refused = match t.with(*k, |t| t.admit(rule, *k, now)) {
                Admit::Yes => continue,
                Admit::No => *why,
                Admit::Wait => Refused::Busy,
            };
            for &j in &order[..n] {
                let (t, k, ..) = &places[j];
                t.with(*k, |t| t.abandoned(*k));
            }
            if refused != Refused::Busy {
                self.refused.fetch_add(1, Ordering::Relaxed);
            }
            if n > 0 {
                // A place was freed: another may take it.
                self.ended();
            }
            return Err(refused);
        }
        Ok(Ticket {
            guard: self.clone(),
            keys,
            done: false,
        })
    }

    /// Binds the router refused itself.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Back-offs begun (of a DN or an address).
    pub fn backoffs(&self) -> u64 {
        self.backoffs.load(Ordering::Relaxed)
    }

    /// Binds answered busy after waiting for a place in flight.
    pub fn busy(&self) -> u64 {
        self.busy.load(Ordering::Relaxed)
    }

    /// A bind in flight ended: wake those waiting for a place.
    fn ended(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.freed.notify_waiters();
        }
    }

    /// DNs (from one address, and from all) and addresses counted now.
    pub fn tracked(&self) -> (usize, usize, usize) {
        (self.pairs.len(), self.dns.len(), self.addresses.len())
    }

    /// The `/metrics` lines (help and type from
    /// [`crate::observe::catalog`]).
    pub fn render(&self, out: &mut String) {
        use crate::observe::catalog::{header, single};
        let (pairs, dns, addrs) = self.tracked();
        single(out, "dsa_router_binds_refused_total", self.refused());
        single(out, "dsa_router_bind_backoffs_total", self.backoffs());
        single(out, "dsa_router_binds_in_flight_busy_total", self.busy());
        header(out, "dsa_router_failed_bind_keys");
        out.push_str(&format!(
            "dsa_router_failed_bind_keys{{of=\"dn_address\"}} {pairs}\n\
             dsa_router_failed_bind_keys{{of=\"dn\"}} {dns}\n\
             dsa_router_failed_bind_keys{{of=\"address\"}} {addrs}\n"
        ));
    }
}

/// An admitted bind; dropped unanswered, it only stops counting as in
/// flight.
pub struct Ticket {
    guard: Arc<Guard>,
    keys: [u64; 3],
    done: bool,
}

/// What [`Ticket::answered`] saw begin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Began {
    /// The DN's back-off from this address.
    pub dn: bool,
    /// The DN's back-off from every address.
    pub ceiling: bool,
    pub address: bool,
}

impl Ticket {
    /// The DSA answered `code`: 49 counts a failure, 0 resets the DN's
    /// counts (from this address and from all). Which back-offs this
    /// answer began.
    pub fn answered(mut self, code: u8) -> Began {
        self.done = true;
        let g = &self.guard;
        let [p, d, a] = g.places(self.keys);
        let now = Instant::now();
        let failed = |(t, k, rule, _): Place<'_>| t.with(k, |t| t.failed(&rule, k, now));
        let began = match code {
            crate::proto::wire::response::rc::INVALID_CREDENTIALS => Began {
                dn: failed(p),
                ceiling: failed(d),
                address: failed(a),
            },
            crate::proto::wire::response::rc::SUCCESS => {
                for (t, k, ..) in [p, d] {
                    t.with(k, |t| t.succeeded(k));
                }
                a.0.with(a.1, |t| t.abandoned(a.1));
                Began::default()
            }
            _ => {
                for (t, k, ..) in [p, d, a] {
                    t.with(k, |t| t.abandoned(k));
                }
                Began::default()
            }
        };
        let n = u64::from(began.dn) + u64::from(began.ceiling) + u64::from(began.address);
        g.backoffs.fetch_add(n, Ordering::Relaxed);
        g.ended();
        began
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.done {
            let g = &self.guard;
            for (t, k, ..) in g.places(self.keys) {
                t.with(k, |t| t.abandoned(k));
            }
            g.ended();
        }
    }
}

#[cfg(test)]
mod tests;
