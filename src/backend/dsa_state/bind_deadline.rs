//! Bind deadlines learned from what a DSA's binds take (availability.md,
//! "Bind deadlines").
//!
//! A client's bind waits for its DSA's answer no longer than that DSA's
//! *bind deadline*; then it is given up (its connection closed) and the
//! next DSA is tried, one DSA at a time. The deadline is [`FACTOR`] times
//! the 95th percentile of the DSA's last [`KEEP`] bind times, never below
//! [`FLOOR`] and never above `--bind-timeout`; before [`MIN_SAMPLES`]
//! binds were answered it is `--bind-timeout`. Each bind given up in a row
//! doubles the next deadline (up to `--bind-timeout`): a DSA that became
//! slow but answers gets its binds answered again, and its times teach the
//! deadline. A DSA is ejected for binds once [`EJECT_AFTER`] binds in a
//! row were given up, or one waited the whole `--bind-timeout`.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

/// The shortest deadline, whatever the DSA's times.
pub(crate) const FLOOR: Duration = Duration::from_millis(100);
/// The deadline is this many times the recent 95th percentile.
pub(crate) const FACTOR: u32 = 4;
/// Binds answered before the deadline is learned (until then:
/// `--bind-timeout`).
pub(crate) const MIN_SAMPLES: usize = 8;
/// Bind times kept per DSA.
pub(crate) const KEEP: usize = 64;
/// Binds given up in a row that eject the DSA for binds.
pub(crate) const EJECT_AFTER: u32 = 3;

/// One DSA's recent bind times, and its binds given up in a row.
#[derive(Debug, Default)]
pub(crate) struct BindTimes(Mutex<Recent>);

#[derive(Debug, Default)]
struct Recent {
    took: VecDeque<Duration>,
    missed: u32,
}

/// What a bind given up at its deadline means for its DSA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Missed {
    /// It waited the whole `--bind-timeout` (as a failed probe).
    pub(crate) full: bool,
    /// The DSA is to be ejected for binds.
    pub(crate) eject: bool,
}

impl BindTimes {
    fn lock(&self) -> std::sync::MutexGuard<'_, Recent> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long a bind sent now waits for this DSA's answer, at most
    /// `ceiling` (`--bind-timeout`).
    pub(crate) fn deadline(&self, ceiling: Duration) -> Duration {
        let r = self.lock();
        if r.took.len() < MIN_SAMPLES {
            return ceiling;
        }
        // The 95th percentile: the smallest time at or above 95 % of them,
        // found in a copy on the stack (every bind asks: no allocation, no
        // full sort).
        let mut times = [Duration::ZERO; KEEP];
        let n = r.took.len().min(KEEP);
        for (t, took) in times.iter_mut().zip(r.took.iter()) {
            *t = *took;
        }
        let at = (n * 95).div_ceil(100).saturating_sub(1);
        let p95 = match times.get_mut(..n) {
            Some(s) if at < n => *s.select_nth_unstable(at).1,
            _ => ceiling,
        };
        let learned = p95.saturating_mul(FACTOR).max(FLOOR);
        let grown = learned.saturating_mul(1u32 << r.missed.min(16));
        grown.min(ceiling)
    }

    /// The DSA answered a bind after `took`.
    pub(crate) fn answered(&self, took: Duration) {
        let mut r = self.lock();
        if r.took.len() >= KEEP {
            r.took.pop_front();
        }
        r.took.push_back(took);
        r.missed = 0;
    }

    /// A bind was given up after `waited` (its deadline; `ceiling`:
    /// `--bind-timeout`).
    pub(crate) fn gave_up(&self, waited: Duration, ceiling: Duration) -> Missed {
        let mut r = self.lock();
        r.missed = r.missed.saturating_add(1);
        let full = waited >= ceiling;
        Missed {
            full,
            eject: full || r.missed >= EJECT_AFTER,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const CEILING: Duration = Duration::from_secs(5);

    #[test]
    fn the_deadline_is_learned_from_the_dsas_own_times() {
        let t = BindTimes::default();
        for _ in 0..MIN_SAMPLES - 1 {
            t.answered(MS);
        }
        assert_eq!(t.deadline(CEILING), CEILING, "not learned yet");
        t.answered(MS);
        assert_eq!(t.deadline(CEILING), FLOOR, "fast binds: the floor");
        // A DSA whose binds take 300 ms gets a deadline above that.
        let slow = BindTimes::default();
        for _ in 0..KEEP {
            slow.answered(300 * MS);
        }
        assert_eq!(slow.deadline(CEILING), 1200 * MS);
        assert_eq!(
            slow.deadline(Duration::from_secs(1)),
            Duration::from_secs(1)
        );
        // One slow bind in twenty is above the 95th percentile.
        let t = BindTimes::default();
        for i in 0..20 {
            t.answered(if i == 0 { 900 * MS } else { 50 * MS });
        }
        assert_eq!(t.deadline(CEILING), 200 * MS);
    }

    /// The percentile is the sorted times' element at 95 %, for windows
    /// of every length (including a full one that dropped its oldest).
    #[test]
    fn the_percentile_is_the_sorted_times_element_at_95_percent() {
        let mut x: u64 = 7;
        for n in MIN_SAMPLES..=KEEP + 10 {
            let t = BindTimes::default();
            let mut all = Vec::new();
            for _ in 0..n {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let took = Duration::from_micros((x >> 33) % 200_000);
                t.answered(took);
                all.push(took);
            }
            let mut kept: Vec<Duration> = all[all.len().saturating_sub(KEEP)..].to_vec();
            kept.sort_unstable();
            let p95 = kept[(kept.len() * 95).div_ceil(100) - 1];
            let want = (p95 * FACTOR).max(FLOOR).min(CEILING);
            assert_eq!(t.deadline(CEILING), want, "{n} times");
        }
    }

    #[test]
    fn binds_given_up_in_a_row_grow_the_deadline_then_eject() {
        let t = BindTimes::default();
        for _ in 0..KEEP {
            t.answered(MS);
        }
        let mut seen = Vec::new();
        for _ in 0..EJECT_AFTER {
            let d = t.deadline(CEILING);
            seen.push((d, t.gave_up(d, CEILING).eject));
        }
        assert_eq!(
            seen,
            [(100 * MS, false), (200 * MS, false), (400 * MS, true)]
        );
        // An answer starts the count again.
        t.answered(MS);
        assert_eq!(t.deadline(CEILING), FLOOR);
        let m = t.gave_up(FLOOR, CEILING);
        assert_eq!((m.full, m.eject), (false, false));
        // Waiting the whole --bind-timeout ejects at once.
        let m = BindTimes::default().gave_up(CEILING, CEILING);
        assert_eq!((m.full, m.eject), (true, true));
    }
}
