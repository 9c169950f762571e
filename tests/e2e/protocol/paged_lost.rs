//! A paged search (RFC 2696) whose connection to its
//! DSA is lost between pages. The DSA's cookie belongs to that connection;
//! the router answers the next page itself with `unavailable` (52) naming
//! the DSA, never sending the stale cookie (slapd would answer
//! `protocolError`, "paged results cookie is invalid"), and the client
//! starts again from the first page. Against slapd, restarted between
//! pages; also a search spanning two partitions (c=AU), which the router
//! pages itself with the DSA's cookie inside its own.
//!
//! Needs slapd (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support;

use ldap3::controls::{ControlType, PagedResults};
use ldap3::{LdapConnAsync, Scope, SearchEntry};
use std::time::Duration;
use support::knowledge::{Dsa, Knowledge};
use support::router::Router;
use support::slapd::{one_dsa_knowledge, Slapd, SlapdConfig, ROUTER_PW};

const DEMOCORP: &str = "o=DEMOCORP,c=AU";

/// One page of 10 of `ou=people` with `cookie` (replaced by the next):
/// (entries, result code, message).
async fn page(l: &mut ldap3::Ldap, cookie: &mut Vec<u8>) -> (usize, u32, String) {
    let (dns, code, text) = page_at(l, &format!("ou=people,{DEMOCORP}"), cookie).await;
    (dns.len(), code, text)
}

/// One page of 10 of the users under `base` with `cookie` (replaced by
/// the next): (entry DNs, result code, message).
async fn page_at(
    l: &mut ldap3::Ldap,
    base: &str,
    cookie: &mut Vec<u8>,
) -> (Vec<String>, u32, String) {
    let r = tokio::time::timeout(
        Duration::from_secs(20),
        l.with_controls(PagedResults {
            size: 10,
            cookie: cookie.clone(),
        })
        .search(base, Scope::Subtree, "(uid=*)", vec!["1.1"]),
    )
    .await
    .expect("the page came in time")
    .unwrap();
    *cookie =
        r.1.ctrls
            .iter()
            .find(|c| matches!(c.0, Some(ControlType::PagedResults)))
            .map(|c| c.1.parse::<PagedResults>().cookie)
            .unwrap_or_default();
    let dns =
        r.0.into_iter()
            .map(|e| SearchEntry::construct(e).dn)
            .collect();
    (dns, r.1.rc, r.1.text)
}

async fn connect(url: &str) -> ldap3::Ldap {
    let (conn, l) = LdapConnAsync::new(url).await.unwrap();
    ldap3::drive!(conn);
    l
}

#[test]
fn a_paged_search_whose_dsa_connection_was_lost_gets_the_routers_answer() {
    let mut s = Slapd::start(SlapdConfig::seeded("PAGED", &[DEMOCORP]));
    let dir = tempfile::tempdir().unwrap();
    let r = Router::start_with(
        &one_dsa_knowledge(dir.path(), s.port, ROUTER_PW),
        dir.path(),
        &["--probe-interval", "0.2"],
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut direct = connect(&s.url).await;
        let mut routed = connect(&r.url).await;
        let (mut dc, mut rc) = (Vec::new(), Vec::new());
        assert_eq!(page(&mut direct, &mut dc).await.0, 10);
        assert_eq!(page(&mut routed, &mut rc).await.0, 10);
        assert!(!rc.is_empty() && !dc.is_empty());
        // The DSA restarts between pages: both connections are lost.
        s.restart();
        let mut direct = connect(&s.url).await;
        let d = page(&mut direct, &mut dc).await;
        println!("slapd, the stale cookie on a new connection: {d:?}");
        // The router's next page: its own answer, not the DSA's.
        // (slapd's restart waited for it to answer again: the router's
        // reader saw its connection end long before.)
        let got = page(&mut routed, &mut rc.clone()).await;
        println!("router, the next page: {got:?}");
        assert_eq!(got.1, 52, "unavailable: {got:?}");
        assert!(
            got.2
                .contains("paged search's connection to DSA D1 was lost"),
            "{got:?}"
        );
        // Asked again, the same answer: the stale cookie never goes out.
        let again = page(&mut routed, &mut rc.clone()).await;
        assert_eq!(again.1, 52, "{again:?}");
        // From the first page, the search runs again to its end, once the
        // DSA is up again (the lost connection took it down at once; its
        // probes bring it back).
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        let mut cookie = Vec::new();
        let mut total = loop {
            let (n, code, text) = page(&mut routed, &mut cookie).await;
            if code == 0 {
                break n;
            }
            assert_eq!(code, 52, "{text}");
            assert!(std::time::Instant::now() < deadline, "{text}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        while !cookie.is_empty() {
            let (n, code, text) = page(&mut routed, &mut cookie).await;
            assert_eq!(code, 0, "{text}");
            total += n;
        }
        assert_eq!(
            total,
            support::slapd::SEED_USERS + 2,
            "alice, bob and the users"
        );
    });
}

