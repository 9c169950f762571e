//! The balancer: reads the worker threads' CPU time every period and
//! applies the plan.

use super::plan::{plan, Reading, Trend};
use super::{Shared, PERIOD};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// `/proc/self/task/TID` of the calling thread.
pub(super) fn this_task() -> Option<String> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    let tid = link.file_name()?.to_str()?;
    Some(format!("/proc/self/task/{tid}"))
}

/// CPU time a thread has used, from its `schedstat` (nanoseconds), else its
/// `stat` (utime + stime in clock ticks, 100 per second on Linux).
fn cpu_time(task: &str) -> Option<Duration> {
    if let Ok(s) = std::fs::read_to_string(format!("{task}/schedstat")) {
        if let Some(ns) = s.split_whitespace().next().and_then(|v| v.parse().ok()) {
            return Some(Duration::from_nanos(ns));
        }
    }
    let s = std::fs::read_to_string(format!("{task}/stat")).ok()?;
    let rest = s.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// Read the workers' CPU use every [`PERIOD`] and apply [`plan`], until
/// `shutdown`. Does nothing with one worker or `--spread-above 0`; when a
/// worker's CPU time cannot be read, every worker is put in use.
pub async fn balance(shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let n = shared.slots.len();
    if n <= 1 || shared.above <= 0.0 {
        return;
    }
    let read = |sh: &Shared| -> Option<Vec<Duration>> {
        sh.slots
            .iter()
            .map(|s| s.task.get().and_then(|t| cpu_time(t)))
            .collect()
    };
    let Some(mut last) = read(&shared) else {
        tracing::warn!("cannot read the worker threads' CPU time: every worker takes clients (as --spread-above 0)");
        shared.in_use.store(n, Relaxed);
        return;
    };
    let mut at = Instant::now();
    let mut trend = Trend::default();
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => break,
        }
        let Some(now_cpu) = read(&shared) else {
            tracing::warn!(
                "cannot read the worker threads' CPU time any more: every worker takes clients"
            );
            shared.in_use.store(n, Relaxed);
            return;
        };
        let now = Instant::now();
        let wall = now.duration_since(at).as_secs_f64().max(1e-3);
        at = now;
        let readings: Vec<Reading> = shared
            .slots
            .iter()
            .zip(now_cpu.iter().zip(&last))
            .map(|(s, (c, l))| Reading {
                busy: c.saturating_sub(*l).as_secs_f64() / wall,
                sessions: s.sessions.load(Relaxed),
                talkers: s.talkers.swap(0, Relaxed),
            })
            .collect();
        last = now_cpu;
        shared.epoch.fetch_add(1, Relaxed);
        let before = shared.in_use();
        let p = plan(&readings, before, shared.above, &mut trend);
        if p.in_use != before {
            tracing::info!(
                workers = p.in_use,
                busy = ?readings.iter().map(|r| (r.busy * 100.0).round() as u32).collect::<Vec<_>>(),
                "workers in use: {before} -> {}",
                p.in_use
            );
        }
        shared.in_use.store(p.in_use, Relaxed);
        for (i, &(k, to)) in p.leave.iter().enumerate() {
            shared.ask(i, k, to);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_read_for_this_thread() {
        let task = this_task().expect("/proc/thread-self");
        let a = cpu_time(&task).expect("schedstat or stat");
        // 50 ms on the CPU (several scheduler ticks).
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
        }
        let b = cpu_time(&task).expect("schedstat or stat");
        assert!(b > a, "CPU time went from {a:?} to {b:?}");
    }
}
