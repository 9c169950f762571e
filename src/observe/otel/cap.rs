//! The cap on operations traced because their caller asked: a request's
//! trace context control with the sampled flag set is followed only
//! while such operations stay within a rate (`--otlp-caller-rate`, per
//! second, with a second's worth as burst), so that a client cannot make
//! the router trace (and export) every one of its operations. Over the
//! cap, the operation is sampled as if it carried no control, at
//! `--otlp-sample`.
//!
//! A lock-free token bucket kept as one time (GCRA): the instant, in
//! nanoseconds since the cap was made, at which the bucket will be full
//! again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The cap (see the module documentation).
#[derive(Debug)]
pub(super) struct Cap {
    start: Instant,
    /// Nanoseconds one operation costs (1e9 / rate); 0: no cap at all;
    /// `u64::MAX`: nothing the caller asks is followed beyond the ratio.
    cost: u64,
    /// The burst, in nanoseconds of cost.
    burst: u64,
    /// When the bucket is full again (nanoseconds since `start`).
    full_at: AtomicU64,
}

impl Cap {
    /// A cap of `per_second` operations (a second's worth at once); 0
    /// follows no caller beyond the ratio.
    pub(super) fn new(per_second: u32) -> Cap {
        let cost = match per_second {
            0 => u64::MAX,
            n => 1_000_000_000 / u64::from(n),
        };
        Cap {
            start: Instant::now(),
            cost,
            burst: 1_000_000_000,
            full_at: AtomicU64::new(0),
        }
    }

    /// Take one operation at `now`: false when over the cap.
    pub(super) fn take(&self, now: Instant) -> bool {
        if self.cost == u64::MAX {
            crate::observe::metrics::TRACES_CALLER_CAPPED.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let t = now.saturating_duration_since(self.start).as_nanos() as u64;
        let mut full_at = self.full_at.load(Ordering::Relaxed);
        loop {
            let next = full_at.max(t).saturating_add(self.cost);
            if next.saturating_sub(t) > self.burst {
                crate::observe::metrics::TRACES_CALLER_CAPPED.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            match self.full_at.compare_exchange_weak(
                full_at,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(seen) => full_at = seen,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_second_s_worth_at_once_then_the_rate() {
        let cap = Cap::new(100);
        let t0 = cap.start;
        let burst = (0..1000).filter(|_| cap.take(t0)).count();
        assert_eq!(burst, 100, "a second's worth");
        assert!(!cap.take(t0 + Duration::from_millis(5)));
        assert!(cap.take(t0 + Duration::from_millis(11)), "one per 10 ms");
        let later = t0 + Duration::from_secs(10);
        let n = (0..1000).filter(|_| cap.take(later)).count();
        assert_eq!(n, 100, "refilled to the burst, no more");
    }

    #[test]
    fn zero_follows_no_caller() {
        let cap = Cap::new(0);
        assert!(!cap.take(Instant::now()));
    }
}
