//! Machine utilization: CPU and memory percentages, cgroup-aware.
//!
//! Inside a container (cgroup v2), the limits are the cgroup's: CPU from
//! `cpu.stat` `usage_usec` against the `cpu.max` quota, memory from
//! `memory.current` against `memory.max`. Outside, or where the cgroup sets
//! no limit, the machine's totals from `/proc/stat` and `/proc/meminfo`.
//! The source is a trait so that the admission logic can be tested with
//! utilization made up by the test.

use std::path::{Path, PathBuf};
use std::time::Instant;

/// One reading, percent (0-100).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub cpu: f64,
    pub memory: f64,
}

pub trait Source: Send {
    /// Utilization since the previous call (CPU) and now (memory).
    fn sample(&mut self) -> Option<Sample>;
}

/// Reads cgroup v2 files under `dir`, falling back to `/proc` files under
/// `proc` for what the cgroup does not limit.
pub(crate) struct System {
    cgroup: Option<PathBuf>,
    proc: PathBuf,
    last_cpu: Option<CpuMark>,
}

enum CpuMark {
    Cgroup { usage_usec: u64, at: Instant },
    Proc { busy: u64, total: u64 },
}

impl System {
    /// The running process's own cgroup (v2) and `/proc`.
    pub(crate) fn detect() -> System {
        let cgroup = std::fs::read_to_string("/proc/self/cgroup")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("0::"))
                    .map(|p| Path::new("/sys/fs/cgroup").join(p.trim_start_matches('/')))
                    .filter(|d| d.join("cpu.stat").exists() || d.join("memory.current").exists())
            });
        System::at(cgroup, PathBuf::from("/proc"))
    }

    /// Explicit paths (tests use fixture directories).
    pub(crate) fn at(cgroup: Option<PathBuf>, proc: PathBuf) -> System {
        System {
            cgroup,
            proc,
            last_cpu: None,
        }
    }

    fn read(&self, p: &Path) -> Option<String> {
        std::fs::read_to_string(p).ok()
    }

    /// CPUs the cgroup may use (`cpu.max` quota / period), if limited.
    fn cgroup_cpus(&self, dir: &Path) -> Option<f64> {
        let s = self.read(&dir.join("cpu.max"))?;
        let mut it = s.split_whitespace();
        let quota = it.next()?;
        let period: f64 = it.next()?.parse().ok()?;
        if quota == "max" || period <= 0.0 {
            return None;
        }
        Some(quota.parse::<f64>().ok()? / period)
    }

    fn cpu(&mut self) -> Option<f64> {
        if let Some(dir) = self.cgroup.clone() {
            let usage: u64 = self
                .read(&dir.join("cpu.stat"))?
                .lines()
                .find_map(|l| l.strip_prefix("usage_usec "))
                .and_then(|v| v.trim().parse().ok())?;
            let cpus = self.cgroup_cpus(&dir).unwrap_or_else(|| {
                std::thread::available_parallelism()
                    .map(|n| n.get() as f64)
                    .unwrap_or(1.0)
            });
            let now = Instant::now();
            let prev = self.last_cpu.replace(CpuMark::Cgroup {
                usage_usec: usage,
                at: now,
            });
            return match prev {
                Some(CpuMark::Cgroup { usage_usec, at }) => {
                    let wall = now.duration_since(at).as_micros() as f64 * cpus;
                    (wall > 0.0).then(|| {
                        (usage.saturating_sub(usage_usec) as f64 / wall * 100.0).clamp(0.0, 100.0)
                    })
                }
                _ => None,
            };
        }
        let line = self.read(&self.proc.join("stat"))?;
        let first = line.lines().next()?;
        let nums: Vec<u64> = first
            .split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect();
        if nums.len() < 4 {
            return None;
        }
        let total: u64 = nums.iter().sum();
        let idle = nums[3] + nums.get(4).copied().unwrap_or(0);
        let busy = total.saturating_sub(idle);
        let prev = self.last_cpu.replace(CpuMark::Proc { busy, total });
        match prev {
            Some(CpuMark::Proc {
                busy: b0,
                total: t0,
            }) if total > t0 => Some(
                (busy.saturating_sub(b0) as f64 / (total - t0) as f64 * 100.0).clamp(0.0, 100.0),
            ),
            _ => None,
        }
    }

    fn memory(&self) -> Option<f64> {
        let meminfo = || -> Option<(f64, f64)> {
            let s = self.read(&self.proc.join("meminfo"))?;
            let field = |name: &str| -> Option<f64> {
                s.lines()
                    .find_map(|l| l.strip_prefix(name))
                    .and_then(|v| v.split_whitespace().next())
                    .and_then(|v| v.parse::<f64>().ok())
                    .map(|kb| kb * 1024.0)
            };
            Some((field("MemTotal:")?, field("MemAvailable:")?))
        };
        if let Some(dir) = &self.cgroup {
            let current: Option<f64> = self
                .read(&dir.join("memory.current"))
                .and_then(|s| s.trim().parse().ok());
            let max: Option<f64> = self
                .read(&dir.join("memory.max"))
                .and_then(|s| s.trim().parse().ok());
            if let Some(cur) = current {
                let limit = max.or_else(|| meminfo().map(|(t, _)| t))?;
                return (limit > 0.0).then(|| (cur / limit * 100.0).clamp(0.0, 100.0));
            }
        }
        let (total, avail) = meminfo()?;
        (total > 0.0).then(|| ((total - avail) / total * 100.0).clamp(0.0, 100.0))
    }
}

impl Source for System {
    fn sample(&mut self) -> Option<Sample> {
        let cpu = self.cpu();
        let memory = self.memory()?;
        Some(Sample { cpu: cpu?, memory })
    }
}
