//! Identity on shared DSA connections: each client's identity stays its
//! own (test DSAs; real slapd with ldap-utils, Python `ldap3` and concurrent
//! Rust `ldap3` clients), and bind, compare and WhoAmI through the router
//! answer as the DSA does.
//!
//! The slapd tests need slapd, ldap-utils and the Python module ldap3
//! (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::dsas::five_dsas::{alice, bob, rt, setup, CUSTOMER, DEMOCORP};
use crate::dsas::inproc_checks::sees;
use crate::support;
use crate::support::inproc::*;
use crate::support::ldap::{dns, search, show, whoami};
use ldap3::exop::{WhoAmI, WhoAmIResp};
use ldap3::Scope;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::slapd::{
    ldap_tool, router_dn, run_tool, user_dn, ToolOutput, ALICE_PW, BOB_PW, ROUTER_PW,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identities_do_not_leak_between_clients() {
    // One DEMOCORP DSA, so every operation below shares it.
    let h = Builder::default().democorp(&["D1"]).start().await;
    let url = h.url();
    let restricted = "ou=Restricted,o=DEMOCORP,c=AU";

    let mut anon = ldap(&url).await;
    let (rc, dns, text) = sees(&mut anon, SECRET, Scope::Base).await;
    assert!(
        dns.is_empty() && rc == 32,
        "anonymous: rc {rc} {dns:?} {text}"
    );
    let (rc, dns, text) = sees(&mut anon, restricted, Scope::Subtree).await;
    assert!(
        dns.is_empty() && rc == 32,
        "anonymous: rc {rc} {dns:?} {text}"
    );

    let mut alice = bound(&url, ALICE, "alicepw").await;
    let mut router = bound(&url, ROUTER_ID, "routerpw").await;
    let (rc, dns, text) = sees(&mut alice, SECRET, Scope::Base).await;
    assert!(dns.is_empty() && rc == 32, "alice: rc {rc} {dns:?} {text}");
    let (rc, dns, _) = sees(&mut alice, DEMOCORP, Scope::Subtree).await;
    assert_eq!(rc, 0);
    assert!(
        !dns.iter()
            .any(|d| d.to_ascii_lowercase().contains("restricted")),
        "alice's subtree search shows restricted entries: {dns:?}"
    );
    let (rc, dns, text) = sees(&mut router, SECRET, Scope::Base).await;
    assert_eq!((rc, dns.len()), (0, 1), "router identity: {text}");

    for round in 0..20 {
        let ((arc, adns, atext), (rrc, rdns, rtext), (nrc, ndns, _)) = tokio::join!(
            sees(&mut alice, SECRET, Scope::Base),
            sees(&mut router, SECRET, Scope::Base),
            sees(&mut anon, SECRET, Scope::Base),
        );
        assert!(
            adns.is_empty() && arc == 32,
            "round {round}: alice saw {adns:?} (rc {arc}, {atext})"
        );
        assert!(
            rdns.len() == 1 && rrc == 0,
            "round {round}: router identity saw {rdns:?} (rc {rrc}, {rtext})"
        );
        assert!(ndns.is_empty() && nrc == 32, "round {round}: anonymous");
        assert_eq!(dsa_of(&atext).as_deref(), Some("D1"));
        assert_eq!(dsa_of(&rtext).as_deref(), Some("D1"));
        let ((arc, _, _), (rrc, rdns, _)) = tokio::join!(
            sees(&mut alice, restricted, Scope::Subtree),
            sees(&mut router, restricted, Scope::Subtree),
        );
        assert_eq!(arc, 32, "round {round}: alice subtree of ou=Restricted");
        assert_eq!((rrc, rdns.len()), (0, 2), "round {round}: router subtree");
    }
    let (exop, _) = within("whoami", alice.extended(WhoAmI))
        .await
        .unwrap()
        .success()
        .unwrap();
    assert_eq!(exop.parse::<WhoAmIResp>().authzid, format!("dn:{ALICE}"));
}

#[test]
fn compare_bind_whoami_through_router() {
    let s = setup("set write-precedence = D2;\n");
    let url = &s.router.url;
    let a = alice();
    // Compare: TRUE exits 6, FALSE 5 (ldapcompare's convention).
    let t = ldap_tool("ldapcompare", &["-x", "-H", url, &a, "sn:Example"], None);
    assert_eq!(t.code, Some(6), "{}", show("compare sn:Example", &t));
    assert!(t.stdout.contains("TRUE"), "{}", show("compare", &t));
    let f = ldap_tool("ldapcompare", &["-x", "-H", url, &a, "sn:Nobody"], None);
    assert_eq!(f.code, Some(5), "{}", show("compare sn:Nobody", &f));
    assert!(f.stdout.contains("FALSE"), "{}", show("compare", &f));
    // Compare as alice on the restricted entry: no access.
    let secret = format!("cn=secret,ou=restricted,{DEMOCORP}");
    let r = ldap_tool(
        "ldapcompare",
        &[
            "-x",
            "-H",
            url,
            "-D",
            &a,
            "-w",
            ALICE_PW,
            &secret,
            "description:top secret",
        ],
        None,
    );
    assert!(
        matches!(r.code, Some(32) | Some(50)),
        "{}",
        show("alice compares the restricted entry", &r)
    );
    // Compare as the router identity: allowed.
    let rdn = router_dn(DEMOCORP);
    let r = ldap_tool(
        "ldapcompare",
        &[
            "-x",
            "-H",
            url,
            "-D",
            &rdn,
            "-w",
            ROUTER_PW,
            &secret,
            "description:top secret",
        ],
        None,
    );
    assert_eq!(r.code, Some(6), "{}", show("router compares secret", &r));

    // Bind + WhoAmI.
    let w = whoami(url, &a, ALICE_PW);
    assert!(w.success(), "{}", show("whoami alice", &w));
    assert_eq!(w.stdout.trim(), format!("dn:{a}"), "{}", show("whoami", &w));
    let w = whoami(url, &bob(), BOB_PW);
    assert!(w.success(), "{}", show("whoami bob", &w));
    assert_eq!(w.stdout.trim(), format!("dn:{}", bob()));
    // Wrong password: invalidCredentials (49), from the DSA.
    let bad = whoami(url, &a, "wrong");
    assert_eq!(bad.code, Some(49), "{}", show("whoami bad pw", &bad));
    // Unknown user: invalidCredentials too.
    let bad = whoami(url, &user_dn(DEMOCORP, "nobody"), "x");
    assert_eq!(bad.code, Some(49), "{}", show("whoami unknown", &bad));
    // Anonymous WhoAmI: anonymous.
    let anon = ldap_tool("ldapwhoami", &["-x", "-H", url], None);
    assert!(anon.success(), "{}", show("whoami anonymous", &anon));
    assert_eq!(anon.stdout.trim(), "anonymous", "{}", show("anon", &anon));
    // A CUSTOMER user binds through C1.
    let cr = router_dn(CUSTOMER);
    let w = whoami(url, &cr, ROUTER_PW);
    assert!(w.success(), "{}", show("whoami customer router", &w));
    assert_eq!(w.stdout.trim(), format!("dn:{cr}"));
}

#[test]
fn identity_is_kept_per_client() {
    let s = setup("");
    let url = &s.router.url;
    let restricted = format!("ou=restricted,{DEMOCORP}");
    let a = alice();
    let rdn = router_dn(DEMOCORP);
    let sees_secret = |bind: Option<(&str, &str)>| -> bool {
        let out = search(
            url,
            bind,
            &[],
            &restricted,
            "sub",
            "(objectClass=*)",
            &["description"],
        );
        match out.code {
            Some(0) => {
                let d = dns(&out);
                assert!(
                    d.is_empty() || d.len() == 2,
                    "{}",
                    show("restricted search", &out)
                );
                !d.is_empty()
            }
            Some(32) => false,
            _ => panic!("{}", show("restricted search", &out)),
        }
    };
    assert!(!sees_secret(None), "anonymous must not see ou=restricted");
    assert!(
        !sees_secret(Some((&a, ALICE_PW))),
        "alice must not see ou=restricted"
    );
    assert!(
        sees_secret(Some((&rdn, ROUTER_PW))),
        "cn=router must see ou=restricted"
    );
    // Alternating processes: each keeps its own access.
    for i in 0..6 {
        let (who, bind, expect): (&str, Option<(&str, &str)>, bool) = match i % 3 {
            0 => ("router", Some((&rdn, ROUTER_PW)), true),
            1 => ("alice", Some((&a, ALICE_PW)), false),
            _ => ("anonymous", None, false),
        };
        assert_eq!(sees_secret(bind), expect, "round {i}: {who}");
    }
    // Long-lived interleaved connections: Python ldap3.
    let out = python(
        "identity_interleave.py",
        &[url, DEMOCORP, &a, ALICE_PW, &rdn, ROUTER_PW],
    );
    assert!(out.success(), "{}", show("identity_interleave.py", &out));
}

/// Long-lived connections, concurrently: alice, bob, cn=router and an
/// anonymous client, each with several operations outstanding at once on
/// the same DSAs, each getting exactly its own access.
#[test]
fn identity_concurrent_rust_ldap3() {
    let s = setup("");
    let url = s.router.url.clone();
    rt().block_on(async move {
        use ldap3::{LdapConnAsync, Scope, SearchEntry};
        let restricted = format!("ou=restricted,{DEMOCORP}");
        let mut clients = Vec::new();
        for (name, bind, expect) in [
            ("router", Some((router_dn(DEMOCORP), ROUTER_PW)), 2usize),
            ("alice", Some((alice(), ALICE_PW)), 0),
            ("bob", Some((bob(), BOB_PW)), 0),
            ("anonymous", None, 0),
        ] {
            let (conn, mut ldap) = LdapConnAsync::new(&url).await.unwrap();
            ldap3::drive!(conn);
            if let Some((dn, pw)) = &bind {
                ldap.simple_bind(dn, pw).await.unwrap().success().unwrap();
            }
            clients.push((name, ldap, expect));
        }
        let mut tasks = Vec::new();
        for (name, ldap, expect) in clients {
            let restricted = restricted.clone();
            tasks.push(tokio::spawn(async move {
                // 8 concurrent searches per client on one connection.
                let mut inner = Vec::new();
                for _ in 0..8 {
                    let mut l = ldap.clone();
                    let base = restricted.clone();
                    inner.push(tokio::spawn(async move {
                        let ldap3::SearchResult(entries, res) = l
                            .search(
                                &base,
                                Scope::Subtree,
                                "(objectClass=*)",
                                vec!["description"],
                            )
                            .await
                            .unwrap();
                        let n = entries.len();
                        let dns: Vec<String> = entries
                            .into_iter()
                            .map(|e| SearchEntry::construct(e).dn)
                            .collect();
                        (res.rc, n, dns)
                    }));
                }
                let mut got = Vec::new();
                for t in inner {
                    got.push(t.await.unwrap());
                }
                for (rc, n, dns) in &got {
                    let ok = if expect == 0 {
                        (*rc == 32 || *rc == 0) && *n == 0
                    } else {
                        *rc == 0 && *n == expect
                    };
                    assert!(
                        ok,
                        "{name}: rc {rc}, {n} entries {dns:?}; expected {expect}"
                    );
                }
                // WhoAmI is the client's own.
                let mut l = ldap;
                let w = l.extended(ldap3::exop::WhoAmI).await.unwrap();
                let ldap3::result::ExopResult(exop, res) = w;
                assert_eq!(res.rc, 0);
                let resp: ldap3::exop::WhoAmIResp = exop.parse();
                let want = match name {
                    "router" => format!("dn:{}", router_dn(DEMOCORP)),
                    "alice" => format!("dn:{}", alice()),
                    "bob" => format!("dn:{}", bob()),
                    _ => String::new(),
                };
                assert_eq!(resp.authzid, want, "{name}: WhoAmI");
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
}

fn interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop")
}

fn python(script: &str, args: &[&str]) -> ToolOutput {
    let path = interop_dir().join(script);
    let path = path.to_str().unwrap();
    let mut all = vec![path];
    all.extend_from_slice(args);
    run_tool("python3", &all, None, Duration::from_secs(120))
}

#[test]
fn python_ldap3_client() {
    let dep = run_tool(
        "python3",
        &["-c", "import ldap3"],
        None,
        Duration::from_secs(30),
    );
    assert!(
        dep.success(),
        "the Python module ldap3 is missing (scripts/install-deps.sh): {}",
        show("import ldap3", &dep)
    );
    let s = setup("");
    let out = python(
        "ldap3_client.py",
        &[&s.router.url, DEMOCORP, CUSTOMER, &alice(), ALICE_PW],
    );
    assert!(out.success(), "{}", show("ldap3_client.py", &out));
    assert!(
        out.stdout.contains("ldap3_client: ok"),
        "{}",
        show("ldap3_client.py", &out)
    );
}
