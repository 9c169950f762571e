//! A router in process in front of test DSAs on loopback ports (knowledge
//! written to a scratch directory), an `ldap3` client, a raw-socket client
//! that speaks hand-built PDUs, and a few measurements; for the in-process
//! end-to-end tests (`tests/e2e`: routing, pipelining, backpressure, `malformed`, `tls` and
//! others).
#![allow(dead_code, clippy::unwrap_used, clippy::panic)]

use super::knowledge::{Dsa, Knowledge};
use bytes::BytesMut;
use dsa_router::service::context::{Config, Context};
use dsa_testdsa::seed_ldif;
use dsa_testdsa::{Directory, TestDsa};
use futures::StreamExt;
use ldap3_proto::proto::{
    LdapCompareRequest, LdapDerefAliases, LdapFilter, LdapMsg, LdapOp, LdapResultCode,
    LdapSearchRequest, LdapSearchScope,
};
use ldap3_proto::LdapCodec;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::codec::FramedRead;

pub const DEMOCORP: &str = "o=DEMOCORP,c=AU";
pub const CUSTOMER: &str = "o=CUSTOMER,c=AU";
pub const BIG: &str = "o=BIG,c=AU";
pub const ALICE: &str = "uid=alice,ou=People,o=DEMOCORP,c=AU";
pub const ROUTER_ID: &str = "cn=router,o=DEMOCORP,c=AU";
pub const SECRET: &str = "cn=secret,ou=Restricted,o=DEMOCORP,c=AU";
pub const NOTICE_OID: &str = "1.3.6.1.4.1.1466.20036";

/// The default bound on any single wait in these tests.
pub const WAIT: Duration = Duration::from_secs(10);

/// Tests that build a 100,000-entry directory or measure the process's RSS
/// hold this, so that they do not run at the same time (they share one
/// process, and one's allocations would show in the other's RSS). The whole
/// of `tests/e2e` is one process, `testdsa`'s large directory included.
pub static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `o=BIG,c=AU` -> `<c AU><o BIG>` (values without spaces only).
pub fn knowledge_prefix(suffix: &str) -> String {
    suffix
        .split(',')
        .rev()
        .map(|rdn| {
            let (a, v) = rdn.split_once('=').expect("attr=value");
            format!("<{} {}>", a.trim(), v.trim())
        })
        .collect()
}

/// One DSA of the harness.
fn harness_dsa(
    name: &str,
    suffix: &str,
    addr: SocketAddr,
    group: Option<&str>,
    target: bool,
) -> Dsa {
    let prefix = knowledge_prefix(suffix);
    let mut d = Dsa::at(name, addr)
        .prefix(&prefix)
        .dsa_name(&format!("{prefix}<cn {name}>"), "secret")
        .flags("load-share");
    if let Some(g) = group {
        d = d.load_share_group(g);
    }
    if target {
        d = d.router("routerpw").trust_conveyed();
    }
    d
}

/// An extra single-DSA partition.
pub struct Extra {
    pub name: String,
    pub suffix: String,
    pub dir: Directory,
}

/// What to start: which DEMOCORP DSAs in which knowledge order, the `set`
/// lines, extra partitions and the router's configuration.
pub struct Builder {
    pub democorp: Vec<&'static str>,
    pub customer: bool,
    pub precedence: Vec<&'static str>,
    pub write_precedence: Vec<&'static str>,
    pub extra: Vec<Extra>,
    pub cfg: Config,
    /// Worker threads (count, `--spread-above` as a share of a CPU); none:
    /// every session on the test's runtime.
    pub workers: Option<(usize, f64)>,
}

impl Default for Builder {
    fn default() -> Builder {
        Builder {
            democorp: vec!["D1", "H1", "H2", "D2"],
            customer: true,
            precedence: Vec::new(),
            write_precedence: Vec::new(),
            extra: Vec::new(),
            cfg: Config::default(),
            workers: None,
        }
    }
}

fn group_of(name: &str) -> Option<&'static str> {
    match name {
        "D1" | "H1" => Some("GROUP1"),
        "H2" | "D2" => Some("GROUP2"),
        _ => None,
    }
}

