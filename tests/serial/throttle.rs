#![allow(clippy::unwrap_used, clippy::panic)]
//! Throttling end to end, everything as real processes: the router
//! (`dsa-router serve`), each test DSA as a `dsa-router testdsa` process that
//! delays every response, clients as Rust `ldap3` connections, raw LDAP
//! sockets (`ldap3_proto` codec) and OpenLDAP's `ldapsearch`.
//!
//! 1. Per-DSA concurrency limits: exact refusal counts and messages, a burst
//!    that clears lets traffic resume, knowledge/CLI precedence of the
//!    limit, and a saturated load-share group answers `busy` naming its
//!    DSAs without spilling into the next group.
//! 2. The three refusal messages verbatim in `ldapsearch` output, each
//!    reached for real (concurrency, memory, CPU under a real CPU burn), and
//!    out-of-range thresholds are start-up errors.
//! 3. A refusal storm (memory threshold set and removed by knowledge reload)
//!    drops nothing already accepted; abandon and unbind still work.
//! 4. Client limits: outstanding operations per connection and connections
//!    per address; `/metrics` counts every refusal reason exercised.
//!
//! Tests burn CPU and measure timing, so they run one at a time ([`SERIAL`]).

use futures::{SinkExt, StreamExt};
use ldap3::exop::{WhoAmI, WhoAmIResp};
use ldap3::{Ldap, LdapConnAsync, LdapConnSettings, Scope, SearchEntry, SearchResult};
use ldap3_proto::proto::{
    LdapDerefAliases, LdapFilter, LdapMsg, LdapOp, LdapResultCode, LdapSearchRequest,
    LdapSearchScope,
};
use ldap3_proto::LdapCodec;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::codec::Framed;

use crate::support;
use crate::support::SERIAL;
use support::knowledge::{Dsa, Knowledge};

const BIN: &str = env!("CARGO_BIN_EXE_dsa-router");
const SUFFIX: &str = "o=SLOW,c=AU";
const KPREFIX: &str = "<c AU><o SLOW>";
const SERVED_BY: &str = "cn=served-by,o=SLOW,c=AU";
/// Users of the test DSA's seed data (`dsa_testdsa::seed_ldif`).
const ALICE: &str = "uid=alice,ou=People,o=SLOW,c=AU";
const BOB: &str = "uid=bob,ou=People,o=SLOW,c=AU";
const BUSY: u32 = 51;
const CONCURRENCY_S1: &str = "dsa-router: DSA S1 has exceeded the concurrency limit set by the administrator; try again later, or ask the administrator to raise the limit";
const CONCURRENCY_AB: &str = "dsa-router: DSAs A, B have exceeded the concurrency limit set by the administrator; try again later, or ask the administrator to raise the limit";
const CPU_MSG: &str = "dsa-router: the router has exceeded the CPU limit set by the administrator; try again later, or ask the administrator to raise the limit";
const MEMORY_MSG: &str = "dsa-router: the router has exceeded the memory limit set by the administrator; try again later, or ask the administrator to raise the limit";
const NOTICE_OF_DISCONNECTION: &str = "1.3.6.1.4.1.1466.20036";
/// Bound on any single client operation.
const OP_TIMEOUT: Duration = Duration::from_secs(30);

// ------------------------------------------------------------ processes

