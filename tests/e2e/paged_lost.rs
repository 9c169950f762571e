//! Issue 37, point 8: a paged search (RFC 2696) whose connection to its
//! DSA is lost between pages. The DSA's cookie belongs to that connection;
//! the router answers the next page itself with `unavailable` (52) naming
//! the DSA, never sending the stale cookie (slapd would answer
//! `protocolError`, "paged results cookie is invalid"), and the client
//! starts again from the first page. Against slapd, restarted between
//! pages.
//!
//! Needs slapd (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support;

use ldap3::controls::{ControlType, PagedResults};
use ldap3::{LdapConnAsync, Scope};
use std::time::Duration;
use support::router::Router;
use support::slapd::{one_dsa_knowledge, Slapd, SlapdConfig, ROUTER_PW};

const DEMOCORP: &str = "o=DEMOCORP,c=AU";

/// One page of 10 of `ou=people` with `cookie` (replaced by the next):
/// (entries, result code, message).
async fn page(l: &mut ldap3::Ldap, cookie: &mut Vec<u8>) -> (usize, u32, String) {
    let r = tokio::time::timeout(
        Duration::from_secs(20),
        l.with_controls(PagedResults {
            size: 10,
            cookie: cookie.clone(),
        })
        .search(
            &format!("ou=people,{DEMOCORP}"),
            Scope::Subtree,
            "(uid=*)",
            vec!["1.1"],
        ),
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
    (r.0.len(), r.1.rc, r.1.text)
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