/// A running router with its test DSAs.
pub struct Harness {
    pub dsas: Vec<TestDsa>,
    pub addr: SocketAddr,
    pub router: Arc<Context>,
    pub knowledge: PathBuf,
    /// The worker threads, when the builder asked for them.
    pub workers: Option<Arc<dsa_router::base::workers::Shared>>,
    shutdown: watch::Sender<bool>,
    server: JoinHandle<()>,
    _tmp: tempfile::TempDir,
}

impl Builder {
    pub fn precedence(mut self, p: &[&'static str]) -> Builder {
        self.precedence = p.to_vec();
        self
    }

    pub fn write_precedence(mut self, p: &[&'static str]) -> Builder {
        self.write_precedence = p.to_vec();
        self
    }

    pub fn democorp(mut self, d: &[&'static str]) -> Builder {
        self.democorp = d.to_vec();
        self
    }

    /// Serve on `n` worker threads (as `serve --threads n --spread-above
    /// P`, `above` = P / 100).
    pub fn workers(mut self, n: usize, above: f64) -> Builder {
        self.workers = Some((n, above));
        self
    }

    pub fn cfg(mut self, f: impl FnOnce(&mut Config)) -> Builder {
        f(&mut self.cfg);
        self
    }

    pub fn extra(mut self, name: &str, suffix: &str, dir: Directory) -> Builder {
        self.extra.push(Extra {
            name: name.to_string(),
            suffix: suffix.to_string(),
            dir,
        });
        self
    }

    pub async fn start(self) -> Harness {
        let tmp = tempfile::tempdir().expect("tempdir");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("listen");
        let addr = listener.local_addr().expect("local addr");
        let mut dsas = Vec::new();
        let mut root = String::from("# generated by tests/support/inproc.rs\nsource \"R1.dxc\";\n");
        Knowledge::new()
            .dsa(harness_dsa("R1", DEMOCORP, addr, Some("GROUP1"), false))
            .write_to(&tmp.path().join("R1.dxc"));
        let mut plan: Vec<(String, String, Option<&str>, Directory)> = Vec::new();
        for &n in &self.democorp {
            let dir = Directory::from_ldif(&seed_ldif(DEMOCORP, n)).expect("seed LDIF");
            plan.push((n.to_string(), DEMOCORP.to_string(), group_of(n), dir));
        }
        if self.customer {
            for n in ["C1", "C2"] {
                let dir = Directory::from_ldif(&seed_ldif(CUSTOMER, n)).expect("seed LDIF");
                plan.push((n.to_string(), CUSTOMER.to_string(), None, dir));
            }
        }
        for e in self.extra {
            plan.push((e.name, e.suffix, None, e.dir));
        }
        for (name, suffix, group, dir) in plan {
            let dsa = TestDsa::start(dir, "127.0.0.1:0", &name)
                .await
                .expect("start test DSA");
            Knowledge::new()
                .dsa(harness_dsa(&name, &suffix, dsa.addr, group, true))
                .write_to(&tmp.path().join(format!("{name}.dxc")));
            root += &format!("source \"{name}.dxc\";\n");
            dsas.push(dsa);
        }
        if !self.precedence.is_empty() {
            root += &format!("set precedence = {};\n", self.precedence.join(", "));
        }
        if !self.write_precedence.is_empty() {
            root += &format!(
                "set write-precedence = {};\n",
                self.write_precedence.join(", ")
            );
        }
        let knowledge = tmp.path().join("router.dxg");
        std::fs::write(&knowledge, root).expect("write dxg");
        let snap = dsa_router::directory::knowledge::load(&knowledge)
            .unwrap_or_else(|e| panic!("knowledge does not load: {e}"));
        let router = Arc::new(Context::new(self.cfg, snap, Some("R1".into())).expect("router"));
        let (tx, rx) = watch::channel(false);
        let (server, workers) = match self.workers {
            None => (
                tokio::spawn(dsa_router::frontend::server::run(
                    listener,
                    router.clone(),
                    rx,
                )),
                None,
            ),
            Some((n, above)) => {
                let (server, shared) =
                    serve_on_workers(listener, None, router.clone(), rx, n, above);
                (server, Some(shared))
            }
        };
        Harness {
            dsas,
            addr,
            router,
            knowledge,
            workers,
            shutdown: tx,
            server,
            _tmp: tmp,
        }
    }
}

/// Serve `listener` (and `ldaps`) on `n` worker threads, as `serve
/// --threads n --spread-above` (`above` a share of a CPU): the accept
/// loop's task and the workers' shared state.
pub fn serve_on_workers(
    listener: TcpListener,
    ldaps: Option<TcpListener>,
    router: Arc<Context>,
    shutdown: watch::Receiver<bool>,
    n: usize,
    above: f64,
) -> (JoinHandle<()>, Arc<dsa_router::base::workers::Shared>) {
    let w = dsa_router::base::workers::Workers::start(n, tokio::runtime::Handle::current(), above)
        .expect("worker threads");
    let shared = w.shared().clone();
    // The workers' threads end when the accept loop drops them.
    let server = tokio::spawn(async move {
        dsa_router::frontend::server::run_on(listener, ldaps, router, shutdown, Some(&w)).await;
    });
    (server, shared)
}

impl Harness {
    pub fn dsa(&self, name: &str) -> &TestDsa {
        self.dsas
            .iter()
            .find(|d| d.name == name)
            .unwrap_or_else(|| panic!("no test DSA {name}"))
    }

    pub fn take_dsa(&mut self, name: &str) -> TestDsa {
        let i = self
            .dsas
            .iter()
            .position(|d| d.name == name)
            .unwrap_or_else(|| panic!("no test DSA {name}"));
        self.dsas.remove(i)
    }

    pub fn url(&self) -> String {
        format!("ldap://{}", self.addr)
    }

    /// Start the router's drain, as SIGTERM does in `serve`.
    pub fn drain(&self) {
        let _ = self.shutdown.send(true);
    }

    /// Whether the accept loop is still running (it never ends by itself).
    pub fn serving(&self) -> bool {
        !self.server.is_finished()
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        self.server.abort();
    }
}

/// `dir` of the seed for `suffix` plus `n` entries under `ou=Bulk,<suffix>`.
pub fn big_directory(suffix: &str, name: &str, n: usize) -> Directory {
    let mut s = seed_ldif(suffix, name);
    s.reserve(n * 120);
    s += &format!(
        "dn: ou=Bulk,{suffix}\nobjectClass: top\nobjectClass: organizationalUnit\nou: Bulk\n\n"
    );
    for i in 0..n {
        s += &format!(
            "dn: uid=b{i:06},ou=Bulk,{suffix}\nobjectClass: top\nobjectClass: inetOrgPerson\nuid: b{i:06}\ncn: Bulk {i}\nsn: Bulk\n\n"
        );
    }
    Directory::from_ldif(&s).expect("bulk LDIF")
}

/// Await `f` for at most `WAIT`.
pub async fn within<F: std::future::Future>(what: &str, f: F) -> F::Output {
    match tokio::time::timeout(WAIT, f).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: no answer within {WAIT:?}"),
    }
}

/// The process's resident set size in KiB.
pub fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// The test DSA named in a result message (`testdsa D1` or `testdsa D1: ...`).
pub fn dsa_of(text: &str) -> Option<String> {
    let rest = text.strip_prefix("testdsa ")?;
    Some(rest.split(':').next().unwrap_or(rest).trim().to_string())
}

// ----------------------------------------------------------------------
// ldap3 clients

pub async fn ldap(url: &str) -> ldap3::Ldap {
    let settings = ldap3::LdapConnSettings::new().set_conn_timeout(Duration::from_secs(5));
    let (conn, ldap) = within(
        "connect",
        ldap3::LdapConnAsync::with_settings(settings, url),
    )
    .await
    .expect("connect to the router");
    ldap3::drive!(conn);
    ldap
}

pub async fn bound(url: &str, dn: &str, pw: &str) -> ldap3::Ldap {
    let mut l = ldap(url).await;
    let r = within("bind", l.simple_bind(dn, pw))
        .await
        .expect("bind I/O");
    assert_eq!(r.rc, 0, "bind as {dn}: {r:?}");
    l
}

/// `description` of `cn=served-by,<suffix>`: the DSA that answered.
pub async fn served_by(l: &mut ldap3::Ldap, suffix: &str) -> String {
    let dn = format!("cn=served-by,{suffix}");
    let r = within(
        "served-by search",
        l.search(
            &dn,
            ldap3::Scope::Base,
            "(objectClass=*)",
            vec!["description"],
        ),
    )
    .await
    .expect("search I/O");
    let (entries, res) = r.success().unwrap_or_else(|e| panic!("search {dn}: {e}"));
    assert_eq!(entries.len(), 1, "one entry for {dn}: {res:?}");
    let e = ldap3::SearchEntry::construct(entries.into_iter().next().expect("entry"));
    let d = e.attrs.get("description").expect("description");
    d[0].clone()
}

// ----------------------------------------------------------------------
// Raw PDUs

/// A BER length.
pub fn ber_len(len: usize) -> Vec<u8> {
    if len < 0x80 {
        vec![len as u8]
    } else {
        let be = (len as u64).to_be_bytes();
        let skip = be.iter().take_while(|&&b| b == 0).count();
        let mut v = vec![0x80 | (8 - skip) as u8];
        v.extend_from_slice(&be[skip..]);
        v
    }
}

/// One TLV with a single-octet tag.
pub fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut v = vec![tag];
    v.extend(ber_len(content.len()));
    v.extend_from_slice(content);
    v
}

/// `inner` wrapped in `depth` constructed elements with tag `tag`.
pub fn nest(tag: u8, depth: usize, inner: &[u8]) -> Vec<u8> {
    let mut headers = Vec::with_capacity(depth);
    let mut len = inner.len();
    for _ in 0..depth {
        let mut h = vec![tag];
        h.extend(ber_len(len));
        len += h.len();
        headers.push(h);
    }
    let mut out = Vec::with_capacity(len);
    for h in headers.iter().rev() {
        out.extend_from_slice(h);
    }
    out.extend_from_slice(inner);
    out
}

pub fn encode(msg: LdapMsg) -> Vec<u8> {
    let mut b = BytesMut::new();
    let tag: lber::structure::StructureTag = msg.into();
    lber::write::encode_into(&mut b, tag).expect("encode");
    b.to_vec()
}

pub fn search_msg(
    msgid: i32,
    base: &str,
    scope: LdapSearchScope,
    filter: LdapFilter,
    attrs: &[&str],
) -> LdapMsg {
    LdapMsg {
        msgid,
        op: LdapOp::SearchRequest(LdapSearchRequest {
            base: base.to_string(),
            scope,
            aliases: LdapDerefAliases::Never,
            sizelimit: 0,
            timelimit: 0,
            typesonly: false,
            filter,
            attrs: attrs.iter().map(|a| a.to_string()).collect(),
        }),
        ctrl: Vec::new(),
    }
}

/// A base search of `dn` for `description`.
pub fn base_search(msgid: i32, dn: &str) -> Vec<u8> {
    encode(search_msg(
        msgid,
        dn,
        LdapSearchScope::Base,
        LdapFilter::Present("objectClass".into()),
        &["description"],
    ))
}

pub fn compare_msg(msgid: i32, dn: &str, attr: &str, val: &str) -> Vec<u8> {
    encode(LdapMsg {
        msgid,
        op: LdapOp::CompareRequest(LdapCompareRequest {
            dn: dn.to_string(),
            atype: attr.to_string(),
            val: val.as_bytes().to_vec(),
        }),
        ctrl: Vec::new(),
    })
}

pub fn abandon_msg(msgid: i32, target: i32) -> Vec<u8> {
    encode(LdapMsg {
        msgid,
        op: LdapOp::AbandonRequest(target),
        ctrl: Vec::new(),
    })
}

/// What a raw client read.
#[derive(Debug)]
pub enum Recv {
    Msg(LdapMsg),
    /// End of stream.
    Closed,
    /// A read error (e.g. connection reset) or an undecodable PDU.
    Error(String),
    Timeout,
}

/// A client that writes bytes and reads decoded responses.
pub struct Raw {
    pub rd: FramedRead<OwnedReadHalf, LdapCodec>,
    pub wr: OwnedWriteHalf,
}

impl Raw {
    pub async fn connect(addr: SocketAddr) -> Raw {
        let s = within("connect", TcpStream::connect(addr))
            .await
            .expect("connect");
        Raw::from_stream(s)
    }

