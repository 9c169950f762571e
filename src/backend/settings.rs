//! The backend's settings: connection limits and timeouts, health probes,
//! hedged reads and outlier ejection. Plain data the configuration fills.

use crate::directory::knowledge::RouterSettings;
use arc_swap::ArcSwap;
use std::sync::Arc;
use std::time::Duration;

/// What the backend is built with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The router's own DSA name in the knowledge, never a target.
    pub name: Option<String>,
    pub limits: Limits,
    /// The settings a reload of the settings file changes.
    pub live: Arc<ArcSwap<Live>>,
    /// DSAs (names) whose connections start with a PROXY protocol v2
    /// header.
    pub send_proxy_to: Vec<String>,
    /// Worker threads: shared DSA connections are kept per worker.
    pub workers: usize,
}

/// Connection settings shared by all pools.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub connect_timeout: Duration,
    /// Silence allowed on an operation.
    pub op_timeout: Duration,
    /// Cap on an operation's whole time (zero: none).
    pub op_total_timeout: Duration,
    /// How long a bind the router makes (its own, or a client's replayed)
    /// waits for its DSA.
    pub bind_timeout: Duration,
    pub max_response_pdu: usize,
    /// Health `fall`: an operation timeout counts as a failed probe.
    pub fall: u32,
    /// Connections of clients' own per DSA (0: no limit).
    pub max_own_connections: u32,
    /// Spare connections per DSA and worker thread.
    pub spare_connections: usize,
}

/// Active health probes.
#[derive(Debug, Clone)]
pub struct HealthConfig {
    pub interval: Duration,
    pub timeout: Duration,
    pub fall: u32,
    pub rise: u32,
    /// Failback hold-down: a DSA that went down serves again only after
    /// its probes have succeeded for this long (and `rise` in a row).
    pub failback_hold: Duration,
    /// Probe search base (default: the root DSE, "").
    pub base: String,
    /// Probe filter (default `(objectClass=*)`).
    pub filter: String,
    /// Bind DN and password for probes of every DSA (default: the
    /// router's `ldap-dsa-name` on each DSA that has one, else anonymous).
    pub bind: Option<(String, crate::directory::knowledge::Secret)>,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            fall: 3,
            rise: 2,
            failback_hold: Duration::ZERO,
            base: String::new(),
            filter: "(objectClass=*)".into(),
            bind: None,
        }
    }
}

/// Hedged reads and outlier ejection (knowledge `set dsa-router-...`
/// overrides them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailConfig {
    /// Hedges allowed, in percent of reads (0: no hedging).
    pub hedge_budget: u32,
    /// The least time a read waits before it is hedged (the partition's
    /// recent 95th percentile when that is longer).
    pub hedge_floor: Duration,
    /// The largest share of a group's DSAs ejected at once, in percent (0:
    /// no ejection).
    pub max_ejection: u32,
    /// An outlier's first ejection time; each repeat adds as much again.
    pub ejection_time: Duration,
}

impl Default for TailConfig {
    fn default() -> TailConfig {
        TailConfig {
            hedge_budget: 5,
            hedge_floor: Duration::from_millis(10),
            max_ejection: 50,
            ejection_time: Duration::from_secs(10),
        }
    }
}

/// The settings a reload may change: those knowledge's `set dsa-router-*`
/// lines may also set, with which of them the settings file or the
/// command line fixed (they then override knowledge).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Live {
    pub tail: TailConfig,
    /// Operations in flight from this router to one DSA (0: no limit);
    /// knowledge may override it per DSA, or router-wide unless pinned.
    pub dsa_concurrency_limit: u32,
    /// CPU and memory thresholds, percent (0: off).
    pub cpu_threshold: u32,
    pub memory_threshold: u32,
    pub pinned: Pinned,
}

/// The settings given in the settings file or on the command line: each
/// flag's long name, and where it was given (for the notices).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pinned(pub Vec<(String, String)>);

impl Pinned {
    /// Where `flag` was given, when it was.
    pub fn by(&self, flag: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(f, _)| f == flag)
            .map(|(_, by)| by.as_str())
    }
}

/// Knowledge's router-wide settings that it sets: each line's `key =
/// value` as written, with the `serve` setting that overrides it.
pub fn knowledge_values(k: &RouterSettings) -> Vec<(String, &'static str)> {
    let n = |key: &str, v: Option<u32>| v.map(|v| format!("{key} = {v}"));
    let d = |v: &Option<crate::directory::knowledge::SetDuration>| {
        v.as_ref().map(|d| d.written.clone())
    };
    [
        (
            n("dsa-router-cpu-threshold", k.cpu_threshold),
            "cpu-threshold",
        ),
        (
            n("dsa-router-memory-threshold", k.memory_threshold),
            "memory-threshold",
        ),
        (
            n("dsa-router-concurrency-limit", k.concurrency_limit),
            "dsa-concurrency-limit",
        ),
        (n("dsa-router-hedge-budget", k.hedge_budget), "hedge-budget"),
        (d(&k.hedge_floor), "hedge-floor"),
        (n("dsa-router-max-ejection", k.max_ejection), "max-ejection"),
        (d(&k.ejection_time), "ejection-time"),
    ]
    .into_iter()
    .filter_map(|(written, flag)| Some((written?, flag)))
    .collect()
}

/// What knowledge's `set dsa-router-*` lines do under `pinned`: one
/// notice for each, in force or overridden.
pub fn knowledge_notices(k: &RouterSettings, pinned: &Pinned) -> Vec<String> {
    knowledge_values(k)
        .into_iter()
        .map(|(written, flag)| match pinned.by(flag) {
            Some(by) => format!("knowledge: set {written} is overridden by {flag} from {by}"),
            None => format!(
                "knowledge: set {written} is in force (the settings file's {flag}, or --{flag}, would override it)"
            ),
        })
        .collect()
}

impl Live {
    /// The tail-latency settings in force: knowledge's `set
    /// dsa-router-...` where the settings file and command line left them.
    pub fn tail(&self, k: &RouterSettings) -> TailConfig {
        let own = |flag: &str| self.pinned.by(flag).is_some();
        let cli = self.tail;
        let pick = |flag: &str, v: Option<u32>| v.filter(|_| !own(flag));
        let time = |flag: &str, v: &Option<crate::directory::knowledge::SetDuration>| {
            v.as_ref().filter(|_| !own(flag)).map(|d| d.value)
        };
        TailConfig {
            hedge_budget: pick("hedge-budget", k.hedge_budget).unwrap_or(cli.hedge_budget),
            hedge_floor: time("hedge-floor", &k.hedge_floor).unwrap_or(cli.hedge_floor),
            max_ejection: pick("max-ejection", k.max_ejection).unwrap_or(cli.max_ejection),
            ejection_time: time("ejection-time", &k.ejection_time).unwrap_or(cli.ejection_time),
        }
    }

    /// The router-wide per-DSA concurrency limit in force.
    pub fn concurrency_limit(&self, k: &RouterSettings) -> u32 {
        k.concurrency_limit
            .filter(|_| self.pinned.by("dsa-concurrency-limit").is_none())
            .unwrap_or(self.dsa_concurrency_limit)
    }

    /// The CPU and memory thresholds in force, percent.
    pub fn thresholds(&self, k: &RouterSettings) -> (u32, u32) {
        let own = |flag: &str| self.pinned.by(flag).is_some();
        (
            k.cpu_threshold
                .filter(|_| !own("cpu-threshold"))
                .unwrap_or(self.cpu_threshold),
            k.memory_threshold
                .filter(|_| !own("memory-threshold"))
                .unwrap_or(self.memory_threshold),
        )
    }
}
