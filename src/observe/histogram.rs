//! A Prometheus histogram of durations: fixed buckets of atomics, one
//! relaxed add per bucket, sum and count for each observation (no lock, no
//! allocation). Used for operations through the router, operations per
//! DSA and health probes per DSA.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Bucket bounds, seconds: from 100 µs (a cached read on the same host)
/// to the longest operation timeout people set (`--op-timeout`, 120 s by
/// default), so that slow operations land in a bucket of their own rather
/// than `+Inf`.
pub const BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0, 120.0,
];

/// One histogram's counts: per bucket (not cumulative; the last is above
/// every bound), the sum in microseconds.
#[derive(Debug)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_us: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_us: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// One observation of `took`.
    pub fn observe(&self, took: Duration) {
        self.observe_us(took.as_micros().min(u128::from(u64::MAX)) as u64);
    }

    /// One observation of `micros` microseconds.
    pub fn observe_us(&self, micros: u64) {
        let secs = micros as f64 / 1e6;
        let b = BUCKETS
            .iter()
            .position(|&le| secs <= le)
            .unwrap_or(BUCKETS.len());
        if let Some(slot) = self.buckets.get(b) {
            slot.fetch_add(1, Ordering::Relaxed);
        }
        self.sum_us.fetch_add(micros, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// The `_bucket`, `_sum` and `_count` samples of `name` with `labels`
    /// (already escaped, `k="v",...`, or empty) before `le`.
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cum = 0;
        for (i, le) in BUCKETS.iter().enumerate() {
            cum += self.buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cum}");
        }
        cum += self.buckets[BUCKETS.len()].load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {cum}");
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let braces = |s: &str| {
            if s.is_empty() {
                String::new()
            } else {
                format!("{{{s}}}")
            }
        };
        let _ = writeln!(out, "{name}_sum{} {sum}", braces(labels));
        let _ = writeln!(out, "{name}_count{} {cum}", braces(labels));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_reach_the_operation_timeout() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(50));
        h.observe(Duration::from_secs(7));
        h.observe(Duration::from_secs(100));
        h.observe(Duration::from_secs(500));
        let mut out = String::new();
        h.render(&mut out, "x", "op=\"search\"");
        assert!(
            out.contains("x_bucket{op=\"search\",le=\"0.0001\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("x_bucket{op=\"search\",le=\"5\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("x_bucket{op=\"search\",le=\"10\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("x_bucket{op=\"search\",le=\"120\"} 3\n"),
            "{out}"
        );
        assert!(
            out.contains("x_bucket{op=\"search\",le=\"+Inf\"} 4\n"),
            "{out}"
        );
        assert!(out.contains("x_count{op=\"search\"} 4\n"), "{out}");
        assert!(out.contains("x_sum{op=\"search\"} 607.00005\n"), "{out}");
        assert_eq!(h.count(), 4);
        let mut bare = String::new();
        h.render(&mut bare, "y", "");
        assert!(
            bare.contains("y_bucket{le=\"+Inf\"} 4\ny_sum 607.00005\ny_count 4\n"),
            "{bare}"
        );
    }
}
