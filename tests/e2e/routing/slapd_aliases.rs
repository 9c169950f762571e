//! With real slapd aliases: a search that dereferences
//! aliases (derefInSearching, derefFindingBaseObj, derefAlways) may
//! legitimately return entries outside its base, anywhere the DSA holds:
//! the router checks those entries against the DSA's partition, not the
//! search's base and scope. An alias that leads outside the partition the
//! knowledge gives the DSA (slapd holds more than that) is dropped and
//! counted against the DSA; a search that does not dereference gets the
//! alias entry itself.
//!
//! One slapd holding `o=DEMOCORP,c=AU`; the router's knowledge gives it
//! twice: `D1` for the whole suffix and `NARROW` for `ou=narrow` only.
//! `ldapsearch -a never|search|find|always` through the router and
//! directly against slapd, compared.
//!
//! Needs slapd and ldap-utils (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use support::knowledge::{Dsa, Knowledge};
use support::ldap::get;
use support::router::Router;
use support::slapd::{
    ldap_tool, ldif_entry, pick_port, seed_ldif, user_dn, Slapd, SlapdConfig, LDAPSEARCH, ROUTER_PW,
};

const DEMOCORP: &str = "o=DEMOCORP,c=AU";

/// The seed data and the aliases:
/// * `ou=aliases`: `cn=alice` → alice's entry in `ou=people`;
/// * `ou=narrow`: `cn=bob` → bob's entry in `ou=people` (outside
///   `ou=narrow`), `cn=inside` → `cn=target,ou=narrow` (inside).
fn ldif() -> String {
    let s = DEMOCORP;
    let mut l = seed_ldif(s, "D1");
    for ou in ["aliases", "narrow"] {
        l.push_str(&ldif_entry(
            &format!("ou={ou},{s}"),
            &[("objectClass", "organizationalUnit"), ("ou", ou)],
        ));
    }
    l.push_str(&ldif_entry(
        &format!("cn=target,ou=narrow,{s}"),
        &[("objectClass", "organizationalRole"), ("cn", "target")],
    ));
    for (cn, ou, to) in [
        ("alice", "aliases", user_dn(s, "alice")),
        ("bob", "narrow", user_dn(s, "bob")),
        ("inside", "narrow", format!("cn=target,ou=narrow,{s}")),
    ] {
        l.push_str(&ldif_entry(
            &format!("cn={cn},ou={ou},{s}"),
            &[
                ("objectClass", "alias"),
                ("objectClass", "extensibleObject"),
                ("cn", cn),
                ("aliasedObjectName", &to),
            ],
        ));
    }
    l
}

/// `D1` for the whole suffix, `NARROW` (the same slapd) for `ou=narrow`
/// only.
fn d1_and_narrow(dir: &Path, port: u16) -> PathBuf {
    let dsa = |name: &str, prefix: &str| {
        Dsa::new(name, port)
            .prefix(prefix)
            .ldap_dsa("<c AU><o DEMOCORP><cn router>", ROUTER_PW)
            .flags("multi-write")
            .trust_conveyed()
    };
    Knowledge::new()
        .dsa(dsa("D1", "<c AU><o DEMOCORP>"))
        .dsa(dsa("NARROW", "<c AU><o DEMOCORP><ou narrow>"))
        .write(dir)
}

/// The DNs a subtree search at `base` with `-a deref` returns from `url`
/// (lowercased), and the alias entries among them.
fn search(url: &str, base: &str, deref: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let out = ldap_tool(
        LDAPSEARCH,
        &[
            "-x",
            "-LLL",
            "-o",
            "ldif-wrap=no",
            "-H",
            url,
            "-b",
            base,
            "-s",
            "sub",
            "-a",
            deref,
            "(objectClass=*)",
            "objectClass",
        ],
        None,
    );
    assert!(
        out.success(),
        "ldapsearch -a {deref} at {base} on {url}: {out:?}"
    );
    let (mut dns, mut aliases) = (BTreeSet::new(), BTreeSet::new());
    for entry in out.stdout.split("\n\n") {
        let Some(dn) = entry
            .lines()
            .find_map(|l| l.strip_prefix("dn: "))
            .map(str::to_ascii_lowercase)
        else {
            continue;
        };
        if entry
            .lines()
            .any(|l| l.eq_ignore_ascii_case("objectClass: alias"))
        {
            aliases.insert(dn.clone());
        }
        dns.insert(dn);
    }
    (dns, aliases)
}

