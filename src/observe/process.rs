//! The standard `process_*` series of Prometheus client libraries, read
//! from `/proc/self` at each scrape (no crate: a few files the kernel
//! writes in a fixed format). A value that cannot be read gets no sample.

use super::catalog::single;

/// What `/proc/self` says now.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Process {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    pub start_time_seconds: Option<f64>,
}

impl Process {
    /// Read this process's figures.
    pub fn read() -> Process {
        let stat = std::fs::read_to_string("/proc/self/stat").ok();
        let fields = stat.as_deref().map(stat_fields).unwrap_or_default();
        let num = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
        let boot = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| boot_time(&s));
        // Fields counted from the state (field 3 of proc(5)) as 0.
        let (utime, stime, start, vsize) = (num(11), num(12), num(19), num(20));
        Process {
            cpu_seconds: utime.zip(stime).map(|(u, s)| (u + s) as f64 / USER_HZ),
            resident_bytes: std::fs::read_to_string("/proc/self/status")
                .ok()
                .and_then(|s| resident(&s)),
            virtual_bytes: vsize,
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|d| d.count() as u64),
            max_fds: std::fs::read_to_string("/proc/self/limits")
                .ok()
                .and_then(|s| max_open_files(&s)),
            start_time_seconds: start
                .zip(boot)
                .map(|(st, b)| b as f64 + st as f64 / USER_HZ),
        }
    }

    /// The `process_*` samples.
    pub fn render(&self, out: &mut String) {
        let rows: [(&str, Option<f64>); 6] = [
            ("process_cpu_seconds_total", self.cpu_seconds),
            (
                "process_resident_memory_bytes",
                self.resident_bytes.map(|v| v as f64),
            ),
            (
                "process_virtual_memory_bytes",
                self.virtual_bytes.map(|v| v as f64),
            ),
            ("process_open_fds", self.open_fds.map(|v| v as f64)),
            ("process_max_fds", self.max_fds.map(|v| v as f64)),
            ("process_start_time_seconds", self.start_time_seconds),
        ];
        for (name, v) in rows {
            if let Some(v) = v {
                single(out, name, v);
            }
        }
    }
}

/// The fields of `/proc/self/stat` after the command name (which may hold
/// spaces and parentheses: everything after the last `)`).
fn stat_fields(stat: &str) -> Vec<&str> {
    stat.rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default()
}

/// `btime` of `/proc/stat`: Unix time of the boot.
fn boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit of "Max open files" in `/proc/self/limits`.
fn max_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
}

/// Clock ticks per second in `/proc` files: USER_HZ, which the kernel
/// fixes at 100 for user space on every architecture Linux runs this on
/// (what Prometheus's own procfs reader assumes too).
const USER_HZ: f64 = 100.0;

/// `VmRSS` of `/proc/self/status`, bytes.
fn resident(status: &str) -> Option<u64> {
    let kb = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kb: u64 = kb.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_read_as_proc_5_describes_them() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194304 122 0 0 0 250 50 0 0 20 0 1 0 1000 3133440 361 18446744073709551615";
        let f = stat_fields(stat);
        assert_eq!(
            (f[0], f[11], f[12], f[19], f[20], f[21]),
            ("S", "250", "50", "1000", "3133440", "361")
        );
        assert_eq!(
            boot_time("cpu 1 2\nbtime 1700000000\nprocesses 5\n"),
            Some(1_700_000_000)
        );
        let limits = "Limit Soft Limit Hard Limit Units\nMax open files            20000                40000                files\n";
        assert_eq!(max_open_files(limits), Some(20000));
        assert_eq!(
            resident("Name:\tx\nVmRSS:\t    1234 kB\n"),
            Some(1234 * 1024)
        );
    }

    #[test]
    fn this_process_reads_whole() {
        let p = Process::read();
        assert!(p.cpu_seconds.is_some_and(|c| c >= 0.0), "{p:?}");
        assert!(p.resident_bytes.is_some_and(|r| r > 1 << 20), "{p:?}");
        assert!(p.virtual_bytes >= p.resident_bytes, "{p:?}");
        assert!(p.open_fds.is_some_and(|n| n >= 3), "{p:?}");
        assert!(p.max_fds >= p.open_fds, "{p:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        assert!(
            p.start_time_seconds
                .is_some_and(|s| s <= now + 1.0 && s > now - 86400.0 * 365.0),
            "{p:?}"
        );
        let mut out = String::new();
        p.render(&mut out);
        assert!(
            out.contains("# TYPE process_cpu_seconds_total counter\n"),
            "{out}"
        );
        assert_eq!(out.matches("# TYPE").count(), 6, "{out}");
    }
}
