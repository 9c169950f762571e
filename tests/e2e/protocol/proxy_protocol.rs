//! PROXY protocol v1/v2 on the client listener: from
//! `--proxy-protocol-from` sources the header's address is the client's
//! (limits, access log); a malformed or missing header from there is
//! refused; from any other source a PROXY header is not LDAP.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::inproc::*;
use crate::support::router::Router;
use crate::support::slapd::{
    one_dsa_knowledge, pick_port, seed_ldif, Slapd, SlapdConfig, ROUTER_PW,
};
use ldap3_proto::proto::LdapOp;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SIG_V2: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// A v2 PROXY header for a TCP over IPv4 client at `src`.
fn v2(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let (SocketAddr::V4(s), SocketAddr::V4(d)) = (src, dst) else {
        panic!("IPv4 only");
    };
    let mut b = SIG_V2.to_vec();
    b.extend([0x21, 0x11, 0x00, 0x0c]);
    b.extend(s.ip().octets());
    b.extend(d.ip().octets());
    b.extend(s.port().to_be_bytes());
    b.extend(d.port().to_be_bytes());
    b
}

/// A v1 PROXY header for a TCP over IPv4 client at `src`.
fn v1(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    format!(
        "PROXY TCP4 {} {} {} {}\r\n",
        src.ip(),
        dst.ip(),
        src.port(),
        dst.port()
    )
    .into_bytes()
}

/// A client whose connection starts with `header`: served (a base search
/// answered) or not.
async fn served_after(addr: SocketAddr, header: &[u8]) -> Result<(), String> {
    let mut c = Raw::connect(addr).await;
    let mut first = header.to_vec();
    first.extend(base_search(1, DEMOCORP));
    c.send(&first).await.map_err(|e| e.to_string())?;
    match c.recv(WAIT).await {
        Recv::Msg(m) => match (&m.op, notice(&m)) {
            (LdapOp::SearchResultEntry(_), _) => Ok(()),
            (_, Some((code, msg))) => Err(format!("{code:?}: {msg}")),
            _ => Err(format!("{m:?}")),
        },
        other => Err(format!("{other:?}")),
    }
}

async fn harness(from: &str, per_ip: usize) -> Harness {
    let mut b = Builder::default();
    b.cfg.proxy_protocol_from = dsa_router::proto::proxy_protocol::parse_list(from).unwrap();
    b.cfg.max_clients_per_ip = per_ip;
    b.start().await
}

#[tokio::test]
async fn from_a_listed_source_v1_and_v2_headers_give_the_clients_address_to_the_limits() {
    // One connection per client address: the header's, not the balancer's.
    let h = harness("127.0.0.0/8", 1).await;
    let a: SocketAddr = "192.0.2.7:40000".parse().unwrap();
    let b: SocketAddr = "198.51.100.9:40001".parse().unwrap();
    let mut held = Raw::connect(h.addr).await;
    let mut first = v2(a, h.addr);
    first.extend(base_search(1, DEMOCORP));
    held.send(&first).await.unwrap();
    assert!(matches!(
        held.msg("held client").await.op,
        LdapOp::SearchResultEntry(_)
    ));
    // Another client through the same balancer is served...
    served_after(h.addr, &v1(b, h.addr)).await.unwrap();
    served_after(h.addr, &v2(b, h.addr)).await.unwrap();
    // ...the same client again is over its limit.
    let again = served_after(h.addr, &v1(a, h.addr)).await.unwrap_err();
    assert!(
        again.contains("too many connections from your address"),
        "{again}"
    );
    // A LOCAL header (the balancer's own check) keeps its address.
    let mut local = SIG_V2.to_vec();
    local.extend([0x20, 0x00, 0x00, 0x00]);
    served_after(h.addr, &local).await.unwrap();
}

