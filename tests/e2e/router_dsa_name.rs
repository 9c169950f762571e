//! Issue 37, point 5: `ldap-dsa-name` (with `ldap-dsa-password`) is the
//! router's identity on a DSA wherever the knowledge gives it, so that a
//! DSA that refuses anonymous clients' operations serves them through the
//! router:
//! * a DSA that does not trust conveyed originators (slapd with `require
//!   authc`: every operation must be authenticated) gets anonymous clients'
//!   searches and compares as the router, on the router's shared
//!   connection; their writes stay anonymous (and are refused);
//! * a DSA that trusts them gets them unbound, as anonymous: the router's
//!   name there may assume any identity, and anonymous clients never gain
//!   its rights;
//! * without the name the DSA refuses them as it refuses them directly.
//!
//! Needs slapd and ldap-utils (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support;

use std::path::{Path, PathBuf};
use support::router::Router;
use support::slapd::{
    ldap_tool, user_dn, Slapd, SlapdConfig, ToolOutput, ALICE_PW, LDAPSEARCH, ROUTER_PW,
};

const DEMOCORP: &str = "o=DEMOCORP,c=AU";

/// Knowledge with one DSA `D1` for DEMOCORP on `port`: with the router's
/// name and password when `named`, trusting conveyed originators when
/// `trusted`.
fn knowledge(dir: &Path, port: u16, named: bool, trusted: bool) -> PathBuf {
    let name = if named {
        format!(
            "    ldap-dsa-name     = <c AU><o DEMOCORP><cn router>\n    ldap-dsa-password = \"{ROUTER_PW}\"\n"
        )
    } else {
        String::new()
    };
    let trust = if trusted {
        "    trust-flags       = trust-conveyed-originator\n"
    } else {
        ""
    };
    let dxc = format!(
        "set dsa \"D1\" =\n{{\n    prefix            = <c AU><o DEMOCORP>\n{name}    address           = tcp \"127.0.0.1\" port {port}\n    dsa-flags         = multi-write\n{trust}}};\n"
    );
    let path = dir.join(format!("named{named}-trusted{trusted}.dxg"));
    std::fs::write(&path, dxc).unwrap();
    path
}

/// A slapd whose DEMOCORP database refuses anonymous operations by `rule`
/// (its root DSE stays readable, for the harness and the router's probes).
fn refusing(rule: &str) -> Slapd {
    let mut cfg = SlapdConfig::seeded("REFUSING", &[DEMOCORP]);
    cfg.database = format!("{rule}\n");
    Slapd::start(cfg)
}

/// An anonymous `ldapsearch` at `url` (`-x`: its anonymous bind first, which
/// the router answers itself).
fn anonymous_search(url: &str, base: &str, filter: &str, attrs: &[&str]) -> ToolOutput {
    let mut args = vec!["-x", "-H", url, "-LLL", "-b", base, filter];
    args.extend_from_slice(attrs);
    ldap_tool(LDAPSEARCH, &args, None)
}

fn report(label: &str, out: &ToolOutput) {
    println!(
        "{label}: exit {:?}, {} entries, {}",
        out.code,
        out.stdout.matches("dn: ").count(),
        out.stderr.trim().replace('\n', " | ")
    );
}

fn router(knowledge: &Path, dir: &Path) -> Router {
    Router::start_with(knowledge, dir, &["--probe-interval", "0.2"])
}