/// Entries of DSA `dsa` dropped as out of scope, from `/metrics`.
fn dropped(admin: &str, dsa: &str) -> u64 {
    let metrics = get(admin, "/metrics");
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("dsa_router_dsa_out_of_scope_entries_total{")
                && l.contains(&format!("dsa=\"{dsa}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn lower<S: AsRef<str>>(dns: &[S]) -> BTreeSet<String> {
    dns.iter()
        .map(|d| d.as_ref().to_ascii_lowercase())
        .collect()
}

#[test]
fn aliases_lead_anywhere_in_the_dsas_partition_and_no_further() {
    let s = Slapd::start(SlapdConfig::new("ALIASES", &[DEMOCORP], ldif()));
    let dir = tempfile::tempdir().unwrap();
    let admin = format!("127.0.0.1:{}", pick_port());
    let r = Router::start_with(
        &d1_and_narrow(dir.path(), s.port),
        dir.path(),
        &["--admin", &admin],
    );
    let aliases = format!("ou=aliases,{DEMOCORP}");
    let narrow = format!("ou=narrow,{DEMOCORP}");
    let alice = user_dn(DEMOCORP, "alice");
    let bob = user_dn(DEMOCORP, "bob");
    let alice_alias = format!("cn=alice,{aliases}");
    let target = format!("cn=target,{narrow}");

    // derefNever: the alias entry itself, as slapd gives it.
    let direct = search(&s.url, &aliases, "never");
    let routed = search(&r.url, &aliases, "never");
    println!("-a never at {aliases}: direct {direct:?}, router {routed:?}");
    assert_eq!(routed, direct, "derefNever: router and slapd differ");
    assert_eq!(routed.1, lower(&[&alice_alias]), "the alias entry");
    assert!(!routed.0.contains(&alice.to_ascii_lowercase()));

    // Dereferencing: alice's entry, outside the search's base but in D1's
    // partition, exactly as slapd gives it.
    for deref in ["always", "search"] {
        let direct = search(&s.url, &aliases, deref);
        let routed = search(&r.url, &aliases, deref);
        println!("-a {deref} at {aliases}: direct {direct:?}, router {routed:?}");
        assert_eq!(routed, direct, "-a {deref}: router and slapd differ");
        assert_eq!(
            routed.0,
            lower(&[&aliases, &alice]),
            "-a {deref}: the base and the aliased entry"
        );
        assert!(routed.1.is_empty(), "-a {deref}: an alias entry came");
    }
    // derefFindingBaseObj with the alias as the base: the subtree of the
    // aliased entry.
    let direct = search(&s.url, &alice_alias, "find");
    let routed = search(&r.url, &alice_alias, "find");
    println!("-a find at {alice_alias}: direct {direct:?}, router {routed:?}");
    assert_eq!(routed, direct, "-a find: router and slapd differ");
    assert_eq!(routed.0, lower(&[&alice]));
    assert_eq!(dropped(&admin, "D1"), 0, "nothing dropped for D1");

    // NARROW holds ou=narrow only (by the knowledge; slapd holds more):
    // the alias to bob leads outside it. Dropped and counted; the alias
    // within the partition is followed.
    let direct = search(&s.url, &narrow, "always");
    let routed = search(&r.url, &narrow, "always");
    println!("-a always at {narrow}: direct {direct:?}, router {routed:?}");
    assert_eq!(
        direct.0,
        lower(&[&narrow, &target, &bob]),
        "slapd follows both aliases"
    );
    assert_eq!(
        routed.0,
        lower(&[&narrow, &target]),
        "bob's entry, outside NARROW's partition, must not reach the client"
    );
    assert_eq!(dropped(&admin, "NARROW"), 1, "one entry dropped, counted");
    let status = get(&admin, "/status");
    assert!(
        status.contains("\"out_of_scope_entries\":1"),
        "/status counts it: {status}"
    );
    // Not dereferencing: both alias entries, nothing dropped.
    let routed = search(&r.url, &narrow, "never");
    assert_eq!(
        routed.1,
        lower(&[format!("cn=bob,{narrow}"), format!("cn=inside,{narrow}")])
    );
    assert_eq!(dropped(&admin, "NARROW"), 1, "nothing more dropped");
    let log = r.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("NARROW") && l.to_ascii_lowercase().contains("uid=bob")),
        "the dropped entry is logged against NARROW:\n{log}"
    );
}