fn blocking<R>(f: impl FnOnce() -> R) -> R {
    tokio::task::block_in_place(f)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A child process, killed on drop.
struct Proc {
    what: String,
    child: Child,
    log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

enum Ready {
    Yes,
    /// Exited before listening (a lost port race, or a real failure).
    Exited(String),
}

/// Poll until every port accepts a TCP connection (deadline 20 s).
fn wait_listening(p: &mut Proc, ports: &[u16]) -> Ready {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let up = ports.iter().all(|&port| {
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
        });
        if up {
            return Ready::Yes;
        }
        if let Ok(Some(st)) = p.child.try_wait() {
            return Ready::Exited(format!("{} exited ({st}):\n{}", p.what, tail(&p.log, 20)));
        }
        assert!(
            Instant::now() < deadline,
            "{} did not listen on {ports:?} within 20 s:\n{}",
            p.what,
            tail(&p.log, 20)
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Spawn `make(ports)` on fresh ports until it listens on all of them
/// (retrying a few times in case another process took a port meanwhile).
fn spawn_listening(
    what: &str,
    log: PathBuf,
    nports: usize,
    make: impl Fn(&[u16]) -> Command,
) -> (Proc, Vec<u16>) {
    let mut last = String::new();
    for _ in 0..5 {
        let ports: Vec<u16> = (0..nports).map(|_| free_port()).collect();
        let logf = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = make(&ports)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(logf)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        let mut p = Proc {
            what: what.to_string(),
            child,
            log: log.clone(),
        };
        match wait_listening(&mut p, &ports) {
            Ready::Yes => return (p, ports),
            Ready::Exited(why) => last = why,
        }
    }
    panic!("{what} never started: {last}");
}

/// One test DSA process holding `SUFFIX`, delaying every response.
fn start_dsa(dir: &Path, name: &str, delay_ms: u64) -> (Proc, u16) {
    let (p, ports) = spawn_listening(
        &format!("testdsa {name}"),
        dir.join(format!("testdsa-{name}.log")),
        1,
        |ports| {
            let mut c = Command::new(BIN);
            c.args([
                "testdsa",
                "--listen",
                &format!("127.0.0.1:{}", ports[0]),
                "--name",
                name,
                "--suffix",
                SUFFIX,
                "--delay-ms",
                &delay_ms.to_string(),
            ]);
            c
        },
    );
    (p, ports[0])
}

/// One DSA of the SLOW partition.
fn slow_dsa(name: &str, port: u16) -> Dsa {
    Dsa::new(name, port).prefix(KPREFIX).flags("load-share")
}

struct Router {
    proc: Proc,
    port: u16,
    admin: u16,
    root: PathBuf,
}

/// Test DSA S1 (answering after `delay_ms`) with the knowledge attribute
/// `dsa-router-concurrency-limit = 4`, in root file `root_name`.
/// Returns the DSA, its port and the root file.
fn limited_s1(dir: &Path, delay_ms: u64, root_name: &str) -> (Proc, u16, PathBuf) {
    let (s1, p1) = start_dsa(dir, "S1", delay_ms);
    let root = dir.join(root_name);
    std::fs::write(
        &root,
        slow_dsa("S1", p1)
            .set("dsa-router-concurrency-limit", "4")
            .to_string(),
    )
    .unwrap();
    (s1, p1, root)
}

fn start_router(dir: &Path, root: &Path, extra: &[&str]) -> Router {
    let (proc, ports) = spawn_listening("router", dir.join("router.log"), 2, |ports| {
        let mut c = Command::new(BIN);
        c.arg("serve")
            .arg("--knowledge")
            .arg(root)
            .args([
                "--listen",
                &format!("127.0.0.1:{}", ports[0]),
                "--admin",
                &format!("127.0.0.1:{}", ports[1]),
                "--no-access-log",
            ])
            .arg("--control-socket")
            .arg(support::control_socket(&format!("127.0.0.1:{}", ports[1])))
            .args(extra);
        c
    });
    Router {
        proc,
        port: ports[0],
        admin: ports[1],
        root: root.to_path_buf(),
    }
}

impl Router {
    fn url(&self) -> String {
        format!("ldap://127.0.0.1:{}", self.port)
    }

    fn get(&self, path: &str) -> String {
        blocking(|| http_get(self.admin, path))
    }

    fn status(&self) -> Value {
        serde_json::from_str(&self.get("/status")).unwrap()
    }

    fn dsa(&self, name: &str) -> Value {
        let st = self.status();
        st["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| p["dsas"].as_array().unwrap().iter())
            .find(|d| d["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no DSA {name} in /status: {st}"))
    }

    fn in_flight(&self, name: &str) -> u64 {
        self.dsa(name)["in_flight"].as_u64().unwrap()
    }

    fn utilization(&self, field: &str) -> f64 {
        self.status()["utilization"][field].as_f64().unwrap()
    }

    /// One `/metrics` series (exact name with labels).
    fn metric(&self, series: &str) -> f64 {
        let text = self.get("/metrics");
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no series {series} in /metrics:\n{text}"))
    }

    fn refusals(&self, reason: &str) -> f64 {
        self.metric(&format!("dsa_router_refusals_total{{reason=\"{reason}\"}}"))
    }

    /// Rewrite the root knowledge file and `dsa-router ctl reload`.
    fn reload(&self, knowledge: &str) -> (bool, String) {
        std::fs::write(&self.root, knowledge).unwrap();
        let out = blocking(|| {
            Command::new(BIN)
                .args([
                    "ctl",
                    "--admin",
                    &format!("127.0.0.1:{}", self.admin),
                    "--control-socket",
                    support::control_socket(&format!("127.0.0.1:{}", self.admin))
                        .to_str()
                        .unwrap(),
                    "reload",
                ])
                .output()
                .unwrap()
        });
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    fn log_tail(&self) -> String {
        tail(&self.proc.log, 30)
    }

    /// Poll a condition on the router with a deadline.
    /// Wait until every DSA of the knowledge is up in `/status` (probed):
    /// a test that counts where operations went needs every DSA eligible,
    /// and on a loaded machine the first probes take a while.
    async fn all_up(&self) {
        self.wait_for("every DSA up", Duration::from_secs(30), |r| {
            r.status()["partitions"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|p| p["dsas"].as_array().unwrap().iter())
                .all(|d| d["state"] == "up")
        })
        .await;
    }

    async fn wait_for(&self, what: &str, within: Duration, mut cond: impl FnMut(&Router) -> bool) {
        let deadline = Instant::now() + within;
        while !cond(self) {
            assert!(
                Instant::now() < deadline,
                "timed out after {within:?} waiting for {what}; /status: {}\nrouter log:\n{}",
                self.get("/status"),
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// GET over a hand-written HTTP/1.0 request.
fn http_get(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // The API's own address: without a token it refuses other Hosts.
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n").unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    let (head, body) = buf
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("bad HTTP response to {path}: {buf:?}"));
    assert!(
        head.lines().next().is_some_and(|l| l.contains(" 200 ")),
        "GET {path}: {head}"
    );
    body.to_string()
}

/// Busy threads on every core until dropped.
struct CpuBurner {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<u64>>,
}

impl CpuBurner {
    fn start(n: usize) -> CpuBurner {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x: u64 = 1;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..10_000 {
                            x = std::hint::black_box(
                                x.wrapping_mul(6364136223846793005).wrapping_add(1),
                            );
                        }
                    }
                    x
                })
            })
            .collect();
        CpuBurner { stop, threads }
    }
}

impl Drop for CpuBurner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

// ------------------------------------------------------------ ldap3 clients

async fn ldap(url: &str) -> Ldap {
    let settings = LdapConnSettings::new().set_conn_timeout(Duration::from_secs(5));
    let (conn, ldap) = LdapConnAsync::with_settings(settings, url).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.drive().await;
    });
    ldap
}

#[derive(Debug, Clone)]
struct Outcome {
    rc: u32,
    text: String,
    served_by: Option<String>,
    took: Duration,
}

/// Base search of `cn=served-by`: who answered, or the refusal.
async fn search(l: &mut Ldap) -> Outcome {
    let t = Instant::now();
    let r = tokio::time::timeout(
        OP_TIMEOUT,
        l.search(
            SERVED_BY,
            Scope::Base,
            "(objectClass=*)",
            vec!["description"],
        ),
    )
    .await
    .expect("search timed out")
    .expect("search failed at the protocol level");
    let SearchResult(entries, res) = r;
    let served_by = entries
        .into_iter()
        .next()
        .map(SearchEntry::construct)
        .and_then(|e| e.attrs.get("description").and_then(|v| v.first().cloned()));
    Outcome {
        rc: res.rc,
        text: res.text,
        served_by,
        took: t.elapsed(),
    }
}

async fn connections(url: &str, n: usize) -> Vec<Ldap> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(ldap(url).await);
    }
    v
}

/// One search on each connection, all sent at once.
async fn burst(conns: &mut [Ldap]) -> Vec<Outcome> {
    futures::future::join_all(conns.iter_mut().map(search)).await
}

