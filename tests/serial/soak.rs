//! The chaos soak (`scripts/soak.sh MINUTES [SEED]`): mixed client load
//! through the router to real slapd while DSAs are killed, frozen, stopped,
//! disabled and drained and knowledge is reloaded at random (seeded)
//! moments; then the books are checked.
//!
//! Topology: `o=DEMOCORP,c=AU` on three slapd (D1 and D2 in load-share group
//! GROUP1, D3 alone in GROUP2, D3 without `trust-conveyed-originator`, so a
//! bound client's reads there replay its bind on a connection of its own),
//! `o=CUSTOMER,c=AU` on two (C1, C2, the partition's unnamed load-share
//! group); the router process in front with fast probes, an admin port,
//! StartTLS (a certificate from [`Ca`]) and the access log on, written to
//! `access.log` (`--access-log`; to stderr, `router.log`, with the rest of
//! its log when `serve` has no such flag): its volume is part of the soak.
//!
//! Load, each kind in tasks of its own looping until the deadline: anonymous
//! reads; bound clients (each its own `userNNNN`) asking WhoAmI and reading
//! their own `userPassword`, another user's entry and `ou=restricted`;
//! connection churn (connect, bind as a random user, check, unbind); adds
//! by `cn=writer` recorded in a ledger as acknowledged, refused or unknown;
//! paged searches (RFC 2696, one partition or spanning both); spanning
//! searches at `c=AU`; StartTLS sessions. Errors (unavailable, busy, a cut
//! connection) are counted, not failed: DSAs die under the load on purpose.
//!
//! What fails the soak: an identity or data crossing (an answer naming
//! another user's identity or data, `ou=restricted` seen by a user, an
//! entry other than the one asked for), a bound operation run without the
//! client's identity, a successful search with wrong content, a ledger
//! violation (an acknowledged add missing or on two DSAs, an add of unknown
//! outcome on two DSAs, a refused add that exists, an entry nobody asked
//! for), the router exiting, DSAs not all back up, or the router's RSS or
//! open fds not back near their baseline. It prints one summary table.
//!
//! `SOAK_MINUTES` (default 2) and `SOAK_SEED` (default: from the clock; it
//! is printed): the same seed repeats the same chaos schedule (actions,
//! targets, durations); the load's interleaving is the machine's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;
use crate::support::SERIAL;

use ldap3::adapters::PagedResults;
use ldap3::exop::WhoAmI;
use ldap3::{Ldap, LdapConnAsync, LdapConnSettings, LdapError, Scope, SearchEntry};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::certs::Ca;
use support::knowledge::{Dsa, Knowledge};
use support::slapd::{
    admin_dn, seed_ldif, user_dn, writer_dn, Slapd, SlapdConfig, ADMIN_PW, ROUTER_PW, SEED_USERS,
    USER_PW, WRITER_PW,
};

const BIN: &str = env!("CARGO_BIN_EXE_dsa-router");

/// The router binary the soak runs: a copy of [`BIN`] made at its start,
/// so that a rebuild of `target/` during a long soak (another build on the
/// machine) changes neither the router nor `ctl` under it.
static ROUTER_BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

fn bin() -> &'static Path {
    ROUTER_BIN
        .get()
        .map(|p| p.as_path())
        .unwrap_or(Path::new(BIN))
}
const DEMOCORP: &str = "o=DEMOCORP,c=AU";
const CUSTOMER: &str = "o=CUSTOMER,c=AU";
const PARTITIONS: [&str; 2] = [DEMOCORP, CUSTOMER];

/// Bound on any one client operation (a connect, a bind, a search with all
/// its pages); past it the client gives up, counts `timeout` and reconnects.
const OP_TIMEOUT: Duration = Duration::from_secs(20);
/// Load before the baseline is measured (every kind, no chaos).
const WARMUP: Duration = Duration::from_secs(20);
/// Quiet time before RSS and fds are read.
const SETTLE: Duration = Duration::from_secs(5);
/// How long the DSAs may take to be all up again after the chaos.
const RECOVERY: Duration = Duration::from_secs(120);
/// The longest ejection of a tail-latency outlier at the router's default
/// `--ejection-time` (10 s, times at most 30 ejections in a row): a DSA the
/// chaos froze again and again may still be ejected when the chaos stops,
/// and is back in selection when its ejection ends, not before.
const LONGEST_EJECTION: Duration = Duration::from_secs(300);
/// `uid=*` entries under each partition's `ou=people` (alice, bob, users).
const PEOPLE: usize = SEED_USERS + 2;

/// One DSA of the topology.
struct DsaSpec {
    name: &'static str,
    /// Index into [`PARTITIONS`].
    part: usize,
    /// Named load-share group, or the partition's unnamed one.
    group: Option<&'static str>,
    /// `trust-conveyed-originator`: bound clients go on the router's
    /// connection with proxied authorization; else their binds are replayed.
    trust: bool,
}

const DSAS: [DsaSpec; 5] = [
    DsaSpec {
        name: "D1",
        part: 0,
        group: Some("GROUP1"),
        trust: true,
    },
    DsaSpec {
        name: "D2",
        part: 0,
        group: Some("GROUP1"),
        trust: true,
    },
    DsaSpec {
        name: "D3",
        part: 0,
        group: Some("GROUP2"),
        trust: false,
    },
    DsaSpec {
        name: "C1",
        part: 1,
        group: None,
        trust: true,
    },
    DsaSpec {
        name: "C2",
        part: 1,
        group: None,
        trust: true,
    },
];

/// What `router.dxg` says besides its `source` lines; the chaos reloads
/// one of these at random (precedence moves reads to GROUP2 and C2, whose
/// D3 replays binds; write precedence moves writes).
const VARIANTS: [&str; 4] = [
    "set write-precedence = D1, C1;\n",
    "set precedence = D3, C2;\nset write-precedence = D1, C1;\n",
    "set write-precedence = D2, C2;\n",
    "set precedence = D3, C2;\nset write-precedence = D3, C2;\n",
];

/// Knowledge with an error: a reload of it must be refused, the old kept.
const BROKEN: &str =
    "set dsa \"BROKEN\" = { prefix = <c AU><o DEMOCORP> address = tcp \"127.0.0.1\" port x1 };\n";

// ------------------------------------------------------------ randomness

/// splitmix64: the chaos schedule's and the clients' choices, from the seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    /// Uniform in `lo..=hi` milliseconds.
    fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }
}

// ------------------------------------------------------------ the router

/// `dsa-router serve` as a process (the pattern of availability.rs), with
/// StartTLS and the access log on.
struct RouterProc {
    port: u16,
    admin: u16,
    log: PathBuf,
    /// The access log's own file, when `serve` can write one
    /// (`--access-log PATH`); else the access log is in `log`.
    access_log: Option<PathBuf>,
    child: Child,
}

