//! A DSA's health as the probes and passive signals see it: falls, rises,
//! the failback hold-down, and why.

use super::DsaState;
use crate::base::logsafe::esc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

pub(super) const HEALTH_UP: u8 = 0;
const HEALTH_DOWN: u8 = 1;

/// Health bookkeeping: consecutive probe results, why, since when.
#[derive(Debug, Clone)]
pub struct Track {
    pub oks: u32,
    pub fails: u32,
    /// Down, with probes succeeding since then: the failback hold-down
    /// runs from here.
    pub recovering_since: Option<std::time::Instant>,
    /// Remaining hold-down waived by an administrator (`ctl enable`).
    pub hold_waived: bool,
    pub reason: String,
    pub since: SystemTime,
    pub probe_latency: Option<Duration>,
}

impl DsaState {
    fn track(&self) -> std::sync::MutexGuard<'_, Track> {
        self.track.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn health_track(&self) -> Track {
        self.track().clone()
    }

    pub fn set_up(&self, up: bool) {
        self.health
            .store(if up { HEALTH_UP } else { HEALTH_DOWN }, Ordering::Relaxed);
    }

    /// The DSA is this router itself: its root DSE carries this
    /// process's instance marker (`why` says where it was met). Out of
    /// selection for good (operations waiting on it are re-sent), never
    /// probed again; said once, as a warning. Whether this call found it.
    pub fn found_itself(&self, why: &str) -> bool {
        if self.itself.swap(true, Ordering::Relaxed) {
            return false;
        }
        let reason = format!("this router itself: {why}");
        tracing::warn!(dsa = %self.name, "knowledge block {} is this router itself ({why}): taken as the router's own block, never a target, not probed again; pass --name {} to say so", self.name, self.name);
        let mut t = self.track();
        self.set_up(false);
        t.reason = reason;
        t.since = SystemTime::now();
        t.oks = 0;
        t.recovering_since = None;
        self.down_epoch.fetch_add(1, Ordering::Relaxed);
        self.down_signal.notify_waiters();
        true
    }

    /// Whether the DSA turned out to be this router itself.
    pub fn is_itself(&self) -> bool {
        self.itself.load(Ordering::Relaxed)
    }

    pub fn down_epoch(&self) -> u64 {
        self.down_epoch.load(Ordering::Relaxed)
    }

    fn go_down(&self, t: &mut Track, reason: String) {
        self.set_up(false);
        tracing::warn!(dsa = %self.name, reason = %esc(&reason), "DSA down");
        t.reason = reason;
        t.since = SystemTime::now();
        t.oks = 0;
        t.recovering_since = None;
        t.hold_waived = false;
        self.down_epoch.fetch_add(1, Ordering::Relaxed);
        self.down_signal.notify_waiters();
    }

    /// A probe succeeded; up again after `rise` in a row and, once it has
    /// been down, after probes have succeeded for `hold` (the failback
    /// hold-down) unless an administrator waived it.
    pub fn probe_ok(&self, latency: Duration, rise: u32, hold: Duration) {
        self.probe_latency.observe(latency);
        let mut t = self.track();
        t.fails = 0;
        t.probe_latency = Some(latency);
        if self.is_up() {
            if t.reason == "not probed yet" {
                t.reason = "probes succeed".into();
            }
            return;
        }
        t.oks += 1;
        let since = *t
            .recovering_since
            .get_or_insert_with(std::time::Instant::now);
        let left = hold.saturating_sub(since.elapsed());
        if t.oks < rise.max(1) {
            if !hold.is_zero() && !t.hold_waived {
                t.reason = format!(
                    "answering again; back in service after the failback hold-down ({} s left)",
                    left.as_secs().max(1)
                );
            }
            return;
        }
        if left.is_zero() || t.hold_waived {
            self.set_up(true);
            t.reason = if hold.is_zero() || t.hold_waived {
                format!("{} probe(s) succeeded", t.oks)
            } else {
                format!(
                    "probes succeeded for the failback hold-down ({} s)",
                    hold.as_secs()
                )
            };
            t.since = SystemTime::now();
            t.recovering_since = None;
            t.hold_waived = false;
            tracing::info!(dsa = %self.name, reason = %esc(&t.reason), "DSA up");
        } else {
            t.reason = format!(
                "answering again; back in service after the failback hold-down ({} s left)",
                left.as_secs().max(1)
            );
        }
    }

    /// Time left before a recovering DSA serves again (failback
    /// hold-down), if it is recovering.
    pub fn failback_left(&self, hold: Duration) -> Option<Duration> {
        let t = self.track();
        if self.is_up() || t.hold_waived {
            return None;
        }
        t.recovering_since.map(|s| hold.saturating_sub(s.elapsed()))
    }

    /// A probe (or an operation timeout) failed; down after `fall` in a row.
    pub fn probe_failed(&self, reason: &str, fall: u32) {
        let mut t = self.track();
        t.oks = 0;
        t.recovering_since = None;
        if !self.is_up() {
            return;
        }
        t.fails += 1;
        if t.fails >= fall.max(1) {
            let r = format!("{} probe(s) failed, last: {reason}", t.fails);
            self.go_down(&mut t, r);
        }
    }

    /// A passive signal (refused or timed-out connect, reset connection):
    /// down at once.
    pub fn passive_down(&self, reason: &str) {
        let mut t = self.track();
        t.oks = 0;
        t.recovering_since = None;
        if self.is_up() {
            self.go_down(&mut t, reason.to_string());
        }
    }

    pub fn is_up(&self) -> bool {
        self.health.load(Ordering::Relaxed) == HEALTH_UP
    }

    /// An administrator enabled the DSA: a DSA answering its probes again
    /// serves at once, whatever is left of the failback hold-down; one
    /// still failing serves after its next good probes.
    pub(super) fn waive_hold(&self) {
        let mut t = self.track();
        if self.is_up() {
            return;
        }
        if t.recovering_since.is_some() {
            self.set_up(true);
            t.reason =
                "enabled by an administrator while answering probes (failback hold-down waived)"
                    .into();
            t.since = SystemTime::now();
            t.recovering_since = None;
            tracing::info!(dsa = %self.name, reason = %esc(&t.reason), "DSA up");
        } else {
            t.hold_waived = true;
        }
    }
}
