//! A DSA that answers a search with entries outside the
//! search's base and scope. The router drops them, counts them against the
//! DSA (`/status`, metrics) and takes a DSA that keeps doing it down.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::inproc::*;
use dsa_router::app::admin::status::DsaReport;
use ldap3::Scope;

const BOB: &str = "uid=bob,ou=People,o=DEMOCORP,c=AU";

fn reports(h: &Harness) -> Vec<DsaReport> {
    dsa_router::app::admin::status::status(&h.router)
        .partitions
        .into_iter()
        .flat_map(|p| p.dsas)
        .collect()
}

fn dropped(h: &Harness) -> u64 {
    reports(h).iter().map(|d| d.out_of_scope_entries).sum()
}

/// A base search at alice's entry answered with bob's: the client gets no
/// entry, the DSA a counted fault; the third such answer takes it down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_search_answered_with_another_entry_gets_nothing() {
    let h = Builder::default().start().await;
    let mut l = ldap(&h.url()).await;
    // In scope: the entry itself.
    let (rs, res) = l
        .search(ALICE, Scope::Base, "(objectClass=*)", vec!["uid"])
        .await
        .unwrap()
        .success()
        .unwrap();
    assert_eq!((rs.len(), res.rc), (1, 0));
    for d in ["D1", "H1", "H2", "D2"] {
        h.dsa(d).faults.set_answer_as(Some(BOB));
    }
    let r = within(
        "base search",
        l.search(ALICE, Scope::Base, "(objectClass=*)", vec!["uid"]),
    )
    .await
    .unwrap();
    println!(
        "answered with bob's entry: {} entries, {:?}",
        r.0.len(),
        r.1
    );
    assert!(r.0.is_empty(), "bob's entry reached the client: {:?}", r.0);
    assert_eq!(dropped(&h), 1, "one counted fault");
    let metrics = dsa_router::app::admin::metrics_text(&h.router);
    assert!(
        metrics.lines().any(
            |l| l.starts_with("dsa_router_dsa_out_of_scope_entries_total{") && l.ends_with(" 1")
        ),
        "{metrics}"
    );
    // A DSA that keeps doing it is taken down.
    for i in 0..12 {
        let r = within(
            "base search",
            l.search(ALICE, Scope::Base, "(objectClass=*)", vec!["uid"]),
        )
        .await
        .unwrap();
        assert!(r.0.is_empty(), "search {i}: {:?}", r.0);
        if reports(&h).iter().any(|d| d.health == "down") {
            break;
        }
    }
    let down: Vec<_> = reports(&h)
        .into_iter()
        .filter(|d| d.health == "down")
        .collect();
    println!(
        "{:?}",
        down.iter()
            .map(|d| (&d.name, &d.reason))
            .collect::<Vec<_>>()
    );
    assert!(
        down.iter()
            .any(|d| d.reason.contains("outside their searches' base and scope")),
        "no DSA was taken down: {:?}",
        reports(&h)
    );
}

/// Entries a subtree or one-level search reaches are not touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_within_the_scope_pass() {
    let h = Builder::default().start().await;
    let mut l = ldap(&h.url()).await;
    let people = format!("ou=People,{DEMOCORP}");
    for scope in [Scope::OneLevel, Scope::Subtree] {
        let (rs, _) = l
            .search(&people, scope, "(uid=*)", vec!["uid"])
            .await
            .unwrap()
            .success()
            .unwrap();
        assert!(rs.len() >= 2, "{scope:?}: {}", rs.len());
    }
    assert_eq!(dropped(&h), 0);
}
