//! TLS: LDAPS and StartTLS towards clients, TLS towards DSAs, certificate
//! reload, and the error paths (bad certificates, failed handshakes,
//! StartTLS with operations outstanding or twice, confidentialityRequired).
//!
//! Certificates are generated here with `rcgen` (a CA and server
//! certificates for IP 127.0.0.1 and DNS localhost). The in-process tests
//! use the test DSA and a rustls client; `tls_both_sides.rs` runs the router as
//! a process in front of TLS-only slapds.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::dsas::inproc_checks::until;
use crate::support::certs::Ca;
use crate::support::inproc::{self, within, ALICE};
use bytes::BytesMut;
use dsa_router::service::context::{Config, Context};
use ldap3_proto::proto::{
    LdapBindCred, LdapBindRequest, LdapExtendedRequest, LdapFilter, LdapMsg, LdapOp,
    LdapResultCode, LdapSearchScope,
};
use ldap3_proto::LdapCodec;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::codec::Decoder;

const START_TLS: &str = "1.3.6.1.4.1.1466.20037";

// ---------------------------------------------------------------- certificates

// ---------------------------------------------------------------- raw LDAP over any stream

fn bind_msg(msgid: i32, dn: &str, pw: &str) -> LdapMsg {
    LdapMsg {
        msgid,
        op: LdapOp::BindRequest(LdapBindRequest {
            version: 3,
            dn: dn.to_string(),
            cred: LdapBindCred::Simple(pw.to_string()),
        }),
        ctrl: Vec::new(),
    }
}

fn start_tls_msg(msgid: i32) -> LdapMsg {
    LdapMsg {
        msgid,
        op: LdapOp::ExtendedRequest(LdapExtendedRequest {
            name: START_TLS.to_string(),
            value: None,
        }),
        ctrl: Vec::new(),
    }
}

fn search_msg(msgid: i32, dn: &str) -> LdapMsg {
    inproc::search_msg(
        msgid,
        dn,
        LdapSearchScope::Base,
        LdapFilter::Present("objectClass".into()),
        &["cn"],
    )
}

/// An LDAP client over any byte stream.
struct Client<S> {
    s: S,
    buf: BytesMut,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    fn new(s: S) -> Client<S> {
        Client {
            s,
            buf: BytesMut::new(),
        }
    }

    async fn send(&mut self, msgs: &[LdapMsg]) {
        let mut b = Vec::new();
        for m in msgs {
            b.extend(inproc::encode(m.clone()));
        }
        self.s.write_all(&b).await.unwrap();
        self.s.flush().await.unwrap();
    }

    /// The next message, or `None` when the connection ends.
    async fn recv(&mut self) -> Option<LdapMsg> {
        within("LDAP response", async {
            loop {
                if let Some(m) = LdapCodec::default().decode(&mut self.buf).ok()? {
                    return Some(m);
                }
                match self.s.read_buf(&mut self.buf).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            }
        })
        .await
    }

    /// The result code of the final response to `msgid` (entries skipped).
    async fn result(&mut self, msgid: i32) -> (LdapResultCode, String) {
        loop {
            let m = self.recv().await.expect("connection open");
            if m.msgid != msgid {
                continue;
            }
            let res = match m.op {
                LdapOp::BindResponse(r) => r.res,
                LdapOp::SearchResultDone(r) => r,
                LdapOp::ExtendedResponse(r) => {
                    if r.res.code == LdapResultCode::Success {
                        assert_eq!(r.name.as_deref(), Some(START_TLS), "StartTLS responseName");
                    }
                    r.res
                }
                LdapOp::SearchResultEntry(_) => continue,
                other => panic!("unexpected response {other:?}"),
            };
            return (res.code, res.message);
        }
    }

