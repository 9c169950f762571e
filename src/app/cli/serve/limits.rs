//! The limits and behaviour flags shared by `serve` and `demo`, and the
//! [`Config`] they make. The flags with their help texts stay side by side
//! with the code that reads them, so that `serve --help` and the
//! configuration cannot drift apart.

use super::flags::{
    AccessLogFormat, AffinityScope, FailedBindArgs, FanoutPolicy, OwnConnection, PolicyArgs,
    ReplicationArgs,
};
use super::groups::{DSAS, LIMITS, LISTEN, LOGS, REPLICATION, ROUTER};
use super::naming::Naming;
use super::values::{Bytes, Dur, Num};
use crate::base::error::{Error, Result};
use crate::base::units::{Count, Size, Span, GIB, TIB};
use crate::service::context::Config;
use std::path::PathBuf;
use std::time::Duration;

const fn secs(min: Duration, max: Duration) -> Span {
    Span::secs(min, max)
}
const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

// The ranges of the duration, size and count flags.
const MAX_CLIENTS: Count = Count {
    min: 1,
    max: 10_000_000,
};
const PDU: Size = Size { min: 64, max: GIB };
const MEMORY: Size = Size { min: 64, max: TIB };
const OUTSTANDING: Count = Count {
    min: 1,
    max: 1_000_000,
};
const CONNECTIONS: Count = Count {
    min: 0,
    max: 1_000_000,
};
const QUEUE: Count = Count {
    min: 1,
    max: 1 << 30,
};
const QUEUE_BYTES: Size = Size {
    min: 4096,
    max: TIB,
};
const PROBES: Count = Count { min: 1, max: 1000 };
const READ_YOUR_WRITES: Span = secs(ms(1), DAY).or_zero();
// Shared with knowledge's `set dsa-router-hedge-floor` and
// `dsa-router-ejection-time`.
use crate::directory::knowledge::{EJECTION_TIME, HEDGE_FLOOR};
const IDLE: Span = secs(Duration::from_secs(1), Duration::from_secs(30 * 86_400)).or_zero();
const TIMEOUT: Span = secs(ms(10), DAY);
const CONNECT: Span = secs(ms(10), HOUR);
const BIND: Span = secs(ms(100), HOUR);
const DRAIN: Span = secs(ms(10), DAY).or_zero();
const PROBE: Span = secs(ms(10), HOUR);
const FAILBACK: Span = secs(ms(100), DAY).or_zero();
const WINDOW: Span = secs(ms(100), DAY);

