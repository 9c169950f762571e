//! Where each operation goes: one connection switching bases reaches each
//! partition, reads go to the group and writes to the write precedence
//! (in front of test DSAs, and with ldap-utils against real slapd, password
//! modify included), and a partition with no DSA reachable is unavailable.
//!
//! The slapd tests need slapd and ldap-utils (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::dsas::five_dsas::{alice, bob, setup, Dsas, DEMOCORP};
use crate::dsas::inproc_checks::set;
use crate::support;
use crate::support::inproc::*;
use crate::support::ldap::{dns, search, show, values, whoami};
use ldap3::exop::{WhoAmI, WhoAmIResp};
use ldap3::{Mod, Scope};
use std::collections::HashSet;
use std::time::Instant;
use support::slapd::{
    ldap_tool, user_dn, writer_dn, Slapd, ToolOutput, ALICE_PW, BOB_PW, WRITER_PW,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connection_switching_bases_routes_each_to_its_partition() {
    let h = Builder::default().start().await;
    let mut l = ldap(&h.url()).await;
    let democorp = set(["D1", "H1"]);
    let customer = set(["C1", "C2"]);
    for (i, (suffix, holders)) in [
        (DEMOCORP, &democorp),
        (DEMOCORP, &democorp),
        (CUSTOMER, &customer),
        (CUSTOMER, &customer),
        (DEMOCORP, &democorp),
        (CUSTOMER, &customer),
        (DEMOCORP, &democorp),
    ]
    .into_iter()
    .enumerate()
    {
        let by = served_by(&mut l, suffix).await;
        assert!(
            holders.contains(&by),
            "request {i} for {suffix} answered by {by}, not one of {holders:?}"
        );
    }
}

fn only_in(h: &Harness, dn: &str, holder: &str, others: &[&str]) {
    assert!(
        h.dsa(holder).dir.contains(dn),
        "{dn} must exist in {holder}"
    );
    for o in others {
        assert!(!h.dsa(o).dir.contains(dn), "{dn} must not exist in {o}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_route_reads_to_group_and_writes_to_write_precedence() {
    let h = Builder::default().write_precedence(&["D2"]).start().await;
    let url = h.url();
    let mut l = ldap(&url).await;
    let readers = ["D1", "H1"];

    // WhoAmI, anonymous: the empty authzId.
    let (exop, _) = within("whoami", l.extended(WhoAmI))
        .await
        .unwrap()
        .success()
        .unwrap();
    assert_eq!(exop.parse::<WhoAmIResp>().authzid, "");

    // Compare is a read: GROUP1.
    let r = within(
        "compare",
        l.compare(ALICE, "mail", "alice@example.com".as_bytes()),
    )
    .await
    .unwrap();
    assert_eq!(r.0.rc, 6, "compareTrue expected: {:?}", r.0);
    let d = dsa_of(&r.0.text).unwrap_or_default();
    assert!(readers.contains(&d.as_str()), "compare answered by {d}");
    let r = within(
        "compare",
        l.compare(ALICE, "mail", "bob@example.com".as_bytes()),
    )
    .await
    .unwrap();
    assert_eq!(r.0.rc, 5, "compareFalse expected: {:?}", r.0);

    // A wrong password fails and leaves the client anonymous.
    let r = within("bad bind", l.simple_bind(ALICE, "bobpw"))
        .await
        .unwrap();
    assert_eq!(r.rc, 49, "invalidCredentials expected: {r:?}");
    let (exop, _) = within("whoami", l.extended(WhoAmI))
        .await
        .unwrap()
        .success()
        .unwrap();
    assert_eq!(exop.parse::<WhoAmIResp>().authzid, "");

    // Bind is a read too.
    let r = within("bind", l.simple_bind(ALICE, "alicepw"))
        .await
        .unwrap();
    assert_eq!(r.rc, 0, "bind: {r:?}");
    let d = dsa_of(&r.text).unwrap_or_default();
    assert!(readers.contains(&d.as_str()), "bind answered by {d}");
    let (exop, _) = within("whoami", l.extended(WhoAmI))
        .await
        .unwrap()
        .success()
        .unwrap();
    assert_eq!(exop.parse::<WhoAmIResp>().authzid, format!("dn:{ALICE}"));

    // Writes: D2 (write-precedence), and only D2.
    let others = ["D1", "H1", "H2"];
    let dn = "cn=Router Test,ou=People,o=DEMOCORP,c=AU";
    let r = within(
        "add",
        l.add(
            dn,
            vec![
                ("objectClass", HashSet::from(["top", "person"])),
                ("cn", HashSet::from(["Router Test"])),
                ("sn", HashSet::from(["Test"])),
            ],
        ),
    )
    .await
    .unwrap();
    assert_eq!((r.rc, r.text.as_str()), (0, "testdsa D2"), "add: {r:?}");
    only_in(&h, dn, "D2", &others);

    let r = within(
        "modify",
        l.modify(
            dn,
            vec![Mod::Replace("description", HashSet::from(["changed"]))],
        ),
    )
    .await
    .unwrap();
    assert_eq!((r.rc, r.text.as_str()), (0, "testdsa D2"), "modify: {r:?}");
    let e = h.dsa("D2").dir.entry(dn).unwrap();
    assert!(
        e.iter()
            .any(|(a, v)| a.eq_ignore_ascii_case("description") && v == &["changed"]),
        "modified entry on D2: {e:?}"
    );

    let renamed = "cn=Router Renamed,ou=People,o=DEMOCORP,c=AU";
    let r = within("modify DN", l.modifydn(dn, "cn=Router Renamed", true, None))
        .await
        .unwrap();
    assert_eq!((r.rc, r.text.as_str()), (0, "testdsa D2"), "modDN: {r:?}");
    only_in(&h, renamed, "D2", &others);
    for n in ["D1", "H1", "H2", "D2"] {
        assert!(!h.dsa(n).dir.contains(dn), "old name gone from {n}");
    }

    let r = within("delete", l.delete(renamed)).await.unwrap();
    assert_eq!((r.rc, r.text.as_str()), (0, "testdsa D2"), "delete: {r:?}");
    for n in ["D1", "H1", "H2", "D2"] {
        assert!(!h.dsa(n).dir.contains(renamed), "deleted from {n}");
    }

    // CUSTOMER has no write-precedence of its own: C1, first of its list.
    // (Anonymously: alice is a DEMOCORP identity that C1 does not know, so
    // her writes there are refused by C1 with authorizationDenied.)
    let cdn = "cn=Router Test,ou=People,o=CUSTOMER,c=AU";
    let mut anon = ldap(&url).await;
    let r = within(
        "add",
        anon.add(
            cdn,
            vec![
                ("objectClass", HashSet::from(["top", "person"])),
                ("sn", HashSet::from(["Test"])),
            ],
        ),
    )
    .await
    .unwrap();
    assert_eq!((r.rc, r.text.as_str()), (0, "testdsa C1"), "add: {r:?}");
    only_in(&h, cdn, "C1", &["C2"]);
}

async fn assert_unavailable(h: &Harness, base: &str, case: &str) {
    let mut l = ldap(&h.url()).await;
    let t = Instant::now();
    let r = within(
        case,
        l.search(base, Scope::Base, "(objectClass=*)", vec!["cn"]),
    )
    .await
    .unwrap();
    println!("{case}: rc {} in {:?}: {}", r.1.rc, t.elapsed(), r.1.text);
    assert!(
        r.1.rc == 52 || (r.1.rc != 0 && r.1.text.starts_with("dsa-router")),
        "{case}: expected unavailable (52), got {:?}",
        r.1
    );
    assert!(r.0.is_empty());
    // The other partition is unaffected.
    let d = served_by(&mut l, DEMOCORP).await;
    assert!(["D1", "H1"].contains(&d.as_str()), "{case}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_with_no_dsa_reachable_is_unavailable() {
    let h = Builder::default().start().await;
    for n in ["C1", "C2"] {
        h.dsa(n).faults.set_refuse(true);
    }
    for i in 0..3 {
        assert_unavailable(&h, CUSTOMER, &format!("refusing, try {i}")).await;
    }
    drop(h);

    let mut h = Builder::default().start().await;
    for n in ["C1", "C2"] {
        h.take_dsa(n).shutdown().await;
    }
    for i in 0..3 {
        assert_unavailable(&h, CUSTOMER, &format!("shut down, try {i}")).await;
    }
}

/// `ldapmodify -x` against `url` as `bind`, LDIF on stdin.
fn modify(url: &str, bind: (&str, &str), ldif: &str) -> ToolOutput {
    ldap_tool(
        "ldapmodify",
        &["-x", "-H", url, "-D", bind.0, "-w", bind.1],
        Some(ldif),
    )
}

/// Exit status of a base search of `dn` on `url` as the rootdn-free
/// writer (sees everything that exists): 0 exists, 32 noSuchObject.
fn exists_on(s: &Slapd, dn: &str) -> bool {
    let wdn = writer_dn(DEMOCORP);
    let out = search(
        &s.url,
        Some((&wdn, WRITER_PW)),
        &[],
        dn,
        "base",
        "(objectClass=*)",
        &["1.1"],
    );
    match out.code {
        Some(0) => dns(&out).len() == 1,
        Some(32) => false,
        _ => panic!(
            "{}",
            show(&format!("base search of {dn} on {}", s.name), &out)
        ),
    }
}

/// `description` of `dn`, read directly on a slapd as the writer.
fn description_on(s: &Slapd, dn: &str) -> Vec<String> {
    let wdn = writer_dn(DEMOCORP);
    let out = search(
        &s.url,
        Some((&wdn, WRITER_PW)),
        &[],
        dn,
        "base",
        "(objectClass=*)",
        &["description"],
    );
    assert!(
        out.success(),
        "{}",
        show(&format!("read {dn} on {}", s.name), &out)
    );
    values(&out, "description")
}

/// Where `dn` exists, among the DEMOCORP DSAs.
fn holders(dsas: &Dsas, dn: &str) -> Vec<&'static str> {
    ["D1", "H1", "H2", "D2"]
        .into_iter()
        .filter(|n| exists_on(dsas.get(n), dn))
        .collect()
}

#[test]
fn writes_land_on_write_precedence_dsa() {
    let s = setup("set write-precedence = D2;\n");
    let url = &s.router.url;
    let wdn = writer_dn(DEMOCORP);
    let writer = (wdn.as_str(), WRITER_PW);
    let new = user_dn(DEMOCORP, "carol");
    let renamed = user_dn(DEMOCORP, "carol2");

    // Add.
    let out = modify(
        url,
        writer,
        &format!(
            "dn: {new}\nchangetype: add\nobjectClass: inetOrgPerson\nuid: carol\n\
             cn: Carol Example\nsn: Example\n"
        ),
    );
    assert!(out.success(), "{}", show("add carol", &out));
    assert_eq!(holders(&s.dsas, &new), ["D2"], "add must land on D2 only");
    // Visible through the router? Reads go to GROUP1 (D1, H1), which do not
    // have it: the DSAs do not replicate. So only check directly.

    // Modify.
    let out = modify(
        url,
        writer,
        &format!("dn: {new}\nchangetype: modify\nreplace: description\ndescription: added via router\n-\n"),
    );
    assert!(out.success(), "{}", show("modify carol", &out));
    assert_eq!(description_on(s.dsas.get("D2"), &new), ["added via router"]);

    // Modify DN.
    let out = modify(
        url,
        writer,
        &format!("dn: {new}\nchangetype: modrdn\nnewrdn: uid=carol2\ndeleteoldrdn: 1\n"),
    );
    assert!(out.success(), "{}", show("modrdn carol", &out));
    assert!(holders(&s.dsas, &new).is_empty());
    assert_eq!(holders(&s.dsas, &renamed), ["D2"]);

    // Delete.
    let out = modify(url, writer, &format!("dn: {renamed}\nchangetype: delete\n"));
    assert!(out.success(), "{}", show("delete carol2", &out));
    assert!(holders(&s.dsas, &renamed).is_empty());

    // Alice modifies her own entry (self write).
    let a = alice();
    let out = modify(
        url,
        (&a, ALICE_PW),
        &format!(
            "dn: {a}\nchangetype: modify\nreplace: description\ndescription: alice was here\n-\n"
        ),
    );
    assert!(out.success(), "{}", show("alice modifies herself", &out));
    assert_eq!(description_on(s.dsas.get("D2"), &a), ["alice was here"]);
    for n in ["D1", "H1", "H2"] {
        assert!(
            description_on(s.dsas.get(n), &a).is_empty(),
            "alice's self-modify also reached {n}"
        );
    }
    // Alice may not modify bob: insufficientAccessRights (50) from D2.
    let out = modify(
        url,
        (&a, ALICE_PW),
        &format!(
            "dn: {}\nchangetype: modify\nreplace: description\ndescription: by alice\n-\n",
            bob()
        ),
    );
    assert_eq!(out.code, Some(50), "{}", show("alice modifies bob", &out));
    assert!(description_on(s.dsas.get("D2"), &bob()).is_empty());
    // Anonymous writes are refused too: slapd says strongerAuthRequired
    // (8) or insufficientAccessRights (50).
    let out = ldap_tool(
        "ldapmodify",
        &["-x", "-H", url],
        Some(&format!(
            "dn: {}\nchangetype: modify\nreplace: description\ndescription: anon\n-\n",
            bob()
        )),
    );
    assert!(
        matches!(out.code, Some(8) | Some(50)),
        "{}",
        show("anonymous modify", &out)
    );

    // The access log names D2 for every write.
    let log_dsas = s.router.access_dsas("add", &new);
    assert_eq!(log_dsas, ["D2"], "access log for the add");
}

#[test]
fn password_modify_lands_on_write_precedence_dsa() {
    let s = setup("set write-precedence = H2;\n");
    let url = &s.router.url;
    let a = alice();
    // Alice changes her own password (no user identity: the bound DN).
    let out = ldap_tool(
        "ldappasswd",
        &["-x", "-H", url, "-D", &a, "-w", ALICE_PW, "-s", "alice-new"],
        None,
    );
    assert!(out.success(), "{}", show("ldappasswd alice", &out));
    let h2 = s.dsas.get("H2");
    let w = whoami(&h2.url, &a, "alice-new");
    assert!(w.success(), "{}", show("bind on H2 with the new pw", &w));
    let w = whoami(&h2.url, &a, ALICE_PW);
    assert_eq!(w.code, Some(49), "{}", show("old pw on H2", &w));
    for n in ["D1", "H1", "D2"] {
        let w = whoami(&s.dsas.get(n).url, &a, ALICE_PW);
        assert!(w.success(), "{}", show(&format!("old pw on {n}"), &w));
    }
    // The writer changes bob's (user identity given): routed by bob's DN.
    let wdn = writer_dn(DEMOCORP);
    let b = bob();
    let out = ldap_tool(
        "ldappasswd",
        &[
            "-x", "-H", url, "-D", &wdn, "-w", WRITER_PW, "-s", "bob-new", &b,
        ],
        None,
    );
    assert!(out.success(), "{}", show("ldappasswd bob by writer", &out));
    assert!(whoami(&h2.url, &b, "bob-new").success());
    assert!(whoami(&s.dsas.get("D1").url, &b, BOB_PW).success());
    // A generated password: the response value (genPasswd) comes back
    // through the router.
    let u1 = user_dn(DEMOCORP, "user0001");
    let out = ldap_tool(
        "ldappasswd",
        &["-x", "-H", url, "-D", &wdn, "-w", WRITER_PW, &u1],
        None,
    );
    assert!(out.success(), "{}", show("ldappasswd generated", &out));
    let generated = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("New password: "))
        .unwrap_or_else(|| panic!("{}", show("no generated password", &out)))
        .trim()
        .to_string();
    let w = whoami(&h2.url, &u1, &generated);
    assert!(
        w.success(),
        "{}",
        show("bind with the generated pw on H2", &w)
    );
    // Alice may not change bob's.
    let out = ldap_tool(
        "ldappasswd",
        &["-x", "-H", url, "-D", &a, "-w", "alice-new", "-s", "x", &b],
        None,
    );
    // Her bind may land on D1/H1 where her password is still alicepw, so
    // retry with the old one if the bind is what failed.
    let out = if out.code == Some(49) {
        ldap_tool(
            "ldappasswd",
            &["-x", "-H", url, "-D", &a, "-w", ALICE_PW, "-s", "x", &b],
            None,
        )
    } else {
        out
    };
    assert!(
        out.code != Some(0) && out.stdout.contains("(50)"),
        "{}",
        show("alice changes bob's", &out)
    );
    assert!(whoami(&h2.url, &b, "bob-new").success());
}