    /// Entries and result of a base search.
    async fn search(&mut self, msgid: i32, dn: &str) -> (usize, LdapResultCode) {
        self.send(&[search_msg(msgid, dn)]).await;
        let mut entries = 0;
        loop {
            let m = self.recv().await.expect("connection open");
            match m.op {
                LdapOp::SearchResultEntry(_) => entries += 1,
                LdapOp::SearchResultDone(r) => return (entries, r.code),
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    /// Whether the peer closes the connection within `within`.
    async fn closed_within(&mut self, within: Duration) -> bool {
        let mut b = [0u8; 512];
        let end = Instant::now() + within;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.s.read(&mut b)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(_)) => continue, // a Notice of Disconnection, or TLS alert
                Err(_) => return false,
            }
        }
    }
}

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

async fn tls_handshake(tcp: TcpStream, cfg: Arc<rustls::ClientConfig>) -> std::io::Result<Tls> {
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    within(
        "TLS handshake",
        tokio_rustls::TlsConnector::from(cfg).connect(name, tcp),
    )
    .await
}

async fn ldaps(addr: SocketAddr, cfg: Arc<rustls::ClientConfig>) -> std::io::Result<Client<Tls>> {
    let tcp = TcpStream::connect(addr).await?;
    Ok(Client::new(tls_handshake(tcp, cfg).await?))
}

/// StartTLS on a fresh plain connection.
async fn start_tls(addr: SocketAddr, cfg: Arc<rustls::ClientConfig>) -> Client<Tls> {
    let mut c = Client::new(TcpStream::connect(addr).await.unwrap());
    c.send(&[start_tls_msg(1)]).await;
    let (code, msg) = c.result(1).await;
    assert_eq!(code, LdapResultCode::Success, "StartTLS: {msg}");
    assert!(c.buf.is_empty());
    Client::new(
        tls_handshake(c.s, cfg)
            .await
            .expect("handshake after StartTLS"),
    )
}

// ---------------------------------------------------------------- in-process router

/// A router in process with a plain and an LDAPS listener, in front of
/// the test DSA D1 (DEMOCORP); TLS files in `dir`.
struct Tlsr {
    _h: inproc::Harness,
    router: Arc<Context>,
    /// The worker threads, when asked for ([`tls_router_on`]).
    workers: Option<Arc<dsa_router::base::workers::Shared>>,
    plain: SocketAddr,
    ldaps: SocketAddr,
    _stop: watch::Sender<bool>,
}

async fn tls_router(dir: &Path, ca: &Ca, f: impl FnOnce(&mut Config)) -> Tlsr {
    tls_router_on(dir, ca, f, None).await
}

