//! `serve` and `demo`: logging, configuration from flags, signals.
//!
//! (Over 500 lines: the flags with their help texts are some 400 of them,
//! kept in one place so that `serve --help` and the code that reads the
//! flags stay side by side.)

use crate::context::{Config, Context};
use crate::error::{Error, Result};
use crate::knowledge;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

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
    pub affinity_scope: crate::config::AffinityScope,
    #[command(flatten)]
    pub replication: crate::replication::Args,
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
    /// Seconds shutdown waits for in-flight operations.
    #[arg(long, default_value_t = 10)]
    pub shutdown_grace: u64,
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
    #[arg(long, value_enum, default_value_t = crate::access::Format::Text)]
    pub access_log_format: crate::access::Format,
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
    #[arg(long, default_value_t = crate::config::DEFAULT_DSA_CONCURRENCY_LIMIT)]
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
    /// A search spanning partitions when one partition cannot be searched
    /// (no DSA of it reachable, busy or unavailable): `fail` fails the
    /// whole search with `unavailable` naming the partition;
    /// `continuation` returns the others' entries plus a continuation
    /// reference to the missing partition, which shows clients the
    /// addresses of its DSAs.
    #[arg(long, value_enum, default_value = "fail")]
    pub fanout_policy: crate::config::FanoutPolicy,
    /// Which bound clients run on DSA connections of their own, bound as
    /// themselves: `policy` those whose bind response carried a password
    /// policy warning or error (and binds as the router's own identity);
    /// `always` every bound client. Others share the router's connection
    /// with proxied authorization on DSAs that trust it.
    #[arg(long, value_enum, default_value = "policy")]
    pub own_connection: crate::config::OwnConnection,
}

/// The DSAs of `snap` with an address that is `listen` on this host: the
/// same port, and an address of this host that `listen` covers (the same
/// address, any address for `0.0.0.0`/`::`, loopback for loopback).
fn own_block_by_address(snap: &crate::knowledge::Snapshot, listen: &str) -> Vec<String> {
    use std::net::{ToSocketAddrs, UdpSocket};
    let Ok(mut l) = listen.to_socket_addrs() else {
        return Vec::new();
    };
    let Some(l) = l.next() else {
        return Vec::new();
    };
    // An address of this host can be bound to.
    let local = |ip: std::net::IpAddr| ip.is_loopback() || UdpSocket::bind((ip, 0)).is_ok();
    let covers = |a: std::net::SocketAddr| {
        a.port() == l.port()
            && local(a.ip())
            && (l.ip().is_unspecified()
                || a.ip() == l.ip()
                || (a.ip().is_loopback() && l.ip().is_loopback()))
    };
    snap.dsas
        .iter()
        .filter(|d| {
            d.addresses.iter().any(|a| {
                (a.host.as_str(), a.port)
                    .to_socket_addrs()
                    .map(|mut it| it.any(covers))
                    .unwrap_or(false)
            })
        })
        .map(|d| d.name.clone())
        .collect()
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
    pub fn config(&self) -> Result<Config> {
        let failback_hold = parse_duration_or_zero(&self.failback_hold)?;
        let read_your_writes = parse_duration_or_zero(&self.read_your_writes)?;
        Ok(Config {
            dsa_concurrency_limit: self.dsa_concurrency_limit,
            thresholds: crate::config::Thresholds::validate(
                self.cpu_threshold,
                self.memory_threshold,
            )?,
            utilization_window: parse_duration(&self.utilization_window)?,
            max_clients_per_ip: self.max_clients_per_ip,
            fanout_policy: self.fanout_policy,
            own_connection: self.own_connection,
            max_clients: self.max_clients.max(1),
            max_request_pdu: self.max_request_pdu.max(64),
            max_request_memory: self.max_request_memory.max(self.max_request_pdu.max(64)),
            max_response_memory: self.max_response_memory,
            max_response_pdu: self.max_response_pdu.max(64),
            max_own_connections: self.max_own_connections,
            spare_connections: self.spare_connections,
            read_your_writes,
            affinity_scope: self.affinity_scope,
            replication: self.replication.config(parse_duration_or_zero)?,
            tail: crate::config::TailConfig {
                hedge_budget: percent("--hedge-budget", self.hedge_budget)?,
                hedge_floor: parse_duration_or_zero(&self.hedge_floor)?,
                max_ejection: percent("--max-ejection", self.max_ejection)?,
                ejection_time: parse_duration(&self.ejection_time)?,
            },
            max_outstanding: self.max_outstanding.max(1),
            client_queue: self.client_queue.max(1),
            client_queue_bytes: self.client_queue_bytes.max(4096),
            idle_timeout: Duration::from_secs(self.idle_timeout),
            pdu_timeout: Duration::from_secs(self.pdu_timeout.max(1)),
            connect_timeout: Duration::from_secs(self.connect_timeout.max(1)),
            op_timeout: Duration::from_secs(self.op_timeout.max(1)),
            op_total_timeout: Duration::from_secs(self.op_total_timeout),
            bind_timeout: Duration::from_secs_f64(if self.bind_timeout.is_finite() {
                self.bind_timeout.clamp(0.1, 3600.0)
            } else {
                5.0
            }),
            shutdown_grace: Duration::from_secs(self.shutdown_grace),
            access_log: !self.no_access_log,
            access_log_target: match &self.access_log {
                Some(p) if p.as_os_str() != "-" => crate::access::Target::File(p.clone()),
                _ => crate::access::Target::Stderr,
            },
            access_log_format: self.access_log_format,
            health: (self.probe_interval > 0.0).then(|| crate::config::HealthConfig {
                interval: Duration::from_secs_f64(self.probe_interval.max(0.01)),
                timeout: Duration::from_secs_f64(self.probe_timeout.max(0.01)),
                fall: self.fall.max(1),
                rise: self.rise.max(1),
                failback_hold,
                base: self.probe_base.clone(),
                filter: self.probe_filter.clone(),
                bind: None,
            }),
            tls: None,
            require_tls_for_bind: false,
            dsa_ca: None,
            ..Config::default()
        })
    }
}