    pub fn from_stream(s: TcpStream) -> Raw {
        let _ = s.set_nodelay(true);
        let (rd, wr) = s.into_split();
        Raw {
            rd: FramedRead::new(rd, LdapCodec::new(Some(64 << 20), None)),
            wr,
        }
    }

    /// Write bytes; a write error (the router already closed) is returned.
    pub async fn send(&mut self, b: &[u8]) -> std::io::Result<()> {
        match tokio::time::timeout(WAIT, self.wr.write_all(b)).await {
            Ok(r) => r,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "write timed out",
            )),
        }
    }

    pub async fn recv(&mut self, wait: Duration) -> Recv {
        match tokio::time::timeout(wait, self.rd.next()).await {
            Err(_) => Recv::Timeout,
            Ok(None) => Recv::Closed,
            Ok(Some(Ok(m))) => Recv::Msg(m),
            Ok(Some(Err(e))) => Recv::Error(e.to_string()),
        }
    }

    /// The next message; panics on close, error or timeout.
    pub async fn msg(&mut self, what: &str) -> LdapMsg {
        match self.recv(WAIT).await {
            Recv::Msg(m) => m,
            other => panic!("{what}: expected a message, got {other:?}"),
        }
    }
}

/// A Notice of Disconnection's result code and message, if `m` is one.
pub fn notice(m: &LdapMsg) -> Option<(LdapResultCode, String)> {
    match &m.op {
        LdapOp::ExtendedResponse(r) if m.msgid == 0 && r.name.as_deref() == Some(NOTICE_OID) => {
            Some((r.res.code.clone(), r.res.message.clone()))
        }
        _ => None,
    }
}

