//! Failed-bind defence (issue 41): after `--failed-bind-limit` failed
//! simple binds (invalidCredentials from the DSA) for one bind DN within
//! `--failed-bind-window`, or `--failed-bind-limit-per-address` from one
//! client address, the router answers that DN's (that address's) binds
//! itself with invalidCredentials for `--failed-bind-backoff`, without
//! reaching a DSA, so a DSA's lockout policy sees each guess once. A
//! successful bind resets its DN's count (not its address's: a guesser
//! holding one valid account could otherwise reset its address at will).
//!
//! The tables hold hashes of the normalized DN (as routing compares DNs)
//! and of the client address, keyed per process, so a flood of distinct
//! DNs costs a fixed amount of memory: [`DN_CAPACITY`] and
//! [`ADDRESS_CAPACITY`] entries in shards of their own, a new key in a
//! full shard evicting the entries with nothing left to count, then the
//! oldest window not in back-off.

pub mod table;
mod wait;

use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use table::{Admit, Rule, Table};

/// Bind DNs counted at once: 64 shards of 1,024, each a hash table of at
/// most 2,048 slots of [`table::ENTRY_BYTES`] (48) bytes: about 6 MiB at
/// most.
pub const DN_CAPACITY: usize = 65_536;
/// Client addresses counted at once: 64 shards of 256 (at most 512 slots
/// each): about 1.5 MiB at most.
pub const ADDRESS_CAPACITY: usize = 16_384;
// The memory bound the docs give: a slot of 48 bytes, and each shard's
// hash table never past twice its capacity in slots (a control byte each):
// under 8 MiB for both tables.
const _: () = assert!(table::ENTRY_BYTES <= 48);
const _: () = assert!(2 * (DN_CAPACITY + ADDRESS_CAPACITY) * (table::ENTRY_BYTES + 1) < 8 << 20);

/// Shards of each table (one lock each; a full shard is scanned to evict).
const SHARDS: usize = 64;

/// The `serve` options.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Failed simple binds (invalidCredentials from the DSA) for one bind
    /// DN within --failed-bind-window after which the router answers that
    /// DN's binds itself, invalidCredentials, for --failed-bind-backoff,
    /// without reaching a DSA (0: off). A successful bind resets the count.
    #[arg(long, default_value_t = 5)]
    pub failed_bind_limit: u32,
    /// The same for all binds from one client address, whatever their DNs
    /// (0: off, the default: behind a load balancer without PROXY protocol
    /// or a NAT every user shares one address, and all would be refused).
    /// Other users of that address are refused too once it is reached:
    /// keep it well above --failed-bind-limit.
    #[arg(long, default_value_t = 0)]
    pub failed_bind_limit_per_address: u32,
    /// The window failures count in, from a DN's (address's) first failure.
    #[arg(long, default_value = "5m")]
    pub failed_bind_window: String,
    /// How long binds are refused once a limit is reached.
    #[arg(long, default_value = "5m")]
    pub failed_bind_backoff: String,
}

impl Args {
    pub fn config(
        &self,
        parse: impl Fn(&str) -> crate::error::Result<Duration>,
    ) -> crate::error::Result<Config> {
        let window = parse(&self.failed_bind_window)?;
        let backoff = parse(&self.failed_bind_backoff)?;
        let rule = |limit| Rule {
            limit,
            window,
            backoff,
        };
        Ok(Config {
            dn: rule(self.failed_bind_limit),
            address: rule(self.failed_bind_limit_per_address),
        })
    }
}

/// The limits (see [`Args`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    pub dn: Rule,
    pub address: Rule,
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
    Dn,
    Address,
    /// Not now: the DN's (address's) failures plus binds in flight have
    /// reached its limit.
    Busy,
}

impl Guard {
    pub fn new(cfg: Config) -> Guard {
        Guard {
            cfg,
            keys: Default::default(),
            dns: Shards::new(DN_CAPACITY),
            addresses: Shards::new(ADDRESS_CAPACITY),
            refused: AtomicU64::new(0),
            backoffs: AtomicU64::new(0),
            busy: AtomicU64::new(0),
            freed: tokio::sync::Notify::new(),
            waiting: AtomicUsize::new(0),
        }
    }