/// TLS towards clients and DSAs (`serve`).
#[derive(clap::Args, Debug, Clone)]
pub struct TlsArgs {
    /// Also listen for LDAPS (TLS from the first byte) on this address;
    /// needs --tls-cert and --tls-key.
    #[arg(long)]
    pub ldaps_listen: Option<String>,
    /// Server certificate chain (PEM) for LDAPS and StartTLS; re-read on
    /// reload (SIGHUP, `ctl reload`, --watch).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM: PKCS#8, PKCS#1 or SEC1) of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Verify client certificates against these CA certificates (PEM);
    /// clients without a certificate are still admitted unless
    /// --tls-require-client-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// With --tls-client-ca: refuse TLS clients without a valid
    /// certificate.
    #[arg(long, requires = "tls_client_ca")]
    pub tls_require_client_cert: bool,
    /// Refuse binds that send a password (simple with a password, SASL
    /// PLAIN and LOGIN) on connections without TLS
    /// (result confidentialityRequired).
    #[arg(long)]
    pub require_tls_for_bind: bool,
    /// CA certificates (PEM) that DSA certificates are verified against,
    /// for DSAs reached over TLS (`link-flags = ssl-encryption` or
    /// `dsa-router-tls`); re-read on reload.
    #[arg(long)]
    pub dsa_ca: Option<PathBuf>,
}

impl TlsArgs {
    /// Add the TLS settings to `cfg`.
    pub fn apply(&self, cfg: &mut Config) -> Result<()> {
        cfg.tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(crate::tls::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.tls_client_ca.clone(),
                require_client_cert: self.tls_require_client_cert,
            }),
            _ => None,
        };
        if self.ldaps_listen.is_some() && cfg.tls.is_none() {
            return Err(Error::config(
                "--ldaps-listen needs --tls-cert and --tls-key",
            ));
        }
        cfg.ldaps_listen = self.ldaps_listen.clone();
        cfg.require_tls_for_bind = self.require_tls_for_bind;
        cfg.dsa_ca = self.dsa_ca.clone();
        Ok(())
    }
}

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// The root knowledge file.
    #[arg(long)]
    pub knowledge: PathBuf,
    /// The router's own DSA block: never a target; its address is the
    /// default listen address.
    #[arg(long)]
    pub name: Option<String>,
    /// Listen address (default: the router's own block's address, else
    /// 127.0.0.1:3389).
    #[arg(long)]
    pub listen: Option<String>,
    /// Admin API address (`/status`, `/metrics`, control); `none` turns it
    /// off. Without a token it must be loopback (else serve does not
    /// start), and it refuses other Host names, other origins and state
    /// changes without the header X-Dsa-Router.
    #[arg(long, default_value = crate::admin::ctl::DEFAULT_ADMIN)]
    pub admin: String,
    /// Bearer token required by the admin API (default:
    /// $DSA_ROUTER_ADMIN_TOKEN; none or empty: no token).
    #[arg(long, env = "DSA_ROUTER_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Reload when a knowledge or TLS file changes (polled every second).
    #[arg(long)]
    pub watch: bool,
    /// Worker threads, each a single-threaded runtime serving its share of
    /// the clients on DSA connections of its own. 0 (the default): one per
    /// CPU this process may use (cgroup quota aware); 1 for the smallest
    /// footprint.
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Pack clients onto as few of the worker threads as their CPU use
    /// needs: one more worker is taken into use when a worker in use was
    /// busier than PERCENT of a CPU for half a second, and the last one is
    /// left when the others could carry its load at half that; sessions
    /// move between workers at their next request. Fewer, busier workers
    /// sleep and wake less often per operation (the cheapest CPU per
    /// operation). 0: every worker takes clients from the start.
    #[arg(long, default_value_t = 60, value_name = "PERCENT", value_parser = clap::value_parser!(u8).range(0..=100))]
    pub spread_above: u8,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
}