/// Limits and behaviour shared by `serve` and `demo`. Durations take a
/// unit (`500ms`, `15s`, `15m`, `2h`), sizes one of KiB, MiB, GiB.
#[derive(clap::Args, Debug, Clone)]
pub struct LimitArgs {
    /// Maximum client connections at once.
    #[arg(long, default_value = "10000", value_parser = Num(MAX_CLIENTS), help_heading = LISTEN)]
    pub max_clients: u64,
    /// Largest request PDU (bytes, or with a unit: 64KiB, 4MiB).
    #[arg(long, default_value = "4MiB", value_parser = Bytes(PDU), help_heading = LIMITS)]
    pub max_request_pdu: usize,
    /// Bytes all clients' large incomplete requests may hold at once (at
    /// least --max-request-pdu); a
    /// client whose incomplete request would go beyond is disconnected
    /// (busy), the others keep theirs.
    #[arg(long, default_value = "256MiB", value_parser = Bytes(MEMORY), help_heading = LIMITS)]
    pub max_request_memory: usize,
    /// Bytes of responses queued for all clients at once (each client has
    /// its own bound too, --client-queue-bytes); beyond, a client with a
    /// backlog whose next response would go over is disconnected and its
    /// operations abandoned, as when its own queue is full.
    #[arg(long, default_value = "1GiB", value_parser = Bytes(MEMORY), help_heading = LIMITS)]
    pub max_response_memory: usize,
    /// Largest response PDU from a DSA (bytes, or with a unit: 64KiB,
    /// 4MiB).
    #[arg(long, default_value = "16MiB", value_parser = Bytes(PDU), help_heading = LIMITS)]
    pub max_response_pdu: usize,
    /// Outstanding operations per client connection (`busy` beyond).
    #[arg(long, default_value = "256", value_parser = Num(OUTSTANDING), help_heading = LIMITS)]
    pub max_outstanding: u64,
    /// Dedicated connections per DSA: connections the router opens for one
    /// client alone, bound as that client (binds, paged and sorted
    /// searches, VLV, sync, transactions, SASL); a client that would need
    /// one more gets `busy`. 0: no limit.
    #[arg(long, default_value = "0", value_parser = Num(CONNECTIONS), help_heading = DSAS)]
    pub max_own_connections: u64,
    /// Dedicated connections kept open for later binds once their clients
    /// have unbound or left, per DSA and worker thread (a web
    /// login then costs the DSA a bind, not a TCP connection). Only a
    /// connection that carried nothing the DSA keeps per connection is
    /// kept; unused for 30 s it closes. They count in
    /// --max-own-connections. 0: close them.
    #[arg(long, default_value = "16", value_parser = Num(CONNECTIONS), help_heading = DSAS)]
    pub spare_connections: u64,
    /// Read-your-writes: after a client's write, its reads of the same
    /// partition go to the DSA that took the write for this long, while
    /// that DSA is eligible (multi-write DSAs replicate with a lag). `0`
    /// turns it off. A bare number is seconds.
    #[arg(long, default_value = "5s", value_parser = Dur(READ_YOUR_WRITES), help_heading = REPLICATION)]
    pub read_your_writes: Duration,
    /// Whose writes the affinity follows: `connection` (the client
    /// connection's own) or `identity` (the bound DN's, from any of its
    /// connections).
    #[arg(long, value_enum, default_value = "connection", help_heading = REPLICATION)]
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
    #[arg(long, default_value_t = 5, help_heading = DSAS)]
    pub hedge_budget: u32,
    /// The least time a read waits before it is hedged (a bare number is
    /// seconds).
    #[arg(long, default_value = "10ms", value_parser = Dur(HEDGE_FLOOR), help_heading = DSAS)]
    pub hedge_floor: Duration,
    /// Outlier ejection: a DSA whose reads stall, or run far slower than
    /// its group's, is taken out of selection for --ejection-time (longer
    /// each time it repeats); at most this percentage of a group is
    /// ejected at once (0 turns ejection off).
    #[arg(long, default_value_t = 50, help_heading = DSAS)]
    pub max_ejection: u32,
    /// An outlier's first ejection time (a bare number is seconds).
    #[arg(long, default_value = "10s", value_parser = Dur(EJECTION_TIME), help_heading = DSAS)]
    pub ejection_time: Duration,
    /// Response PDUs queued for one client that does not read fast enough
    /// (a PDU, or the responses of one DSA read): beyond it the client
    /// counts as stalled, its operations are abandoned and it is
    /// disconnected; the router's own answers wait for room instead.
    #[arg(long, default_value = "1048576", value_parser = Num(QUEUE), help_heading = LIMITS)]
    pub client_queue: u64,
    /// Response bytes queued for one client before it counts as stalled
    /// (its operations are abandoned and it is disconnected).
    #[arg(long, default_value = "16MiB", value_parser = Bytes(QUEUE_BYTES), help_heading = LIMITS)]
    pub client_queue_bytes: usize,
    /// How long a client may stay idle (0: forever; a bare number is
    /// seconds).
    #[arg(long, default_value = "15m", value_parser = Dur(IDLE), help_heading = LISTEN)]
    pub idle_timeout: Duration,
    /// How long a client may leave a PDU incomplete (a bare number is
    /// seconds).
    #[arg(long, default_value = "30s", value_parser = Dur(TIMEOUT), help_heading = LISTEN)]
    pub pdu_timeout: Duration,
    /// How long connecting to a DSA may take (a bare number is seconds).
    #[arg(long, default_value = "3s", value_parser = Dur(CONNECT), help_heading = DSAS)]
    pub connect_timeout: Duration,
    /// How long a DSA may stay silent on an operation (time since it last
    /// sent something for it: a search streaming entries is never cut
    /// while they come); then the client gets timeLimitExceeded and the
    /// operation is abandoned on the DSA. A bare number is seconds.
    #[arg(long, default_value = "2m", value_parser = Dur(TIMEOUT), help_heading = DSAS)]
    pub op_timeout: Duration,
    /// How long an operation may take in all, however steadily its DSA
    /// answers (0: no cap; a bare number is seconds).
    #[arg(long, default_value = "0", value_parser = Dur(TIMEOUT.or_zero()), help_heading = DSAS)]
    pub op_total_timeout: Duration,
    /// The longest a simple bind waits for its DSA. The wait is learned
    /// from that DSA's recent bind times (4 times their 95th percentile,
    /// at least 100 ms) up to this; a bind not answered in time is given
    /// up there and goes to the next DSA of the partition (up to 3 tries),
    /// as a read would. Waiting this long counts as a failed probe. A bare
    /// number is seconds.
    #[arg(long, default_value = "5s", value_parser = Dur(BIND), help_heading = DSAS)]
    pub bind_timeout: Duration,
    /// How long a drain (SIGTERM, SIGINT, `ctl shutdown`) lets operations
    /// in flight finish before the connections that still run some are
    /// cut (a bare number is seconds).
    #[arg(long, alias = "shutdown-grace", default_value = "30s", value_parser = Dur(DRAIN), help_heading = ROUTER)]
    pub drain_timeout: Duration,
    /// Turn the access log (one line per operation) off.
    #[arg(long, help_heading = LOGS)]
    pub no_access_log: bool,
    /// Write the access log to this file (appended to; SIGUSR1 reopens it,
    /// for logrotate) instead of stderr (`-`). `demo` logs no operations
    /// unless given one.
    #[arg(long, value_name = "PATH", help_heading = LOGS)]
    pub access_log: Option<PathBuf>,
    /// The access log's format: `text` (`TIME  INFO access: key=value
    /// ...`) or `json` (one object per line).
    #[arg(long, value_enum, default_value_t = AccessLogFormat::Text, help_heading = LOGS)]
    pub access_log_format: AccessLogFormat,
    /// Time between health probes of each DSA (0: no active probes; a bare
    /// number is seconds).
    #[arg(long, default_value = "1s", value_parser = Dur(PROBE.or_zero()), help_heading = DSAS)]
    pub probe_interval: Duration,
    /// How long a probe may take (a bare number is seconds).
    #[arg(long, default_value = "1s", value_parser = Dur(PROBE), help_heading = DSAS)]
    pub probe_timeout: Duration,
    /// Failed probes in a row that mark a DSA down.
    #[arg(long, default_value = "3", value_parser = Num(PROBES), help_heading = DSAS)]
    pub fall: u64,
    /// Good probes in a row that bring a DSA back up.
    #[arg(long, default_value = "2", value_parser = Num(PROBES), help_heading = DSAS)]
    pub rise: u64,
    /// Failback hold-down: a DSA that went down serves again only after its
    /// probes have succeeded for this long (CA Directory restores a failed
    /// DSA after five minutes); `ctl enable NAME` brings it back at once.
    /// `0` returns it after `--rise` good probes. A bare number is seconds.
    #[arg(long, default_value = "5m", value_parser = Dur(FAILBACK), help_heading = DSAS)]
    pub failback_hold: Duration,
    /// Probe search base (default: the root DSE).
    #[arg(long, default_value = "", help_heading = DSAS)]
    pub probe_base: String,
    /// Probe search filter.
    #[arg(long, default_value = "(objectClass=*)", help_heading = DSAS)]
    pub probe_filter: String,
    /// Operations in flight from this router to one DSA; beyond it the DSA
    /// is skipped, and `busy` when its whole group is saturated (0: none).
    #[arg(long, default_value_t = crate::service::config::DEFAULT_DSA_CONCURRENCY_LIMIT, help_heading = DSAS)]
    pub dsa_concurrency_limit: u32,
    /// Refuse new operations while the CPU use of the machine the router
    /// runs on (of its container, when a cgroup quota limits it), averaged
    /// over --utilization-window, is above this percentage: the gateway's
    /// load, all processes counted, as CA Directory's router measures it,
    /// not the router process's own share (0-100; 0 = off).
    #[arg(long, default_value_t = 0, help_heading = LIMITS)]
    pub cpu_threshold: u32,
    /// Refuse new operations while the memory in use on the machine (in
    /// the container, when a cgroup limits it), averaged over
    /// --utilization-window, is above this percentage of its total (0-100;
    /// 0 = off).
    #[arg(long, default_value_t = 0, help_heading = LIMITS)]
    pub memory_threshold: u32,
    /// Window for the CPU and memory averages (`30s`, `5m`; a bare number
    /// is seconds).
    #[arg(long, default_value = "5m", value_parser = Dur(WINDOW), help_heading = LIMITS)]
    pub utilization_window: Duration,
    /// Client connections per source address (0: no limit).
    #[arg(long, default_value_t = 0, help_heading = LISTEN)]
    pub max_clients_per_ip: usize,
    /// Load balancers that send a PROXY protocol header (v1 or v2) with
    /// the client's address: addresses or CIDR blocks, comma-separated.
    /// From these a header is required; from others it is not LDAP.
    #[arg(long, value_name = "CIDR,...", default_value = "", help_heading = LISTEN)]
    pub proxy_protocol_from: String,
    /// DSAs (knowledge names, comma-separated) that take a PROXY protocol
    /// header first on each connection (OpenLDAP's `pldap://` listener):
    /// the router sends a v2 header with the client's address on a client's
    /// dedicated connections, and a LOCAL one on its shared connections and
    /// probes, which carry no one client's.
    #[arg(long, value_name = "DSA,...", default_value = "", help_heading = DSAS)]
    pub send_proxy_to: String,
    /// A search spanning partitions when one partition cannot be searched
    /// (no DSA of it reachable, busy or unavailable): `fail` fails the
    /// whole search with `unavailable` naming the partition;
    /// `continuation` returns the others' entries plus a continuation
    /// reference to the missing partition, which shows clients the
    /// addresses of its DSAs.
    #[arg(long, value_enum, default_value = "fail", help_heading = DSAS)]
    pub fanout_policy: FanoutPolicy,
    /// Which bound clients run on DSA connections of their own, bound as
    /// themselves: `policy` those whose bind response carried a password
    /// policy warning or error (and binds as the router's own identity);
    /// `always` every bound client. Others share the router's connection
    /// with proxied authorization on DSAs that trust it.
    #[arg(long, value_enum, default_value = "policy", help_heading = DSAS)]
    pub own_connection: OwnConnection,
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

/// A count within its flag's range (the ranges fit `usize` and `u32`).
fn count<T: TryFrom<u64>>(flag: &str, v: u64) -> Result<T> {
    T::try_from(v).map_err(|_| Error::config(format!("--{flag} {v} is too large")))
}

impl LimitArgs {
    /// The configuration these flags give (the rest at its defaults); the
    /// first bad value is the error.
    /// `naming` names the settings in an error that weighs two.
    pub fn config(&self, naming: &dyn Naming) -> Result<Config> {
        if self.max_request_memory < self.max_request_pdu {
            let size = |n: usize| crate::base::units::format_size(n as u64);
            return Err(Error::config(format!(
                "{} is below {}: it must hold at least one request",
                naming.show("max-request-memory", &size(self.max_request_memory)),
                naming.show("max-request-pdu", &size(self.max_request_pdu)),
            )));
        }
        Ok(Config {
            dsa_concurrency_limit: self.dsa_concurrency_limit,
            thresholds: crate::service::config::Thresholds::validate(
                self.cpu_threshold,
                self.memory_threshold,
            )?,
            utilization_window: self.utilization_window,
            max_clients_per_ip: self.max_clients_per_ip,
            proxy_protocol_from: crate::proto::proxy_protocol::parse_list(
                &self.proxy_protocol_from,
            )
            .map_err(|e| Error::config(format!("--proxy-protocol-from: {e}")))?,
            send_proxy_to: self
                .send_proxy_to
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(String::from)
                .collect(),
            fanout_policy: self.fanout_policy.into(),
            own_connection: self.own_connection.into(),
            max_clients: count("max-clients", self.max_clients)?,
            max_request_pdu: self.max_request_pdu,
            max_request_memory: self.max_request_memory,
            max_response_memory: self.max_response_memory,
            max_response_pdu: self.max_response_pdu,
            max_own_connections: count("max-own-connections", self.max_own_connections)?,
            spare_connections: count("spare-connections", self.spare_connections)?,
            read_your_writes: self.read_your_writes,
            affinity_scope: self.affinity_scope.into(),
            replication: self.replication.config(),
            failed_binds: self.failed_binds.config(),
            policy: self.policy.policy.clone(),
            tail: self.tail()?,
            max_outstanding: count("max-outstanding", self.max_outstanding)?,
            client_queue: count("client-queue", self.client_queue)?,
            client_queue_bytes: self.client_queue_bytes,
            idle_timeout: self.idle_timeout,
            pdu_timeout: self.pdu_timeout,
            connect_timeout: self.connect_timeout,
            op_timeout: self.op_timeout,
            op_total_timeout: self.op_total_timeout,
            bind_timeout: self.bind_timeout,
            drain_timeout: self.drain_timeout,
            access_log: !self.no_access_log,
            access_log_target: match &self.access_log {
                Some(p) if p.as_os_str() != "-" => crate::observe::access::Target::File(p.clone()),
                _ => crate::observe::access::Target::Stderr,
            },
            access_log_format: self.access_log_format.into(),
            health: self.health()?,
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
            hedge_floor: self.hedge_floor,
            max_ejection: percent("--max-ejection", self.max_ejection)?,
            ejection_time: self.ejection_time,
        })
    }

    /// Active probes, unless --probe-interval is 0.
    fn health(&self) -> Result<Option<crate::service::config::HealthConfig>> {
        if self.probe_interval.is_zero() {
            return Ok(None);
        }
        Ok(Some(crate::service::config::HealthConfig {
            interval: self.probe_interval,
            timeout: self.probe_timeout,
            fall: count("fall", self.fall)?,
            rise: count("rise", self.rise)?,
            failback_hold: self.failback_hold,
            base: self.probe_base.clone(),
            filter: self.probe_filter.clone(),
            bind: None,
        }))
    }
}
