//! Operation rates (issue 41 point 2): token buckets per client address
//! and per bound identity, for binds and for other operations apart.
//! Each table holds hashes of its keys, keyed per process, in shards of a
//! fixed capacity: a new key in a full shard first drops the buckets that
//! have refilled (forgetting them changes nothing), then the one used
//! longest ago, so a flood of distinct addresses or DNs costs a fixed
//! amount of memory ([`CAPACITY`] buckets per table).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::Mutex;
use std::time::Instant;

/// Buckets per table: 64 shards of 256 (about 32 bytes each and the hash
/// map's overhead: well under 1 MiB a table).
pub const CAPACITY: usize = 16_384;
const SHARDS: usize = 64;

/// A rate: `per_second` operations on average, up to `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limit {
    pub per_second: f64,
    pub burst: u32,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// The tokens at `now`, refilled.
    fn level(&self, l: &Limit, now: Instant) -> f64 {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        (self.tokens + dt * l.per_second).min(f64::from(l.burst.max(1)))
    }
}

/// One table of buckets.
pub struct Buckets {
    keys: std::collections::hash_map::RandomState,
    shards: Vec<Mutex<HashMap<u64, Bucket>>>,
}

impl Default for Buckets {
    fn default() -> Buckets {
        Buckets {
            keys: Default::default(),
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashMap::with_capacity(8)))
                .collect(),
        }
    }
}

impl Buckets {
    /// Take one token for `key` under `l` at `now`: false when the bucket
    /// is empty (the operation is over the rate).
    pub fn take<K: Hash>(&self, key: K, l: &Limit, now: Instant) -> bool {
        let k = self.keys.hash_one(key);
        let Some(shard) = self.shards.get((k % SHARDS as u64) as usize) else {
            return true;
        };
        let mut m = shard.lock().unwrap_or_else(|e| e.into_inner());
        let full = f64::from(l.burst.max(1));
        if let Some(b) = m.get_mut(&k) {
            let level = b.level(l, now);
            if level < 1.0 {
                return false;
            }
            *b = Bucket {
                tokens: level - 1.0,
                at: now,
            };
            return true;
        }
        if m.len() >= CAPACITY / SHARDS {
            m.retain(|_, b| b.level(l, now) < full);
            if m.len() >= CAPACITY / SHARDS {
                if let Some(old) = m.iter().min_by_key(|(_, b)| b.at).map(|(k, _)| *k) {
                    m.remove(&old);
                }
            }
        }
        m.insert(
            k,
            Bucket {
                tokens: full - 1.0,
                at: now,
            },
        );
        true
    }

    /// Buckets held now.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The `[rates]` section of the policy file: each limit optional.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rates {
    /// Operations other than binds, per client address.
    pub address: Option<Limit>,
    /// Operations other than binds, per bound identity (its DN).
    pub identity: Option<Limit>,
    /// Binds per client address.
    pub address_binds: Option<Limit>,
    /// Binds per bind DN.
    pub identity_binds: Option<Limit>,
}

/// Which rate was over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    Address,
    Identity,
}

/// The router's buckets.
#[derive(Default)]
pub struct Meter {
    address: Buckets,
    identity: Buckets,
    address_binds: Buckets,
    identity_binds: Buckets,
}

impl Meter {
    /// Take a token for an operation from `addr` as `identity` (the
    /// normalized bound DN, or the bind DN of a bind).
    pub fn take(
        &self,
        r: &Rates,
        bind: bool,
        addr: std::net::IpAddr,
        identity: Option<&str>,
        now: Instant,
    ) -> Result<(), Over> {
        let (a, i, ta, ti) = if bind {
            (
                r.address_binds,
                r.identity_binds,
                &self.address_binds,
                &self.identity_binds,
            )
        } else {
            (r.address, r.identity, &self.address, &self.identity)
        };
        if let Some(l) = a {
            if !ta.take(addr, &l, now) {
                return Err(Over::Address);
            }
        }
        if let (Some(l), Some(id)) = (i, identity) {
            if !ti.take(id, &l, now) {
                return Err(Over::Identity);
            }
        }
        Ok(())
    }

    /// Buckets held (addresses, identities), binds included.
    pub fn tracked(&self) -> (usize, usize) {
        (
            self.address.len() + self.address_binds.len(),
            self.identity.len() + self.identity_binds.len(),
        )
    }
}