pub fn init_logging() {
    // ldap3_proto warns about every control it does not model (proxied
    // authorization among them) where the test DSA decodes requests: noise
    // for a router that forwards controls as bytes.
    let filter = tracing_subscriber::EnvFilter::try_from_env("DSA_ROUTER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,ldap3_proto=error"));
    // Colours only on a terminal: logs written to files stay plain text.
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}

fn runtime(threads: usize) -> Result<tokio::runtime::Runtime> {
    // One thread: tokio's single-threaded scheduler (no work stealing, no
    // cross-thread wake-ups).
    let mut b = match threads {
        1 => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    if threads > 1 {
        b.worker_threads(threads);
    }
    b.enable_all()
        .build()
        .map_err(|e| Error::config(format!("cannot start the runtime: {e}")))
}

pub fn serve(args: &ServeArgs) -> ExitCode {
    init_logging();
    // An empty token is no token; without one, the admin API stays on
    // loopback (refused before anything listens).
    let admin_token = args.admin_token.clone().filter(|t| !t.is_empty());
    if args.admin != "none" {
        if let Err(e) = crate::admin::guard::admin_flag(&args.admin, admin_token.as_deref()) {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    }
    let snap = match knowledge::load(&args.knowledge) {
        Ok(s) => s,
        Err(e) => {
            eprint!("{e}");
            return ExitCode::from(1);
        }
    };
    for w in &snap.warnings {
        tracing::warn!("{}", w.to_string().trim_end());
    }
    let own = args
        .name
        .as_deref()
        .and_then(|n| snap.dsa_index(n))
        .map(|i| snap.dsas[i].clone());
    let listen = args
        .listen
        .clone()
        .or_else(|| {
            own.as_ref()
                .and_then(|d| crate::upstream::pool::socket_addrs(d).into_iter().next())
        })
        .unwrap_or_else(|| "127.0.0.1:3389".to_string());
    // Without --name, the router's own block is the one whose address is
    // this router's listen address: never a target of its own.
    let name = args.name.clone().or_else(|| {
        let found = own_block_by_address(&snap, &listen);
        match found.as_slice() {
            [one] => {
                tracing::warn!(dsa = %one, %listen, "no --name: DSA {one}'s address is this router's listen address, so it is taken as the router's own block and never a target (pass --name {one} to say so)");
                Some(one.clone())
            }
            [] => None,
            many => {
                tracing::warn!(%listen, dsas = ?many, "no --name: several DSAs have this router's listen address; none is taken as the router's own (pass --name); connections from the router to itself are refused");
                None
            }
        }
    });
    let router = match args
        .limits
        .config()
        .and_then(|mut c| args.tls.apply(&mut c).map(|_| c))
        .and_then(|mut c| {
            c.listen = listen;
            c.workers = crate::workers::resolve(args.threads);
            c.spread_above = args.spread_above;
            Context::new(c, snap, name)
        }) {
        Ok(r) => Arc::new(r),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    if let Err(e) = start_access_log(&router.cfg) {
        eprintln!("error: {e}");
        return ExitCode::from(1);
    }
    // Worker 0 is this thread's single-threaded runtime; the others are
    // threads of their own (crate::workers).
    let rt = match runtime(1) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let workers = match crate::workers::Workers::start(
        router.cfg.workers,
        rt.handle().clone(),
        f64::from(router.cfg.spread_above) / 100.0,
    ) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: cannot start the worker threads: {e}");
            return ExitCode::from(1);
        }
    };
    let root = args.knowledge.clone();
    let pool = &workers;
    let result: Result<()> = rt.block_on(async move {
        let listen = &router.cfg.listen;
        let listener = crate::server::listen(listen)
            .await
            .map_err(|e| Error::config(format!("cannot listen on {listen}: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::config(e.to_string()))?;
        tracing::info!(%addr, knowledge = %root.display(), "dsa-router listening");
        let ldaps = match &router.cfg.ldaps_listen {
            Some(a) => {
                let l = crate::server::listen(a).await.map_err(|e| {
                    Error::config(format!("cannot listen on --ldaps-listen {a}: {e}"))
                })?;
                let addr = l.local_addr().map_err(|e| Error::config(e.to_string()))?;
                tracing::info!(%addr, "dsa-router listening for LDAPS");
                Some(l)
            }
            None => None,
        };
        let (tx, rx) = watch::channel(false);
        if args.admin != "none" {
            crate::admin::start(&args.admin, admin_token.clone(), router.clone(), rx.clone())
                .await?;
        }
        if args.watch {
            tokio::spawn(watch_files(router.clone(), rx.clone()));
        }
        tokio::spawn(signals(tx, router.clone(), root));
        tracing::info!(
            threads = router.cfg.workers,
            spread_above = router.cfg.spread_above,
            "worker threads"
        );
        crate::server::run_on(listener, ldaps, router, rx, Some(pool)).await;
        tracing::info!("dsa-router stopped");
        Ok(())
    });
    // A reload still reading knowledge (a slow or hostile file) does not
    // keep the process from exiting.
    rt.shutdown_timeout(Duration::from_secs(1));
    workers.stop();
    crate::access::flush();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// The access log's writer, when the log is on.
fn start_access_log(cfg: &Config) -> Result<()> {
    if !cfg.access_log {
        return Ok(());
    }
    crate::access::start(cfg.access_log_format, cfg.access_log_target.clone()).map_err(|e| {
        Error::config(format!(
            "cannot open the access log {:?}: {e}",
            cfg.access_log_target
        ))
    })
}

/// `--watch`: reload when any knowledge or TLS file's modification time or
/// size changes.
async fn watch_files(router: Arc<Context>, mut shutdown: watch::Receiver<bool>) {
    // The TLS files too: a renewed certificate is picked up like knowledge.
    let tls_files: Vec<PathBuf> = router
        .cfg
        .tls
        .iter()
        .flat_map(|t| {
            [
                Some(t.cert.clone()),
                Some(t.key.clone()),
                t.client_ca.clone(),
            ]
        })
        .flatten()
        .chain(router.cfg.dsa_ca.clone())
        .collect();
    let stamp = |router: &Context| -> Vec<(PathBuf, Option<std::time::SystemTime>, u64)> {
        router
            .routing()
            .snap
            .files
            .iter()
            .chain(tls_files.iter())
            .map(|f| {
                let m = std::fs::metadata(f).ok();
                (
                    f.clone(),
                    m.as_ref().and_then(|m| m.modified().ok()),
                    m.map(|m| m.len()).unwrap_or(0),
                )
            })
            .collect()
    };
    let mut last = stamp(&router);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.changed() => return,
        }
        let now = stamp(&router);
        if now != last {
            tracing::info!("knowledge file changed; reloading");
            let r = router.clone();
            let _ = tokio::task::spawn_blocking(move || r.reload_from_disk()).await;
            last = stamp(&router);
        }
    }
}

/// SIGINT/SIGTERM: shut down. SIGHUP: reload knowledge. SIGUSR1: reopen
/// the access log's file.
async fn signals(tx: watch::Sender<bool>, router: Arc<Context>, root: PathBuf) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int), Ok(mut hup), Ok(mut usr1)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
        signal(SignalKind::user_defined1()),
    ) else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    let mut running: Option<tokio::task::JoinHandle<()>> = None;
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = usr1.recv() => crate::access::reopen(),
            _ = hup.recv() => {
                // Off the runtime's threads: with --threads 1 a reload
                // would otherwise stall every connection while it reads.
                // Not awaited here: a reload in progress never delays
                // SIGTERM; one at a time.
                if running.as_ref().is_some_and(|h| !h.is_finished()) {
                    tracing::warn!("SIGHUP: a reload is still running; this one is skipped");
                    continue;
                }
                let (r, p) = (router.clone(), root.clone());
                running = Some(tokio::task::spawn_blocking(move || reload(&r, &p)));
            }
        }
    }
    tracing::info!("shutting down: no new connections; waiting for operations in flight");
    let _ = tx.send(true);
}

/// Reload knowledge: validated whole; on error the old snapshot stays.
pub fn reload(router: &Context, _root: &std::path::Path) {
    let _ = router.reload_from_disk();
}

/// `dsa-router demo` (feature `dev-tools`).
#[cfg(feature = "dev-tools")]
pub fn demo(limits: &LimitArgs, listen: Option<String>) -> ExitCode {
    init_logging();
    let rt = match runtime(0) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let mut cfg = match limits.config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // The terminal is the demo's: no line per operation (serve logs them),
    // unless --access-log names a file.
    cfg.access_log = matches!(cfg.access_log_target, crate::access::Target::File(_));
    if let Err(e) = start_access_log(&cfg) {
        eprintln!("error: {e}");
        return ExitCode::from(1);
    }
    match rt.block_on(crate::demo::run(cfg, listen)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
