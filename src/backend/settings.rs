//! The backend's settings: connection limits and timeouts, health probes,
//! hedged reads and outlier ejection. Plain data the configuration fills.

use std::time::Duration;

/// What the backend is built with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The router's own DSA name in the knowledge, never a target.
    pub name: Option<String>,
    pub limits: Limits,
    pub tail: TailConfig,
    /// Operations in flight from this router to one DSA (0: no limit);
    /// knowledge may override it per DSA or router-wide.
    pub dsa_concurrency_limit: u32,
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
