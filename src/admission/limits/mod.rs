//! Throttling (architecture.md, "Availability and throttling").
//!
//! * Per-DSA concurrency limits live in [`crate::backend::dsa_state::DsaState`] and are
//!   enforced by selection: a saturated target is skipped, and when every
//!   target of the chosen group is saturated the request fails with `busy`
//!   and the concurrency message naming the DSAs.
//! * Router CPU and memory thresholds (percent, 0 = off) gate only the
//!   admission of new operations: a sampler averages utilization over the
//!   aggregation window, and while an average is above its threshold new
//!   operations are refused with `busy` and the CPU or memory message.
//!   Work already accepted continues; unbind and abandon are always
//!   accepted.

pub(crate) mod sampler;

use sampler::{Sample, Source};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub(crate) const CPU_MESSAGE: &str = "dsa-router: the router has exceeded the CPU limit set by the administrator; try again later, or ask the administrator to raise the limit";
pub(crate) const MEMORY_MESSAGE: &str = "dsa-router: the router has exceeded the memory limit set by the administrator; try again later, or ask the administrator to raise the limit";

/// Thresholds in percent; 0 is off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Thresholds {
    pub cpu: u8,
    pub memory: u8,
}

impl Thresholds {
    pub fn validate(cpu: u32, memory: u32) -> crate::base::error::Result<Thresholds> {
        for (name, v) in [("CPU", cpu), ("memory", memory)] {
            if v > 100 {
                return Err(crate::base::error::Error::config(format!(
                    "{name} threshold {v} is not a percentage 0-100 (0 = off)"
                )));
            }
        }
        Ok(Thresholds {
            cpu: cpu as u8,
            memory: memory as u8,
        })
    }
}

/// Which limit refused an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    Cpu,
    Memory,
}

impl Over {
    pub fn message(self) -> &'static str {
        match self {
            Over::Cpu => CPU_MESSAGE,
            Over::Memory => MEMORY_MESSAGE,
        }
    }
}

/// Windowed averages and the admission decision. The averages are stored
/// as f64 bits in atomics so admission reads them without a lock.
pub struct Throttle {
    thresholds: Mutex<Thresholds>,
    cpu_avg: AtomicU64,
    mem_avg: AtomicU64,
    window: Duration,
    samples: Mutex<VecDeque<(Instant, Sample)>>,
}

impl Throttle {
    pub fn new(thresholds: Thresholds, window: Duration) -> Throttle {
        Throttle {
            thresholds: Mutex::new(thresholds),
            cpu_avg: AtomicU64::new(0f64.to_bits()),
            mem_avg: AtomicU64::new(0f64.to_bits()),
            window,
            samples: Mutex::new(VecDeque::new()),
        }
    }

