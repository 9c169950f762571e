//! CA Directory knowledge settings that change where operations go, checked
//! against real slapd behind the router: `dsa-flags = read-only` (CA
//! routers send no updates to a read-only namespace).
//!
//! Needs slapd and ldap-utils (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::knowledge::{Dsa, Knowledge};
use support::ldap::show;
use support::router::Router;
use support::slapd::{admin_dn, ldap_tool, Slapd, SlapdConfig, ToolOutput, ADMIN_PW};

const DEMOCORP: &str = "o=DEMOCORP,c=AU";

/// `set dsa` blocks for `dsas` (name, slapd, flags), all holding
/// `o=DEMOCORP,c=AU`, in that order.
fn democorp_dsas(dir: &Path, dsas: &[(&str, &Slapd, &str)]) -> PathBuf {
    Knowledge::new()
        .dsas(dsas.iter().map(|(name, s, flags)| {
            Dsa::new(name, s.port)
                .prefix("<c AU><o DEMOCORP>")
                .dsa_name_only(&format!("<c AU><o DEMOCORP><cn {name}>"))
                .flags(flags)
        }))
        .write(dir)
}

fn add(url: &str, uid: &str) -> ToolOutput {
    let ldif = format!(
        "dn: uid={uid},ou=people,{DEMOCORP}\nobjectClass: inetOrgPerson\nuid: {uid}\ncn: {uid}\nsn: {uid}\n"
    );
    let admin = admin_dn(DEMOCORP);
    ldap_tool(
        "ldapadd",
        &["-x", "-H", url, "-D", &admin, "-w", ADMIN_PW],
        Some(&ldif),
    )
}

fn exists(url: &str, uid: &str) -> bool {
    let out = ldap_tool(
        "ldapsearch",
        &[
            "-x",
            "-LLL",
            "-H",
            url,
            "-b",
            &format!("uid={uid},ou=people,{DEMOCORP}"),
            "-s",
            "base",
            "1.1",
        ],
        None,
    );
    out.success()
}

fn explain(k: &Path, op: &str) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .arg("explain")
        .arg(k)
        .arg(format!("uid=new,ou=people,{DEMOCORP}"))
        .args(["--op", op, "--json"])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "explain --json: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[test]
fn read_only_dsas_get_no_updates() {
    // RO is first in knowledge order: without the flag it would be the
    // write DSA.
    let ro = Slapd::start(SlapdConfig::seeded("RO", &[DEMOCORP]));
    let rw = Slapd::start(SlapdConfig::seeded("RW", &[DEMOCORP]));
    let dir = tempfile::tempdir().unwrap();
    let k = democorp_dsas(
        dir.path(),
        &[
            ("RO", &ro, "read-only, load-share"),
            ("RW", &rw, "multi-write"),
        ],
    );
    let x = explain(&k, "modify");
    assert_eq!(x["targets"], serde_json::json!(["RW"]), "{x}");
    assert!(
        x["reason"]
            .as_str()
            .unwrap()
            .contains("read-only DSAs take no writes: RO"),
        "{x}"
    );
    let x = explain(&k, "search");
    assert_eq!(
        x["order"],
        serde_json::json!(["RO", "RW"]),
        "reads still use RO: {x}"
    );

    let router = Router::start(&k, dir.path());
    let out = add(&router.url, "newbie");
    assert!(out.success(), "{}", show("add via router", &out));
    assert!(exists(&rw.url, "newbie"), "the add reached RW");
    assert!(!exists(&ro.url, "newbie"), "the add never reached RO");
    drop(router);

    // Only read-only DSAs: writes are refused (53), naming the partition;
    // reads work.
    let k = democorp_dsas(dir.path(), &[("RO", &ro, "read-only")]);
    let x = explain(&k, "add");
    assert_eq!(x["error"], "unwillingToPerform", "{x}");
    let router = Router::start(&k, dir.path());
    let out = add(&router.url, "refused");
    assert_eq!(
        out.code,
        Some(53),
        "{}",
        show("add to a read-only partition", &out)
    );
    assert!(
        out.stderr
            .contains("partition o=DEMOCORP,c=AU is read-only"),
        "{}",
        out.stderr
    );
    assert!(!exists(&ro.url, "refused"));
    assert!(exists(&router.url, "alice"), "reads are served");
}

// ------------------------------------------------------------ self-routing