/// The final result of a response, if it is one: `(code, message)`.
pub fn final_result(m: &LdapMsg) -> Option<(LdapResultCode, String)> {
    let r = match &m.op {
        LdapOp::SearchResultDone(r)
        | LdapOp::CompareResult(r)
        | LdapOp::ModifyResponse(r)
        | LdapOp::AddResponse(r)
        | LdapOp::DelResponse(r)
        | LdapOp::ModifyDNResponse(r) => r,
        LdapOp::BindResponse(b) => &b.res,
        LdapOp::ExtendedResponse(e) => &e.res,
        _ => return None,
    };
    Some((r.code.clone(), r.message.clone()))
}

/// How a connection ended.
#[derive(Debug)]
pub enum End {
    /// A Notice of Disconnection, then (`closed`) end of stream.
    Notice {
        code: LdapResultCode,
        message: String,
        closed: bool,
    },
    /// Closed without a notice.
    Closed,
    /// Reset or undecodable.
    Error(String),
}

/// Read until the router disconnects; panics on a timeout or on any
/// message other than a Notice of Disconnection.
pub async fn expect_disconnect(raw: &mut Raw, wait: Duration, what: &str) -> (End, Duration) {
    let t0 = Instant::now();
    match raw.recv(wait).await {
        Recv::Msg(m) => {
            let Some((code, message)) = notice(&m) else {
                panic!("{what}: expected a Notice of Disconnection or a close, got {m:?}");
            };
            let at = t0.elapsed();
            let closed = matches!(
                raw.recv(Duration::from_secs(3)).await,
                Recv::Closed | Recv::Error(_)
            );
            (
                End::Notice {
                    code,
                    message,
                    closed,
                },
                at,
            )
        }
        Recv::Closed => (End::Closed, t0.elapsed()),
        Recv::Error(e) => (End::Error(e), t0.elapsed()),
        Recv::Timeout => {
            panic!("{what}: still connected after {wait:?} (no Notice of Disconnection, no close)")
        }
    }
}

/// A fresh client's base search through the router succeeds.
pub async fn assert_serves(addr: SocketAddr, what: &str) {
    let mut c = Raw::connect(addr).await;
    c.send(&base_search(1, &format!("cn=served-by,{DEMOCORP}")))
        .await
        .expect("write search");
    let mut entries = 0;
    loop {
        let m = c.msg(what).await;
        assert_eq!(m.msgid, 1, "{what}: fresh client got {m:?}");
        match m.op {
            LdapOp::SearchResultEntry(_) => entries += 1,
            LdapOp::SearchResultDone(r) => {
                assert_eq!(
                    r.code,
                    LdapResultCode::Success,
                    "{what}: fresh client: {r:?}"
                );
                assert_eq!(entries, 1, "{what}: fresh client entries");
                return;
            }
            other => panic!("{what}: fresh client got {other:?}"),
        }
    }
}