    /// May a simple bind as `dn` (normalized as routing compares DNs)
    /// from `addr` go to a DSA now? The ticket says how it ended.
    /// [`Guard::admit_within`] waits while it is [`Refused::Busy`].
    pub fn admit(self: &Arc<Self>, dn: &crate::dn::Dn, addr: IpAddr) -> Result<Ticket, Refused> {
        let dn_key = self.keys.hash_one(dn);
        let addr_key = self.keys.hash_one(addr);
        let now = Instant::now();
        // The DN first, taking nothing: a bind over its DN's cap takes no
        // address place it would give back (a give-back wakes those
        // waiting, who would wake each other in turn).
        let dn_rule = self.cfg.dn;
        match self.dns.with(dn_key, |t| t.peek(&dn_rule, dn_key, now)) {
            Admit::Yes => {}
            Admit::No => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                return Err(Refused::Dn);
            }
            Admit::Wait => return Err(Refused::Busy),
        }
        let rule = self.cfg.address;
        match self
            .addresses
            .with(addr_key, |t| t.admit(&rule, addr_key, now))
        {
            Admit::Yes => {}
            Admit::No => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                return Err(Refused::Address);
            }
            Admit::Wait => return Err(Refused::Busy),
        }
        let rule = self.cfg.dn;
        let refused = match self.dns.with(dn_key, |t| t.admit(&rule, dn_key, now)) {
            Admit::Yes => None,
            Admit::No => Some(Refused::Dn),
            Admit::Wait => Some(Refused::Busy),
        };
        if let Some(why) = refused {
            self.addresses.with(addr_key, |t| t.abandoned(addr_key));
            if why == Refused::Dn {
                self.refused.fetch_add(1, Ordering::Relaxed);
            }
            // The address's place was freed: another may take it.
            self.ended();
            return Err(why);
        }
        Ok(Ticket {
            guard: self.clone(),
            dn_key,
            addr_key,
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

    /// DNs and addresses counted now.
    pub fn tracked(&self) -> (usize, usize) {
        (self.dns.len(), self.addresses.len())
    }

    /// The `/metrics` lines.
    pub fn render(&self, out: &mut String) {
        let (dns, addrs) = self.tracked();
        out.push_str(&format!(
            "# HELP dsa_router_binds_refused_total Simple binds the router answered invalidCredentials itself (a DN or address in failed-bind back-off).\n\
             # TYPE dsa_router_binds_refused_total counter\n\
             dsa_router_binds_refused_total {}\n\
             # HELP dsa_router_bind_backoffs_total Failed-bind back-offs begun (--failed-bind-limit, --failed-bind-limit-per-address).\n\
             # TYPE dsa_router_bind_backoffs_total counter\n\
             dsa_router_bind_backoffs_total {}\n\
             # HELP dsa_router_binds_in_flight_busy_total Simple binds answered busy (51): their DN's (address's) failures plus binds in flight stayed at its limit for the whole --bind-timeout.\n\
             # TYPE dsa_router_binds_in_flight_busy_total counter\n\
             dsa_router_binds_in_flight_busy_total {}\n\
             # HELP dsa_router_failed_bind_keys Bind DNs and client addresses the failed-bind defence counts now.\n\
             # TYPE dsa_router_failed_bind_keys gauge\n\
             dsa_router_failed_bind_keys{{of=\"dn\"}} {dns}\n\
             dsa_router_failed_bind_keys{{of=\"address\"}} {addrs}\n",
            self.refused(),
            self.backoffs(),
            self.busy(),
        ));
    }
}

/// An admitted bind; dropped unanswered, it only stops counting as in
/// flight.
pub struct Ticket {
    guard: Arc<Guard>,
    dn_key: u64,
    addr_key: u64,
    done: bool,
}

/// What [`Ticket::answered`] saw begin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Began {
    pub dn: bool,
    pub address: bool,
}

impl Ticket {
    /// The DSA answered `code`: 49 counts a failure, 0 resets the DN.
    /// Which back-offs this answer began.
    pub fn answered(mut self, code: u8) -> Began {
        self.done = true;
        let g = &self.guard;
        let (d, a) = (self.dn_key, self.addr_key);
        let now = Instant::now();
        let began = match code {
            crate::wire::response::rc::INVALID_CREDENTIALS => Began {
                dn: g.dns.with(d, |t| t.failed(&g.cfg.dn, d, now)),
                address: g.addresses.with(a, |t| t.failed(&g.cfg.address, a, now)),
            },
            crate::wire::response::rc::SUCCESS => {
                g.dns.with(d, |t| t.succeeded(d));
                g.addresses.with(a, |t| t.abandoned(a));
                Began::default()
            }
            _ => {
                g.dns.with(d, |t| t.abandoned(d));
                g.addresses.with(a, |t| t.abandoned(a));
                Began::default()
            }
        };
        let n = u64::from(began.dn) + u64::from(began.address);
        g.backoffs.fetch_add(n, Ordering::Relaxed);
        g.ended();
        began
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.done {
            let (g, d, a) = (&self.guard, self.dn_key, self.addr_key);
            g.dns.with(d, |t| t.abandoned(d));
            g.addresses.with(a, |t| t.abandoned(a));
            g.ended();
        }
    }
}

#[cfg(test)]
mod tests;
