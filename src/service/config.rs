//! The router's configuration: plain data that the command line fills and
//! the runtime reads (listen addresses, limits, health probes, the fan-out
//! policy, throttling thresholds, TLS files). Nothing here does I/O.

pub use crate::admission::limits::Thresholds;
pub use crate::backend::settings::{HealthConfig, Limits, Live, Pinned, TailConfig};
use std::time::Duration;

/// Default per-DSA concurrency limit: generous for one router in front of a
/// DSA, low enough to protect it from a burst.
pub const DEFAULT_DSA_CONCURRENCY_LIMIT: u32 = 500;

/// Run-time settings of `serve`; every limit has a sane default.
#[derive(Debug, Clone)]
pub struct Config {
    /// The LDAP listener (`serve`: --listen, else the router's own
    /// block's address, else 127.0.0.1:3389).
    pub listen: String,
    /// The LDAPS listener, if any.
    pub ldaps_listen: Option<String>,
    /// Maximum client connections at once.
    pub max_clients: usize,
    /// Largest request PDU accepted from a client.
    pub max_request_pdu: usize,
    /// Bytes all clients' incomplete requests may hold at once; a client
    /// whose large incomplete request would go beyond is disconnected.
    pub max_request_memory: usize,
    /// Bytes of responses queued for all clients at once; beyond, a
    /// client with a backlog whose response would go over is disconnected.
    pub max_response_memory: usize,
    /// Largest response PDU accepted from a DSA.
    pub max_response_pdu: usize,
    /// Outstanding operations per client connection (`busy` beyond).
    pub max_outstanding: usize,
    /// Connections of clients' own per DSA (0: no limit); a client that
    /// would need one more gets `busy`.
    pub max_own_connections: u32,
    /// Clients' own connections kept open for later binds, per DSA and
    /// worker thread, once their clients are done with them (0: none).
    pub spare_connections: usize,
    /// Read-your-writes: after a client's write, its reads of the same
    /// partition go to the DSA that took the write for this long (zero:
    /// off).
    pub read_your_writes: Duration,
    /// Whose writes the affinity follows.
    pub affinity_scope: AffinityScope,
    /// Replication positions: polling, lag and staleness bounds.
    pub replication: crate::directory::replication::Config,
    /// Failed-bind defence: limits, window, back-off.
    pub failed_binds: crate::admission::guard::Config,
    /// Client policies and rates (`--policy FILE`), re-read on reload.
    pub policy: Option<std::path::PathBuf>,
    /// Tail latency: hedged reads and outlier ejection.
    pub tail: TailConfig,
    /// Response PDUs queued for one client before it counts as stalled.
    pub client_queue: usize,
    /// Response bytes queued for one client before it counts as stalled.
    pub client_queue_bytes: usize,
    /// Close a client connection idle this long (zero: never).
    pub idle_timeout: Duration,
    /// Close a client that leaves a PDU incomplete this long.
    pub pdu_timeout: Duration,
    pub connect_timeout: Duration,
    /// Per-operation inactivity timeout towards DSAs: the longest a DSA
    /// may stay silent on an operation (a search streaming entries is not
    /// cut while entries come).
    pub op_timeout: Duration,
    /// An optional cap on an operation's whole time (zero: none).
    pub op_total_timeout: Duration,
    /// How long a simple bind waits for its DSA before it goes to the next.
    pub bind_timeout: Duration,
    /// How long a drain lets operations in flight finish (`--drain-timeout`).
    pub drain_timeout: Duration,
    /// Worker threads, each with a single-threaded runtime of its own
    /// ([`crate::base::workers`]); shared DSA connections are kept per worker.
    pub workers: usize,
    /// Percent of a CPU over which a worker in use brings one more into
    /// use (`--spread-above`; 0: every worker in use from the start).
    pub spread_above: u8,
    /// The access log: on or off, where it goes, in which format.
    pub access_log: bool,
    pub access_log_target: crate::observe::access::Target,
    pub access_log_format: crate::observe::access::Format,
    /// Active health probes; `None` turns them off.
    pub health: Option<HealthConfig>,
    /// Operations in flight from this router to one DSA (0: no limit);
    /// knowledge may override it per DSA or router-wide.
    pub dsa_concurrency_limit: u32,
    /// The settings given in the settings file or on the command line
    /// (they override knowledge's `set dsa-router-*`).
    pub pinned: Pinned,
    /// Router CPU and memory thresholds (percent, 0 = off).
    pub thresholds: Thresholds,
    /// Window over which utilization is averaged.
    pub utilization_window: Duration,
    /// Client connections per source address (0: no limit).
    pub max_clients_per_ip: usize,
    /// Sources whose connections start with a PROXY protocol header
    /// (`--proxy-protocol-from`): [`crate::proto::proxy_protocol`].
    pub proxy_protocol_from: Vec<crate::proto::proxy_protocol::Cidr>,
    /// DSAs (names) each connection to which starts with a PROXY
    /// protocol v2 header (`--send-proxy-to`):
    /// [`crate::proto::proxy_protocol::send`].
    pub send_proxy_to: Vec<String>,
    /// What a failed partition does to a search spanning partitions.
    pub fanout_policy: FanoutPolicy,
    /// Client-facing TLS (LDAPS listener, StartTLS): PEM files, re-read
    /// on reload. `None`: no TLS towards clients.
    pub tls: Option<crate::proto::tls::TlsFiles>,
    /// Refuse binds that send a password (simple with a password, SASL
    /// PLAIN and LOGIN) on connections without TLS
    /// (result confidentialityRequired).
    pub require_tls_for_bind: bool,
    /// CA certificates DSA certificates are verified against (DSAs that
    /// knowledge marks for TLS need it); re-read on reload.
    pub dsa_ca: Option<std::path::PathBuf>,
    /// Which bound clients run on DSA connections of their own, bound as
    /// themselves, instead of the router's shared connection.
    pub own_connection: OwnConnection,
}