#[tokio::test]
async fn from_a_listed_source_a_missing_or_malformed_header_is_refused() {
    let h = harness("127.0.0.1", 0).await;
    let bad: [&[u8]; 4] = [
        b"",
        b"PROXY TCP4 1.2.3 4.5.6.7 1 2\r\n",
        b"PROXY TCP4 1.2.3.4 4.5.6.7 99999 2\r\n",
        &[
            0x0d, 0x0a, 0x0d, 0x0a, 0, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a, 0x21, 0x41, 0, 0,
        ],
    ];
    for header in bad {
        let got = served_after(h.addr, header).await;
        let err = got.expect_err("served without a valid header");
        assert!(
            err.contains("ProtocolError") && err.contains("PROXY"),
            "{header:?}: {err}"
        );
    }
    assert_serves_after_header(&h).await;
}

async fn assert_serves_after_header(h: &Harness) {
    let a: SocketAddr = "192.0.2.7:1".parse().unwrap();
    served_after(h.addr, &v2(a, h.addr)).await.unwrap();
}

#[tokio::test]
async fn from_an_unlisted_source_a_proxy_header_is_a_protocol_error() {
    let h = harness("10.9.9.9/32", 0).await;
    let a: SocketAddr = "192.0.2.7:1".parse().unwrap();
    for header in [v1(a, h.addr), v2(a, h.addr)] {
        let err = served_after(h.addr, &header).await.unwrap_err();
        assert!(err.starts_with("ProtocolError"), "{err}");
    }
    // Its LDAP is served as ever.
    assert_serves(h.addr, "an unlisted client without a header").await;
}

/// HAProxy in TCP mode with `send-proxy-v2` in front of the router.
struct Haproxy {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Haproxy {
    fn start(to: &str) -> Haproxy {
        let dir = tempfile::tempdir().unwrap();
        let port = pick_port();
        let cfg = dir.path().join("haproxy.cfg");
        std::fs::write(
            &cfg,
            format!(
                "defaults\n  mode tcp\n  timeout connect 2s\n  timeout client 30s\n  timeout server 30s\n\
                 frontend ldap\n  bind 127.0.0.1:{port}\n  default_backend routers\n\
                 backend routers\n  server r1 {to} send-proxy-v2\n"
            ),
        )
        .unwrap();
        let child = Command::new("haproxy")
            .args(["-db", "-f", cfg.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + WAIT;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "haproxy did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Haproxy {
            child,
            port,
            _dir: dir,
        }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Through HAProxy (`send-proxy-v2`), a client on 127.0.0.2 shows in the
/// router's access log as 127.0.0.2, not as HAProxy's 127.0.0.1.
#[test]
fn through_haproxy_the_access_log_shows_the_clients_address() {
    let slapd = Slapd::start(SlapdConfig {
        suffixes: vec![DEMOCORP.to_string()],
        ldif: seed_ldif(DEMOCORP, "D1"),
        name: "PROXIED".to_string(),
        global: String::new(),
        database: String::new(),
        sasldb: Vec::new(),
    });
    let dir = tempfile::tempdir().unwrap();
    let router = Router::start_with(
        &one_dsa_knowledge(dir.path(), slapd.port, ROUTER_PW),
        dir.path(),
        &["--proxy-protocol-from", "127.0.0.1"],
    );
    let haproxy = Haproxy::start(router.url.trim_start_matches("ldap://"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = rt.block_on(async {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let s = sock
            .connect(SocketAddr::from(([127, 0, 0, 1], haproxy.port)))
            .await
            .unwrap();
        let me = s.local_addr().unwrap();
        let mut c = Raw::from_stream(s);
        c.send(&compare_msg(
            1,
            &format!("cn=served-by,{DEMOCORP}"),
            "cn",
            "served-by",
        ))
        .await
        .unwrap();
        let m = c.msg("compare through haproxy").await;
        assert!(final_result(&m).is_some(), "{m:?}");
        me
    });
    let log = router.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("op=\"compare\""))
        .unwrap_or_else(|| panic!("no access line:\n{log}"));
    assert!(line.contains(&format!("client={client}")), "{line}");
    assert!(!line.contains("client=127.0.0.1:"), "{line}");
    // Directly from 127.0.0.1 (listed), without a header: refused.
    let out = Command::new("ldapsearch")
        .args(["-x", "-H", &router.url, "-b", DEMOCORP, "-s", "base"])
        .env("LDAPNOINIT", "1")
        .output()
        .unwrap();
    assert!(!out.status.success());
}