/// Whether `serve` writes the access log to a file of its own
/// (`--access-log PATH`); without it, it goes to stderr with the rest.
fn serve_has_access_log_file() -> bool {
    Command::new(bin())
        .args(["serve", "--help"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("--access-log <"))
        .unwrap_or(false)
}

/// What the chaos thread needs of the router: its admin API and pid.
#[derive(Clone)]
struct RouterHandle {
    admin: String,
    pid: u32,
}

impl RouterProc {
    fn start(dir: &Path, root: &Path, cert: &Path, key: &Path) -> RouterProc {
        let (port, admin) = (support::slapd::pick_port(), support::slapd::pick_port());
        let log = dir.join("router.log");
        let err = std::fs::File::create(&log).expect("router log");
        let (listen, admin_addr) = (format!("127.0.0.1:{port}"), format!("127.0.0.1:{admin}"));
        let control = support::control_socket(&admin_addr);
        let control = control.to_str().expect("utf-8 path").to_string();
        let mut args = vec![
            "serve",
            "--knowledge",
            root.to_str().expect("utf-8 path"),
            "--listen",
            &listen,
            "--admin",
            &admin_addr,
            "--control-socket",
            &control,
            "--tls-cert",
            cert.to_str().expect("utf-8 path"),
            "--tls-key",
            key.to_str().expect("utf-8 path"),
            "--probe-interval",
            "0.5",
            "--probe-timeout",
            "1",
            "--fall",
            "2",
            "--rise",
            "2",
            // Back after `--rise` good probes: the soak restarts DSAs every
            // few seconds.
            "--failback-hold",
            "0",
            // A DSA frozen for a while fails what waits on it within the
            // clients' patience.
            "--op-timeout",
            "10",
            "--threads",
            "2",
            // Both workers come into use under the soak's load, and
            // sessions move between them while DSAs come and go (the
            // default, 60, keeps a light load on one worker).
            "--spread-above",
            "20",
        ];
        // The access log is on (no --no-access-log): one line per
        // operation, into access.log, or router.log with the rest.
        let access_log = serve_has_access_log_file().then(|| dir.join("access.log"));
        if let Some(p) = &access_log {
            args.extend(["--access-log", p.to_str().expect("utf-8 path")]);
        }
        let child = Command::new(bin())
            .args(args)
            .env("DSA_ROUTER_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("spawn router");
        let mut r = RouterProc {
            port,
            admin,
            log,
            access_log,
            child,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        for p in [port, admin] {
            loop {
                if let Ok(Some(st)) = r.child.try_wait() {
                    panic!("router exited ({st}):\n{}", tail(&r.log, 30));
                }
                let addr = SocketAddr::from(([127, 0, 0, 1], p));
                if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "router not listening on {p}:\n{}",
                    tail(&r.log, 30)
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        r
    }

    fn url(&self) -> String {
        format!("ldap://127.0.0.1:{}", self.port)
    }

    fn handle(&self) -> RouterHandle {
        RouterHandle {
            admin: format!("127.0.0.1:{}", self.admin),
            pid: self.child.id(),
        }
    }

    /// The exit status, if it has exited.
    fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(st)) => Some(st.to_string()),
            _ => None,
        }
    }
}

impl Drop for RouterProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl RouterHandle {
    /// `dsa-router ctl --admin .. ARGS`: exit code, stdout + stderr.
    fn ctl(&self, args: &[&str]) -> (i32, String) {
        match Command::new(bin())
            .args(["ctl", "--admin", &self.admin])
            .arg("--control-socket")
            .arg(support::control_socket(&self.admin))
            .args(args)
            .output()
        {
            Ok(out) => (
                out.status.code().unwrap_or(-1),
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout).trim(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            ),
            Err(e) => (-1, format!("cannot run ctl: {e}")),
        }
    }

    /// `ctl status --json`, or `None` when it fails.
    fn status(&self) -> Option<Value> {
        let (code, out) = self.ctl(&["status", "--json"]);
        if code != 0 {
            return None;
        }
        serde_json::from_str(&out).ok()
    }

    /// The sum of one family's samples on `/metrics` (every label set),
    /// or `None` when the page cannot be read or has no such family.
    fn metric(&self, family: &str) -> Option<f64> {
        use std::io::{Read, Write};
        let mut s = TcpStream::connect(&self.admin).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(s, "GET /metrics HTTP/1.0\r\nHost: {}\r\n\r\n", self.admin).ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).ok()?;
        let values: Vec<f64> = body
            .lines()
            .filter(|l| {
                l.strip_prefix(family)
                    .is_some_and(|rest| rest.starts_with([' ', '{']))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect();
        (!values.is_empty()).then(|| values.iter().sum())
    }

    fn hup(&self) -> bool {
        Command::new("kill")
            .args(["-HUP", &self.pid.to_string()])
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    }

    /// VmRSS and VmHWM (bytes) and open fds of the router process.
    fn usage(&self) -> Usage {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
                * 1024
        };
        let fds = std::fs::read_dir(format!("/proc/{}/fd", self.pid))
            .map(|d| d.count() as u64)
            .unwrap_or(0);
        Usage {
            rss: kib("VmRSS:"),
            hwm: kib("VmHWM:"),
            fds,
        }
    }
}

/// What the router's open fds are: TCP connections by peer (a DSA's name,
/// `client`), listeners, and other kinds (`anon_inode:[eventpoll]`, files),
/// counted; e.g. `D1 2, D2 2, client 0, listen 3, anon_inode:[eventpoll] 1`.
fn fd_summary(pid: u32, dsa_ports: &[(&str, u16)]) -> String {
    let mut sockets = HashSet::new();
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for e in dir.flatten() {
            let link = std::fs::read_link(e.path())
                .map(|l| l.to_string_lossy().into_owned())
                .unwrap_or_default();
            if let Some(inode) = link
                .strip_prefix("socket:[")
                .and_then(|r| r.strip_suffix(']'))
            {
                sockets.insert(inode.to_string());
            } else if link.starts_with('/') {
                *kinds.entry("file".to_string()).or_insert(0) += 1;
            } else {
                *kinds.entry(link).or_insert(0) += 1;
            }
        }
    }
    let mut peers: BTreeMap<String, u64> = BTreeMap::new();
    let mut seen = 0u64;
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || !sockets.contains(f[9]) {
                continue;
            }
            seen += 1;
            let port = |a: &str| {
                a.rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok())
                    .unwrap_or(0)
            };
            let remote = port(f[2]);
            let who = if f[3] == "0A" {
                "listen".to_string()
            } else if let Some((n, _)) = dsa_ports.iter().find(|(_, p)| *p == remote) {
                n.to_string()
            } else {
                "client".to_string()
            };
            *peers.entry(who).or_insert(0) += 1;
        }
    }
    let other_sockets = sockets.len() as u64 - seen.min(sockets.len() as u64);
    let mut parts: Vec<String> = peers.iter().map(|(k, v)| format!("{k} {v}")).collect();
    if other_sockets > 0 {
        parts.push(format!("other sockets {other_sockets}"));
    }
    parts.extend(kinds.iter().map(|(k, v)| format!("{k} {v}")));
    parts.join(", ")
}

#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    rss: u64,
    hwm: u64,
    fds: u64,
}

/// Every DSA of every partition in `/status`.
fn all_dsas(status: &Value) -> Vec<Value> {
    status["partitions"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .flat_map(|p| p["dsas"].as_array().cloned().unwrap_or_default())
                .collect()
        })
        .unwrap_or_default()
}

fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

// ------------------------------------------------------------ knowledge

/// `o=DEMOCORP,c=AU` as knowledge writes it.
fn kprefix(part: usize) -> &'static str {
    ["<c AU><o DEMOCORP>", "<c AU><o CUSTOMER>"][part]
}

fn spec_dsa(d: &DsaSpec, port: u16) -> Knowledge {
    let p = kprefix(d.part);
    let mut dsa = Dsa::new(d.name, port)
        .prefix(p)
        .router(ROUTER_PW)
        .flags("multi-write, load-share");
    if let Some(g) = d.group {
        dsa = dsa.load_share_group(g);
    }
    if d.trust {
        dsa = dsa.trust_conveyed();
    }
    Knowledge::new().dsa(dsa)
}

/// `router.dxg`: the DSA files in knowledge order, then `tail` (a variant
/// or the broken text). Written whole and renamed into place.
fn write_root(dir: &Path, tail_text: &str) -> PathBuf {
    let mut root = String::from("# written by tests/serial/soak.rs\n");
    for d in &DSAS {
        let _ = writeln!(root, "source \"{}.dxc\";", d.name);
    }
    root.push_str(tail_text);
    let path = dir.join("router.dxg");
    let tmp = dir.join("router.dxg.tmp");
    std::fs::write(&tmp, root).expect("write dxg");
    std::fs::rename(&tmp, &path).expect("rename dxg");
    path
}

// ------------------------------------------------------------ load: books

/// Per load kind: operations, errors by code, latencies.
#[derive(Default)]
struct KindStats {
    ops: u64,
    errors: BTreeMap<String, u64>,
    /// First message seen per error code.
    samples: BTreeMap<String, String>,
    lat_us: Vec<u32>,
}

impl KindStats {
    fn record(&mut self, started: Instant, r: &Res) {
        self.ops += 1;
        self.lat_us
            .push(u32::try_from(started.elapsed().as_micros()).unwrap_or(u32::MAX));
        if let Err(f) = r {
            let key = f.key();
            *self.errors.entry(key.clone()).or_insert(0) += 1;
            self.samples.entry(key).or_insert_with(|| f.to_string());
        }
    }

    fn merge(&mut self, o: KindStats) {
        self.ops += o.ops;
        for (k, v) in o.errors {
            *self.errors.entry(k).or_insert(0) += v;
        }
        for (k, v) in o.samples {
            self.samples.entry(k).or_insert(v);
        }
        self.lat_us.extend(o.lat_us);
    }

    fn p99_ms(&mut self) -> f64 {
        if self.lat_us.is_empty() {
            return 0.0;
        }
        self.lat_us.sort_unstable();
        let i = (self.lat_us.len() * 99).div_ceil(100).saturating_sub(1);
        f64::from(self.lat_us[i]) / 1000.0
    }

