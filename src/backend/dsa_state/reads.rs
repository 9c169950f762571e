//! Read latencies of one DSA, gathered on the read path and taken by the
//! tail-latency task.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Buckets of [`ReadStats`]: bucket `i` holds latencies below
/// `50 µs × 2^((i+1)/2)` (the last holds everything above).
pub(crate) const LATENCY_BUCKETS: usize = 32;

/// Read latencies of one DSA since the tail-latency task last took them:
/// a histogram in half-octave buckets and the sum (for the mean). One
/// relaxed add each per completed read.
#[derive(Debug)]
pub struct ReadStats {
    buckets: [AtomicU32; LATENCY_BUCKETS],
    sum_us: AtomicU64,
    /// Its reads' races lost to their hedges.
    lost: AtomicU32,
    /// Mean read latency of the last window with reads, µs (0: none yet).
    recent_us: AtomicU64,
}

impl Default for ReadStats {
    fn default() -> ReadStats {
        ReadStats {
            buckets: std::array::from_fn(|_| AtomicU32::new(0)),
            sum_us: AtomicU64::new(0),
            lost: AtomicU32::new(0),
            recent_us: AtomicU64::new(0),
        }
    }
}

/// The bucket of a latency of `us` microseconds.
pub(crate) fn latency_bucket(us: u64) -> usize {
    if us < 50 {
        return 0;
    }
    let halves = ((us as f64 / 50.0).log2() * 2.0) as usize;
    halves.min(LATENCY_BUCKETS - 1)
}

/// The upper bound of bucket `i`, in microseconds.
pub(crate) fn bucket_upper_us(i: usize) -> u64 {
    (50.0 * 2f64.powf((i + 1) as f64 / 2.0)).ceil() as u64
}

impl ReadStats {
    /// One read answered after `us` microseconds.
    pub fn record(&self, us: u64) {
        self.buckets[latency_bucket(us)].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// The mean read latency of the last window with reads.
    pub fn recent_mean(&self) -> Option<std::time::Duration> {
        match self.recent_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(std::time::Duration::from_micros(us)),
        }
    }

    /// Set by the tail-latency task at each window's end.
    pub fn set_recent_mean(&self, us: u64) {
        self.recent_us.store(us.max(1), Ordering::Relaxed);
    }

    /// One of its reads was answered first by its hedge, elsewhere.
    pub fn lose(&self) {
        self.lost.fetch_add(1, Ordering::Relaxed);
    }

    /// Races lost since last taken.
    pub fn take_lost(&self) -> u32 {
        self.lost.swap(0, Ordering::Relaxed)
    }

    /// Take what was gathered (the counts start again from zero): the
    /// bucket counts and the sum of latencies.
    pub fn take(&self) -> ([u32; LATENCY_BUCKETS], u64) {
        let b = std::array::from_fn(|i| self.buckets[i].swap(0, Ordering::Relaxed));
        (b, self.sum_us.swap(0, Ordering::Relaxed))
    }
}
