//! The router's own answers: the root DSE (both naming contexts, the
//! filter honoured, against real slapd too), noSuchObject outside every
//! partition, and the extended operations the router answers itself.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::dsas::five_dsas::{alice, setup, tail, CUSTOMER, DEMOCORP};
use crate::dsas::inproc_checks::set;
use crate::support;
use crate::support::inproc::*;
use crate::support::ldap::{dns, search, show, values};
use ldap3::exop::Exop;
use ldap3::{Scope, SearchEntry};
use std::collections::BTreeSet;
use support::slapd::ALICE_PW;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_answers_root_dse_no_partition_and_extended_ops() {
    let h = Builder::default().start().await;
    let mut l = ldap(&h.url()).await;

    for base in ["o=Nowhere,c=US", "c=NZ", "cn=x,o=Elsewhere"] {
        let r = within(
            "search",
            l.search(base, Scope::Base, "(objectClass=*)", vec!["cn"]),
        )
        .await
        .unwrap();
        assert_eq!(r.1.rc, 32, "search {base}: {:?}", r.1);
    }
    let r = within("compare", l.compare("cn=x,o=Nowhere", "cn", "x".as_bytes()))
        .await
        .unwrap();
    assert_eq!(r.0.rc, 32, "compare under no partition: {:?}", r.0);

    let r = within(
        "root DSE",
        l.search("", Scope::Base, "(objectClass=*)", vec!["namingContexts"]),
    )
    .await
    .unwrap();
    let (entries, _) = r.success().unwrap();
    assert_eq!(entries.len(), 1);
    let e = SearchEntry::construct(entries.into_iter().next().unwrap());
    let nc: BTreeSet<String> = e
        .attrs
        .get("namingContexts")
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|v| v.replace(' ', "").to_ascii_lowercase())
        .collect();
    println!("namingContexts: {nc:?}");
    assert_eq!(nc, set(["o=democorp,c=au", "o=customer,c=au"]));

    let start_tls = Exop {
        name: Some("1.3.6.1.4.1.1466.20037".into()),
        val: None,
    };
    let r = within("StartTLS", l.extended(start_tls)).await.unwrap();
    println!("StartTLS: rc {} {}", r.1.rc, r.1.text);
    assert_ne!(r.1.rc, 0, "StartTLS must not succeed: {:?}", r.1);

    let unknown = Exop {
        name: Some("1.3.6.1.4.1.99999.1.2.3".into()),
        val: Some(b"x".to_vec()),
    };
    let r = within("unknown exop", l.extended(unknown)).await.unwrap();
    assert_eq!(r.1.rc, 2, "unknown extended op: {:?}", r.1);

    // The session goes on after both.
    let d = served_by(&mut l, DEMOCORP).await;
    assert!(["D1", "H1"].contains(&d.as_str()));
}

#[test]
fn root_dse_lists_both_naming_contexts() {
    let s = setup("");
    for attrs in [&["namingContexts"][..], &["+"][..], &["*", "+"][..]] {
        let out = search(
            &s.router.url,
            None,
            &[],
            "",
            "base",
            "(objectClass=*)",
            attrs,
        );
        assert!(out.success(), "{}", show("root DSE", &out));
        let nc: BTreeSet<String> = values(&out, "namingContexts")
            .into_iter()
            .map(|v| v.to_ascii_lowercase())
            .collect();
        assert_eq!(
            nc,
            BTreeSet::from([DEMOCORP.to_ascii_lowercase(), CUSTOMER.to_ascii_lowercase()]),
            "{}",
            show(&format!("root DSE {attrs:?}"), &out)
        );
    }
    // Also as a bound client.
    let a = alice();
    let out = search(
        &s.router.url,
        Some((&a, ALICE_PW)),
        &[],
        "",
        "base",
        "(objectClass=*)",
        &["namingContexts", "supportedExtension"],
    );
    assert!(
        out.success(),
        "{}\nrouter log tail:\n{}",
        show("root DSE as alice", &out),
        tail(&s.router.log_text())
    );
    assert_eq!(
        values(&out, "namingContexts").len(),
        2,
        "{}",
        show("rootDSE", &out)
    );
}

/// The root DSE is an entry like any other for the search filter: a base
/// search of "" with a filter it does not match returns no entry, as slapd
/// does.
#[test]
fn root_dse_honours_the_filter() {
    let s = setup("");
    // slapd, for reference.
    let d1 = s.dsas.get("D1");
    let direct = search(
        &d1.url,
        None,
        &[],
        "",
        "base",
        "(objectClass=nosuchclass)",
        &[],
    );
    assert!(
        direct.success() && dns(&direct).is_empty(),
        "{}",
        show("direct", &direct)
    );
    let out = search(
        &s.router.url,
        None,
        &[],
        "",
        "base",
        "(objectClass=nosuchclass)",
        &[],
    );
    assert!(
        out.success(),
        "{}",
        show("root DSE, non-matching filter", &out)
    );
    assert!(
        dns(&out).is_empty(),
        "{}",
        show(
            "root DSE with (objectClass=nosuchclass) must return no entry",
            &out
        )
    );
}