    fn error_total(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// How one client operation went wrong.
#[derive(Debug)]
enum Fail {
    /// An LDAP result code other than the one expected, with its message.
    Code(u32, String),
    /// Client side: `connect`, `timeout` or `conn` (connection lost).
    Client(&'static str, String),
    /// Another user's identity or data (fails the soak).
    Crossing(String),
    /// A bound operation that ran without the client's identity (fails).
    Lost(String),
    /// A successful answer with the wrong content (fails).
    Wrong(String),
}

impl Fail {
    fn key(&self) -> String {
        match self {
            Fail::Code(rc, _) => rc.to_string(),
            Fail::Client(k, _) => k.to_string(),
            Fail::Crossing(_) => "CROSSING".to_string(),
            Fail::Lost(_) => "IDENTITY-LOST".to_string(),
            Fail::Wrong(_) => "WRONG".to_string(),
        }
    }

    /// Client-side failures leave the connection unusable.
    fn drops_connection(&self) -> bool {
        matches!(self, Fail::Client(..))
    }
}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fail::Code(rc, m) => write!(f, "rc {rc}: {m}"),
            Fail::Client(k, m) => write!(f, "{k}: {m}"),
            Fail::Crossing(m) => write!(f, "CROSSING: {m}"),
            Fail::Lost(m) => write!(f, "IDENTITY LOST: {m}"),
            Fail::Wrong(m) => write!(f, "WRONG ANSWER: {m}"),
        }
    }
}

type Res = Result<(), Fail>;

fn client_fail(e: &LdapError) -> Fail {
    match e {
        LdapError::Timeout { .. } => Fail::Client("timeout", e.to_string()),
        _ => Fail::Client("conn", e.to_string()),
    }
}

/// What every task shares: the stop flag, the write ledger and the record
/// of violations.
struct Shared {
    url: String,
    seed: u64,
    /// `w` (warm-up) or `s` (soak): in the written entries' names, so the
    /// two phases never write the same name.
    phase: &'static str,
    stop: AtomicBool,
    ledger: Mutex<Vec<LedgerEntry>>,
    crossings: AtomicU64,
    lost: AtomicU64,
    wrong: AtomicU64,
    /// The first violations, described.
    notes: Mutex<Vec<String>>,
    /// Operations so far, all kinds (progress lines).
    ops: AtomicU64,
    t0: Instant,
}

