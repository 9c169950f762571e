//! Proxied authorization (RFC 4370) sent by clients through the router to
//! real slapd: searches and WhoAmI run as the proxied identity exactly when
//! slapd allows it.
//!
//! Needs slapd and ldap-utils (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::dsas::five_dsas::{alice, setup, DEMOCORP};
use crate::support;
use crate::support::ldap::{dns, search, show, values};
use support::slapd::{ldap_tool, router_dn, ALICE_PW, ROUTER_PW};

/// A client's own proxied-authorization control (RFC 4370) through the
/// router: the DSA decides, with the client's own identity as the
/// authorizing one. cn=router may assume alice (and then sees what alice
/// sees); alice may not assume cn=router; anonymous may assume nobody.
#[test]
fn client_proxied_authorization() {
    let s = setup("");
    let url = &s.router.url;
    let restricted = format!("ou=restricted,{DEMOCORP}");
    let a = alice();
    let rdn = router_dn(DEMOCORP);
    let as_alice = format!("!authzid=dn:{a}");
    let as_router = format!("!authzid=dn:{rdn}");
    let run = |bind: Option<(&str, &str)>, ctl: &str| {
        search(
            url,
            bind,
            &["-e", ctl],
            &restricted,
            "sub",
            "(objectClass=*)",
            &["description"],
        )
    };
    // cn=router as alice: allowed, but no access to ou=restricted.
    let out = run(Some((&rdn, ROUTER_PW)), &as_alice);
    assert!(
        matches!(out.code, Some(0) | Some(32)) && dns(&out).is_empty(),
        "{}",
        show("router proxying alice", &out)
    );
    // ... while a readable entry is readable as alice.
    let out = search(
        url,
        Some((&rdn, ROUTER_PW)),
        &["-e", &as_alice],
        &a,
        "base",
        "(objectClass=*)",
        &["sn"],
    );
    assert!(
        out.success(),
        "{}",
        show("router proxying alice reads alice", &out)
    );
    assert_eq!(values(&out, "sn"), ["Example"]);
    // alice as cn=router: refused (authorizationDenied, 123), never the
    // secret.
    let out = run(Some((&a, ALICE_PW)), &as_router);
    assert!(
        out.code != Some(0) && dns(&out).is_empty(),
        "{}",
        show("alice proxying cn=router", &out)
    );
    assert!(
        out.stderr.contains("(123)") || out.stderr.contains("(50)"),
        "{}",
        show("alice proxying cn=router", &out)
    );
    // anonymous as cn=router: refused.
    let out = run(None, &as_router);
    assert!(
        out.code != Some(0) && dns(&out).is_empty(),
        "{}",
        show("anonymous proxying cn=router", &out)
    );
    // And cn=router without the control still sees it.
    let out = search(
        url,
        Some((&rdn, ROUTER_PW)),
        &[],
        &restricted,
        "sub",
        "(objectClass=*)",
        &["1.1"],
    );
    assert_eq!(
        dns(&out).len(),
        2,
        "{}",
        show("router without control", &out)
    );
}

/// WhoAmI with the client's proxied-authorization control (RFC 4532
/// section 3): the answer is the proxied identity when the proxying is
/// allowed, authorizationDenied (123) when not; as slapd itself answers.
#[test]
fn whoami_with_proxied_authorization() {
    let s = setup("");
    let a = alice();
    let rdn = router_dn(DEMOCORP);
    // The reference: slapd directly.
    let d1 = s.dsas.get("D1");
    let direct = ldap_tool(
        "ldapwhoami",
        &[
            "-x",
            "-H",
            &d1.url,
            "-D",
            &rdn,
            "-w",
            ROUTER_PW,
            "-e",
            &format!("!authzid=dn:{a}"),
        ],
        None,
    );
    assert!(direct.success(), "{}", show("direct whoami", &direct));
    assert_eq!(
        direct.stdout.trim().to_ascii_lowercase(),
        format!("dn:{a}").to_ascii_lowercase()
    );
    let direct_denied = ldap_tool(
        "ldapwhoami",
        &[
            "-x",
            "-H",
            &d1.url,
            "-D",
            &a,
            "-w",
            ALICE_PW,
            "-e",
            &format!("!authzid=dn:{rdn}"),
        ],
        None,
    );
    // ldapwhoami exits 1 and prints the result code.
    assert!(
        !direct_denied.success() && direct_denied.stdout.contains("(123)"),
        "{}",
        show("direct whoami denied", &direct_denied)
    );
    // Through the router.
    let url = &s.router.url;
    let out = ldap_tool(
        "ldapwhoami",
        &[
            "-x",
            "-H",
            url,
            "-D",
            &rdn,
            "-w",
            ROUTER_PW,
            "-e",
            &format!("!authzid=dn:{a}"),
        ],
        None,
    );
    let mut problems = Vec::new();
    if !(out.success() && out.stdout.trim().eq_ignore_ascii_case(&format!("dn:{a}"))) {
        problems.push(show(
            "cn=router's WhoAmI with authzid alice (want dn:<alice>)",
            &out,
        ));
    }
    let out = ldap_tool(
        "ldapwhoami",
        &[
            "-x",
            "-H",
            url,
            "-D",
            &a,
            "-w",
            ALICE_PW,
            "-e",
            &format!("!authzid=dn:{rdn}"),
        ],
        None,
    );
    if out.success() || !out.stdout.contains("(123)") {
        problems.push(show(
            "alice's WhoAmI with authzid cn=router (want authorizationDenied, 123)",
            &out,
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}