/// [`tls_router`] serving on `workers` worker threads (count, as
/// `--spread-above`).
async fn tls_router_on(
    dir: &Path,
    ca: &Ca,
    f: impl FnOnce(&mut Config),
    workers: Option<(usize, f64)>,
) -> Tlsr {
    let cert = dir.join("router-cert.pem");
    let key = dir.join("router-key.pem");
    ca.write_server("router", &cert, &key);
    let mut b = inproc::Builder::default().democorp(&["D1"]);
    b.customer = false;
    let h = b.start().await;
    let mut cfg = Config {
        tls: Some(dsa_router::proto::tls::TlsFiles {
            cert,
            key,
            client_ca: None,
            require_client_cert: false,
        }),
        pdu_timeout: Duration::from_secs(1),
        health: None,
        ..Config::default()
    };
    f(&mut cfg);
    let snap = dsa_router::directory::knowledge::load(&h.knowledge).unwrap();
    let router = Arc::new(Context::new(cfg, snap, Some("R1".into())).unwrap());
    let plain = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ldaps = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (pa, la) = (plain.local_addr().unwrap(), ldaps.local_addr().unwrap());
    let (tx, rx) = watch::channel(false);
    let workers = match workers {
        None => {
            tokio::spawn(dsa_router::frontend::server::run_with_ldaps(
                plain,
                Some(ldaps),
                router.clone(),
                rx,
            ));
            None
        }
        Some((n, above)) => {
            Some(inproc::serve_on_workers(plain, Some(ldaps), router.clone(), rx, n, above).1)
        }
    };
    Tlsr {
        _h: h,
        router,
        workers,
        plain: pa,
        ldaps: la,
        _stop: tx,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starttls_ldaps_and_their_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new(tmp.path(), "one");
    let other = Ca::new(tmp.path(), "other");
    let r = tls_router(tmp.path(), &ca, |c| c.require_tls_for_bind = true).await;
    let trust = ca.client_config();

    // Plain: reads work, a simple bind with a password is refused.
    let mut c = Client::new(TcpStream::connect(r.plain).await.unwrap());
    assert_eq!(c.search(1, ALICE).await, (1, LdapResultCode::Success));
    c.send(&[bind_msg(2, ALICE, "alicepw")]).await;
    let (code, msg) = c.result(2).await;
    assert_eq!(code, LdapResultCode::ConfidentialityRequired, "{msg}");
    // The root DSE offers StartTLS.
    c.send(&[inproc::search_msg(
        3,
        "",
        LdapSearchScope::Base,
        LdapFilter::Present("objectClass".into()),
        &["supportedExtension"],
    )])
    .await;
    let m = c.recv().await.unwrap();
    assert!(format!("{m:?}").contains(START_TLS), "root DSE: {m:?}");

    // StartTLS on the same connection, then bind and search over TLS.
    c.send(&[start_tls_msg(4)]).await;
    assert_eq!(c.result(4).await.0, LdapResultCode::Success);
    let mut t = Client::new(tls_handshake(c.s, trust.clone()).await.unwrap());
    t.send(&[bind_msg(5, ALICE, "alicepw")]).await;
    assert_eq!(t.result(5).await.0, LdapResultCode::Success);
    assert_eq!(t.search(6, ALICE).await, (1, LdapResultCode::Success));
    // StartTLS twice: operationsError, and the TLS connection goes on.
    t.send(&[start_tls_msg(7)]).await;
    let (code, msg) = t.result(7).await;
    assert_eq!(code, LdapResultCode::OperationsError, "{msg}");
    assert!(msg.contains("already"), "{msg}");
    assert_eq!(t.search(8, ALICE).await, (1, LdapResultCode::Success));

    // LDAPS: bind and search.
    let mut l = ldaps(r.ldaps, trust.clone()).await.unwrap();
    l.send(&[bind_msg(1, ALICE, "alicepw")]).await;
    assert_eq!(l.result(1).await.0, LdapResultCode::Success);
    assert_eq!(l.search(2, ALICE).await, (1, LdapResultCode::Success));
    l.send(&[start_tls_msg(3)]).await;
    assert_eq!(l.result(3).await.0, LdapResultCode::OperationsError);

    // StartTLS with an operation outstanding (the DSA is slow).
    r._h.dsa("D1").faults.set_delay(Duration::from_millis(400));
    let mut c = Client::new(TcpStream::connect(r.plain).await.unwrap());
    c.send(&[search_msg(1, ALICE), start_tls_msg(2)]).await;
    let (code, msg) = c.result(2).await;
    assert_eq!(code, LdapResultCode::OperationsError, "{msg}");
    assert!(msg.contains("outstanding"), "{msg}");
    assert_eq!(c.result(1).await.0, LdapResultCode::Success);
    r._h.dsa("D1").faults.set_delay(Duration::ZERO);
    // A request sent right behind StartTLS: refused; the request is served.
    c.send(&[start_tls_msg(3), search_msg(4, ALICE)]).await;
    assert_eq!(c.result(3).await.0, LdapResultCode::OperationsError);
    assert_eq!(c.result(4).await.0, LdapResultCode::Success);

    // Garbage instead of a handshake after StartTLS: that connection only.
    let mut c = Client::new(TcpStream::connect(r.plain).await.unwrap());
    c.send(&[start_tls_msg(1)]).await;
    assert_eq!(c.result(1).await.0, LdapResultCode::Success);
    c.s.write_all(&inproc::encode(search_msg(2, ALICE)))
        .await
        .unwrap();
    assert!(c.closed_within(Duration::from_secs(5)).await);
    // Silence after StartTLS: closed when the handshake times out.
    let mut c = Client::new(TcpStream::connect(r.plain).await.unwrap());
    c.send(&[start_tls_msg(1)]).await;
    assert_eq!(c.result(1).await.0, LdapResultCode::Success);
    let t0 = Instant::now();
    assert!(c.closed_within(Duration::from_secs(5)).await);
    assert!(
        t0.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t0.elapsed()
    );
    // Garbage and silence on the LDAPS port: closed (the silent one when
    // the handshake times out, pdu_timeout 1 s).
    let mut g = Client::new(TcpStream::connect(r.ldaps).await.unwrap());
    g.s.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
    assert!(g.closed_within(Duration::from_secs(5)).await);
    let mut silent = Client::new(TcpStream::connect(r.ldaps).await.unwrap());
    let t0 = Instant::now();
    assert!(silent.closed_within(Duration::from_secs(5)).await);
    assert!(
        t0.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t0.elapsed()
    );
    // A client that does not trust the certificate fails its handshake.
    let e = ldaps(r.ldaps, other.client_config()).await.err();
    assert!(
        e.is_some(),
        "handshake with an untrusted certificate succeeded"
    );
    let tcp = TcpStream::connect(r.plain).await.unwrap();
    let mut c = Client::new(tcp);
    c.send(&[start_tls_msg(1)]).await;
    assert_eq!(c.result(1).await.0, LdapResultCode::Success);
    assert!(tls_handshake(c.s, other.client_config()).await.is_err());

    // After all that, the router serves as before.
    let mut t = start_tls(r.plain, trust.clone()).await;
    assert_eq!(t.search(1, ALICE).await, (1, LdapResultCode::Success));
    let mut l = ldaps(r.ldaps, trust).await.unwrap();
    assert_eq!(l.search(1, ALICE).await, (1, LdapResultCode::Success));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_sessions_move_between_workers_with_their_tls_state() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new(tmp.path(), "one");
    // Both workers take clients (--spread-above 0): the StartTLS client
    // goes to worker 0, the LDAPS one to worker 1.
    let r = tls_router_on(tmp.path(), &ca, |_| {}, Some((2, 0.0))).await;
    let w = r.workers.clone().unwrap();
    let trust = ca.client_config();
    let mut st = start_tls(r.plain, trust.clone()).await;
    st.send(&[bind_msg(2, ALICE, "alicepw")]).await;
    assert_eq!(st.result(2).await.0, LdapResultCode::Success);
    let mut ls = ldaps(r.ldaps, trust.clone()).await.unwrap();
    assert_eq!(ls.search(1, ALICE).await, (1, LdapResultCode::Success));
    let end = Instant::now() + Duration::from_secs(10);
    while w.sessions() != vec![1, 1] {
        assert!(Instant::now() < end, "sessions {:?}", w.sessions());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // The StartTLS session leaves worker 0 at its next request, with its
    // TLS session and its bind, and 20 searches sent in one TLS write.
    w.ask(0, 1, 1);
    let burst: Vec<LdapMsg> = (3..23).map(|id| search_msg(id, ALICE)).collect();
    st.send(&burst).await;
    // Answered in any order (the DSA runs them concurrently), each once.
    let mut done = Vec::new();
    while done.len() < 20 {
        let m = st.recv().await.expect("connection open");
        match m.op {
            LdapOp::SearchResultEntry(_) => {}
            LdapOp::SearchResultDone(r) => {
                assert_eq!(r.code, LdapResultCode::Success, "search {}", m.msgid);
                done.push(m.msgid);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    done.sort_unstable();
    assert_eq!(done, (3..23).collect::<Vec<_>>(), "every search, once");
    assert_eq!(w.sessions(), vec![0, 2]);
    assert_eq!(w.moves(), 1);

    // Both move back to worker 0 and go on working there.
    w.ask(1, 2, 0);
    assert_eq!(st.search(23, ALICE).await, (1, LdapResultCode::Success));
    assert_eq!(ls.search(2, ALICE).await, (1, LdapResultCode::Success));
    assert_eq!(w.sessions(), vec![2, 0]);
    assert_eq!(w.moves(), 3);
    // The StartTLS session moved twice and is still bound as alice.
    st.send(&[LdapMsg {
        msgid: 24,
        op: LdapOp::ExtendedRequest(LdapExtendedRequest {
            name: "1.3.6.1.4.1.4203.1.11.3".to_string(),
            value: None,
        }),
        ctrl: Vec::new(),
    }])
    .await;
    match st.recv().await.map(|m| (m.msgid, m.op)) {
        Some((24, LdapOp::ExtendedResponse(r))) => {
            assert_eq!(r.res.code, LdapResultCode::Success);
            assert_eq!(r.value.as_deref(), Some(format!("dn:{ALICE}").as_bytes()));
        }
        other => panic!("WhoAmI: {other:?}"),
    }
    assert_eq!(ls.search(3, ALICE).await, (1, LdapResultCode::Success));
    drop(st);
    drop(ls);
    let end = Instant::now() + Duration::from_secs(10);
    while w.sessions() != vec![0, 0] {
        assert!(Instant::now() < end, "sessions {:?}", w.sessions());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starttls_not_configured_is_unavailable() {
    let h = inproc::Builder::default().democorp(&["D1"]).start().await;
    let mut c = Client::new(TcpStream::connect(h.addr).await.unwrap());
    c.send(&[start_tls_msg(1)]).await;
    let (code, msg) = c.result(1).await;
    assert_eq!(code, LdapResultCode::Unavailable, "{msg}");
    assert_eq!(c.search(2, ALICE).await, (1, LdapResultCode::Success));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_reload_under_load() {
    let tmp = tempfile::tempdir().unwrap();
    let ca1 = Ca::new(tmp.path(), "one");
    let ca2 = Ca::new(tmp.path(), "two");
    let r = tls_router(tmp.path(), &ca1, |_| {}).await;
    let files = r.router.cfg.tls.clone().unwrap();

    // Clients on LDAPS and StartTLS, searching without pause.
    let stop = Arc::new(AtomicBool::new(false));
    let reloaded = Arc::new(AtomicBool::new(false));
    // Clients that have searched before the reload, and after it.
    let searched = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let mut tasks = Vec::new();
    for i in 0..4 {
        let mut c = if i % 2 == 0 {
            ldaps(r.ldaps, ca1.client_config()).await.unwrap()
        } else {
            start_tls(r.plain, ca1.client_config()).await
        };
        let (stop, reloaded, searched) = (stop.clone(), reloaded.clone(), searched.clone());
        tasks.push(tokio::spawn(async move {
            let (mut before, mut after) = (0u64, 0u64);
            let mut id = 1;
            while !stop.load(Ordering::Relaxed) {
                let after_reload = reloaded.load(Ordering::Relaxed);
                assert_eq!(c.search(id, ALICE).await, (1, LdapResultCode::Success));
                id += 1;
                if after_reload {
                    after += 1;
                } else {
                    before += 1;
                }
                if (after_reload && after == 1) || (!after_reload && before == 1) {
                    searched[usize::from(after_reload)].fetch_add(1, Ordering::Relaxed);
                }
            }
            (before, after)
        }));
    }
    let ops = Arc::new(AtomicU64::new(0));
    until("every client searching before the reload", || {
        searched[0].load(Ordering::Relaxed) == 4
    })
    .await;

    // Swap in a certificate from another CA and reload.
    ca2.write_server("router-2", &files.cert, &files.key);
    let router = r.router.clone();
    let msg = tokio::task::spawn_blocking(move || router.reload_from_disk())
        .await
        .unwrap()
        .expect("reload with a good certificate");
    assert!(msg.contains("TLS certificate"), "{msg}");
    reloaded.store(true, Ordering::Relaxed);
    // New connections get the new certificate; the old CA no longer works.
    let mut n = ldaps(r.ldaps, ca2.client_config()).await.unwrap();
    assert_eq!(n.search(1, ALICE).await, (1, LdapResultCode::Success));
    assert!(ldaps(r.ldaps, ca1.client_config()).await.is_err());
    let mut s = start_tls(r.plain, ca2.client_config()).await;
    assert_eq!(s.search(1, ALICE).await, (1, LdapResultCode::Success));

    // A bad certificate file: the reload fails, the current one stays.
    std::fs::write(&files.cert, "-----BEGIN CERTIFICATE-----\nnot base64!\n").unwrap();
    let router = r.router.clone();
    let err = tokio::task::spawn_blocking(move || router.reload_from_disk())
        .await
        .unwrap()
        .expect_err("reload with a broken certificate must fail");
    assert!(err.to_string().contains("--tls-cert"), "{err}");
    // A certificate that does not match the key: refused as well.
    let (c3, _) = ca2.server("mismatch");
    std::fs::write(&files.cert, c3).unwrap();
    let router = r.router.clone();
    let err = tokio::task::spawn_blocking(move || router.reload_from_disk())
        .await
        .unwrap()
        .expect_err("reload with a certificate not matching the key must fail");
    assert!(err.to_string().contains("TLS"), "{err}");
    let status = r.router.last_reload.lock().unwrap().clone().unwrap();
    assert!(!status.ok);
    let mut n = ldaps(r.ldaps, ca2.client_config()).await.unwrap();
    assert_eq!(n.search(1, ALICE).await, (1, LdapResultCode::Success));

    until("every client searching after the reload", || {
        searched[1].load(Ordering::Relaxed) == 4
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let (before, after) = t.await.expect("client saw no error");
        assert!(before > 0 && after > 0, "before {before}, after {after}");
        ops.fetch_add(before + after, Ordering::Relaxed);
    }
    eprintln!(
        "{} searches on 4 TLS connections across the reloads",
        ops.load(Ordering::Relaxed)
    );
}

/// Whether a search over LDAPS with `cfg` works (the server may refuse a
/// client certificate only after the client's handshake finished: TLS 1.3).
async fn ldaps_works(addr: SocketAddr, cfg: Arc<rustls::ClientConfig>) -> bool {
    let Ok(mut c) = ldaps(addr, cfg).await else {
        return false;
    };
    c.send(&[search_msg(1, ALICE)]).await;
    matches!(
        c.recv().await,
        Some(LdapMsg {
            op: LdapOp::SearchResultEntry(_),
            ..
        })
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new(tmp.path(), "server");
    let clients = Ca::new(tmp.path(), "clients");
    let stranger = Ca::new(tmp.path(), "stranger");
    let client_ca = clients.pem.clone();
    // Optional: no certificate or a good one is admitted; a bad one not.
    let r = tls_router(tmp.path(), &ca, |c| {
        if let Some(t) = c.tls.as_mut() {
            t.client_ca = Some(client_ca.clone());
        }
    })
    .await;
    assert!(ldaps_works(r.ldaps, ca.client_config()).await);
    assert!(ldaps_works(r.ldaps, ca.client_config_with_cert(&clients)).await);
    assert!(!ldaps_works(r.ldaps, ca.client_config_with_cert(&stranger)).await);
    // Required: only a good certificate is admitted.
    let r = tls_router(tmp.path(), &ca, |c| {
        if let Some(t) = c.tls.as_mut() {
            t.client_ca = Some(client_ca.clone());
            t.require_client_cert = true;
        }
    })
    .await;
    assert!(!ldaps_works(r.ldaps, ca.client_config()).await);
    assert!(ldaps_works(r.ldaps, ca.client_config_with_cert(&clients)).await);
    assert!(!ldaps_works(r.ldaps, ca.client_config_with_cert(&stranger)).await);
}