/// The most reads in flight on DSA `name` the router's `/status` showed,
/// read until it reaches `want` or 2 s have passed (run beside a burst of
/// searches the DSA holds for 500 ms each).
async fn peak_in_flight(r: &Router, name: &str, want: u64) -> u64 {
    let end = Instant::now() + Duration::from_secs(2);
    let mut peak = 0;
    while peak < want && Instant::now() < end {
        peak = peak.max(blocking(|| r.in_flight(name)));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    peak
}

#[derive(Debug, Default)]
struct Tally {
    ok: usize,
    busy: usize,
    other: Vec<(u32, String)>,
    /// Who answered the successes.
    by: BTreeMap<String, usize>,
    busy_texts: BTreeMap<String, usize>,
    slowest_busy: Duration,
    fastest_ok: Option<Duration>,
    slowest_ok: Duration,
}

fn tally(v: &[Outcome]) -> Tally {
    let mut t = Tally::default();
    for o in v {
        match o.rc {
            0 => {
                t.ok += 1;
                *t.by
                    .entry(o.served_by.clone().unwrap_or_else(|| "?".into()))
                    .or_default() += 1;
                t.fastest_ok = Some(t.fastest_ok.map_or(o.took, |f| f.min(o.took)));
                t.slowest_ok = t.slowest_ok.max(o.took);
            }
            BUSY => {
                t.busy += 1;
                *t.busy_texts.entry(o.text.clone()).or_default() += 1;
                t.slowest_busy = t.slowest_busy.max(o.took);
            }
            rc => t.other.push((rc, o.text.clone())),
        }
    }
    t
}

/// A burst of `n` on fresh connections must give exactly `ok` successes
/// and the rest busy with `message`.
async fn expect_burst(r: &Router, n: usize, ok: usize, message: &str, case: &str) -> Vec<Ldap> {
    let mut conns = connections(&r.url(), n).await;
    let t0 = Instant::now();
    let out = burst(&mut conns).await;
    let t = tally(&out);
    println!(
        "{case}: {n} concurrent -> {} ok (by {:?}; {:?}..{:?}), {} busy (slowest {:?}), other {:?}; burst took {:?}",
        t.ok,
        t.by,
        t.fastest_ok,
        t.slowest_ok,
        t.busy,
        t.slowest_busy,
        t.other,
        t0.elapsed()
    );
    assert!(
        t.other.is_empty(),
        "{case}: unexpected results {:?}",
        t.other
    );
    assert_eq!(t.ok, ok, "{case}: successes; {t:?}");
    assert_eq!(t.busy, n - ok, "{case}: busy refusals; {t:?}");
    if t.busy > 0 {
        assert_eq!(
            t.busy_texts.keys().collect::<Vec<_>>(),
            vec![message],
            "{case}: busy message(s)"
        );
    }
    conns
}

// ------------------------------------------------------------ raw LDAP

fn search_req(msgid: i32, base: &str) -> LdapMsg {
    LdapMsg {
        msgid,
        op: LdapOp::SearchRequest(LdapSearchRequest {
            base: base.to_string(),
            scope: LdapSearchScope::Base,
            aliases: LdapDerefAliases::Never,
            sizelimit: 0,
            timelimit: 0,
            typesonly: false,
            filter: LdapFilter::Present("objectClass".into()),
            attrs: vec!["description".into()],
        }),
        ctrl: vec![],
    }
}

fn abandon_req(msgid: i32, target: i32) -> LdapMsg {
    LdapMsg {
        msgid,
        op: LdapOp::AbandonRequest(target),
        ctrl: vec![],
    }
}

fn unbind_req(msgid: i32) -> LdapMsg {
    LdapMsg {
        msgid,
        op: LdapOp::UnbindRequest,
        ctrl: vec![],
    }
}

#[derive(Debug)]
enum Got {
    Msg(Box<LdapMsg>),
    Eof,
    Timeout,
}

struct Raw {
    f: Framed<tokio::net::TcpStream, LdapCodec>,
}

/// A search's final result on a raw connection.
#[derive(Debug, Clone)]
struct Done {
    code: LdapResultCode,
    message: String,
    entries: usize,
    at: Instant,
}

impl Raw {
    async fn connect(port: u16) -> Raw {
        let s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        s.set_nodelay(true).unwrap();
        Raw {
            f: Framed::new(s, LdapCodec::default()),
        }
    }

    /// Send PDUs in one write.
    async fn send(&mut self, msgs: Vec<LdapMsg>) {
        for m in msgs {
            self.f.feed(m).await.unwrap();
        }
        self.f.flush().await.unwrap();
    }

    async fn next(&mut self, wait: Duration) -> Got {
        match tokio::time::timeout(wait, self.f.next()).await {
            Err(_) => Got::Timeout,
            Ok(None) => Got::Eof,
            Ok(Some(Ok(m))) => Got::Msg(Box::new(m)),
            Ok(Some(Err(e))) if e.kind() == std::io::ErrorKind::ConnectionReset => Got::Eof,
            Ok(Some(Err(e))) => panic!("undecodable PDU from the router: {e}"),
        }
    }

    /// Read until every msgid in `want` has its SearchResultDone.
    async fn dones(&mut self, want: &[i32], within: Duration) -> BTreeMap<i32, Done> {
        let deadline = Instant::now() + within;
        let mut entries: BTreeMap<i32, usize> = BTreeMap::new();
        let mut done = BTreeMap::new();
        while !want.iter().all(|m| done.contains_key(m)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left).await {
                Got::Msg(m) => match m.op {
                    LdapOp::SearchResultEntry(_) => *entries.entry(m.msgid).or_default() += 1,
                    LdapOp::SearchResultDone(res) => {
                        assert!(
                            want.contains(&m.msgid),
                            "result for unexpected msgid {}: {res:?}",
                            m.msgid
                        );
                        done.insert(
                            m.msgid,
                            Done {
                                code: res.code,
                                message: res.message,
                                entries: entries.get(&m.msgid).copied().unwrap_or(0),
                                at: Instant::now(),
                            },
                        );
                    }
                    other => panic!("unexpected PDU (msgid {}): {other:?}", m.msgid),
                },
                other => panic!(
                    "waiting for results of {want:?} (have {:?}): {other:?}",
                    done.keys()
                ),
            }
        }
        done
    }
}

/// The root DSE, answered by the router itself.
async fn root_dse(c: &mut Raw) -> BTreeMap<i32, Done> {
    c.send(vec![search_req(1, "")]).await;
    c.dones(&[1], Duration::from_secs(5)).await
}

// ------------------------------------------------------------ ldapsearch

struct LdapSearch {
    child: Child,
    out: PathBuf,
}

