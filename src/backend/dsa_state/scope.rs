//! A DSA's entries returned outside the search they answer, counted:
//! [`STRIKES`] within [`WINDOW`] take the DSA down as broken.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Out-of-scope entries within [`WINDOW`] that take the DSA down.
pub(crate) const STRIKES: u32 = 3;
/// See [`STRIKES`].
pub(crate) const WINDOW: Duration = Duration::from_secs(60);

/// One DSA's out-of-scope entries.
#[derive(Debug, Default)]
pub struct OutOfScope {
    /// Entries dropped since start.
    pub entries: AtomicU64,
    /// Those of the current window: how many, since when.
    window: Mutex<(u32, Option<Instant>)>,
}

impl OutOfScope {
    /// Count one; the number within the window when it reaches
    /// [`STRIKES`] (the window then starts again).
    pub(crate) fn strike(&self, now: Instant) -> Option<u32> {
        self.entries.fetch_add(1, Ordering::Relaxed);
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        match w.1 {
            Some(since) if now.duration_since(since) <= WINDOW => w.0 += 1,
            _ => *w = (1, Some(now)),
        }
        if w.0 >= STRIKES {
            let n = w.0;
            *w = (0, None);
            return Some(n);
        }
        None
    }

    pub fn count(&self) -> u64 {
        self.entries.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_third_strike_within_the_window_counts() {
        let o = OutOfScope::default();
        let t = Instant::now();
        assert_eq!(o.strike(t), None);
        // The window has passed: counting starts again.
        assert_eq!(o.strike(t + WINDOW + Duration::from_secs(1)), None);
        let t = t + WINDOW + Duration::from_secs(1);
        assert_eq!(o.strike(t + Duration::from_secs(1)), None);
        assert_eq!(o.strike(t + Duration::from_secs(2)), Some(3));
        assert_eq!(o.strike(t + Duration::from_secs(3)), None);
        assert_eq!(o.count(), 5);
    }
}