/// The seed knowledge in `dir`, the router block R1 at `port`.
fn seed_with_router_at(dir: &Path, port: u16) -> PathBuf {
    let seed = Path::new(env!("CARGO_MANIFEST_DIR")).join("knowledge");
    for e in fs::read_dir(&seed).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "dxc" || x == "dxg") {
            let mut text = fs::read_to_string(&p).unwrap();
            if p.file_name().is_some_and(|n| n == "R1.dxc") {
                text = text.replace("port 3389", &format!("port {port}"));
            }
            fs::write(dir.join(p.file_name().unwrap()), text).unwrap();
        }
    }
    dir.join("router.dxg")
}

#[test]
fn without_name_the_router_recognises_its_own_block_by_address() {
    let dir = tempfile::tempdir().unwrap();
    let port = support::slapd::pick_port();
    let k = seed_with_router_at(dir.path(), port);
    let admin = format!("127.0.0.1:{}", support::slapd::pick_port());
    let listen = format!("127.0.0.1:{port}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .args([
            "serve",
            "--knowledge",
            k.to_str().unwrap(),
            "--listen",
            &listen,
        ])
        .args(["--admin", &admin, "--probe-interval", "0"])
        .env("NO_COLOR", "1")
        .stderr(fs::File::create(dir.path().join("log")).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let st = loop {
        if let Ok(r) = ureq::get(&format!("http://{admin}/status")).call() {
            break serde_json::from_str::<serde_json::Value>(&r.into_string().unwrap()).unwrap();
        }
        assert!(std::time::Instant::now() < deadline, "router did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let _ = child.kill();
    let _ = child.wait();
    let log = fs::read_to_string(dir.path().join("log")).unwrap();
    assert!(log.contains("taken as the router's own block"), "{log}");
    assert_eq!(st["router"], "R1", "{st}");
    let targets: Vec<&str> = st["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["dsas"].as_array().unwrap())
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert!(!targets.contains(&"R1"), "R1 is a target: {targets:?}");
    assert_eq!(targets.len(), 6, "{targets:?}");
}

#[test]
fn a_router_that_would_route_to_itself_refuses_the_loop() {
    let dir = tempfile::tempdir().unwrap();
    let port = support::slapd::pick_port();
    // "SELF" holds the partition at the router's own address, and --name
    // names another block: knowledge that routes the router to itself.
    let k = Knowledge::new()
        .dsa(Dsa::at_host("R9", "192.0.2.1", 389).prefix("<c NZ>"))
        .dsa(Dsa::new("SELF", port).prefix("<c AU><o DEMOCORP>"))
        .write(dir.path());
    let log_path = dir.path().join("log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .args(["serve", "--knowledge", k.to_str().unwrap()])
        .args(["--listen", &format!("127.0.0.1:{port}"), "--name", "R9"])
        .args(["--admin", "none"])
        .env("NO_COLOR", "1")
        .stderr(fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while !fs::read_to_string(&log_path)
        .unwrap()
        .contains("dsa-router listening")
    {
        assert!(std::time::Instant::now() < deadline, "router did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let url = format!("ldap://127.0.0.1:{port}");
    let t0 = std::time::Instant::now();
    let out = ldap_tool(
        "ldapsearch",
        &["-x", "-H", &url, "-b", DEMOCORP, "-s", "base", "1.1"],
        None,
    );
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        t0.elapsed()
    );
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(out.code, Some(52), "{}", show("search", &out));
    let log = fs::read_to_string(&log_path).unwrap();
    assert!(
        log.contains("loop: DSA SELF's address is this router's own"),
        "{log}"
    );
    // Bounded: a few refused connections, not hundreds.
    let loops = log.matches("loop: DSA SELF").count();
    assert!(loops <= 10, "{loops} loop connections:\n{log}");
}

// ------------------------------------------------------------ native-prefix

const NATIVE: &str = "o=NATIVE,c=AU";

/// One DSA `N1` holding `o=DEMOCORP,c=AU` under `o=NATIVE,c=AU`.
fn native_knowledge(dir: &Path, s: &Slapd) -> PathBuf {
    Knowledge::new()
        .dsa(
            Dsa::new("N1", s.port)
                .prefix("<c AU><o DEMOCORP>")
                .native_prefix("<c AU><o NATIVE>"),
        )
        .write(dir)
}

#[test]
fn a_dsa_with_a_native_prefix_stores_under_it_and_clients_see_the_knowledge_prefix() {
    let s = Slapd::start(SlapdConfig::seeded("NATIVE", &[NATIVE]));
    let dir = tempfile::tempdir().unwrap();
    let router = Router::start(&native_knowledge(dir.path(), &s), dir.path());
    let admin = admin_dn(DEMOCORP);
    let search = |url: &str, base: &str, filter: &str| {
        ldap_tool(
            "ldapsearch",
            &["-x", "-LLL", "-H", url, "-b", base, filter, "1.1"],
            None,
        )
    };
    // A search: DNs under the knowledge prefix.
    let out = search(&router.url, DEMOCORP, "(uid=alice)");
    assert!(out.success(), "{}", show("search", &out));
    assert_eq!(
        out.stdout.trim(),
        format!("dn: uid=alice,ou=people,{DEMOCORP}"),
        "{}",
        out.stdout
    );
    // An add (bound as the administrator, whose DN is mapped too): stored
    // under the DSA's own prefix.
    let out = add(&router.url, "newbie");
    assert!(out.success(), "{}", show("add", &out));
    let direct = search(&s.url, NATIVE, "(uid=newbie)");
    assert_eq!(
        direct.stdout.trim(),
        format!("dn: uid=newbie,ou=people,{NATIVE}"),
        "{}",
        direct.stdout
    );
    // A modify DN with a new superior: moved within the DSA's tree.
    let out = ldap_tool(
        "ldapmodrdn",
        &[
            "-x",
            "-H",
            &router.url,
            "-D",
            &admin,
            "-w",
            ADMIN_PW,
            "-s",
            &format!("ou=restricted,{DEMOCORP}"),
            &format!("uid=newbie,ou=people,{DEMOCORP}"),
            "uid=newbie",
        ],
        None,
    );
    assert!(out.success(), "{}", show("modrdn", &out));
    let direct = ldap_tool(
        "ldapsearch",
        &[
            "-x",
            "-LLL",
            "-H",
            &s.url,
            "-D",
            &admin_dn(NATIVE),
            "-w",
            ADMIN_PW,
            "-b",
            NATIVE,
            "(uid=newbie)",
            "1.1",
        ],
        None,
    );
    assert_eq!(
        direct.stdout.trim(),
        format!("dn: uid=newbie,ou=restricted,{NATIVE}"),
        "{}",
        direct.stdout
    );
    // A bound user (bind DN mapped) and a missing entry's matchedDN.
    let alice = format!("uid=alice,ou=people,{DEMOCORP}");
    let out = ldap_tool(
        "ldapsearch",
        &[
            "-x",
            "-H",
            &router.url,
            "-D",
            &alice,
            "-w",
            "alicepw",
            "-b",
            &format!("uid=nobody,ou=people,{DEMOCORP}"),
            "-s",
            "base",
        ],
        None,
    );
    assert_eq!(out.code, Some(32), "{}", show("missing entry", &out));
    assert!(
        out.stdout
            .contains(&format!("matchedDN: ou=people,{DEMOCORP}")),
        "{}",
        out.stdout
    );
}

/// A hexstring RDN value (RFC 4514 2.4, `cn=#04024142`: the BER encoding
/// of the value) reaches a DSA with a native prefix as a hexstring, so the
/// client gets the answer the DSA gives for it directly. slapd 2.5 refuses
/// hexstring values in a DN (`invalidDNSyntax`, "invalid DN"); before, the
/// router sent `cn=\#04024142` (a string value that starts with `#`),
/// which slapd looked up (`noSuchObject`). A string value that starts with
/// `#` stays one.
#[test]
fn hexstring_rdn_values_reach_a_native_prefix_dsa_as_hexstrings() {
    let s = Slapd::start(SlapdConfig::seeded("NATIVEHEX", &[NATIVE]));
    let dir = tempfile::tempdir().unwrap();
    let router = Router::start(&native_knowledge(dir.path(), &s), dir.path());
    let admin = |suffix: &str| admin_dn(suffix);
    // (client's DN below the suffix, the code slapd gives directly)
    for (below, code) in [
        ("cn=#04024142", 34),
        ("uid=#0C05616C696365,ou=people", 34),
        ("cn=\\#04024142", 32),
    ] {
        let read = |url: &str, suffix: &str| {
            let base = format!("{below},{suffix}");
            let search = ldap_tool(
                "ldapsearch",
                &["-x", "-LLL", "-H", url, "-b", &base, "-s", "base", "1.1"],
                None,
            );
            let compare = ldap_tool(
                "ldapcompare",
                &[
                    "-x",
                    "-H",
                    url,
                    "-D",
                    &admin(suffix),
                    "-w",
                    ADMIN_PW,
                    &base,
                    "cn:AB",
                ],
                None,
            );
            [search, compare].map(|o| {
                let text = format!("{}{}", o.stdout, o.stderr).replace(suffix, "SUFFIX");
                (o.code, text)
            })
        };
        let direct = read(&s.url, NATIVE);
        let via = read(&router.url, DEMOCORP);
        assert_eq!(direct[0].0, Some(code), "{below}: {direct:?}");
        assert_eq!(via, direct, "{below}: through the router, then directly");
    }
}