fn ldapsearch_spawn(r: &Router, dir: &Path, tag: &str) -> LdapSearch {
    let out = dir.join(format!("ldapsearch-{tag}.out"));
    let f = std::fs::File::create(&out).unwrap();
    let child = Command::new("ldapsearch")
        .env("LDAPNOINIT", "1")
        .args([
            "-x",
            "-H",
            &r.url(),
            "-b",
            SERVED_BY,
            "-s",
            "base",
            "-o",
            "nettimeout=20",
            "-o",
            "ldif_wrap=no",
            "description",
        ])
        .stdin(Stdio::null())
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .expect("ldapsearch (ldap-utils) must be installed");
    LdapSearch { child, out }
}

impl LdapSearch {
    /// Exit code and combined stdout+stderr.
    fn wait(mut self) -> (i32, String) {
        let deadline = Instant::now() + OP_TIMEOUT;
        let st = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "ldapsearch did not finish within {OP_TIMEOUT:?}: {}",
                    std::fs::read_to_string(&self.out).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        (
            st.code().unwrap_or(-1),
            std::fs::read_to_string(&self.out).unwrap_or_default(),
        )
    }
}

fn ldapsearch(r: &Router, dir: &Path, tag: &str) -> (i32, String) {
    blocking(|| ldapsearch_spawn(r, dir, tag).wait())
}

/// `ldapsearch` refused at its bind: exit 51, the message as additional info.
fn assert_bind_refused(code: i32, out: &str, message: &str, case: &str) {
    println!("{case}: ldapsearch exit {code}:\n{}", out.trim_end());
    assert_eq!(code, 51, "{case}: ldapsearch exit code; output:\n{out}");
    assert!(
        out.contains("ldap_bind: Server is busy (51)"),
        "{case}: {out}"
    );
    assert!(
        out.lines()
            .any(|l| l.trim() == format!("additional info: {message}")),
        "{case}: expected `additional info: {message}` in:\n{out}"
    );
}

// ============================================================ 1. concurrency

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrency_limit_refuses_exactly_the_excess_and_traffic_resumes() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let (_s1, p1, root) = limited_s1(dir.path(), 500, "router.dxg");
    // The command-line default (5) is overridden by the knowledge.
    let r = start_router(
        dir.path(),
        &root,
        &["--probe-timeout", "5", "--dsa-concurrency-limit", "5"],
    );
    r.all_up().await;

    let mut conns = expect_burst(&r, 16, 4, CONCURRENCY_S1, "limit 4 (DSA attribute)").await;
    // Refusals are immediate, not queued behind the DSA's 500 ms.
    r.wait_for("S1 in flight back to 0", Duration::from_secs(5), |r| {
        r.in_flight("S1") == 0
    })
    .await;
    let refused = r.refusals("concurrency");
    println!(
        "after the first burst: S1 served {}, refusals_total{{concurrency}} {refused}",
        r.dsa("S1")["served"]
    );
    assert_eq!(refused, 12.0, "one refusal counted per busy answer");

    // A burst that clears lets traffic resume: at once, on the same
    // connections, several times over.
    // "In parallel" is read from the router's own count of reads in
    // flight on S1 while the burst runs, not from how long it took (a
    // loaded machine stretched 4 parallel 500 ms searches past 950 ms).
    for round in 1..=3 {
        let t0 = Instant::now();
        let (out, peak) = tokio::join!(burst(&mut conns[..4]), peak_in_flight(&r, "S1", 4));
        let took = t0.elapsed();
        let t = tally(&out);
        println!(
            "resume round {round}: 4 concurrent -> {} ok, {} busy {:?}, took {took:?}, \
             at most {peak} in flight on S1",
            t.ok, t.busy, t.busy_texts
        );
        assert_eq!(
            t.ok, 4,
            "round {round}: every one of 4 must succeed right after a burst cleared: {t:?}"
        );
        assert_eq!(
            peak, 4,
            "round {round}: 4 concurrent 500 ms searches were not all in flight at once"
        );
    }

    // Where the limit comes from: the DSA attribute, else
    // --dsa-concurrency-limit (a flag, or the settings file), else the
    // root file's `set dsa-router-concurrency-limit`: the flag given here
    // overrides the knowledge line.
    let set2 = "set dsa-router-concurrency-limit = 2;\n";
    let (ok, msg) = r.reload(&(set2.to_string() + &slow_dsa("S1", p1).to_string()));
    assert!(ok, "reload: {msg}");
    drop(conns);
    let case = "--dsa-concurrency-limit 5 over root set 2";
    expect_burst(&r, 16, 5, CONCURRENCY_S1, case).await;
    let (ok, msg) = r.reload(
        &(set2.to_string()
            + &slow_dsa("S1", p1)
                .set("dsa-router-concurrency-limit", "3")
                .to_string()),
    );
    assert!(ok, "reload: {msg}");
    expect_burst(&r, 16, 3, CONCURRENCY_S1, "DSA attribute 3 over the flag").await;
    let (ok, msg) = r.reload(&slow_dsa("S1", p1).to_string());
    assert!(ok, "reload: {msg}");
    expect_burst(&r, 16, 5, CONCURRENCY_S1, "--dsa-concurrency-limit 5").await;
    let (ok, msg) = r.reload(
        &slow_dsa("S1", p1)
            .set("dsa-router-concurrency-limit", "0")
            .to_string(),
    );
    assert!(ok, "reload: {msg}");
    expect_burst(&r, 16, 16, CONCURRENCY_S1, "limit 0 = none").await;
    println!(
        "refusals_total{{concurrency}} {} (12+11+13+11 expected = 47); test took {:?}",
        r.refusals("concurrency"),
        started.elapsed()
    );
    assert_eq!(r.refusals("concurrency"), 47.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn saturated_load_share_group_is_busy_and_never_spills_to_the_next_group() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let (_a, pa) = start_dsa(dir.path(), "A", 500);
    let (_b, pb) = start_dsa(dir.path(), "B", 500);
    let (_c, pc) = start_dsa(dir.path(), "C", 500);
    let root = dir.path().join("router.dxg");
    let limit2 = |d: Dsa| {
        d.load_share_group("G1")
            .set("dsa-router-concurrency-limit", "2")
    };
    Knowledge::new()
        .dsa(limit2(slow_dsa("A", pa)))
        .dsa(limit2(slow_dsa("B", pb)))
        .dsa(slow_dsa("C", pc).load_share_group("G2"))
        .write_to(&root);
    // Who answers is what this test counts, so nothing but selection under
    // the limit may move a read between A and B. Outlier ejection would:
    // on a busy machine A answers its two a tick before B, B (two reads
    // waiting 500 ms, none answered, its mate answering) counts as
    // stalled and is ejected, and its reads are re-sent to A, now free
    // ("A takes its 2: {"A": 4}"). Hedging could too (its floor is 10 ms).
    // Both have tests of their own. And C must serve nothing: the reads of
    // replication positions (`--csn-interval`) would be served by C too
    // ("C must not have served anything: 1" on a loaded machine).
    let r = start_router(
        dir.path(),
        &root,
        &[
            "--probe-timeout",
            "5",
            "--max-ejection",
            "0",
            "--hedge-budget",
            "0",
            "--csn-interval",
            "0",
        ],
    );
    r.all_up().await;

    let mut conns = connections(&r.url(), 8).await;
    let out = burst(&mut conns).await;
    let t = tally(&out);
    println!("group G1 = A, B (limit 2 each), G2 = C: 8 concurrent -> {t:?}");
    assert!(t.other.is_empty(), "unexpected results {:?}", t.other);
    assert_eq!(t.ok, 4, "{t:?}");
    assert_eq!(t.busy, 4, "{t:?}");
    assert_eq!(
        t.busy_texts.keys().collect::<Vec<_>>(),
        vec![CONCURRENCY_AB],
        "busy message names both DSAs"
    );
    assert_eq!(t.by.get("A"), Some(&2), "A takes its 2: {:?}", t.by);
    assert_eq!(t.by.get("B"), Some(&2), "B takes its 2: {:?}", t.by);
    assert_eq!(t.by.get("C"), None, "nothing spills into G2: {:?}", t.by);
    r.wait_for("nothing in flight", Duration::from_secs(5), |r| {
        r.in_flight("A") + r.in_flight("B") + r.in_flight("C") == 0
    })
    .await;
    let served_c = r.dsa("C")["served"].as_u64().unwrap();
    println!(
        "served: A {}, B {}, C {served_c}; refusals_total{{concurrency}} {}; test took {:?}",
        r.dsa("A")["served"],
        r.dsa("B")["served"],
        r.refusals("concurrency"),
        started.elapsed()
    );
    assert_eq!(served_c, 0, "C must not have served anything");
    assert_eq!(r.refusals("concurrency"), 4.0);
}

