//! A DSA that itself answers `busy` (51) or `unavailable` (52), as slapd
//! does while it starts or a DSA with `no-service-while-recovering` does
//! then: a read goes on to the next eligible DSA, as if
//! the DSA could not be reached; a write is never sent again, and its
//! client gets the DSA's answer. In process, in front of test DSAs whose
//! fault switch answers every operation with one code.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::inproc::*;
use ldap3::Mod;
use ldap3_proto::proto::LdapResultCode;
use std::collections::HashSet;

/// D1 (GROUP1, first for reads and writes) and D2 (GROUP2); no probes, so
/// that D1 stays eligible while it refuses, and no replication positions
/// read (their reads would count as D2's operations).
async fn start() -> Harness {
    Builder::default()
        .democorp(&["D1", "D2"])
        .write_precedence(&["D1", "D2"])
        .cfg(|c| {
            c.health = None;
            c.replication.interval = std::time::Duration::ZERO;
        })
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_the_dsa_answers_busy_or_unavailable_goes_to_the_next_dsa() {
    let h = start().await;
    let mut l = ldap(&h.url()).await;
    assert_eq!(served_by(&mut l, DEMOCORP).await, "D1");
    for code in [LdapResultCode::Busy, LdapResultCode::Unavailable] {
        h.dsa("D1").faults.set_answer(Some(code.clone()));
        let before = h.dsa("D1").stats.operations();
        for round in 0..3 {
            let by = served_by(&mut l, DEMOCORP).await;
            assert_eq!(by, "D2", "{code:?}, round {round}");
        }
        // Each read was asked of D1 first.
        assert!(
            h.dsa("D1").stats.operations() >= before + 3,
            "{code:?}: D1 saw {} operations",
            h.dsa("D1").stats.operations() - before
        );
        h.dsa("D1").faults.set_answer(None);
    }
    // With no other DSA able to take it, the client gets the DSA's own
    // answer.
    for n in ["D1", "D2"] {
        h.dsa(n).faults.set_answer(Some(LdapResultCode::Busy));
    }
    let dn = format!("cn=served-by,{DEMOCORP}");
    let r = within(
        "search",
        l.search(&dn, ldap3::Scope::Base, "(objectClass=*)", vec!["1.1"]),
    )
    .await
    .unwrap();
    assert_eq!(r.1.rc, 51, "{:?}", r.1);
    assert!(r.1.text.contains("answered busy"), "{:?}", r.1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_dsa_answers_busy_is_not_sent_again() {
    let h = start().await;
    let mut l = ldap(&h.url()).await;
    let dn = "uid=alice,ou=People,o=DEMOCORP,c=AU";
    for code in [LdapResultCode::Busy, LdapResultCode::Unavailable] {
        h.dsa("D1").faults.set_answer(Some(code.clone()));
        let before = h.dsa("D2").stats.operations();
        let r = within(
            "modify",
            l.modify(dn, vec![Mod::Replace("description", HashSet::from(["x"]))]),
        )
        .await
        .unwrap();
        assert_eq!(r.rc, code.clone() as u32, "{code:?}: {r:?}");
        assert_eq!(r.text, "testdsa D1", "the DSA's own answer: {r:?}");
        // D2 saw nothing of it (there are no probes).
        assert_eq!(h.dsa("D2").stats.operations(), before, "{code:?}");
        let e = h.dsa("D2").dir.entry(dn).unwrap();
        assert!(
            !e.iter()
                .any(|(a, v)| a.eq_ignore_ascii_case("description") && v == &["x"]),
            "{code:?}: modified on D2: {e:?}"
        );
    }
}
