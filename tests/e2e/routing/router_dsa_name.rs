//! Anonymous clients never gain the rights of the
//! router's name on a DSA (`ldap-dsa-name`): their operations reach every
//! DSA unbound, so a DSA that refuses anonymous operations refuses them
//! through the router as it does directly, and one that trusts conveyed
//! originators serves them as anonymous.
//!
//! Needs slapd and ldap-utils (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support;

use std::path::{Path, PathBuf};
use support::knowledge::{Dsa, Knowledge};
use support::router::Router;
use support::slapd::{
    ldap_tool, user_dn, Slapd, SlapdConfig, ToolOutput, ALICE_PW, LDAPSEARCH, ROUTER_PW,
};

const DEMOCORP: &str = "o=DEMOCORP,c=AU";

/// Knowledge with one DSA `D1` for DEMOCORP on `port`: with the router's
/// name and password when `named`, trusting conveyed originators when
/// `trusted`.
fn d1_knowledge(dir: &Path, port: u16, named: bool, trusted: bool) -> PathBuf {
    let mut d1 = Dsa::new("D1", port).prefix("<c AU><o DEMOCORP>");
    if named {
        d1 = d1.router(ROUTER_PW);
    }
    d1 = d1.flags("multi-write");
    if trusted {
        d1 = d1.trust_conveyed();
    }
    Knowledge::new()
        .dsa(d1)
        .write_to(&dir.join(format!("named{named}-trusted{trusted}.dxg")))
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

/// A DSA that refuses anonymous operations (slapd `require authc`) refuses
/// anonymous clients through the router exactly as directly, whether or
/// not the knowledge gives the router's name there: the router never lends
/// its name to anonymous clients (they never gain its
/// rights).
#[test]
fn anonymous_clients_never_gain_the_routers_rights_on_a_dsa_requiring_authentication() {
    let s = refusing("require authc");
    let dir = tempfile::tempdir().unwrap();
    let people = format!("ou=people,{DEMOCORP}");
    let direct = anonymous_search(&s.url, &people, "(uid=alice)", &["mail"]);
    report("direct, anonymous", &direct);
    assert_eq!(direct.code, Some(53), "slapd refuses anonymous: {direct:?}");
    for named in [false, true] {
        let r = router(&d1_knowledge(dir.path(), s.port, named, false), dir.path());
        let out = anonymous_search(&r.url, &people, "(uid=alice)", &["mail"]);
        report(&format!("router, ldap-dsa-name given: {named}"), &out);
        assert_eq!(out.code, Some(53), "{out:?}");
        assert!(out.stderr.contains("authentication required"), "{out:?}");
        let cmp = ldap_tool(
            "ldapcompare",
            &["-x", "-H", &r.url, &user_dn(DEMOCORP, "alice"), "uid:alice"],
            None,
        );
        report("anonymous compare", &cmp);
        assert_eq!(cmp.code, Some(53), "{cmp:?}");
    }
}

/// An anonymous client never reads as another client: alice's own
/// `userPassword` (readable by herself only) stays hidden from an anonymous
/// client after alice bound through the router, on the shared connection
/// and on a connection of the client's own (a paged search).
#[test]
fn anonymous_clients_never_read_as_another_client() {
    let s = refusing("require authc");
    let dir = tempfile::tempdir().unwrap();
    let r = router(&d1_knowledge(dir.path(), s.port, true, false), dir.path());
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
        // Neither the shared connection nor one of the client's own runs
        // as alice (or as the router): the DSA refuses it as anonymous.
        assert_eq!(out.code, Some(53), "{out:?}");
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
    let named = router(&d1_knowledge(dir.path(), s.port, true, true), dir.path());
    let out = anonymous_search(&named.url, &restricted, "(objectClass=*)", &["cn"]);
    report("restricted, anonymous through the router", &out);
    assert_eq!(out.code, Some(32), "{out:?}");
    assert!(!out.stdout.contains("cn=secret"), "{out:?}");
    let people = format!("ou=people,{DEMOCORP}");
    let out = anonymous_search(&named.url, &people, "(uid=alice)", &["mail"]);
    assert!(out.stdout.contains("mail: alice@"), "{out:?}");
}

/// A DSA whose data refuses anonymous reads (`require authc`) and
/// publishes a replication position (syncprov's contextCSN).
fn refusing_provider() -> Slapd {
    let mut cfg = SlapdConfig::seeded("POSITIONS", &[DEMOCORP]);
    cfg.global = "moduleload syncprov\n".to_string();
    cfg.database = "require authc\noverlay syncprov\nsyncprov-checkpoint 100 1\n".to_string();
    Slapd::start(cfg)
}

/// D1's report in the router's `/status`.
fn d1(admin: &str) -> serde_json::Value {
    support::replica::dsa(&support::replica::status(admin), "D1")
}

/// The router's own requests run as its name wherever the knowledge gives
/// one, trusted or not): probes of the suffix entry and
/// replication position reads succeed on a DSA that refuses anonymous
/// reads, while anonymous clients are still refused there. Without the
/// name the probes fail (the DSA's 53) and no position is read; with a
/// wrong password the DSA's refusal of the router's bind is the reason.
#[test]
fn the_routers_own_requests_bind_as_its_name_where_anonymous_reads_are_refused() {
    use std::time::Duration;
    use support::replica::wait_for;
    let s = refusing_provider();
    let dir = tempfile::tempdir().unwrap();
    let probes = ["--probe-interval", "0.2", "--probe-base", DEMOCORP];
    let start = |k: &Path| support::replica::router(dir.path(), k, &probes);

    let (named, admin) = start(&d1_knowledge(dir.path(), s.port, true, false));
    wait_for("D1 up with a position", Duration::from_secs(20), || {
        let d = d1(&admin);
        d["state"] == "up"
            && d["replication"]["positions"]
                .as_object()
                .is_some_and(|p| !p.is_empty())
    });
    println!("named: {}", d1(&admin));
    let out = anonymous_search(
        &named.url,
        &format!("ou=people,{DEMOCORP}"),
        "(uid=alice)",
        &["mail"],
    );
    report("anonymous through the named router", &out);
    assert_eq!(
        out.code,
        Some(53),
        "anonymous clients stay anonymous: {out:?}"
    );
    drop(named);

    let (_unnamed, admin) = start(&d1_knowledge(dir.path(), s.port, false, false));
    wait_for(
        "D1 down without the router's name",
        Duration::from_secs(20),
        || d1(&admin)["state"] == "down",
    );
    let d = d1(&admin);
    println!("unnamed: {d}");
    assert!(d["reason"].as_str().unwrap().contains("53"), "{d}");
    assert!(
        d["replication"]["positions"]
            .as_object()
            .is_none_or(|p| p.is_empty()),
        "{d}"
    );

    let wrong = dir.path().join("wrong.dxg");
    let text = std::fs::read_to_string(d1_knowledge(dir.path(), s.port, true, false)).unwrap();
    std::fs::write(&wrong, text.replace(ROUTER_PW, "not-the-password")).unwrap();
    let (_wrong, admin) = start(&wrong);
    wait_for("D1 down on a refused bind", Duration::from_secs(20), || {
        d1(&admin)["state"] == "down"
    });
    let d = d1(&admin);
    println!("wrong password: {d}");
    assert!(d["reason"].as_str().unwrap().contains("49"), "{d}");
}