/// Two DSAs under `c=AU`: `D1` (`o=DEMOCORP`) and `D2` (`o=OTHER`).
fn two_dsa_knowledge(dir: &std::path::Path, ports: [u16; 2]) -> std::path::PathBuf {
    let dsa = |name: &str, o: &str, port: u16| {
        Dsa::new(name, port)
            .prefix(&format!("<c AU><o {o}>"))
            .router(ROUTER_PW)
            .flags("multi-write")
            .trust_conveyed()
    };
    Knowledge::new()
        .dsa(dsa("D1", "DEMOCORP", ports[0]))
        .dsa(dsa("D2", "OTHER", ports[1]))
        .write(dir)
}

/// A paged search at `c=AU` spans D1 and D2: the router pages it, one
/// partition after the other, its cookie holding the DSA's. The DSA being
/// read restarts between pages: the next page gets the router's 52 naming
/// it (before, slapd's "paged results cookie is invalid", protocolError);
/// the router's cookie on another connection of the client gets 52 too;
/// from the first page the search reads both partitions to the end.
#[test]
fn a_spanning_paged_search_whose_dsa_connection_was_lost_gets_the_routers_answer() {
    const OTHER: &str = "o=OTHER,c=AU";
    let mut s = [
        Slapd::start(SlapdConfig::seeded("PAGED1", &[DEMOCORP])),
        Slapd::start(SlapdConfig::seeded("PAGED2", &[OTHER])),
    ];
    let dir = tempfile::tempdir().unwrap();
    let r = Router::start_with(
        &two_dsa_knowledge(dir.path(), [s[0].port, s[1].port]),
        dir.path(),
        &["--probe-interval", "0.2"],
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut routed = connect(&r.url).await;
        let mut rc = Vec::new();
        let (dns, code, text) = page_at(&mut routed, "c=AU", &mut rc).await;
        assert_eq!((dns.len(), code), (10, 0), "{text}");
        assert!(!rc.is_empty());
        // The partition being read: the DSA whose slapd restarts.
        let i = usize::from(!dns[0].to_ascii_lowercase().ends_with("o=democorp,c=au"));
        let dsa = ["D1", "D2"][i];
        println!("first page from {dsa}");
        // Another connection of the client's, with this one's cookie: the
        // DSA's cookie is not valid there.
        let mut other = connect(&r.url).await;
        let got = page_at(&mut other, "c=AU", &mut rc.clone()).await;
        println!("another connection, the same cookie: {got:?}");
        assert_eq!(got.1, 52, "{got:?}");
        assert!(got.2.contains("read on another connection"), "{got:?}");
        // The first connection's pages are untouched by that.
        let mut next = rc.clone();
        let (dns, code, text) = page_at(&mut routed, "c=AU", &mut next).await;
        assert_eq!((dns.len(), code), (10, 0), "{text}");
        let rc = next;
        s[i].restart();
        let got = page_at(&mut routed, "c=AU", &mut rc.clone()).await;
        println!("router, the next page after {dsa} restarted: {got:?}");
        assert_eq!(got.1, 52, "unavailable: {got:?}");
        assert!(
            got.2
                .contains(&format!("paged search's connection to DSA {dsa} was lost")),
            "{got:?}"
        );
        let again = page_at(&mut routed, "c=AU", &mut rc.clone()).await;
        assert_eq!(again.1, 52, "{again:?}");
        // From the first page, both partitions to the end once the DSA is
        // up again.
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        let mut cookie = Vec::new();
        let mut all = loop {
            let (dns, code, text) = page_at(&mut routed, "c=AU", &mut cookie).await;
            if code == 0 {
                break dns;
            }
            assert_eq!(code, 52, "{text}");
            assert!(std::time::Instant::now() < deadline, "{text}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        while !cookie.is_empty() {
            let (dns, code, text) = page_at(&mut routed, "c=AU", &mut cookie).await;
            assert_eq!(code, 0, "{text}");
            all.extend(dns);
        }
        let uniq: std::collections::BTreeSet<_> =
            all.iter().map(|d| d.to_ascii_lowercase()).collect();
        assert_eq!(uniq.len(), all.len(), "an entry came twice");
        assert_eq!(
            all.len(),
            2 * (support::slapd::SEED_USERS + 2),
            "alice, bob and the users of both partitions"
        );
    });
}
