//! Small checks shared by the in-process tests (router in front of test
//! DSAs, [`crate::support::inproc`]).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::inproc::*;
use ldap3::{Scope, SearchEntry};
use std::collections::BTreeSet;

/// Waits until `f` holds, looking every 10 ms; fails after a generous
/// 10 s (a loaded machine included), naming `what`.
pub(crate) async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !f() {
        assert!(
            std::time::Instant::now() < end,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

pub(crate) fn set<const N: usize>(v: [&str; N]) -> BTreeSet<String> {
    v.iter().map(|s| s.to_string()).collect()
}

pub(crate) fn people(suffix: &str) -> BTreeSet<String> {
    let mut s = BTreeSet::new();
    s.insert(format!("ou=People,{suffix}"));
    for u in ["alice", "bob"] {
        s.insert(format!("uid={u},ou=People,{suffix}"));
    }
    for i in 0..20 {
        s.insert(format!("uid=user{i:04},ou=People,{suffix}"));
    }
    s
}

/// A figure of every DSA's `/status`, summed.
pub(crate) fn dsa_total(
    h: &Harness,
    f: impl Fn(&dsa_router::app::admin::status::DsaReport) -> i64,
) -> i64 {
    dsa_router::app::admin::status::status(&h.router)
        .partitions
        .iter()
        .flat_map(|p| &p.dsas)
        .map(f)
        .sum()
}

pub(crate) async fn sees(
    l: &mut ldap3::Ldap,
    base: &str,
    scope: Scope,
) -> (u32, Vec<String>, String) {
    let r = within(
        "search",
        l.search(base, scope, "(objectClass=*)", vec!["cn"]),
    )
    .await
    .unwrap();
    let dns =
        r.0.into_iter()
            .map(|e| SearchEntry::construct(e).dn)
            .collect();
    (r.1.rc, dns, r.1.text)
}