/// Which bound clients get DSA connections of their own (bound as
/// themselves, so the DSA applies what it keeps per connection: password
/// policy restrictions above all) rather than the router's shared
/// connection with proxied authorization.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OwnConnection {
    /// Clients whose bind response carried a password policy warning or
    /// error, and clients bound as the router's own identity.
    #[default]
    Policy,
    /// Every bound client.
    Always,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            listen: "127.0.0.1:3389".to_string(),
            ldaps_listen: None,
            max_clients: 10_000,
            max_request_pdu: 4 << 20,
            max_request_memory: 256 << 20,
            max_response_memory: 1 << 30,
            max_response_pdu: 16 << 20,
            max_outstanding: 256,
            max_own_connections: 0,
            spare_connections: 16,
            read_your_writes: Duration::from_secs(5),
            affinity_scope: AffinityScope::Connection,
            replication: crate::directory::replication::Config::standard(),
            failed_binds: crate::admission::guard::Config::default(),
            policy: None,
            tail: TailConfig::default(),
            client_queue: 1 << 20,
            client_queue_bytes: 16 << 20,
            idle_timeout: Duration::from_secs(900),
            pdu_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(3),
            op_timeout: Duration::from_secs(120),
            op_total_timeout: Duration::ZERO,
            bind_timeout: Duration::from_secs(5),
            drain_timeout: Duration::from_secs(30),
            workers: 1,
            spread_above: 60,
            access_log: true,
            access_log_target: crate::observe::access::Target::Stderr,
            access_log_format: crate::observe::access::Format::Text,
            health: Some(HealthConfig::default()),
            dsa_concurrency_limit: DEFAULT_DSA_CONCURRENCY_LIMIT,
            pinned: Pinned::default(),
            thresholds: Thresholds::default(),
            utilization_window: Duration::from_secs(300),
            max_clients_per_ip: 0,
            proxy_protocol_from: Vec::new(),
            send_proxy_to: Vec::new(),
            fanout_policy: Default::default(),
            tls: None,
            require_tls_for_bind: false,
            own_connection: OwnConnection::Policy,
            dsa_ca: None,
        }
    }
}

impl Config {
    /// What the backend is built with; `name`: the router's own DSA.
    pub fn backend(&self, name: Option<String>) -> crate::backend::settings::Settings {
        crate::backend::settings::Settings {
            name,
            limits: self.limits(),
            live: std::sync::Arc::new(arc_swap::ArcSwap::from_pointee(self.live())),
            send_proxy_to: self.send_proxy_to.clone(),
            workers: self.workers,
        }
    }

    /// The settings a reload may change.
    pub fn live(&self) -> Live {
        Live {
            tail: self.tail,
            dsa_concurrency_limit: self.dsa_concurrency_limit,
            cpu_threshold: self.thresholds.cpu.into(),
            memory_threshold: self.thresholds.memory.into(),
            pinned: self.pinned.clone(),
        }
    }

    pub fn limits(&self) -> Limits {
        Limits {
            connect_timeout: self.connect_timeout,
            op_timeout: self.op_timeout,
            op_total_timeout: self.op_total_timeout,
            bind_timeout: self.bind_timeout.min(self.op_timeout),
            max_response_pdu: self.max_response_pdu,
            fall: self.health.as_ref().map(|h| h.fall).unwrap_or(3),
            max_own_connections: self.max_own_connections,
            spare_connections: self.spare_connections,
        }
    }
}

/// Whose writes read-your-writes affinity follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AffinityScope {
    /// The client connection's own writes.
    #[default]
    Connection,
    /// The bound identity's writes, from any of its connections (anonymous
    /// clients: their connection).
    Identity,
}

/// What a failed partition does to a search spanning partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FanoutPolicy {
    /// Fail the whole search with `unavailable`, naming the partition.
    #[default]
    Fail,
    /// Return what the other partitions gave, plus a continuation
    /// reference (the missing partition's DSA addresses) for the missing
    /// one.
    Continuation,
}
