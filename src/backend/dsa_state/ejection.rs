//! Why a DSA is out of selection for a while though it answers its
//! probes: an outlier for reads (ejected by the tail-latency task), or a
//! DSA whose binds time out, for binds (ejected by the bind that waited).

use super::DsaState;
use crate::base::logsafe::esc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl DsaState {
    /// Take it out of selection as an outlier: reads waiting on it are
    /// re-sent elsewhere, as when it goes down.
    pub fn eject(&self, reason: String) {
        tracing::warn!(dsa = %self.name, reason = %esc(&reason), "DSA ejected as an outlier");
        *self.ejection.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason);
        self.ejected.store(true, Ordering::Relaxed);
        self.down_epoch.fetch_add(1, Ordering::Relaxed);
        self.down_signal.notify_waiters();
    }

    /// Back in selection after its ejection time.
    pub fn readmit(&self) {
        if self.ejected.swap(false, Ordering::Relaxed) {
            tracing::info!(dsa = %self.name, "DSA back in selection after its ejection time");
        }
        *self.ejection.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Why it is ejected, if it is.
    pub fn ejection(&self) -> Option<String> {
        if !self.ejected.load(Ordering::Relaxed) {
            return None;
        }
        self.ejection
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// A DSA out of selection for binds (its binds time out while it answers
/// its probes): until when and why, and its ejections in a row.
#[derive(Debug, Default)]
pub(super) struct BindEjection {
    /// Out of bind selection until then, and why.
    until: Option<(Instant, String)>,
    /// Ejections in a row, and when the last ended.
    times: u32,
    ended: Option<Instant>,
}

/// An ejection ending this long before the next does not count towards
/// the next's length (as for reads).
const IN_A_ROW: Duration = Duration::from_secs(300);

impl DsaState {
    fn bind_ejection_lock(&self) -> std::sync::MutexGuard<'_, BindEjection> {
        self.binds.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take it out of selection for binds for `base` times its ejections
    /// in a row (at most 30), saying `why`; the time it is out.
    pub fn eject_for_binds(&self, why: &str, base: Duration) -> Duration {
        let now = Instant::now();
        let mut b = self.bind_ejection_lock();
        if b.ended.is_some_and(|e| now.duration_since(e) > IN_A_ROW) {
            b.times = 0;
        }
        b.times += 1;
        let time = base * b.times.min(30);
        let reason = format!("{why}; ejected for binds for {} s", time.as_secs_f32());
        tracing::warn!(dsa = %self.name, reason = %esc(&reason), "DSA ejected for binds");
        b.until = Some((now + time, reason));
        b.ended = Some(now + time);
        self.bind_out.store(true, Ordering::Relaxed);
        time
    }

    /// Why it is out of selection for binds, while it is (its ejection
    /// time over, it is back).
    pub fn bind_ejection(&self) -> Option<String> {
        if !self.bind_out.load(Ordering::Relaxed) {
            return None;
        }
        let mut b = self.bind_ejection_lock();
        match &b.until {
            Some((until, why)) if *until > Instant::now() => Some(why.clone()),
            _ => {
                b.until = None;
                if self.bind_out.swap(false, Ordering::Relaxed) {
                    tracing::info!(dsa = %self.name, "DSA back in selection for binds after its ejection time");
                }
                None
            }
        }
    }

    /// Whether it is out of selection for binds.
    pub fn bind_ejected(&self) -> bool {
        self.bind_ejection().is_some()
    }
}
