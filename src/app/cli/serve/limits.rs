//! The limits and behaviour flags shared by `serve` and `demo`, and the
//! [`Config`] they make. The flags with their help texts stay side by side
//! with the code that reads them, so that `serve --help` and the
//! configuration cannot drift apart.

use super::flags::{
    AccessLogFormat, AffinityScope, FailedBindArgs, FanoutPolicy, OwnConnection, PolicyArgs,
    ReplicationArgs,
};
use crate::base::error::{Error, Result};
use crate::service::context::Config;
use std::path::PathBuf;
use std::time::Duration;

/// Limits and behaviour shared by `serve` and `demo`.
#[derive(clap::Args, Debug, Clone)]
pub struct LimitArgs {
    /// Maximum client connections at once.
    #[arg(long, default_value_t = 10_000)]
    pub max_clients: usize,
    /// Largest request PDU, bytes.
    #[arg(long, default_value_t = 4 << 20)]
    pub max_request_pdu: usize,
    /// Bytes all clients' large incomplete requests may hold at once; a
    /// client whose incomplete request would go beyond is disconnected
    /// (busy), the others keep theirs.
    #[arg(long, default_value_t = 256 << 20)]
    pub max_request_memory: usize,
    /// Bytes of responses queued for all clients at once (each client has
    /// its own bound too, --client-queue-bytes); beyond, a client with a
    /// backlog whose next response would go over is disconnected and its
    /// operations abandoned, as when its own queue is full.
    #[arg(long, default_value_t = 1 << 30)]
    pub max_response_memory: usize,
    /// Largest response PDU from a DSA, bytes.
    #[arg(long, default_value_t = 16 << 20)]
    pub max_response_pdu: usize,
    /// Outstanding operations per client connection (`busy` beyond).
    #[arg(long, default_value_t = 256)]
    pub max_outstanding: usize,
    /// Connections of clients' own per DSA (stateful clients: binds, paged
    /// and sorted searches, VLV, sync, transactions, SASL); a client that
    /// would need one more gets `busy`. 0: no limit.
    #[arg(long, default_value_t = 0)]
    pub max_own_connections: u32,
    /// Connections of clients' own kept open for later binds once their
    /// clients have unbound or left, per DSA and worker thread (a web
    /// login then costs the DSA a bind, not a TCP connection). Only a
    /// connection that carried nothing the DSA keeps per connection is
    /// kept; unused for 30 s it closes. They count in
    /// --max-own-connections. 0: close them.
    #[arg(long, default_value_t = 16)]
    pub spare_connections: usize,
    /// Read-your-writes: after a client's write, its reads of the same
    /// partition go to the DSA that took the write for this long, while
    /// that DSA is eligible (multi-write DSAs replicate with a lag). `0`
    /// turns it off.
    #[arg(long, default_value = "5s")]
    pub read_your_writes: String,
    /// Whose writes the affinity follows: `connection` (the client
    /// connection's own) or `identity` (the bound DN's, from any of its
    /// connections).
    #[arg(long, value_enum, default_value = "connection")]
    pub affinity_scope: AffinityScope,
    #[command(flatten)]
    pub replication: ReplicationArgs,
    #[command(flatten)]
    pub failed_binds: FailedBindArgs,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Hedged reads: a read not answered within its partition's recent
    /// 95th-percentile latency (at least --hedge-floor) is also sent to
    /// another DSA of its group, the first answer wins. The budget caps
    /// hedges at this percentage of reads (0 turns hedging off).
    #[arg(long, default_value_t = 5)]
    pub hedge_budget: u32,
    /// The least time a read waits before it is hedged.
    #[arg(long, default_value = "10ms")]
    pub hedge_floor: String,
    /// Outlier ejection: a DSA whose reads stall, or run far slower than
    /// its group's, is taken out of selection for --ejection-time (longer
    /// each time it repeats); at most this percentage of a group is
    /// ejected at once (0 turns ejection off).
    #[arg(long, default_value_t = 50)]
    pub max_ejection: u32,
    /// An outlier's first ejection time.
    #[arg(long, default_value = "10s")]
    pub ejection_time: String,
    /// Response PDUs queued for one client that does not read fast enough
    /// (a PDU, or the responses of one DSA read): beyond it the client
    /// counts as stalled, its operations are abandoned and it is
    /// disconnected; the router's own answers wait for room instead.
    #[arg(long, default_value_t = 1 << 20)]
    pub client_queue: usize,
    /// Response bytes queued for one client before it counts as stalled
    /// (its operations are abandoned and it is disconnected).
    #[arg(long, default_value_t = 16 << 20)]
    pub client_queue_bytes: usize,
    /// Seconds a client may stay idle (0: forever).
    #[arg(long, default_value_t = 900)]
    pub idle_timeout: u64,
    /// Seconds a client may leave a PDU incomplete.
    #[arg(long, default_value_t = 30)]
    pub pdu_timeout: u64,
    /// Seconds to connect to a DSA.
    #[arg(long, default_value_t = 3)]
    pub connect_timeout: u64,
    /// Seconds a DSA may stay silent on an operation (time since it last
    /// sent something for it: a search streaming entries is never cut
    /// while they come); then the client gets timeLimitExceeded and the
    /// operation is abandoned on the DSA.
    #[arg(long, default_value_t = 120)]
    pub op_timeout: u64,
    /// Seconds an operation may take in all, however steadily its DSA
    /// answers (0: no cap).
    #[arg(long, default_value_t = 0)]
    pub op_total_timeout: u64,
    /// Seconds a simple bind waits for its DSA; then that DSA counts a
    /// failed probe and the bind goes to the next DSA of the partition
    /// (up to 3 tries), as a read would.
    #[arg(long, default_value_t = 5.0)]
    pub bind_timeout: f64,
    /// Seconds a drain (SIGTERM, SIGINT, `ctl shutdown`) lets operations in
    /// flight finish before the connections that still run some are cut.
    #[arg(long, alias = "shutdown-grace", default_value_t = 30)]
    pub drain_timeout: u64,
    /// Turn the access log (one line per operation) off.
    #[arg(long)]
    pub no_access_log: bool,
    /// Write the access log to this file (appended to; SIGUSR1 reopens it,
    /// for logrotate) instead of stderr (`-`). `demo` logs no operations
    /// unless given one.
    #[arg(long, value_name = "PATH")]
    pub access_log: Option<PathBuf>,
    /// The access log's format: `text` (`TIME  INFO access: key=value
    /// ...`) or `json` (one object per line).
    #[arg(long, value_enum, default_value_t = AccessLogFormat::Text)]
    pub access_log_format: AccessLogFormat,
    /// Seconds between health probes of each DSA (0: no active probes).
    #[arg(long, default_value_t = 1.0)]
    pub probe_interval: f64,
    /// Seconds a probe may take.
    #[arg(long, default_value_t = 1.0)]
    pub probe_timeout: f64,
    /// Failed probes in a row that mark a DSA down.
    #[arg(long, default_value_t = 3)]
    pub fall: u32,
    /// Good probes in a row that bring a DSA back up.
    #[arg(long, default_value_t = 2)]
    pub rise: u32,
    /// Failback hold-down: a DSA that went down serves again only after its
    /// probes have succeeded for this long (CA Directory restores a failed
    /// DSA after five minutes); `ctl enable NAME` brings it back at once.
    /// `0` returns it after `--rise` good probes.
    #[arg(long, default_value = "5m")]
    pub failback_hold: String,
    /// Probe search base (default: the root DSE).
    #[arg(long, default_value = "")]
    pub probe_base: String,
    /// Probe search filter.
    #[arg(long, default_value = "(objectClass=*)")]
    pub probe_filter: String,
    /// Operations in flight from this router to one DSA; beyond it the DSA
    /// is skipped, and `busy` when its whole group is saturated (0: none).
    #[arg(long, default_value_t = crate::service::config::DEFAULT_DSA_CONCURRENCY_LIMIT)]
    pub dsa_concurrency_limit: u32,
    /// Refuse new operations while the CPU use of the machine the router
    /// runs on (of its container, when a cgroup quota limits it), averaged
    /// over --utilization-window, is above this percentage: the gateway's
    /// load, all processes counted, as CA Directory's router measures it,
    /// not the router process's own share (0-100; 0 = off).
    #[arg(long, default_value_t = 0)]
    pub cpu_threshold: u32,
    /// Refuse new operations while the memory in use on the machine (in
    /// the container, when a cgroup limits it), averaged over
    /// --utilization-window, is above this percentage of its total (0-100;
    /// 0 = off).
    #[arg(long, default_value_t = 0)]
    pub memory_threshold: u32,
    /// Window for the CPU and memory averages: seconds, or with a unit
    /// (`30s`, `5m`).
    #[arg(long, default_value = "5m")]
    pub utilization_window: String,
    /// Client connections per source address (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub max_clients_per_ip: usize,
    /// Load balancers that send a PROXY protocol header (v1 or v2) with
    /// the client's address: addresses or CIDR blocks, comma-separated.
    /// From these a header is required; from others it is not LDAP.
    #[arg(long, value_name = "CIDR,...", default_value = "")]
    pub proxy_protocol_from: String,
    /// DSAs (knowledge names, comma-separated) that take a PROXY protocol
    /// header first on each connection (OpenLDAP's `pldap://` listener):
    /// the router sends a v2 header with the client's address on clients'
    /// own connections, and a LOCAL one on its shared connections and
    /// probes, which carry no one client's.
    #[arg(long, value_name = "DSA,...", default_value = "")]
    pub send_proxy_to: String,
    /// A search spanning partitions when one partition cannot be searched
    /// (no DSA of it reachable, busy or unavailable): `fail` fails the
    /// whole search with `unavailable` naming the partition;
    /// `continuation` returns the others' entries plus a continuation
    /// reference to the missing partition, which shows clients the
    /// addresses of its DSAs.
    #[arg(long, value_enum, default_value = "fail")]
    pub fanout_policy: FanoutPolicy,
    /// Which bound clients run on DSA connections of their own, bound as
    /// themselves: `policy` those whose bind response carried a password
    /// policy warning or error (and binds as the router's own identity);
    /// `always` every bound client. Others share the router's connection
    /// with proxied authorization on DSAs that trust it.
    #[arg(long, value_enum, default_value = "policy")]
    pub own_connection: OwnConnection,
}

