//! The hedge side of the tail-latency task: each DSA's hedge delay (the
//! 95th percentile of its group's reads, never below the floor) and the
//! scan that hedges the reads waiting longer, while the budget lasts.

use super::{Dsa, STALL};
use crate::backend::dsa_state::{bucket_upper_us, LATENCY_BUCKETS};
use crate::backend::routing::{Backend, Routing};
use crate::backend::settings::TailConfig;
use crate::backend::upstream::hedge;
use crate::base::error::Error;
use crate::directory::knowledge::DsaName;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The delay after which a read is hedged: the 95th percentile of `hist`
/// (an upper bucket bound), never below `floor`.
pub(super) fn hedge_delay(hist: &[f64], floor: Duration) -> Duration {
    let total: f64 = hist.iter().sum();
    if total < 1.0 {
        return floor;
    }
    let mut seen = 0.0;
    for (i, c) in hist.iter().enumerate() {
        seen += c;
        if seen >= total * 0.95 {
            return floor.max(Duration::from_micros(bucket_upper_us(i)));
        }
    }
    floor
}

/// Each DSA's hedge delay: the 95th percentile of the reads of the
/// group(s) it belongs to (the quickest of them), at least `floor`;
/// `Duration::MAX` (never) for a DSA with no other in its groups.
pub(super) fn delays(
    dsas: &HashMap<DsaName, Dsa>,
    names: &[DsaName],
    groups: &[Vec<usize>],
    floor: Duration,
) -> Vec<Duration> {
    let mut out = vec![Duration::MAX; names.len()];
    for g in groups {
        // A DSA alone in its group has nowhere to hedge to.
        if g.len() < 2 {
            continue;
        }
        let mut hist = [0.0; LATENCY_BUCKETS];
        for &m in g {
            if let Some(d) = names.get(m).and_then(|n| dsas.get(n)) {
                for (h, c) in hist.iter_mut().zip(d.hist) {
                    *h += c;
                }
            }
        }
        let delay = hedge_delay(&hist, floor);
        for &m in g {
            if let Some(o) = out.get_mut(m) {
                *o = (*o).min(delay);
            }
        }
    }
    out
}

/// Hedge the reads waiting on each DSA longer than its delay, while
/// `budget` lasts (the rest are counted as refused); the reads stuck on
/// each DSA (waiting [`STALL`] for a first answer).
pub(super) fn hedge_slow_reads(
    router: &Backend,
    routing: &Routing,
    delays: &[Duration],
    cfg: &TailConfig,
    budget: &mut f64,
) -> Vec<usize> {
    let mut stuck = vec![0usize; delays.len()];
    for (i, pool) in routing.pools.iter().enumerate() {
        let mut hedged = Vec::new();
        for conn in pool.shared_conns() {
            let mut spare = if cfg.hedge_budget > 0 { *budget } else { 0.0 };
            let after = if cfg.hedge_budget > 0 {
                delays[i]
            } else {
                Duration::MAX
            };
            let (h, refused) = hedge::scan(&conn, after, &mut spare, STALL, &mut stuck[i]);
            if cfg.hedge_budget > 0 {
                *budget = spare;
            }
            router
                .metrics
                .hedge_refusals
                .fetch_add(refused, Ordering::Relaxed);
            hedged.extend(h);
        }
        let name = &routing.snap.dsas[i].name;
        for h in hedged {
            if !h.race.announce() {
                continue;
            }
            let why = Error::new(
                crate::base::error::Kind::Timeout { write: false },
                format!("DSA {name} is slow to answer"),
            );
            h.plan.resend(h.hedge, name, why);
        }
    }
    stuck
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::dsa_state::latency_bucket;

    #[test]
    fn the_hedge_delay_is_the_95th_percentile_never_below_the_floor() {
        let floor = Duration::from_millis(10);
        let mut h = [0.0; LATENCY_BUCKETS];
        assert_eq!(hedge_delay(&h, floor), floor, "no reads: the floor");
        h[latency_bucket(300)] = 96.0;
        h[latency_bucket(50_000)] = 4.0;
        assert_eq!(hedge_delay(&h, floor), floor, "fast p95: the floor");
        h[latency_bucket(300)] = 90.0;
        h[latency_bucket(50_000)] = 10.0;
        let d = hedge_delay(&h, floor);
        assert!(
            d >= Duration::from_millis(50) && d < Duration::from_millis(80),
            "{d:?}"
        );
    }

    #[test]
    fn latency_buckets_are_half_octaves() {
        for us in [
            1,
            49,
            50,
            70,
            71,
            100,
            1_000,
            20_000,
            1_000_000,
            u64::MAX / 2,
        ] {
            let b = latency_bucket(us);
            assert!(b < LATENCY_BUCKETS);
            if b < LATENCY_BUCKETS - 1 {
                assert!(us < bucket_upper_us(b), "{us} in bucket {b}");
            }
            if b > 0 {
                assert!(us >= bucket_upper_us(b - 1), "{us} in bucket {b}");
            }
        }
    }
}