/// Named binds are routed like reads and hold a slot on the DSA while the
/// DSA verifies them: the limit applies to them too, exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_binds_respect_the_concurrency_limit() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let (_s1, _, root) = limited_s1(dir.path(), 500, "router.dxg");
    let r = start_router(dir.path(), &root, &["--probe-timeout", "5"]);
    r.all_up().await;
    for round in 1..=3 {
        let mut conns = connections(&r.url(), 16).await;
        let t0 = Instant::now();
        let out = futures::future::join_all(conns.iter_mut().map(|l| async move {
            let res = tokio::time::timeout(OP_TIMEOUT, l.simple_bind(ALICE, "alicepw"))
                .await
                .expect("bind timed out")
                .expect("bind failed at the protocol level");
            (res.rc, res.text)
        }))
        .await;
        let ok = out.iter().filter(|(rc, _)| *rc == 0).count();
        let busy = out
            .iter()
            .filter(|(rc, t)| *rc == BUSY && t == CONCURRENCY_S1)
            .count();
        println!(
            "bind round {round}: 16 concurrent binds -> {ok} ok, {busy} busy, in {:?}",
            t0.elapsed()
        );
        assert_eq!((ok, busy), (4, 12), "{out:?}");
        r.wait_for("S1 in flight back to 0", Duration::from_secs(5), |r| {
            r.in_flight("S1") == 0
        })
        .await;
    }
    println!(
        "refusals_total{{concurrency}} {}; test took {:?}",
        r.refusals("concurrency"),
        started.elapsed()
    );
    assert_eq!(r.refusals("concurrency"), 36.0);
}