#[test]
fn anonymous_searches_reach_a_dsa_requiring_authentication_as_the_routers_name() {
    let s = refusing("require authc");
    let dir = tempfile::tempdir().unwrap();
    let people = format!("ou=people,{DEMOCORP}");
    let direct = anonymous_search(&s.url, &people, "(uid=alice)", &["mail"]);
    report("direct, anonymous", &direct);
    assert_eq!(direct.code, Some(53), "slapd refuses anonymous: {direct:?}");

    // Without the router's name: refused as the DSA refuses it.
    let unnamed = router(&knowledge(dir.path(), s.port, false, false), dir.path());
    let out = anonymous_search(&unnamed.url, &people, "(uid=alice)", &["mail"]);
    report("router without ldap-dsa-name", &out);
    assert_eq!(out.code, Some(53), "{out:?}");
    assert!(out.stderr.contains("authentication required"), "{out:?}");
    drop(unnamed);

    // With it: served, as the router.
    let named = router(&knowledge(dir.path(), s.port, true, false), dir.path());
    let out = anonymous_search(&named.url, &people, "(uid=alice)", &["mail"]);
    report("router with ldap-dsa-name", &out);
    assert!(out.success(), "{out:?}");
    assert!(
        out.stdout
            .contains(&format!("dn: {}", user_dn(DEMOCORP, "alice"))),
        "{out:?}"
    );
    assert!(out.stdout.contains("mail: alice@"), "{out:?}");
    // A compare too.
    let cmp = ldap_tool(
        "ldapcompare",
        &[
            "-x",
            "-H",
            &named.url,
            &user_dn(DEMOCORP, "alice"),
            "uid:alice",
        ],
        None,
    );
    report("compare with ldap-dsa-name", &cmp);
    assert_eq!(cmp.code, Some(6), "compareTrue: {cmp:?}");
    // Writes are never lent the router's name: the DSA refuses them as
    // anonymous.
    let modify = ldap_tool(
        "ldapmodify",
        &["-x", "-H", &named.url],
        Some(&format!(
            "dn: {}\nchangetype: modify\nreplace: description\ndescription: anonymous\n",
            user_dn(DEMOCORP, "bob")
        )),
    );
    report("anonymous modify with ldap-dsa-name", &modify);
    assert_eq!(modify.code, Some(8), "strongerAuthRequired: {modify:?}");
    assert!(
        modify
            .stderr
            .contains("modifications require authentication"),
        "{modify:?}"
    );
}

/// On a DSA that does not trust conveyed originators an anonymous client
/// reads with the router's rights, and never another client's: alice's own
/// `userPassword` (readable by herself only) stays hidden from an anonymous
/// client after alice bound through the router, on the shared connection
/// and on a connection of the client's own (a paged search).
#[test]
fn anonymous_clients_never_read_as_another_client() {
    let s = refusing("require authc");
    let dir = tempfile::tempdir().unwrap();
    let r = router(&knowledge(dir.path(), s.port, true, false), dir.path());
    let alice = user_dn(DEMOCORP, "alice");
    let as_alice = ldap_tool(
        LDAPSEARCH,
        &[
            "-x",
            "-H",
            &r.url,
            "-D",
            &alice,
            "-w",
            ALICE_PW,
            "-LLL",
            "-b",
            &alice,
            "-s",
            "base",
            "userPassword",
        ],
        None,
    );
    assert!(as_alice.stdout.contains("userPassword"), "{as_alice:?}");
    for paged in [false, true] {
        let mut args = vec!["-x", "-H", &r.url, "-LLL", "-b", &alice, "-s", "base"];
        if paged {
            args.extend(["-E", "pr=5/noprompt"]);
        }
        args.push("userPassword");
        let out = ldap_tool(LDAPSEARCH, &args, None);
        report(&format!("anonymous, paged {paged}"), &out);
        // A connection of the client's own is never bound as the router
        // (the DSA refuses the paged search as anonymous).
        if !paged {
            assert!(out.success(), "{out:?}");
            assert!(out.stdout.contains(&format!("dn: {alice}")), "{out:?}");
        }
        assert!(!out.stdout.contains("userPassword"), "{out:?}");
    }
}

/// On a DSA that trusts conveyed originators the router's name may assume
/// any identity and read the restricted subtree: anonymous clients stay
/// anonymous there (slapd hides the subtree: noSuchObject).
#[test]
fn a_trusting_dsa_serves_anonymous_clients_as_anonymous() {
    let s = Slapd::start(SlapdConfig::seeded("TRUSTING", &[DEMOCORP]));
    let dir = tempfile::tempdir().unwrap();
    let restricted = format!("ou=restricted,{DEMOCORP}");
    let named = router(&knowledge(dir.path(), s.port, true, true), dir.path());
    let out = anonymous_search(&named.url, &restricted, "(objectClass=*)", &["cn"]);
    report("restricted, anonymous through the router", &out);
    assert_eq!(out.code, Some(32), "{out:?}");
    assert!(!out.stdout.contains("cn=secret"), "{out:?}");
    let people = format!("ou=people,{DEMOCORP}");
    let out = anonymous_search(&named.url, &people, "(uid=alice)", &["mail"]);
    assert!(out.stdout.contains("mail: alice@"), "{out:?}");
}