/// [`parse_duration`], or zero (`0`, `0s`, `0m`: off).
fn parse_duration_or_zero(s: &str) -> Result<Duration> {
    match s.trim() {
        "0" | "0s" | "0m" | "0ms" => Ok(Duration::ZERO),
        s => parse_duration(s),
    }
}

/// `300`, `300s`, `5m`, `1h`.
pub fn parse_duration(s: &str) -> Result<Duration> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| Error::config(format!("bad duration {s:?}")))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => {
            return Err(Error::config(format!(
                "bad duration unit in {s:?} (use s, m or h)"
            )))
        }
    };
    if !(secs.is_finite() && secs > 0.0) {
        return Err(Error::config(format!("duration {s:?} must be positive")));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A percentage flag's value, 0-100.
fn percent(flag: &str, v: u32) -> Result<u32> {
    if v > 100 {
        return Err(Error::config(format!(
            "{flag} {v} is not a percentage 0-100 (0 = off)"
        )));
    }
    Ok(v)
}

impl LimitArgs {
    /// The configuration these flags give (the rest at its defaults); the
    /// first bad value is the error.
    pub fn config(&self) -> Result<Config> {
        // --failback-hold is checked first, then in the order below.
        let health = self.health()?;
        let read_your_writes = parse_duration_or_zero(&self.read_your_writes)?;
        Ok(Config {
            dsa_concurrency_limit: self.dsa_concurrency_limit,
            thresholds: crate::service::config::Thresholds::validate(
                self.cpu_threshold,
                self.memory_threshold,
            )?,
            utilization_window: parse_duration(&self.utilization_window)?,
            max_clients_per_ip: self.max_clients_per_ip,
            proxy_protocol_from: crate::proto::proxy_protocol::parse_list(
                &self.proxy_protocol_from,
            )
            .map_err(|e| {
                crate::base::error::Error::config(format!("--proxy-protocol-from: {e}"))
            })?,
            send_proxy_to: self
                .send_proxy_to
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(String::from)
                .collect(),
            fanout_policy: self.fanout_policy.into(),
            own_connection: self.own_connection.into(),
            max_clients: self.max_clients.max(1),
            max_request_pdu: self.max_request_pdu.max(64),
            max_request_memory: self.max_request_memory.max(self.max_request_pdu.max(64)),
            max_response_memory: self.max_response_memory,
            max_response_pdu: self.max_response_pdu.max(64),
            max_own_connections: self.max_own_connections,
            spare_connections: self.spare_connections,
            read_your_writes,
            affinity_scope: self.affinity_scope.into(),
            replication: self.replication.config(parse_duration_or_zero)?,
            failed_binds: self.failed_binds.config(parse_duration)?,
            policy: self.policy.policy.clone(),
            tail: self.tail()?,
            max_outstanding: self.max_outstanding.max(1),
            client_queue: self.client_queue.max(1),
            client_queue_bytes: self.client_queue_bytes.max(4096),
            idle_timeout: Duration::from_secs(self.idle_timeout),
            pdu_timeout: Duration::from_secs(self.pdu_timeout.max(1)),
            connect_timeout: Duration::from_secs(self.connect_timeout.max(1)),
            op_timeout: Duration::from_secs(self.op_timeout.max(1)),
            op_total_timeout: Duration::from_secs(self.op_total_timeout),
            bind_timeout: self.bind_timeout(),
            drain_timeout: Duration::from_secs(self.drain_timeout),
            access_log: !self.no_access_log,
            access_log_target: match &self.access_log {
                Some(p) if p.as_os_str() != "-" => crate::observe::access::Target::File(p.clone()),
                _ => crate::observe::access::Target::Stderr,
            },
            access_log_format: self.access_log_format.into(),
            health,
            tls: None,
            require_tls_for_bind: false,
            dsa_ca: None,
            ..Config::default()
        })
    }

    /// Hedged reads and outlier ejection.
    fn tail(&self) -> Result<crate::service::config::TailConfig> {
        Ok(crate::service::config::TailConfig {
            hedge_budget: percent("--hedge-budget", self.hedge_budget)?,
            hedge_floor: parse_duration_or_zero(&self.hedge_floor)?,
            max_ejection: percent("--max-ejection", self.max_ejection)?,
            ejection_time: parse_duration(&self.ejection_time)?,
        })
    }

    /// Active probes, unless --probe-interval is 0.
    fn health(&self) -> Result<Option<crate::service::config::HealthConfig>> {
        let failback_hold = parse_duration_or_zero(&self.failback_hold)?;
        Ok(
            (self.probe_interval > 0.0).then(|| crate::service::config::HealthConfig {
                interval: Duration::from_secs_f64(self.probe_interval.max(0.01)),
                timeout: Duration::from_secs_f64(self.probe_timeout.max(0.01)),
                fall: self.fall.max(1),
                rise: self.rise.max(1),
                failback_hold,
                base: self.probe_base.clone(),
                filter: self.probe_filter.clone(),
                bind: None,
            }),
        )
    }

    /// --bind-timeout, within 0.1 s and an hour (5 s when not a number).
    fn bind_timeout(&self) -> Duration {
        Duration::from_secs_f64(if self.bind_timeout.is_finite() {
            self.bind_timeout.clamp(0.1, 3600.0)
        } else {
            5.0
        })
    }
}
