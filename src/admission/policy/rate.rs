//! Operation rates: token buckets per client address and per bound
//! identity, for binds and for other operations apart. An IPv6 client
//! counts by its network (`ipv6_prefix`, /64 by default: one site is
//! given a /64 and picks any of its 2^64 addresses, so a bucket per
//! address would give one client as many buckets as it likes).
//! Each table holds hashes of its keys, keyed per process, in shards of a
//! fixed capacity: a new key in a full shard first drops the buckets that
//! have refilled (forgetting them changes nothing), then the one used
//! longest ago, so a flood of distinct addresses or DNs costs a fixed
//! amount of memory ([`CAPACITY`] buckets per table).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::net::IpAddr;
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
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize)]
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
    /// The prefix length an IPv6 client address is counted by (0 to 128;
    /// 128: each address apart).
    #[serde(default = "default_ipv6_prefix", deserialize_with = "ipv6_prefix")]
    pub ipv6_prefix: u8,
}

fn default_ipv6_prefix() -> u8 {
    64
}

/// `ipv6_prefix`: a prefix length, 0 to 128.
fn ipv6_prefix<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u8, D::Error> {
    let n = <u8 as serde::Deserialize>::deserialize(d)?;
    if n > 128 {
        return Err(serde::de::Error::custom(format!(
            "ipv6_prefix {n} is not a prefix length (0 to 128)"
        )));
    }
    Ok(n)
}

impl Default for Rates {
    fn default() -> Rates {
        Rates {
            address: None,
            identity: None,
            address_binds: None,
            identity_binds: None,
            ipv6_prefix: default_ipv6_prefix(),
        }
    }
}

pub use crate::admission::guard::address_key;

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
        addr: IpAddr,
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
            if !ta.take(address_key(addr, r.ipv6_prefix), &l, now) {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv6_clients_count_by_their_network() {
        for (addr, prefix, key) in [
            ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", 64, "2001:db8:1:2::"),
            ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", 48, "2001:db8:1::"),
            ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", 56, "2001:db8:1::"),
            ("2001:db8:1:2ff:aaaa:bbbb:cccc:dddd", 56, "2001:db8:1:200::"),
            (
                "2001:db8:1:2:aaaa:bbbb:cccc:dddd",
                128,
                "2001:db8:1:2:aaaa:bbbb:cccc:dddd",
            ),
            ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", 0, "::"),
            ("::ffff:192.0.2.7", 64, "192.0.2.7"),
            ("192.0.2.7", 64, "192.0.2.7"),
            ("192.0.2.7", 0, "192.0.2.7"),
        ] {
            assert_eq!(address_key(ip(addr), prefix), ip(key), "{addr}/{prefix}");
        }
    }

    #[test]
    fn one_network_shares_a_bucket_unless_told_otherwise() {
        let limit = Limit {
            per_second: 0.001,
            burst: 2,
        };
        let t = Instant::now();
        let per_64 = Rates {
            address: Some(limit),
            ..Rates::default()
        };
        assert_eq!(per_64.ipv6_prefix, 64, "the default");
        let m = Meter::default();
        // Fresh addresses of one /64 do not bring fresh buckets.
        let mut served = 0;
        for i in 1..=20u16 {
            let a = ip(&format!("2001:db8:0:1::{i:x}"));
            served += usize::from(m.take(&per_64, false, a, None, t).is_ok());
        }
        assert_eq!(served, 2, "one bucket for the /64");
        let other = ip("2001:db8:0:2::1");
        assert_eq!(m.take(&per_64, false, other, None, t), Ok(()));

        let per_128 = Rates {
            ipv6_prefix: 128,
            ..per_64
        };
        let m = Meter::default();
        let served = (1..=20u16)
            .filter(|i| {
                let a = ip(&format!("2001:db8:0:1::{i:x}"));
                m.take(&per_128, false, a, None, t).is_ok()
            })
            .count();
        assert_eq!(served, 20, "each address apart");
    }

    #[derive(Debug, serde::Deserialize)]
    struct Wrap {
        rates: Rates,
    }

    #[test]
    fn the_prefix_is_read_and_checked() {
        let r: Wrap = toml::from_str("[rates]\nipv6_prefix = 56\n").unwrap();
        assert_eq!(r.rates.ipv6_prefix, 56);
        let r: Wrap = toml::from_str("[rates]\n").unwrap();
        assert_eq!(r.rates.ipv6_prefix, 64);
        let e = toml::from_str::<Wrap>("[rates]\nipv6_prefix = 129\n").unwrap_err();
        assert!(e.to_string().contains("0 to 128"), "{e}");
        assert!(toml::from_str::<Wrap>("[rates]\nipv6_prefix = -1\n").is_err());
    }
}
