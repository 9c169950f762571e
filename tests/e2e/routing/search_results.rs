//! Search results and limits pass through the router unchanged, against
//! real slapd with ldapsearch.
//!
//! Needs slapd and ldap-utils (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::dsas::five_dsas::{setup, DEMOCORP};
use crate::support;
use crate::support::ldap::{dns, search, show, values};
use std::collections::BTreeSet;
use support::slapd::SEED_USERS;

/// Searches with limits and larger results pass through unchanged.
#[test]
fn search_results_and_limits_through_router() {
    let s = setup("");
    let url = &s.router.url;
    let d1 = s.dsas.get("D1");
    // The whole DEMOCORP subtree, as anonymous: the same DNs as D1 gives
    // directly (ou=restricted hidden).
    let via = search(url, None, &[], DEMOCORP, "sub", "(objectClass=*)", &["1.1"]);
    assert!(via.success(), "{}", show("subtree via router", &via));
    let direct = search(
        &d1.url,
        None,
        &[],
        DEMOCORP,
        "sub",
        "(objectClass=*)",
        &["1.1"],
    );
    assert!(direct.success(), "{}", show("subtree direct", &direct));
    let a: BTreeSet<String> = dns(&via).into_iter().collect();
    let b: BTreeSet<String> = dns(&direct).into_iter().collect();
    assert_eq!(a, b);
    assert!(a.len() >= SEED_USERS + 2, "{} entries", a.len());
    // Size limit: sizeLimitExceeded (4) with 5 entries.
    let out = search(
        url,
        None,
        &["-z", "5"],
        &format!("ou=people,{DEMOCORP}"),
        "one",
        "(objectClass=*)",
        &["1.1"],
    );
    assert_eq!(out.code, Some(4), "{}", show("size limit", &out));
    assert_eq!(dns(&out).len(), 5, "{}", show("size limit", &out));
    // No such object below an existing partition: 32 with matchedDN.
    let out = search(
        url,
        None,
        &[],
        &format!("cn=nobody,{DEMOCORP}"),
        "base",
        "(objectClass=*)",
        &[],
    );
    assert_eq!(out.code, Some(32), "{}", show("missing entry", &out));
    assert!(
        out.stderr.contains(&format!("Matched DN: {DEMOCORP}")),
        "{}",
        show("missing entry", &out)
    );
    // Attribute selection and filters are the DSA's business.
    let out = search(
        url,
        None,
        &[],
        &format!("ou=people,{DEMOCORP}"),
        "one",
        "(&(sn=User000*)(mail=*))",
        &["mail"],
    );
    assert!(out.success(), "{}", show("filter", &out));
    assert_eq!(values(&out, "mail").len(), 10, "{}", show("filter", &out));
}