// ============================================================ 2. messages

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refusal_messages_verbatim_in_ldapsearch() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();

    // Concurrency: 16 ldapsearch processes against limit 4, DSA delay 2 s.
    {
        let (_s1, _, root) = limited_s1(dir.path(), 2000, "conc.dxg");
        let r = start_router(dir.path(), &root, &["--probe-timeout", "5"]);
        r.all_up().await;
        let t0 = Instant::now();
        let results: Vec<(i32, String)> = blocking(|| {
            let kids: Vec<LdapSearch> = (0..16)
                .map(|i| ldapsearch_spawn(&r, dir.path(), &format!("conc-{i}")))
                .collect();
            println!("16 ldapsearch processes spawned in {:?}", t0.elapsed());
            kids.into_iter().map(LdapSearch::wait).collect()
        });
        let busy_line = format!("text: {CONCURRENCY_S1}");
        let busy: Vec<&(i32, String)> = results
            .iter()
            .filter(|(_, o)| o.contains("result: 51 Server is busy"))
            .collect();
        let ok = results
            .iter()
            .filter(|(c, o)| *c == 0 && o.contains("description: S1"))
            .count();
        println!(
            "ldapsearch x16 against limit 4: {ok} ok, {} busy, in {:?}; exit codes {:?}",
            busy.len(),
            t0.elapsed(),
            results.iter().map(|(c, _)| *c).collect::<Vec<_>>()
        );
        if let Some((_, o)) = busy.first() {
            println!("a refused ldapsearch printed:\n{}", o.trim_end());
        }
        assert_eq!(ok, 4, "{results:#?}");
        assert_eq!(busy.len(), 12, "{results:#?}");
        for (code, o) in &busy {
            assert_eq!(*code, 51, "{o}");
            assert!(
                o.lines().any(|l| l == busy_line),
                "expected `{busy_line}` in:\n{o}"
            );
        }
        assert_eq!(r.refusals("concurrency"), 12.0);
    }

    // Memory: always above 1%.
    {
        let (_s1, p1) = start_dsa(dir.path(), "S1", 0);
        let root = dir.path().join("mem.dxg");
        std::fs::write(&root, slow_dsa("S1", p1).to_string()).unwrap();
        let r = start_router(
            dir.path(),
            &root,
            &["--memory-threshold", "1", "--utilization-window", "1s"],
        );
        r.all_up().await;
        r.wait_for("memory average above 1%", Duration::from_secs(10), |r| {
            r.utilization("memory_avg_percent") > 1.0
        })
        .await;
        println!(
            "memory: average {:.2}% over {}s, threshold {}%",
            r.utilization("memory_avg_percent"),
            r.utilization("window_seconds"),
            r.status()["utilization"]["memory_threshold_percent"]
        );
        let (code, out) = ldapsearch(&r, dir.path(), "mem");
        assert_bind_refused(code, &out, MEMORY_MSG, "memory threshold 1%");
        let n = r.refusals("memory");
        println!("refusals_total{{memory}} {n}");
        assert!(n >= 1.0);
    }

    // CPU: burn every core until the windowed average is above 30%.
    {
        let (_s1, p1) = start_dsa(dir.path(), "S1", 0);
        let root = dir.path().join("cpu.dxg");
        std::fs::write(&root, slow_dsa("S1", p1).to_string()).unwrap();
        let r = start_router(
            dir.path(),
            &root,
            &["--cpu-threshold", "30", "--utilization-window", "2s"],
        );
        r.all_up().await;
        let cores = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .max(2);
        let before = r.utilization("cpu_avg_percent");
        let burner = CpuBurner::start(cores);
        let t0 = Instant::now();
        r.wait_for("CPU average above 30%", Duration::from_secs(30), |r| {
            r.utilization("cpu_avg_percent") > 30.0
        })
        .await;
        println!(
            "cpu: average {before:.1}% before burning {cores} threads, {:.1}% after {:?}",
            r.utilization("cpu_avg_percent"),
            t0.elapsed()
        );
        let (code, out) = ldapsearch(&r, dir.path(), "cpu");
        assert_bind_refused(code, &out, CPU_MSG, "CPU threshold 30%");
        drop(burner);
        let n = r.refusals("cpu");
        println!("refusals_total{{cpu}} {n}");
        assert!(n >= 1.0);
        // Recovery once the burn stops, when the machine is otherwise idle
        // enough (other work on the host may keep it above 30%).
        let deadline = Instant::now() + Duration::from_secs(10);
        while r.utilization("cpu_avg_percent") > 25.0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let avg = r.utilization("cpu_avg_percent");
        if avg < 25.0 {
            let (code, out) = ldapsearch(&r, dir.path(), "cpu-after");
            println!("cpu: average {avg:.1}% after the burn: ldapsearch exit {code}");
            assert_eq!(code, 0, "admitted again under the threshold:\n{out}");
            assert!(out.contains("description: S1"), "{out}");
        } else {
            println!("cpu: average still {avg:.1}% 10 s after the burn (host busy); recovery not checked");
        }
    }
    println!("test took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thresholds_over_100_are_startup_errors() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("router.dxg");
    std::fs::write(&root, slow_dsa("S1", 1).to_string()).unwrap();
    let run = |extra: &[&str], root: &Path| {
        blocking(|| {
            let mut c = Command::new(BIN);
            c.arg("serve")
                .arg("--knowledge")
                .arg(root)
                .args([
                    "--listen",
                    &format!("127.0.0.1:{}", free_port()),
                    "--admin",
                    "none",
                    "--no-access-log",
                ])
                .args(extra)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = c.spawn().unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if let Some(st) = child.try_wait().unwrap() {
                    let mut err = String::new();
                    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
                    return Some((st.code(), err));
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    return None;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    for (flag, what) in [("--cpu-threshold", "CPU"), ("--memory-threshold", "memory")] {
        let got = run(&[flag, "101"], &root);
        println!("{flag} 101: {got:?}");
        let (code, err) = got.unwrap_or_else(|| panic!("{flag} 101: router kept running"));
        assert!(code.is_some_and(|c| c != 0), "{flag} 101 exit {code:?}");
        assert!(
            err.contains(&format!("{what} threshold 101")),
            "{flag} 101 stderr: {err}"
        );
    }
    // 100 is the largest valid value: the router keeps running.
    let got = run(
        &["--cpu-threshold", "100", "--memory-threshold", "100"],
        &root,
    );
    println!("thresholds 100: {got:?} (None = kept running)");
    assert!(got.is_none(), "thresholds of 100 must be accepted: {got:?}");
    // The same range in knowledge.
    std::fs::write(
        &root,
        "set dsa-router-cpu-threshold = 101;\n".to_string() + &slow_dsa("S1", 1).to_string(),
    )
    .unwrap();
    let got = run(&[], &root);
    println!("knowledge cpu threshold 101: {got:?}");
    let (code, err) = got.expect("knowledge threshold 101: router kept running");
    assert!(code.is_some_and(|c| c != 0), "exit {code:?}: {err}");
}

// ============================================================ 3. storm

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refusal_storm_drops_nothing_accepted_and_abandon_unbind_still_work() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    const DELAY: u64 = 3000;
    let (_s1, p1) = start_dsa(dir.path(), "S1", DELAY);
    let root = dir.path().join("router.dxg");
    let plain = slow_dsa("S1", p1).to_string();
    std::fs::write(&root, &plain).unwrap();
    let r = start_router(
        dir.path(),
        &root,
        &["--utilization-window", "1s", "--probe-interval", "0"],
    );
    r.all_up().await;
    let url = r.url();
    // Averages are zero until the sampler's first readings (~100 ms here).
    r.wait_for("memory average above 1%", Duration::from_secs(10), |r| {
        r.utilization("memory_avg_percent") > 1.0
    })
    .await;

    // Accepted before the storm: 6 ldap3 searches, and one on each of two
    // raw connections (one to be abandoned during the storm).
    let mut early = Vec::new();
    for _ in 0..6 {
        let mut l = ldap(&url).await;
        early.push(tokio::spawn(async move { search(&mut l).await }));
    }
    let mut keep = Raw::connect(r.port).await;
    keep.send(vec![search_req(1, SERVED_BY)]).await;
    let mut aband = Raw::connect(r.port).await;
    aband.send(vec![search_req(1, SERVED_BY)]).await;
    r.wait_for("8 searches in flight", Duration::from_secs(5), |r| {
        r.in_flight("S1") == 8
    })
    .await;
    let accepted_at = Instant::now();

    // The storm: the memory threshold (1%) from the knowledge, by reload.
    let (ok, msg) = r.reload(&("set dsa-router-memory-threshold = 1;\n".to_string() + &plain));
    assert!(ok, "reload: {msg}");
    let st = r.status();
    println!(
        "storm on {:?} after acceptance: threshold {}%, memory average {:.2}%",
        accepted_at.elapsed(),
        st["utilization"]["memory_threshold_percent"],
        st["utilization"]["memory_avg_percent"]
    );
    assert_eq!(st["utilization"]["memory_threshold_percent"], 1);
    let mut fresh = ldap(&url).await;
    let o = search(&mut fresh).await;
    println!("new search during the storm: {o:?}");
    assert_eq!((o.rc, o.text.as_str()), (BUSY, MEMORY_MSG));

    // The connection with an accepted search is refused new work...
    keep.send(vec![search_req(2, SERVED_BY)]).await;
    let d = keep.dones(&[2], Duration::from_secs(2)).await;
    assert_eq!(d[&2].code, LdapResultCode::Busy, "{d:?}");
    assert_eq!(d[&2].message, MEMORY_MSG);

    // Abandon is accepted: no answer, the DSA slot is freed, and the
    // connection stays usable (its next request is answered).
    aband.send(vec![abandon_req(2, 1)]).await;
    let got = aband.next(Duration::from_millis(300)).await;
    assert!(
        matches!(got, Got::Timeout),
        "abandon must get no response: {got:?}"
    );
    r.wait_for(
        "abandon frees its slot (7 in flight)",
        Duration::from_secs(2),
        |r| r.in_flight("S1") == 7,
    )
    .await;
    aband.send(vec![search_req(3, SERVED_BY)]).await;
    let d = aband.dones(&[3], Duration::from_secs(2)).await;
    println!(
        "after abandon, search 3 on the same connection: {:?}",
        d[&3]
    );
    assert_eq!(d[&3].code, LdapResultCode::Busy);
    assert_eq!(d[&3].message, MEMORY_MSG);

    // Unbind is accepted: the connection closes cleanly, nothing sent.
    let mut u = Raw::connect(r.port).await;
    u.send(vec![unbind_req(1)]).await;
    let got = u.next(Duration::from_secs(3)).await;
    println!("raw unbind during the storm: {got:?}");
    assert!(matches!(got, Got::Eof), "unbind must just close: {got:?}");
    let mut l = ldap(&url).await;
    let t = Instant::now();
    let res = tokio::time::timeout(Duration::from_secs(5), l.unbind()).await;
    println!(
        "ldap3 unbind during the storm: {res:?} in {:?}",
        t.elapsed()
    );
    assert!(matches!(res, Ok(Ok(()))), "{res:?}");

    // Nothing accepted is dropped.
    let mut ok_early = 0;
    for h in early {
        let o = h.await.unwrap();
        assert_eq!(
            (o.rc, o.served_by.as_deref()),
            (0, Some("S1")),
            "accepted before the storm must complete: {o:?}"
        );
        assert!(o.took >= Duration::from_millis(DELAY), "{o:?}");
        ok_early += 1;
    }
    let d = keep.dones(&[1], Duration::from_secs(10)).await;
    println!("accepted raw search 1: {:?}", d[&1]);
    assert_eq!(d[&1].code, LdapResultCode::Success);
    assert_eq!(d[&1].entries, 1);
    println!(
        "{ok_early} ldap3 + 1 raw searches accepted before the storm completed ({:?} after acceptance)",
        d[&1].at.duration_since(accepted_at)
    );
    // The abandoned search never answers, even after the DSA would have.
    let got = aband.next(Duration::from_millis(500)).await;
    assert!(
        matches!(got, Got::Timeout),
        "abandoned search answered: {got:?}"
    );
    r.wait_for("nothing in flight", Duration::from_secs(5), |r| {
        r.in_flight("S1") == 0
    })
    .await;
    let memory_refusals = r.refusals("memory");
    println!("refusals_total{{memory}} {memory_refusals}");
    assert!(memory_refusals >= 3.0);

    // A threshold out of range is rejected whole: the storm goes on.
    let (ok, msg) = r.reload(&("set dsa-router-memory-threshold = 101;\n".to_string() + &plain));
    println!("reload with threshold 101: ok={ok}: {}", msg.trim_end());
    assert!(!ok, "reload with memory threshold 101 must fail");
    assert_eq!(r.status()["utilization"]["memory_threshold_percent"], 1);

    // The storm ends when the reload removes the threshold.
    let (ok, msg) = r.reload(&plain);
    assert!(ok, "reload: {msg}");
    assert_eq!(r.status()["utilization"]["memory_threshold_percent"], 0);
    let o = search(&mut fresh).await;
    println!("after the reload: {o:?}");
    assert_eq!((o.rc, o.served_by.as_deref()), (0, Some("S1")), "{o:?}");
    keep.send(vec![search_req(4, SERVED_BY)]).await;
    aband.send(vec![search_req(4, SERVED_BY)]).await;
    let a = keep.dones(&[4], Duration::from_secs(10)).await;
    let b = aband.dones(&[4], Duration::from_secs(10)).await;
    assert_eq!(a[&4].code, LdapResultCode::Success, "{a:?}");
    assert_eq!(b[&4].code, LdapResultCode::Success, "{b:?}");
    println!("test took {:?}", started.elapsed());
}

/// RFC 4511 4.2.1: "Authentication from earlier binds is subsequently
/// ignored" once a client sends a new Bind; the router's own bind code says
/// "whatever happens next, the old identity ends here". A Bind refused by
/// the CPU/memory admission check must not leave the previous identity in
/// force.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bind_refused_by_the_storm_ends_the_previous_identity() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let (_s1, p1) = start_dsa(dir.path(), "S1", 0);
    let root = dir.path().join("router.dxg");
    let plain = slow_dsa("S1", p1).to_string();
    std::fs::write(&root, &plain).unwrap();
    let r = start_router(dir.path(), &root, &["--utilization-window", "1s"]);
    r.all_up().await;
    r.wait_for("memory average above 1%", Duration::from_secs(10), |r| {
        r.utilization("memory_avg_percent") > 1.0
    })
    .await;
    let mut l = ldap(&r.url()).await;
    let whoami = |l: &mut Ldap| {
        let mut l = l.clone();
        async move {
            let (exop, _) = tokio::time::timeout(OP_TIMEOUT, l.extended(WhoAmI))
                .await
                .expect("whoami timed out")
                .unwrap()
                .success()
                .unwrap();
            exop.parse::<WhoAmIResp>().authzid
        }
    };
    let res = l.simple_bind(ALICE, "alicepw").await.unwrap();
    assert_eq!(res.rc, 0, "{res:?}");
    let before = whoami(&mut l).await;
    assert_eq!(before, format!("dn:{ALICE}"));

    let (ok, msg) = r.reload(&("set dsa-router-memory-threshold = 1;\n".to_string() + &plain));
    assert!(ok, "reload: {msg}");
    let res = l.simple_bind(BOB, "bobpw").await.unwrap();
    println!("bind as bob during the storm: rc {} {:?}", res.rc, res.text);
    assert_eq!((res.rc, res.text.as_str()), (BUSY, MEMORY_MSG));
    let (ok, msg) = r.reload(&plain);
    assert!(ok, "reload: {msg}");

    let after = whoami(&mut l).await;
    println!("WhoAmI: {before:?} before, {after:?} after the refused bind");
    assert_eq!(
        after, "",
        "a refused Bind must leave the connection anonymous, not as alice"
    );
}

// ============================================================ 4. client limits

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn client_limits_outstanding_and_per_address() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let (_s1, p1) = start_dsa(dir.path(), "S1", 1000);
    let root = dir.path().join("router.dxg");
    std::fs::write(&root, slow_dsa("S1", p1).to_string()).unwrap();
    let r = start_router(
        dir.path(),
        &root,
        &[
            "--max-outstanding",
            "4",
            "--max-clients-per-ip",
            "2",
            "--probe-timeout",
            "5",
        ],
    );
    r.all_up().await;

    // --max-outstanding 4: 8 pipelined searches in one write.
    {
        let mut c = Raw::connect(r.port).await;
        let t0 = Instant::now();
        c.send((1..=8).map(|i| search_req(i, SERVED_BY)).collect())
            .await;
        let d = c
            .dones(&(1..=8).collect::<Vec<_>>(), Duration::from_secs(10))
            .await;
        for (id, x) in &d {
            println!(
                "pipelined msgid {id}: {:?} after {:?}, {} entr(ies), {:?}",
                x.code,
                x.at.duration_since(t0),
                x.entries,
                x.message
            );
        }
        let busy: Vec<i32> = d
            .iter()
            .filter(|(_, x)| x.code == LdapResultCode::Busy)
            .map(|(i, _)| *i)
            .collect();
        let ok: Vec<i32> = d
            .iter()
            .filter(|(_, x)| x.code == LdapResultCode::Success && x.entries == 1)
            .map(|(i, _)| *i)
            .collect();
        assert_eq!(ok, vec![1, 2, 3, 4], "{d:?}");
        assert_eq!(busy, vec![5, 6, 7, 8], "{d:?}");
        for i in 5..=8 {
            let m = &d[&i].message;
            assert!(
                m.contains("too many outstanding operations") && m.contains("limit 4"),
                "msgid {i}: {m}"
            );
            assert!(
                d[&i].at < d[&1].at,
                "refusals answer at once, before the DSA"
            );
        }
        // Completed operations free their places.
        c.send((9..=12).map(|i| search_req(i, SERVED_BY)).collect())
            .await;
        let d = c.dones(&[9, 10, 11, 12], Duration::from_secs(10)).await;
        assert!(
            d.values().all(|x| x.code == LdapResultCode::Success),
            "4 more after the first ones completed: {d:?}"
        );
        // An abandoned operation frees its place at once: 4 outstanding,
        // abandon one, and the next search is accepted (same write).
        c.send(
            (13..=16)
                .map(|i| search_req(i, SERVED_BY))
                .chain([abandon_req(17, 13), search_req(18, SERVED_BY)])
                .collect(),
        )
        .await;
        let d = c.dones(&[14, 15, 16, 18], Duration::from_secs(10)).await;
        println!(
            "4 outstanding, abandon 13, search 18: {:?}",
            d.iter()
                .map(|(i, x)| (*i, x.code.clone()))
                .collect::<Vec<_>>()
        );
        assert!(
            d.values().all(|x| x.code == LdapResultCode::Success),
            "abandon must free a place: {d:?}"
        );
        let got = c.next(Duration::from_millis(300)).await;
        assert!(
            matches!(got, Got::Timeout),
            "abandoned 13 answered: {got:?}"
        );
        let n = r.refusals("outstanding");
        println!("refusals_total{{outstanding}} {n}");
        assert_eq!(n, 4.0);
    }
    r.wait_for("no client connections", Duration::from_secs(5), |r| {
        r.status()["client_connections"] == 0
    })
    .await;

    // --max-clients-per-ip 2: the third connection gets a Notice of
    // Disconnection and is closed.
    {
        let mut c1 = Raw::connect(r.port).await;
        let d = root_dse(&mut c1).await;
        assert_eq!(d[&1].code, LdapResultCode::Success);
        let mut c2 = Raw::connect(r.port).await;
        let d = root_dse(&mut c2).await;
        assert_eq!(d[&1].code, LdapResultCode::Success);
        let mut c3 = Raw::connect(r.port).await;
        let got = c3.next(Duration::from_secs(5)).await;
        println!("third connection from 127.0.0.1: {got:?}");
        let Got::Msg(m) = got else {
            panic!("expected a Notice of Disconnection, got {got:?}")
        };
        assert_eq!(m.msgid, 0);
        let LdapOp::ExtendedResponse(x) = &m.op else {
            panic!("expected an ExtendedResponse: {m:?}")
        };
        assert_eq!(x.name.as_deref(), Some(NOTICE_OF_DISCONNECTION), "{x:?}");
        assert_eq!(x.res.code, LdapResultCode::Unavailable, "{x:?}");
        assert!(x.res.message.contains("too many connections"), "{x:?}");
        let got = c3.next(Duration::from_secs(5)).await;
        assert!(matches!(got, Got::Eof), "then closed: {got:?}");
        // The two admitted connections still work.
        let d = root_dse(&mut c2).await;
        assert_eq!(d[&1].code, LdapResultCode::Success);
        // Closing one frees a place for the address.
        drop(c1);
        let t0 = Instant::now();
        let mut tries = 0;
        loop {
            tries += 1;
            let mut c4 = Raw::connect(r.port).await;
            c4.send(vec![search_req(1, "")]).await;
            match c4.next(Duration::from_secs(5)).await {
                Got::Msg(m) if m.msgid == 1 => break,
                other => {
                    assert!(
                        t0.elapsed() < Duration::from_secs(5),
                        "no place freed after closing a connection: {other:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        let n = r.refusals("connections");
        println!(
            "a place was free again after {:?} ({tries} tries); refusals_total{{connections}} {n}",
            t0.elapsed()
        );
        assert!(n >= 1.0);
    }
    println!("test took {:?}", started.elapsed());
}
