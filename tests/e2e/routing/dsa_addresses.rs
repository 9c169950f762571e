//! A DSA's addresses (several, or a name with several)
//! are tried Happy Eyeballs style within the connect timeout. The first
//! address here hangs every connect (a listening socket whose backlog is
//! full: the kernel drops the SYNs), the second is a real slapd.
//!
//! Needs slapd and ldap-utils (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support;

use std::time::{Duration, Instant};

use support::knowledge::{Dsa, Knowledge};
use support::router::Router;
use support::slapd::{ldap_tool, Slapd, SlapdConfig};

const DEMOCORP: &str = "o=DEMOCORP,c=AU";

/// A loopback port where a connect hangs: backlog 0, filled by one
/// connection never accepted. Kept alive by the returned values.
fn blackhole() -> (
    tokio::runtime::Runtime,
    tokio::net::TcpListener,
    std::net::TcpStream,
    u16,
) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let l = {
        let _g = rt.enter();
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        s.bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
            .unwrap();
        s.listen(0).unwrap()
    };
    let port = l.local_addr().unwrap().port();
    let filler = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    // It really hangs: a connect gets no answer.
    let t = Instant::now();
    let probe = std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(500),
    );
    assert!(
        probe.is_err() && t.elapsed() >= Duration::from_millis(450),
        "{probe:?}"
    );
    (rt, l, filler, port)
}

#[test]
fn a_blackholed_first_address_costs_a_quarter_second_not_the_connect_timeout() {
    Slapd::require();
    let s = Slapd::start(SlapdConfig::seeded("D1", &[DEMOCORP]));
    let (_rt, _l, _filler, bh) = blackhole();
    let dir = tempfile::tempdir().unwrap();
    let k = Knowledge::new()
        .dsa(
            Dsa::new("D1", bh)
                .prefix("<c AU><o DEMOCORP>")
                .address(&format!(
                    "tcp \"127.0.0.1\" port {bh}, ipv4 \"127.0.0.1\" port {}",
                    s.port
                )),
        )
        .write(dir.path());
    let router = Router::start_with(&k, dir.path(), &["--connect-timeout", "10"]);
    for i in 0..3 {
        let t = Instant::now();
        let out = ldap_tool(
            "ldapsearch",
            &["-x", "-H", &router.url, "-b", DEMOCORP, "-s", "base", "dn"],
            None,
        );
        let took = t.elapsed();
        println!("search {i}: exit {:?} in {took:?}", out.code);
        assert!(out.success(), "search {i}: {}\n{}", out.stdout, out.stderr);
        assert!(out.stdout.contains("dn: o=DEMOCORP,c=AU"), "{}", out.stdout);
        assert!(took < Duration::from_secs(3), "search {i} took {took:?}");
    }
    let log = router.log_text();
    assert!(!log.contains("cannot connect to DSA D1"), "{log}");
}