    pub fn thresholds(&self) -> Thresholds {
        *self.thresholds.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn set_thresholds(&self, t: Thresholds) {
        *self.thresholds.lock().unwrap_or_else(|p| p.into_inner()) = t;
    }

    pub fn window(&self) -> Duration {
        self.window
    }

    /// Current windowed averages (CPU, memory), percent.
    pub fn averages(&self) -> (f64, f64) {
        (
            f64::from_bits(self.cpu_avg.load(Ordering::Relaxed)),
            f64::from_bits(self.mem_avg.load(Ordering::Relaxed)),
        )
    }

    /// Add a sample taken at `at` and recompute the averages over the window.
    pub fn record(&self, at: Instant, s: Sample) {
        let mut q = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        q.push_back((at, s));
        while q
            .front()
            .is_some_and(|(t, _)| at.duration_since(*t) > self.window)
        {
            q.pop_front();
        }
        let n = q.len().max(1) as f64;
        let cpu = q.iter().map(|(_, s)| s.cpu).sum::<f64>() / n;
        let mem = q.iter().map(|(_, s)| s.memory).sum::<f64>() / n;
        self.cpu_avg.store(cpu.to_bits(), Ordering::Relaxed);
        self.mem_avg.store(mem.to_bits(), Ordering::Relaxed);
    }

    /// Whether a new operation may be admitted now.
    pub fn admit(&self) -> Result<(), Over> {
        let t = self.thresholds();
        if t.cpu == 0 && t.memory == 0 {
            return Ok(());
        }
        let (cpu, mem) = self.averages();
        if t.cpu > 0 && cpu > t.cpu as f64 {
            return Err(Over::Cpu);
        }
        if t.memory > 0 && mem > t.memory as f64 {
            return Err(Over::Memory);
        }
        Ok(())
    }

    /// Sample `source` every `every` until shutdown.
    pub async fn run(
        &self,
        mut source: Box<dyn Source>,
        every: Duration,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut tick = tokio::time::interval(every);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            if let Some(s) = source.sample() {
                self.record(Instant::now(), s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::sampler::{Sample, Source, System};
    use super::*;

    /// Utilization made up by the test.
    struct Script(Vec<Sample>);

    impl Source for Script {
        fn sample(&mut self) -> Option<Sample> {
            (!self.0.is_empty()).then(|| self.0.remove(0))
        }
    }

    fn s(cpu: f64, memory: f64) -> Sample {
        Sample { cpu, memory }
    }

    #[test]
    fn thresholds_are_percentages() {
        assert!(Thresholds::validate(0, 0).is_ok());
        assert!(Thresholds::validate(100, 100).is_ok());
        assert!(Thresholds::validate(101, 0).is_err());
        assert!(Thresholds::validate(0, 250).is_err());
    }

    #[test]
    fn admission_follows_the_window_average() {
        let t = Throttle::new(
            Thresholds {
                cpu: 50,
                memory: 80,
            },
            Duration::from_secs(10),
        );
        let t0 = Instant::now();
        assert_eq!(t.admit(), Ok(()), "no samples yet");
        let mut src = Script(vec![s(90.0, 10.0), s(90.0, 10.0), s(0.0, 10.0)]);
        for i in 0..2 {
            t.record(
                t0 + Duration::from_secs(i),
                src.sample().unwrap_or(s(0.0, 0.0)),
            );
        }
        assert_eq!(t.admit(), Err(Over::Cpu));
        // One idle sample brings the 3-sample average to 60: still over.
        t.record(
            t0 + Duration::from_secs(2),
            src.sample().unwrap_or(s(0.0, 0.0)),
        );
        assert_eq!(t.admit(), Err(Over::Cpu));
        // Samples older than the window drop out.
        t.record(t0 + Duration::from_secs(12), s(10.0, 10.0));
        t.record(t0 + Duration::from_secs(13), s(10.0, 10.0));
        assert_eq!(t.admit(), Ok(()), "{:?}", t.averages());
        t.record(t0 + Duration::from_secs(14), s(10.0, 99.0));
        assert_eq!(
            t.admit(),
            Ok(()),
            "(10+10+99)/3 is under 80: {:?}",
            t.averages()
        );
        t.record(t0 + Duration::from_secs(15), s(10.0, 99.0));
        t.record(t0 + Duration::from_secs(16), s(10.0, 99.0));
        t.record(t0 + Duration::from_secs(17), s(10.0, 99.0));
        t.record(t0 + Duration::from_secs(18), s(10.0, 99.0));
        t.record(t0 + Duration::from_secs(19), s(10.0, 99.0));
        t.record(t0 + Duration::from_secs(20), s(10.0, 99.0));
        t.record(t0 + Duration::from_secs(21), s(10.0, 99.0));
        assert_eq!(t.admit(), Err(Over::Memory), "{:?}", t.averages());
        // Off means off, whatever the load; and thresholds change live.
        t.set_thresholds(Thresholds { cpu: 0, memory: 0 });
        assert_eq!(t.admit(), Ok(()));
        assert!(CPU_MESSAGE.contains("CPU limit") && MEMORY_MESSAGE.contains("memory limit"));
    }

    fn write(dir: &std::path::Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).unwrap_or_default();
    }

    #[test]
    fn cgroup_v2_limits_win_over_host_totals() {
        let Ok(cg) = tempfile::tempdir() else { return };
        let Ok(proc) = tempfile::tempdir() else {
            return;
        };
        write(
            proc.path(),
            "meminfo",
            "MemTotal:       1000000 kB\nMemAvailable:    500000 kB\n",
        );
        write(proc.path(), "stat", "cpu  100 0 100 800 0 0 0 0 0 0\n");
        write(cg.path(), "memory.current", "268435456\n");
        write(cg.path(), "memory.max", "1073741824\n");
        write(cg.path(), "cpu.max", "50000 100000\n");
        write(cg.path(), "cpu.stat", "usage_usec 1000000\nuser_usec 1\n");
        let mut sys = System::at(Some(cg.path().to_path_buf()), proc.path().to_path_buf());
        assert_eq!(sys.sample(), None, "CPU needs two readings");
        std::thread::sleep(Duration::from_millis(100));
        // 50 ms of CPU in ~100 ms of wall time on a half-CPU quota: ~100%.
        write(cg.path(), "cpu.stat", "usage_usec 1050000\n");
        let got = sys.sample().unwrap_or(s(-1.0, -1.0));
        assert!((25.0..=100.0).contains(&got.cpu), "{got:?}");
        assert!(
            (got.memory - 25.0).abs() < 0.01,
            "memory is the cgroup's 256 MiB of 1 GiB: {got:?}"
        );
        // No cgroup memory limit: the host total is the limit.
        write(cg.path(), "memory.max", "max\n");
        let got = sys.sample().unwrap_or(s(-1.0, -1.0));
        assert!((got.memory - 26.2144).abs() < 0.01, "{got:?}");
    }

    #[test]
    fn host_proc_files_without_cgroup() {
        let Ok(proc) = tempfile::tempdir() else {
            return;
        };
        write(
            proc.path(),
            "meminfo",
            "MemTotal:       1000 kB\nMemFree: 1 kB\nMemAvailable:    250 kB\n",
        );
        write(
            proc.path(),
            "stat",
            "cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 1 2 3 4\n",
        );
        let mut sys = System::at(None, proc.path().to_path_buf());
        assert_eq!(sys.sample(), None);
        // +300 busy, +100 idle: 75% CPU.
        write(proc.path(), "stat", "cpu  300 0 200 900 0 0 0 0 0 0\n");
        let got = sys.sample().unwrap_or(s(-1.0, -1.0));
        assert!((got.cpu - 75.0).abs() < 0.01, "{got:?}");
        assert!((got.memory - 75.0).abs() < 0.01, "{got:?}");
    }
}