impl Shared {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Count `r` against the violations when it is one.
    fn judge(&self, kind: &str, r: &Res) {
        self.ops.fetch_add(1, Ordering::Relaxed);
        let counter = match r {
            Err(Fail::Crossing(_)) => &self.crossings,
            Err(Fail::Lost(_)) => &self.lost,
            Err(Fail::Wrong(_)) => &self.wrong,
            _ => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let mut notes = self.notes.lock().unwrap_or_else(|p| p.into_inner());
        if notes.len() < 50 {
            let line = format!(
                "+{:.1}s {kind}: {}",
                self.t0.elapsed().as_secs_f64(),
                r.as_ref().err().map(|f| f.to_string()).unwrap_or_default()
            );
            println!("soak: VIOLATION {line}");
            notes.push(line);
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Result 0.
    Acked,
    /// A clear LDAP error: the DSA must never have had it.
    Refused,
    /// The connection was cut, the client timed out, or the router said
    /// the outcome is unknown.
    Unknown,
}

struct LedgerEntry {
    /// Normalized DN.
    dn: String,
    part: usize,
    outcome: Outcome,
    detail: String,
}

/// Lower case, no blanks after commas: DNs as the soak compares them.
fn norm(dn: &str) -> String {
    dn.split(',')
        .map(|r| r.trim().to_ascii_lowercase())
        .collect::<Vec<_>>()
        .join(",")
}

// ------------------------------------------------------------ load: ops

async fn connect(url: &str, tls: bool) -> Result<Ldap, Fail> {
    let mut s = LdapConnSettings::new().set_conn_timeout(Duration::from_secs(5));
    if tls {
        // The router's certificate is the test CA's; native-tls cannot be
        // handed that CA from here (ldap3 does not re-export it), so the
        // client skips verification: the soak tests the router, not PKI.
        s = s.set_starttls(true).set_no_tls_verify(true);
    }
    match tokio::time::timeout(OP_TIMEOUT, LdapConnAsync::with_settings(s, url)).await {
        Err(_) => Err(Fail::Client("timeout", "connect".to_string())),
        Ok(Err(e)) => Err(Fail::Client("connect", e.to_string())),
        Ok(Ok((conn, ldap))) => {
            ldap3::drive!(conn);
            Ok(ldap)
        }
    }
}

async fn bind(ldap: &mut Ldap, dn: &str, pw: &str) -> Res {
    match tokio::time::timeout(OP_TIMEOUT, ldap.simple_bind(dn, pw)).await {
        Err(_) => Err(Fail::Client("timeout", format!("bind {dn}"))),
        Ok(Err(e)) => Err(client_fail(&e)),
        Ok(Ok(r)) if r.rc == 0 => Ok(()),
        Ok(Ok(r)) => Err(Fail::Code(r.rc, format!("bind {dn}: {}", r.text))),
    }
}

async fn close(mut ldap: Ldap) {
    let _ = tokio::time::timeout(Duration::from_secs(2), ldap.unbind()).await;
}

/// A search's entries (references dropped) or its failure; `Ok` only with
/// result 0 or `expect_rc`.
async fn search(
    ldap: &mut Ldap,
    base: &str,
    scope: Scope,
    filter: &str,
    attrs: Vec<&str>,
    expect_rc: u32,
) -> Result<(u32, Vec<SearchEntry>), Fail> {
    match tokio::time::timeout(OP_TIMEOUT, ldap.search(base, scope, filter, attrs)).await {
        Err(_) => Err(Fail::Client("timeout", format!("search {base}"))),
        Ok(Err(e)) => Err(client_fail(&e)),
        Ok(Ok(ldap3::SearchResult(entries, r))) => {
            if r.rc != 0 && r.rc != expect_rc {
                return Err(Fail::Code(r.rc, format!("search {base}: {}", r.text)));
            }
            let entries = entries
                .into_iter()
                .filter(|e| !e.is_ref() && !e.is_intermediate())
                .map(SearchEntry::construct)
                .collect();
            Ok((r.rc, entries))
        }
    }
}

fn has_attr(e: &SearchEntry, name: &str) -> bool {
    e.attrs.keys().any(|k| k.eq_ignore_ascii_case(name))
        || e.bin_attrs.keys().any(|k| k.eq_ignore_ascii_case(name))
}

fn first_value(e: &SearchEntry, name: &str) -> Option<String> {
    e.attrs
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .and_then(|(_, v)| v.first().cloned())
}

/// WhoAmI must name `me` (normalized `dn:...`).
async fn check_whoami(ldap: &mut Ldap, me: &str) -> Res {
    match tokio::time::timeout(OP_TIMEOUT, ldap.extended(WhoAmI)).await {
        Err(_) => Err(Fail::Client("timeout", "whoami".to_string())),
        Ok(Err(e)) => Err(client_fail(&e)),
        Ok(Ok(ldap3::result::ExopResult(exop, r))) => {
            if r.rc != 0 {
                return Err(Fail::Code(r.rc, format!("whoami: {}", r.text)));
            }
            let got = exop
                .val
                .map(|v| String::from_utf8_lossy(&v).into_owned())
                .unwrap_or_default();
            let want = format!("dn:{}", norm(me));
            let got_n = norm(&got);
            if got_n == want {
                Ok(())
            } else if got.is_empty() {
                Err(Fail::Lost(format!("whoami of {me} answered anonymous")))
            } else {
                Err(Fail::Crossing(format!("whoami of {me} answered {got:?}")))
            }
        }
    }
}

/// A bound client reads its own entry: it must see its own `userPassword`
/// (readable by `self` only).
async fn check_own_entry(ldap: &mut Ldap, me: &str) -> Res {
    let (_, es) = search(
        ldap,
        me,
        Scope::Base,
        "(objectClass=*)",
        vec!["uid", "userPassword"],
        0,
    )
    .await?;
    match es.as_slice() {
        [e] if norm(&e.dn) != norm(me) => Err(Fail::Crossing(format!(
            "{me} read its own entry and got {}",
            e.dn
        ))),
        [e] if !has_attr(e, "userPassword") => Err(Fail::Lost(format!(
            "{me} read its own entry without its userPassword: not run as itself"
        ))),
        [_] => Ok(()),
        _ => Err(Fail::Wrong(format!(
            "{me} read its own entry: {} entries",
            es.len()
        ))),
    }
}

/// Read `uid`'s entry in partition `part` (as whoever the connection is,
/// not `uid`): exactly that entry, without `userPassword`.
async fn check_other_entry(ldap: &mut Ldap, part: usize, uid: &str, who: &str) -> Res {
    let dn = user_dn(PARTITIONS[part], uid);
    let (_, es) = search(
        ldap,
        &dn,
        Scope::Base,
        "(objectClass=*)",
        vec!["uid", "userPassword"],
        0,
    )
    .await?;
    match es.as_slice() {
        [e] if norm(&e.dn) != norm(&dn) || first_value(e, "uid").as_deref() != Some(uid) => Err(
            Fail::Crossing(format!("{who} read {dn} and got {} {:?}", e.dn, e.attrs)),
        ),
        [e] if has_attr(e, "userPassword") => Err(Fail::Crossing(format!(
            "{who} read {dn} and saw its userPassword"
        ))),
        [_] => Ok(()),
        _ => Err(Fail::Wrong(format!(
            "{who} read {dn}: {} entries",
            es.len()
        ))),
    }
}

/// Subtree search `(uid=UID)` under `ou=people`: exactly that entry.
async fn check_filter(ldap: &mut Ldap, part: usize, uid: &str, who: &str) -> Res {
    let base = format!("ou=people,{}", PARTITIONS[part]);
    let (_, es) = search(
        ldap,
        &base,
        Scope::Subtree,
        &format!("(uid={uid})"),
        vec!["uid"],
        0,
    )
    .await?;
    let want = user_dn(PARTITIONS[part], uid);
    match es.as_slice() {
        [e] if norm(&e.dn) == norm(&want) => Ok(()),
        [e] => Err(Fail::Crossing(format!(
            "{who} searched (uid={uid}) and got {}",
            e.dn
        ))),
        _ => Err(Fail::Wrong(format!(
            "{who} searched (uid={uid}) under {base}: {} entries",
            es.len()
        ))),
    }
}

/// `ou=restricted` is readable by the router's and the writer's identity
/// only: a client must see nothing there (noSuchObject).
async fn check_restricted(ldap: &mut Ldap, part: usize, who: &str) -> Res {
    let dn = format!("cn=secret,ou=restricted,{}", PARTITIONS[part]);
    let (rc, es) = search(
        ldap,
        &dn,
        Scope::Base,
        "(objectClass=*)",
        vec!["description"],
        32,
    )
    .await?;
    if let Some(e) = es.first() {
        return Err(Fail::Crossing(format!(
            "{who} read {} in ou=restricted: {:?}",
            e.dn, e.attrs
        )));
    }
    if rc != 32 {
        return Err(Fail::Wrong(format!(
            "{who} read {dn}: rc {rc} and no entry"
        )));
    }
    Ok(())
}

fn random_user(rng: &mut Rng) -> String {
    format!("user{:04}", rng.index(SEED_USERS))
}

// ------------------------------------------------------------ load: tasks

/// A connection kept across iterations, reconnected (and rebound) when it
/// fails on the client side.
struct Conn {
    ldap: Option<Ldap>,
    tls: bool,
    bind: Option<(String, String)>,
}

impl Conn {
    fn new(tls: bool, bind: Option<(String, String)>) -> Conn {
        Conn {
            ldap: None,
            tls,
            bind,
        }
    }

    /// The connection, (re)made when needed; a failure to make it is
    /// recorded in `st` (and `None` returned after a short pause).
    async fn get(&mut self, sh: &Shared, kind: &str, st: &mut KindStats) -> Option<&mut Ldap> {
        if self.ldap.is_none() {
            let t = Instant::now();
            let r = async {
                let mut l = connect(&sh.url, self.tls).await?;
                if let Some((dn, pw)) = &self.bind {
                    if let Err(f) = bind(&mut l, dn, pw).await {
                        close(l).await;
                        return Err(f);
                    }
                }
                Ok(l)
            }
            .await;
            match r {
                Ok(l) => self.ldap = Some(l),
                Err(f) => {
                    let r = Err(f);
                    sh.judge(kind, &r);
                    st.record(t, &r);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    return None;
                }
            }
        }
        self.ldap.as_mut()
    }

    /// After an operation: drop the connection if the failure left it
    /// unusable.
    fn after(&mut self, r: &Res) {
        if let Err(f) = r {
            if f.drops_connection() {
                self.ldap = None;
            }
        }
    }

    async fn close(&mut self) {
        if let Some(l) = self.ldap.take() {
            close(l).await;
        }
    }
}

/// Record `r` of an operation started at `t`, and pause a little.
async fn done(sh: &Shared, kind: &str, st: &mut KindStats, conn: &mut Conn, t: Instant, r: Res) {
    sh.judge(kind, &r);
    st.record(t, &r);
    conn.after(&r);
    if r.is_err() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const THINK: Duration = Duration::from_millis(2);

/// (a) Anonymous reads: base reads of users, `(uid=...)` searches, and
/// `ou=restricted` (which must show nothing), in both partitions.
async fn reads_task(sh: Arc<Shared>, id: u64) -> KindStats {
    let kind = "reads (anonymous)";
    let mut st = KindStats::default();
    let mut rng = Rng::new(sh.seed ^ (0xA000 + id));
    let mut conn = Conn::new(false, None);
    while !sh.stopped() {
        let Some(ldap) = conn.get(&sh, kind, &mut st).await else {
            continue;
        };
        let part = rng.index(2);
        let uid = random_user(&mut rng);
        let t = Instant::now();
        let r = match rng.below(10) {
            0..=4 => check_other_entry(ldap, part, &uid, "anonymous").await,
            5..=8 => check_filter(ldap, part, &uid, "anonymous").await,
            _ => check_restricted(ldap, part, "anonymous").await,
        };
        done(&sh, kind, &mut st, &mut conn, t, r).await;
        tokio::time::sleep(THINK).await;
    }
    conn.close().await;
    st
}

/// (b) A client bound as its own `uid`: WhoAmI, its own entry (with its
/// `userPassword`), another user's entry (without), `ou=restricted`.
async fn bound_task(sh: Arc<Shared>, id: u64, tls: bool) -> KindStats {
    let kind = if tls { "starttls (bound)" } else { "bound" };
    let uid = format!("user{id:04}");
    let me = user_dn(DEMOCORP, &uid);
    let mut st = KindStats::default();
    let mut rng = Rng::new(sh.seed ^ (0xB000 + id));
    let mut conn = Conn::new(tls, Some((me.clone(), USER_PW.to_string())));
    let mut n = 0u64;
    while !sh.stopped() {
        let Some(ldap) = conn.get(&sh, kind, &mut st).await else {
            continue;
        };
        let t = Instant::now();
        let r = match rng.below(8) {
            0..=2 => check_whoami(ldap, &me).await,
            3..=5 => check_own_entry(ldap, &me).await,
            6 => {
                let mut other = random_user(&mut rng);
                if other == uid {
                    other = "alice".to_string();
                }
                check_other_entry(ldap, 0, &other, &me).await
            }
            _ => check_restricted(ldap, rng.index(2), &me).await,
        };
        done(&sh, kind, &mut st, &mut conn, t, r).await;
        n += 1;
        // StartTLS clients start a new session every 20 operations, so
        // the handshake itself is part of the load.
        if tls && n.is_multiple_of(20) {
            conn.close().await;
        }
        tokio::time::sleep(THINK).await;
    }
    conn.close().await;
    st
}

/// (c) Connection churn: connect, bind as a random user, WhoAmI and its own
/// entry, unbind; one operation per cycle.
async fn churn_task(sh: Arc<Shared>, id: u64) -> KindStats {
    let kind = "churn (connect+bind)";
    let mut st = KindStats::default();
    let mut rng = Rng::new(sh.seed ^ (0xC000 + id));
    while !sh.stopped() {
        // user0020..user0099: the bound tasks' users are not among them,
        // but several churners may be the same user at once.
        let uid = format!("user{:04}", 20 + rng.index(SEED_USERS - 20));
        let me = user_dn(DEMOCORP, &uid);
        let t = Instant::now();
        let r = async {
            let mut l = connect(&sh.url, false).await?;
            let r = async {
                bind(&mut l, &me, USER_PW).await?;
                check_whoami(&mut l, &me).await?;
                check_own_entry(&mut l, &me).await
            }
            .await;
            close(l).await;
            r
        }
        .await;
        sh.judge(kind, &r);
        st.record(t, &r);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    st
}

/// (d) Adds of unique entries under `ou=soak` of partition `part`, bound as
/// `cn=writer`, each written in the ledger with its outcome.
async fn write_task(sh: Arc<Shared>, part: usize, id: u64) -> KindStats {
    let kind = "writes (add)";
    let suffix = PARTITIONS[part];
    let mut st = KindStats::default();
    let mut conn = Conn::new(false, Some((writer_dn(suffix), WRITER_PW.to_string())));
    let mut n = 0u64;
    while !sh.stopped() {
        let Some(ldap) = conn.get(&sh, kind, &mut st).await else {
            continue;
        };
        n += 1;
        let cn = format!("soak-{}-{}{id}-{n}", sh.seed, sh.phase);
        let dn = format!("cn={cn},ou=soak,{suffix}");
        let attrs = vec![
            ("objectClass", HashSet::from(["organizationalRole"])),
            ("cn", HashSet::from([cn.as_str()])),
        ];
        let t = Instant::now();
        let (outcome, r) = match tokio::time::timeout(OP_TIMEOUT, ldap.add(&dn, attrs)).await {
            Err(_) => (
                Outcome::Unknown,
                Err(Fail::Client("timeout", format!("add {dn}"))),
            ),
            Ok(Err(e)) => (Outcome::Unknown, Err(client_fail(&e))),
            Ok(Ok(res)) if res.rc == 0 => (Outcome::Acked, Ok(())),
            Ok(Ok(res)) => {
                let unknown = res.text.contains("outcome") && res.text.contains("unknown");
                (
                    if unknown {
                        Outcome::Unknown
                    } else {
                        Outcome::Refused
                    },
                    Err(Fail::Code(res.rc, format!("add: {}", res.text))),
                )
            }
        };
        let detail = match &r {
            Ok(()) => String::new(),
            Err(f) => f.to_string(),
        };
        sh.ledger
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(LedgerEntry {
                dn: norm(&dn),
                part,
                outcome,
                detail,
            });
        done(&sh, kind, &mut st, &mut conn, t, r).await;
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    conn.close().await;
    st
}

/// (e) Paged searches (page size 10) of every person: under one
/// partition's `ou=people`, or at `c=AU` (the router pages through both).
/// A successful one must return each person exactly once.
async fn paged_task(sh: Arc<Shared>, id: u64) -> KindStats {
    let kind = "paged searches";
    let mut st = KindStats::default();
    let mut rng = Rng::new(sh.seed ^ (0xE000 + id));
    let mut conn = Conn::new(false, None);
    while !sh.stopped() {
        let Some(ldap) = conn.get(&sh, kind, &mut st).await else {
            continue;
        };
        let (base, want) = match rng.below(3) {
            0 => (format!("ou=people,{DEMOCORP}"), PEOPLE),
            1 => (format!("ou=people,{CUSTOMER}"), PEOPLE),
            _ => ("c=AU".to_string(), 2 * PEOPLE),
        };
        let t = Instant::now();
        let r = tokio::time::timeout(OP_TIMEOUT, paged(ldap, &base, want)).await;
        let r = r.unwrap_or_else(|_| Err(Fail::Client("timeout", format!("paged {base}"))));
        done(&sh, kind, &mut st, &mut conn, t, r).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    conn.close().await;
    st
}

async fn paged(ldap: &mut Ldap, base: &str, want: usize) -> Res {
    let filter = "(&(objectClass=inetOrgPerson)(uid=*))";
    let mut stream = ldap
        .streaming_search_with(
            PagedResults::new(10),
            base,
            Scope::Subtree,
            filter,
            vec!["uid"],
        )
        .await
        .map_err(|e| client_fail(&e))?;
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut bad = Vec::new();
    loop {
        match stream.next().await {
            Ok(Some(re)) => {
                if re.is_ref() || re.is_intermediate() {
                    continue;
                }
                let e = SearchEntry::construct(re);
                let uid = first_value(&e, "uid").unwrap_or_default();
                if !norm(&e.dn).starts_with(&format!("uid={},", uid.to_ascii_lowercase())) {
                    bad.push(format!("{} with uid {uid:?}", e.dn));
                }
                *seen.entry(norm(&e.dn)).or_insert(0) += 1;
            }
            Ok(None) => break,
            Err(e) => return Err(client_fail(&e)),
        }
    }
    let res = stream.finish().await;
    if res.rc != 0 {
        return Err(Fail::Code(res.rc, format!("paged {base}: {}", res.text)));
    }
    if !bad.is_empty() {
        return Err(Fail::Crossing(format!(
            "paged {base}: entries with another entry's data: {bad:?}"
        )));
    }
    let dups = seen.values().filter(|&&c| c > 1).count();
    if seen.len() != want || dups > 0 {
        return Err(Fail::Wrong(format!(
            "paged {base}: {} distinct entries (want {want}), {dups} repeated",
            seen.len()
        )));
    }
    Ok(())
}

/// (f) Searches spanning both partitions at `c=AU`: subtree (three users
/// and `cn=served-by` per partition) or one level (the two prefix entries).
/// A successful one must return exactly those, each once.
async fn spanning_task(sh: Arc<Shared>, id: u64) -> KindStats {
    let kind = "spanning searches";
    let mut st = KindStats::default();
    let mut rng = Rng::new(sh.seed ^ (0xF000 + id));
    let mut conn = Conn::new(false, None);
    while !sh.stopped() {
        let Some(ldap) = conn.get(&sh, kind, &mut st).await else {
            continue;
        };
        let t = Instant::now();
        let r = if rng.below(4) == 0 {
            // One level: the two partitions' prefix entries.
            spanning(ldap, Scope::OneLevel, "(objectClass=*)", &[""]).await
        } else {
            spanning(
                ldap,
                Scope::Subtree,
                "(|(uid=user0000)(uid=user0001)(uid=user0002)(cn=served-by))",
                &[
                    "uid=user0000,ou=people,",
                    "uid=user0001,ou=people,",
                    "uid=user0002,ou=people,",
                    "cn=served-by,",
                ],
            )
            .await
        };
        done(&sh, kind, &mut st, &mut conn, t, r).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    conn.close().await;
    st
}

/// The search at `c=AU` must return `rdns` (relative to each partition)
/// under both partitions, each once.
async fn spanning(ldap: &mut Ldap, scope: Scope, filter: &str, rdns: &[&str]) -> Res {
    let (_, es) = search(ldap, "c=AU", scope, filter, vec!["uid", "description"], 0).await?;
    let mut want: Vec<String> = PARTITIONS
        .iter()
        .flat_map(|p| rdns.iter().map(move |r| norm(&format!("{r}{p}"))))
        .collect();
    want.sort();
    let mut got: Vec<String> = es.iter().map(|e| norm(&e.dn)).collect();
    got.sort();
    if got == want {
        Ok(())
    } else {
        Err(Fail::Wrong(format!(
            "spanning {scope:?} {filter}: got {got:?}, want {want:?}"
        )))
    }
}

// ------------------------------------------------------------ load: all

/// Every load task, started.
fn start_load(sh: &Arc<Shared>) -> Vec<(String, tokio::task::JoinHandle<KindStats>)> {
    let mut tasks = Vec::new();
    let mut spawn = |name: String, f: tokio::task::JoinHandle<KindStats>| tasks.push((name, f));
    for i in 0..3 {
        spawn(format!("reads{i}"), tokio::spawn(reads_task(sh.clone(), i)));
    }
    for i in 0..3 {
        spawn(
            format!("bound user{i:04}"),
            tokio::spawn(bound_task(sh.clone(), i, false)),
        );
    }
    for i in 0..2 {
        spawn(format!("churn{i}"), tokio::spawn(churn_task(sh.clone(), i)));
    }
    for (i, part) in [0usize, 0, 1].into_iter().enumerate() {
        spawn(
            format!("writer{i}"),
            tokio::spawn(write_task(sh.clone(), part, i as u64)),
        );
    }
    spawn("paged".to_string(), tokio::spawn(paged_task(sh.clone(), 0)));
    spawn(
        "spanning".to_string(),
        tokio::spawn(spanning_task(sh.clone(), 0)),
    );
    for i in 10..12 {
        spawn(
            format!("starttls user{i:04}"),
            tokio::spawn(bound_task(sh.clone(), i, true)),
        );
    }
    tasks
}

/// Stop the load; every task must end within its operation timeout.
/// Returns the statistics per kind and the tasks that did not end.
async fn stop_load(
    sh: &Shared,
    tasks: Vec<(String, tokio::task::JoinHandle<KindStats>)>,
) -> (BTreeMap<String, KindStats>, Vec<String>) {
    sh.stop.store(true, Ordering::Relaxed);
    let mut by_kind: BTreeMap<String, KindStats> = BTreeMap::new();
    let mut hung = Vec::new();
    for (name, t) in tasks {
        match tokio::time::timeout(OP_TIMEOUT * 3, t).await {
            Ok(Ok(st)) => {
                let kind = kind_of(&name);
                by_kind.entry(kind).or_default().merge(st);
            }
            Ok(Err(e)) => hung.push(format!("{name}: {e}")),
            Err(_) => hung.push(format!("{name}: did not stop")),
        }
    }
    (by_kind, hung)
}

fn kind_of(task: &str) -> String {
    let k = match task.trim_end_matches(|c: char| c.is_ascii_digit()) {
        "reads" => "a. reads (anonymous)",
        "churn" => "c. connection churn",
        "writer" => "d. writes (add, ledger)",
        "paged" => "e. paged searches",
        "spanning" => "f. spanning searches",
        t if t.starts_with("bound") => "b. bound (WhoAmI, own data)",
        t if t.starts_with("starttls") => "g. StartTLS (bound)",
        t => t,
    };
    k.to_string()
}

// ------------------------------------------------------------ chaos

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DState {
    Healthy,
    Killed,
    Frozen,
    Stopped,
    Disabled,
    Draining,
}

struct ChaosDsa {
    slapd: Slapd,
    name: &'static str,
    part: usize,
    state: DState,
    until: Instant,
}

struct ChaosReport {
    actions: BTreeMap<&'static str, u64>,
    /// ctl commands and reloads that did not do what they should.
    failures: Vec<String>,
    peak: Usage,
    dsas: Vec<ChaosDsa>,
}

struct Chaos {
    rng: Rng,
    dsas: Vec<ChaosDsa>,
    router: RouterHandle,
    dir: PathBuf,
    variant: usize,
    t0: Instant,
    report_actions: BTreeMap<&'static str, u64>,
    failures: Vec<String>,
}

impl Chaos {
    fn log(&self, what: &str) {
        println!("chaos +{:7.1}s {what}", self.t0.elapsed().as_secs_f64());
    }

    fn count(&mut self, what: &'static str) {
        *self.report_actions.entry(what).or_insert(0) += 1;
    }

    fn ctl(&mut self, args: &[&str]) {
        let (code, out) = self.router.ctl(args);
        if code != 0 {
            let f = format!(
                "+{:.1}s ctl {}: exit {code}: {out}",
                self.t0.elapsed().as_secs_f64(),
                args.join(" ")
            );
            println!("chaos FAILED {f}");
            self.failures.push(f);
        }
    }

    /// Undo what was done to DSA `i`.
    fn recover(&mut self, i: usize) {
        let (name, state) = (self.dsas[i].name, self.dsas[i].state);
        match state {
            DState::Healthy => return,
            DState::Killed | DState::Stopped => {
                let t = Instant::now();
                self.dsas[i].slapd.restart();
                self.log(&format!(
                    "{name}: restarted (answering after {} ms)",
                    t.elapsed().as_millis()
                ));
            }
            DState::Frozen => {
                self.dsas[i].slapd.cont_signal();
                self.log(&format!("{name}: SIGCONT"));
            }
            DState::Disabled | DState::Draining => {
                self.ctl(&["enable", name]);
                self.log(&format!("{name}: ctl enable"));
            }
        }
        self.dsas[i].state = DState::Healthy;
    }

    fn healthy_in(&self, part: usize) -> usize {
        self.dsas
            .iter()
            .filter(|d| d.part == part && d.state == DState::Healthy)
            .count()
    }

    /// One random action.
    fn act(&mut self) {
        let roll = self.rng.below(100);
        if roll >= 80 {
            return self.reload(roll >= 96);
        }
        if roll >= 76 {
            return self.partition_outage();
        }
        // A DSA whose partition keeps another healthy DSA.
        let cands: Vec<usize> = (0..self.dsas.len())
            .filter(|&i| {
                self.dsas[i].state == DState::Healthy && self.healthy_in(self.dsas[i].part) >= 2
            })
            .collect();
        if cands.is_empty() {
            return;
        }
        let i = cands[self.rng.index(cands.len())];
        let name = self.dsas[i].name;
        let (state, until, what) = match roll {
            0..=17 => {
                self.dsas[i].slapd.kill9();
                (
                    DState::Killed,
                    self.rng.ms(1000, 6000),
                    "kill -9, restart later",
                )
            }
            18..=37 => {
                self.dsas[i].slapd.stop_signal();
                (
                    DState::Frozen,
                    self.rng.ms(1000, 5000),
                    "SIGSTOP, SIGCONT later",
                )
            }
            38..=49 => {
                self.dsas[i].slapd.stop();
                (
                    DState::Stopped,
                    self.rng.ms(1000, 6000),
                    "graceful stop, restart later",
                )
            }
            50..=62 => {
                self.ctl(&["disable", name]);
                (
                    DState::Disabled,
                    self.rng.ms(2000, 8000),
                    "ctl disable, enable later",
                )
            }
            _ => {
                self.ctl(&["drain", name]);
                (
                    DState::Draining,
                    self.rng.ms(2000, 8000),
                    "ctl drain, enable later",
                )
            }
        };
        self.count(what);
        self.dsas[i].state = state;
        self.dsas[i].until = Instant::now() + until;
        self.log(&format!("{name}: {what} (in {} ms)", until.as_millis()));
    }

    /// Every DSA of one partition (all healthy) frozen or killed for 1-3 s.
    fn partition_outage(&mut self) {
        let part = self.rng.index(2);
        if self.healthy_in(part) != self.dsas.iter().filter(|d| d.part == part).count() {
            return;
        }
        let freeze = self.rng.below(2) == 0;
        let until = Instant::now() + self.rng.ms(1000, 3000);
        let mut names = Vec::new();
        for d in self.dsas.iter_mut().filter(|d| d.part == part) {
            if freeze {
                d.slapd.stop_signal();
                d.state = DState::Frozen;
            } else {
                d.slapd.kill9();
                d.state = DState::Killed;
            }
            d.until = until;
            names.push(d.name);
        }
        let what = if freeze {
            "whole partition: SIGSTOP all"
        } else {
            "whole partition: kill -9 all"
        };
        self.count(what);
        self.log(&format!(
            "{} ({}): {what} (in {} ms)",
            PARTITIONS[part],
            names.join(", "),
            until.saturating_duration_since(Instant::now()).as_millis()
        ));
    }

    /// A knowledge reload: another variant by `ctl reload` or SIGHUP, or
    /// (`broken`) knowledge with an error, which must be refused.
    fn reload(&mut self, broken: bool) {
        if broken {
            write_root(&self.dir, BROKEN);
            let (code, out) = self.router.ctl(&["reload"]);
            if code == 0 {
                let f = format!(
                    "+{:.1}s broken knowledge was accepted: {out}",
                    self.t0.elapsed().as_secs_f64()
                );
                println!("chaos FAILED {f}");
                self.failures.push(f);
            }
            // Back to what is in force, for the next reload.
            write_root(&self.dir, VARIANTS[self.variant]);
            self.count("reload of broken knowledge (refused)");
            self.log("reload of broken knowledge: refused as it should be");
            return;
        }
        let mut v = self.rng.index(VARIANTS.len() - 1);
        if v >= self.variant {
            v += 1;
        }
        self.variant = v;
        write_root(&self.dir, VARIANTS[v]);
        let by_hup = self.rng.below(2) == 0;
        if by_hup {
            if !self.router.hup() {
                self.failures.push("kill -HUP failed".to_string());
            }
            self.count("reload by SIGHUP");
        } else {
            self.ctl(&["reload"]);
            self.count("reload by ctl reload");
        }
        self.log(&format!(
            "reload ({}): {}",
            if by_hup { "SIGHUP" } else { "ctl" },
            VARIANTS[v].trim().replace('\n', " ")
        ));
    }
}

/// The chaos thread: an action every 1.5-4 s, each undone after its time,
/// until `stop`; then everything undone. Samples the router's RSS and fds.
fn chaos_thread(mut c: Chaos, stop: Arc<AtomicBool>) -> ChaosReport {
    let mut peak = Usage::default();
    let mut next = Instant::now() + c.rng.ms(1500, 4000);
    let mut sampled = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        for i in 0..c.dsas.len() {
            if c.dsas[i].state != DState::Healthy && c.dsas[i].until <= now {
                c.recover(i);
            }
        }
        if now >= next {
            c.act();
            next = Instant::now() + c.rng.ms(1500, 4000);
        }
        if sampled.elapsed() >= Duration::from_secs(1) {
            let u = c.router.usage();
            peak.rss = peak.rss.max(u.rss);
            peak.fds = peak.fds.max(u.fds);
            sampled = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    c.log("chaos stops: every DSA back");
    for i in 0..c.dsas.len() {
        c.recover(i);
    }
    ChaosReport {
        actions: c.report_actions,
        failures: c.failures,
        peak,
        dsas: c.dsas,
    }
}

// ------------------------------------------------------------ verification

/// The DNs under `ou=soak` of one slapd, read directly as its rootdn.
async fn soak_entries(s: &Slapd, suffix: &str) -> Result<Vec<String>, String> {
    let (conn, mut ldap) = LdapConnAsync::new(&s.url)
        .await
        .map_err(|e| format!("{}: connect: {e}", s.name))?;
    ldap3::drive!(conn);
    let r = ldap
        .simple_bind(&admin_dn(suffix), ADMIN_PW)
        .await
        .map_err(|e| format!("{}: bind: {e}", s.name))?;
    if r.rc != 0 {
        return Err(format!("{}: bind: rc {}", s.name, r.rc));
    }
    let ldap3::SearchResult(es, r) = tokio::time::timeout(
        Duration::from_secs(300),
        ldap.search(
            &format!("ou=soak,{suffix}"),
            Scope::OneLevel,
            "(objectClass=*)",
            vec!["1.1"],
        ),
    )
    .await
    .map_err(|_| format!("{}: search timed out", s.name))?
    .map_err(|e| format!("{}: search: {e}", s.name))?;
    if r.rc != 0 {
        return Err(format!("{}: search: rc {} {}", s.name, r.rc, r.text));
    }
    let _ = ldap.unbind().await;
    Ok(es
        .into_iter()
        .map(|e| norm(&SearchEntry::construct(e).dn))
        .collect())
}

#[derive(Default)]
struct LedgerCheck {
    acked: u64,
    refused: u64,
    unknown: u64,
    acked_once: u64,
    acked_missing: u64,
    acked_dup: u64,
    unknown_none: u64,
    unknown_once: u64,
    unknown_dup: u64,
    refused_found: u64,
    /// On a DSA, in no ledger entry.
    phantom: u64,
    notes: Vec<String>,
}

impl LedgerCheck {
    fn violations(&self) -> u64 {
        self.acked_missing + self.acked_dup + self.unknown_dup + self.refused_found + self.phantom
    }

    fn note(&mut self, s: String) {
        if self.notes.len() < 30 {
            self.notes.push(s);
        }
    }
}

/// Every ledger entry against what the DSAs of its partition hold.
async fn check_ledger(ledger: &[LedgerEntry], dsas: &[ChaosDsa]) -> Result<LedgerCheck, String> {
    let mut found: HashMap<String, Vec<(usize, &'static str)>> = HashMap::new();
    for d in dsas {
        for dn in soak_entries(&d.slapd, PARTITIONS[d.part]).await? {
            found.entry(dn).or_default().push((d.part, d.name));
        }
    }
    let mut c = LedgerCheck::default();
    let mut known = HashSet::new();
    for e in ledger {
        known.insert(e.dn.clone());
        // The DSAs of its partition that hold it.
        let on: Vec<&str> = found
            .get(&e.dn)
            .map(|v| {
                v.iter()
                    .filter(|(p, _)| *p == e.part)
                    .map(|(_, n)| *n)
                    .collect()
            })
            .unwrap_or_default();
        match e.outcome {
            Outcome::Acked => {
                c.acked += 1;
                match on.len() {
                    1 => c.acked_once += 1,
                    0 => {
                        c.acked_missing += 1;
                        c.note(format!("acknowledged add missing: {}", e.dn));
                    }
                    _ => {
                        c.acked_dup += 1;
                        c.note(format!("acknowledged add on {on:?}: {}", e.dn));
                    }
                }
            }
            Outcome::Unknown => {
                c.unknown += 1;
                match on.len() {
                    0 => c.unknown_none += 1,
                    1 => c.unknown_once += 1,
                    _ => {
                        c.unknown_dup += 1;
                        c.note(format!(
                            "add of unknown outcome on {on:?}: {} ({})",
                            e.dn, e.detail
                        ));
                    }
                }
            }
            Outcome::Refused => {
                c.refused += 1;
                if !on.is_empty() {
                    c.refused_found += 1;
                    c.note(format!(
                        "refused add exists on {on:?}: {} ({})",
                        e.dn, e.detail
                    ));
                }
            }
        }
    }
    for (dn, on) in &found {
        if !known.contains(dn) {
            c.phantom += 1;
            c.note(format!("entry nobody added, on {on:?}: {dn}"));
        }
    }
    Ok(c)
}

// ------------------------------------------------------------ the soak

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / f64::from(1 << 20))
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Wait (polling `/status`) until every DSA is up with nothing in flight,
/// no own connections, no spare ones (they close after 30 s unused) and
/// no client connections; the last status.
fn wait_recovered(r: &RouterHandle, limit: Duration) -> (bool, Option<Value>) {
    let t = Instant::now();
    let mut last = None;
    while t.elapsed() < limit {
        if let Some(s) = r.status() {
            let ds = all_dsas(&s);
            let ok = ds.len() == DSAS.len()
                && ds.iter().all(|d| {
                    d["state"] == "up"
                        && d["in_flight"].as_u64() == Some(0)
                        && d["own_connections"].as_i64() == Some(0)
                        && d["spare_connections"].as_i64() == Some(0)
                })
                && s["client_connections"].as_i64() == Some(0);
            last = Some(s);
            if ok {
                return (true, last);
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    (false, last)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the chaos soak, minutes long: scripts/soak.sh MINUTES [SEED] (needs slapd)"]
async fn chaos_soak() {
    let _g = SERIAL.lock().await;
    Slapd::require();
    let minutes = env_u64("SOAK_MINUTES").unwrap_or(2).max(1);
    let seed = env_u64("SOAK_SEED").unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(1)
    });
    println!("soak: {minutes} min, seed {seed} (SOAK_SEED={seed} repeats this chaos schedule)");
    let t_test = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let dirp = dir.path().to_path_buf();
    let copy = dirp.join("dsa-router");
    std::fs::copy(BIN, &copy).expect("copy the router binary");
    let _ = ROUTER_BIN.set(copy);

    // DSAs: seeded data, an `ou=soak` for the writes, room for them.
    let slapds: Vec<Slapd> = tokio::task::block_in_place(|| {
        let hs: Vec<_> = DSAS
            .iter()
            .map(|d| {
                let (name, suffix) = (d.name, PARTITIONS[d.part]);
                std::thread::spawn(move || {
                    let mut ldif = seed_ldif(suffix, name);
                    let _ = write!(
                        ldif,
                        "dn: ou=soak,{suffix}\nobjectClass: organizationalUnit\nou: soak\n\n"
                    );
                    let mut cfg = SlapdConfig::new(name, &[suffix], ldif);
                    // mdb's map is address space only; the default of the
                    // harness (64 MiB) is small for a long soak's writes.
                    cfg.database = "maxsize 4294967296\n".to_string();
                    Slapd::start(cfg)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("slapd start"))
            .collect()
    });
    for (d, s) in DSAS.iter().zip(&slapds) {
        spec_dsa(d, s.port).write_to(&dirp.join(format!("{}.dxc", d.name)));
    }
    let root = write_root(&dirp, VARIANTS[0]);
    let ca = Ca::new(&dirp, "soak");
    let (cert, key) = ca.server_files(&dirp, "router");
    let mut router = tokio::task::block_in_place(|| RouterProc::start(&dirp, &root, &cert, &key));
    let handle = router.handle();
    let (up, st) = tokio::task::block_in_place(|| wait_recovered(&handle, Duration::from_secs(30)));
    assert!(
        up,
        "DSAs not all up at start: {st:?}\n{}",
        tail(&router.log, 30)
    );
    println!(
        "soak: router {} (admin {}), DSAs {}, set up in {:.1}s",
        router.url(),
        handle.admin,
        DSAS.iter()
            .zip(&slapds)
            .map(|(d, s)| format!("{}={}", d.name, s.port))
            .collect::<Vec<_>>()
            .join(" "),
        t_test.elapsed().as_secs_f64()
    );

    let shared = |phase: &'static str| {
        Arc::new(Shared {
            url: router.url(),
            seed,
            phase,
            stop: AtomicBool::new(false),
            ledger: Mutex::new(Vec::new()),
            crossings: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            wrong: AtomicU64::new(0),
            notes: Mutex::new(Vec::new()),
            ops: AtomicU64::new(0),
            t0: Instant::now(),
        })
    };

    // Warm-up: every kind of load, no chaos; then the baseline with no
    // client connected. Its writes are checked with the soak's.
    let warm = shared("w");
    let tasks = start_load(&warm);
    tokio::time::sleep(WARMUP).await;
    let (_, hung) = stop_load(&warm, tasks).await;
    assert!(hung.is_empty(), "warm-up tasks did not stop: {hung:?}");
    let (quiet, st) = tokio::task::block_in_place(|| wait_recovered(&handle, RECOVERY));
    assert!(quiet, "not quiet after the warm-up: {st:?}");
    tokio::time::sleep(SETTLE).await;
    let base = handle.usage();
    let dsa_ports: Vec<(&str, u16)> = DSAS
        .iter()
        .zip(&slapds)
        .map(|(d, s)| (d.name, s.port))
        .collect();
    let base_fds = fd_summary(handle.pid, &dsa_ports);
    println!(
        "soak: warm-up {} ops; baseline RSS {}, fds {} ({base_fds})",
        warm.ops.load(Ordering::Relaxed),
        mib(base.rss),
        base.fds
    );

    // The soak.
    let sh = shared("s");
    let stop_chaos = Arc::new(AtomicBool::new(false));
    let chaos = Chaos {
        rng: Rng::new(seed),
        dsas: DSAS
            .iter()
            .zip(slapds)
            .map(|(d, s)| ChaosDsa {
                slapd: s,
                name: d.name,
                part: d.part,
                state: DState::Healthy,
                until: Instant::now(),
            })
            .collect(),
        router: handle.clone(),
        dir: dirp.clone(),
        variant: 0,
        t0: sh.t0,
        report_actions: BTreeMap::new(),
        failures: Vec::new(),
    };
    let chaos = {
        let stop = stop_chaos.clone();
        std::thread::spawn(move || chaos_thread(chaos, stop))
    };
    let tasks = start_load(&sh);
    let n_tasks = tasks.len();
    let duration = Duration::from_secs(minutes * 60);
    let mut exited = None;
    let mut last_progress = Instant::now();
    while sh.t0.elapsed() < duration {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Some(st) = router.exited() {
            exited = Some(st);
            break;
        }
        if last_progress.elapsed() >= Duration::from_secs(60) {
            last_progress = Instant::now();
            let u = handle.usage();
            println!(
                "soak: +{:.0}s {} ops, {} writes, RSS {}, fds {}, violations {}",
                sh.t0.elapsed().as_secs_f64(),
                sh.ops.load(Ordering::Relaxed),
                sh.ledger.lock().map(|l| l.len()).unwrap_or(0),
                mib(u.rss),
                u.fds,
                sh.crossings.load(Ordering::Relaxed)
                    + sh.lost.load(Ordering::Relaxed)
                    + sh.wrong.load(Ordering::Relaxed)
            );
        }
    }
    let soaked = sh.t0.elapsed();

    // Stop the chaos (every DSA back), then the load; wait for recovery.
    stop_chaos.store(true, Ordering::Relaxed);
    let report = tokio::task::block_in_place(|| chaos.join()).expect("chaos thread");
    let (mut kinds, hung) = stop_load(&sh, tasks).await;
    let t_recover = Instant::now();
    let (recovered, last_status) =
        tokio::task::block_in_place(|| wait_recovered(&handle, RECOVERY + LONGEST_EJECTION));
    let recovery = t_recover.elapsed();
    tokio::time::sleep(SETTLE).await;
    let end = handle.usage();
    let moves = handle.metric("dsa_router_session_moves_total");
    let end_fds = fd_summary(handle.pid, &dsa_ports);
    println!(
        "soak: end RSS {}, fds {} ({end_fds})",
        mib(end.rss),
        end.fds
    );
    if exited.is_none() {
        exited = router.exited();
    }
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let log_volume = match &router.access_log {
        Some(a) => format!(
            "access log {}, router log {}",
            mib(size(a)),
            mib(size(&router.log))
        ),
        None => format!(
            "router log (access log included) {}",
            mib(size(&router.log))
        ),
    };

    // The ledger, against the DSAs directly.
    let mut ledger = std::mem::take(&mut *warm.ledger.lock().unwrap_or_else(|p| p.into_inner()));
    ledger.append(&mut sh.ledger.lock().unwrap_or_else(|p| p.into_inner()));
    let books = check_ledger(&ledger, &report.dsas).await;

    // The summary.
    let crossings = sh.crossings.load(Ordering::Relaxed) + warm.crossings.load(Ordering::Relaxed);
    let lost = sh.lost.load(Ordering::Relaxed) + warm.lost.load(Ordering::Relaxed);
    let wrong = sh.wrong.load(Ordering::Relaxed) + warm.wrong.load(Ordering::Relaxed);
    let mut t = String::new();
    let _ = writeln!(t, "| soak | count | detail |");
    let _ = writeln!(t, "|---|---|---|");
    let _ = writeln!(
        t,
        "| duration | {:.1} min | seed {seed}; 5 slapd (DEMOCORP: D1, D2 in GROUP1, D3 in GROUP2 without trust; CUSTOMER: C1, C2); {} client tasks |",
        soaked.as_secs_f64() / 60.0,
        n_tasks
    );
    let mut total_ops = 0;
    for (kind, st) in kinds.iter_mut() {
        total_ops += st.ops;
        let errs = if st.errors.is_empty() {
            "none".to_string()
        } else {
            st.errors
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let p99 = st.p99_ms();
        let _ = writeln!(
            t,
            "| load {kind} | {} ops | errors {} ({errs}); p99 {p99:.1} ms |",
            st.ops,
            st.error_total(),
        );
    }
    let _ = writeln!(
        t,
        "| load, all kinds | {total_ops} ops | {:.0} ops/s; {log_volume} |",
        total_ops as f64 / soaked.as_secs_f64(),
    );
    let total_actions: u64 = report.actions.values().sum();
    for (what, n) in &report.actions {
        let _ = writeln!(t, "| chaos: {what} | {n} | |");
    }
    let _ = writeln!(
        t,
        "| chaos, all actions | {total_actions} | admin/reload failures: {} |",
        report.failures.len()
    );
    match &books {
        Ok(b) => {
            let _ = writeln!(
                t,
                "| writes acknowledged | {} | found once {}, missing {}, duplicated {} |",
                b.acked, b.acked_once, b.acked_missing, b.acked_dup
            );
            let _ = writeln!(
                t,
                "| writes refused | {} | found anywhere {} |",
                b.refused, b.refused_found
            );
            let _ = writeln!(
                t,
                "| writes of unknown outcome | {} | applied once {}, not applied {}, duplicated {} |",
                b.unknown, b.unknown_once, b.unknown_none, b.unknown_dup
            );
            let _ = writeln!(t, "| entries nobody wrote | {} | |", b.phantom);
        }
        Err(e) => {
            let _ = writeln!(t, "| writes | ? | ledger not checked: {e} |");
        }
    }
    let _ = writeln!(
        t,
        "| identity or data crossings | {crossings} | bound operations run without the client's identity: {lost}; successful searches with wrong content: {wrong} |"
    );
    let _ = writeln!(
        t,
        "| router RSS | {} | baseline {}, peak {} (VmHWM and 1 s samples), end {} |",
        mib(end.rss),
        mib(base.rss),
        mib(end.hwm.max(report.peak.rss).max(base.rss)),
        mib(end.rss)
    );
    let _ = writeln!(
        t,
        "| router fds | {} | baseline {}, peak {} (sampled), end {} |",
        end.fds, base.fds, report.peak.fds, end.fds
    );
    let _ = writeln!(
        t,
        "| sessions moved between workers | {} | --threads 2 --spread-above 20 (/metrics dsa_router_session_moves_total) |",
        moves.map_or("?".to_string(), |m| format!("{m:.0}"))
    );
    let _ = writeln!(
        t,
        "| router | {} | DSAs all up (ejections ended), nothing in flight, no connections at the end: {} |",
        match &exited {
            None => "never exited".to_string(),
            Some(s) => format!("EXITED ({s})"),
        },
        if recovered {
            format!("yes, {} s after the chaos and load stopped", recovery.as_secs())
        } else {
            "NO".to_string()
        }
    );

    // The verdict.
    let mut failures = Vec::new();
    if crossings + lost + wrong > 0 {
        failures.push(format!(
            "{crossings} crossing(s), {lost} identity loss(es), {wrong} wrong answer(s): {:#?}",
            sh.notes.lock().unwrap_or_else(|p| p.into_inner())
        ));
    }
    match &books {
        Ok(b) if b.violations() > 0 => {
            failures.push(format!(
                "{} ledger violation(s): {:#?}",
                b.violations(),
                b.notes
            ));
        }
        Ok(_) => {}
        Err(e) => failures.push(format!("ledger not checked: {e}")),
    }
    if let Some(s) = &exited {
        failures.push(format!(
            "the router exited ({s}):\n{}",
            tail(&router.log, 40)
        ));
    }
    if !recovered {
        failures.push(format!("not recovered after the chaos: {last_status:?}"));
    }
    if !hung.is_empty() {
        failures.push(format!("load tasks that did not stop: {hung:?}"));
    }
    let rss_bound = (base.rss + base.rss / 10).max(base.rss + (8 << 20));
    if end.rss > rss_bound {
        failures.push(format!(
            "RSS {} at the end, above {} (baseline {})",
            mib(end.rss),
            mib(rss_bound),
            mib(base.rss)
        ));
    }
    if end.fds > base.fds + 10 {
        failures.push(format!(
            "{} fds at the end ({end_fds}), baseline {} ({base_fds})",
            end.fds, base.fds
        ));
    }
    if !report.failures.is_empty() {
        failures.push(format!("admin/reload failures: {:#?}", report.failures));
    }
    for (kind, st) in &kinds {
        for (code, msg) in &st.samples {
            println!("soak: {kind}: first {code}: {msg}");
        }
    }
    println!("\n{t}");
    println!(
        "soak: test runtime {:.1} min",
        t_test.elapsed().as_secs_f64() / 60.0
    );
    if !failures.is_empty() {
        // The router's log (access log included) and knowledge, for the
        // post-mortem.
        drop(router);
        let kept = dir.keep();
        panic!(
            "soak failed (router log and knowledge kept in {}):\n{}",
            kept.display(),
            failures.join("\n")
        );
    }
}
