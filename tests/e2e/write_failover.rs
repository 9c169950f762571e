//! A write that never reached its DSA goes to the next DSA of the write
//! order (issue 37, point 2): the write DSA is killed (`kill -9`), and at
//! once, before any probe can mark it down, `ldapmodify` through the
//! router: the router's connection to it is gone, the new connect is
//! refused, nothing was sent, and the write lands on the next DSA, with
//! its line in the access log.
//!
//! Needs slapd and ldap-utils (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support;

use std::collections::HashSet;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use support::router::Router;
use support::slapd::{
    ldap_tool, user_dn, writer_dn, Slapd, SlapdConfig, ToolOutput, ROUTER_PW, WRITER_PW,
};

const DEMOCORP: &str = "o=DEMOCORP,c=AU";

/// Knowledge: D1 then D2 for DEMOCORP, both writable; the write order is
/// D1, D2.
fn knowledge(dir: &Path, dsas: &[(&str, u16)]) -> std::path::PathBuf {
    let mut root = String::new();
    for (name, port) in dsas {
        root.push_str(&format!(
            "set dsa \"{name}\" =\n{{\n\
             \x20   prefix            = <c AU><o DEMOCORP>\n\
             \x20   ldap-dsa-name     = <c AU><o DEMOCORP><cn router>\n\
             \x20   ldap-dsa-password = \"{ROUTER_PW}\"\n\
             \x20   address           = tcp \"127.0.0.1\" port {port}\n\
             \x20   dsa-flags         = multi-write\n\
             \x20   trust-flags       = trust-conveyed-originator\n\
             }};\n"
        ));
    }
    let names: Vec<&str> = dsas.iter().map(|d| d.0).collect();
    root.push_str(&format!("set write-precedence = {};\n", names.join(", ")));
    let path = dir.join("router.dxg");
    fs::write(&path, root).unwrap();
    path
}

fn add(url: &str, uid: &str) -> ToolOutput {
    let wdn = writer_dn(DEMOCORP);
    let dn = user_dn(DEMOCORP, uid);
    let ldif = format!(
        "dn: {dn}\nchangetype: add\nobjectClass: inetOrgPerson\nuid: {uid}\n\
         cn: {uid}\nsn: Example\n"
    );
    ldap_tool(
        "ldapmodify",
        &["-x", "-H", url, "-D", &wdn, "-w", WRITER_PW],
        Some(&ldif),
    )
}

/// Whether `dn` exists on `s` (searched directly, as the writer).
fn exists_on(s: &Slapd, dn: &str) -> bool {
    let wdn = writer_dn(DEMOCORP);
    let out = ldap_tool(
        "ldapsearch",
        &[
            "-x", "-LLL", "-H", &s.url, "-D", &wdn, "-w", WRITER_PW, "-b", dn, "-s", "base", "1.1",
        ],
        None,
    );
    out.code == Some(0) && out.stdout.contains("dn:")
}

/// The access log's JSON lines for an add of `dn`, once there is one.
fn add_lines(file: &Path, dn: &str) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines: Vec<serde_json::Value> = fs::read_to_string(file)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .filter(|v: &serde_json::Value| v["op"] == "add" && v["dn"] == dn)
            .collect();
        if !lines.is_empty() || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The router, with its access log in JSON, and probes far apart: it
/// learns of D1's death only from the operations it sends there.
fn router(k: &Path, dir: &Path, file: &Path) -> Router {
    Router::start_with(
        k,
        dir,
        &[
            "--access-log",
            file.to_str().unwrap(),
            "--access-log-format",
            "json",
            "--probe-interval",
            "60",
        ],
    )
}

/// An add of `uid` as the writer, on the client connection `l`.
async fn add_on(l: &mut ldap3::Ldap, uid: &str) -> ldap3::LdapResult {
    let dn = user_dn(DEMOCORP, uid);
    let attrs = vec![
        ("objectClass", HashSet::from(["inetOrgPerson"])),
        ("uid", HashSet::from([uid])),
        ("cn", HashSet::from([uid])),
        ("sn", HashSet::from(["Example"])),
    ];
    tokio::time::timeout(Duration::from_secs(30), l.add(&dn, attrs))
        .await
        .unwrap()
        .unwrap()
}

/// A client bound as the writer.
async fn writer(url: &str) -> ldap3::Ldap {
    let (conn, mut l) = ldap3::LdapConnAsync::new(url).await.unwrap();
    ldap3::drive!(conn);
    let r = l
        .simple_bind(&writer_dn(DEMOCORP), WRITER_PW)
        .await
        .unwrap();
    assert_eq!(r.rc, 0, "{r:?}");
    l
}

/// The must-show: `kill -9` of the write DSA, then at once `ldapmodify`
/// (which binds first, then writes): success on the next DSA, and a line
/// for it in the access log.
#[test]
fn ldapmodify_after_kill_9_of_the_write_dsa_lands_on_the_next_one() {
    let mut d1 = Slapd::start(SlapdConfig::seeded("D1", &[DEMOCORP]));
    let d2 = Slapd::start(SlapdConfig::seeded("D2", &[DEMOCORP]));
    let dir = tempfile::tempdir().unwrap();
    let k = knowledge(dir.path(), &[("D1", d1.port), ("D2", d2.port)]);
    let file = dir.path().join("access.log");
    let router = router(&k, dir.path(), &file);
    let out = add(&router.url, "before");
    assert!(out.success(), "{out:?}");
    let before = user_dn(DEMOCORP, "before");
    assert!(exists_on(&d1, &before) && !exists_on(&d2, &before));

    d1.kill9();
    let out = add(&router.url, "after");
    assert!(out.success(), "the write after kill -9 of D1: {out:?}");
    let after = user_dn(DEMOCORP, "after");
    assert!(exists_on(&d2, &after), "the write landed on D2");
    let lines = add_lines(&file, &after);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(lines[0]["dsa"], "D2", "{}", lines[0]);
    assert_eq!(lines[0]["result"], 0, "{}", lines[0]);
}

/// The write itself meets the dead DSA: a client bound before the kill
/// writes on the same connection. Its DSA is still up for the router; the
/// connect is refused, nothing was sent, and the write goes to D2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_connect_is_refused_goes_to_the_next_dsa_and_is_logged() {
    let mut d1 = Slapd::start(SlapdConfig::seeded("D1", &[DEMOCORP]));
    let d2 = Slapd::start(SlapdConfig::seeded("D2", &[DEMOCORP]));
    let dir = tempfile::tempdir().unwrap();
    let k = knowledge(dir.path(), &[("D1", d1.port), ("D2", d2.port)]);
    let file = dir.path().join("access.log");
    let router = router(&k, dir.path(), &file);
    let mut l = writer(&router.url).await;
    let r = add_on(&mut l, "before").await;
    assert_eq!(r.rc, 0, "{r:?}");
    assert!(exists_on(&d1, &user_dn(DEMOCORP, "before")));

    d1.kill9();
    let r = add_on(&mut l, "after").await;
    assert_eq!(r.rc, 0, "the write after kill -9 of D1: {r:?}");
    let after = user_dn(DEMOCORP, "after");
    assert!(exists_on(&d2, &after), "the write landed on D2");
    let lines = add_lines(&file, &after);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(lines[0]["dsa"], "D2", "{}", lines[0]);
    assert_eq!(lines[0]["result"], 0, "{}", lines[0]);
    let log = router.log_text();
    assert!(
        log.contains("sending a write that was never sent to the next target"),
        "{log}"
    );
}

/// A write that fails because no DSA can take it (the only one is dead)
/// is answered by the router, and has its access-log line too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_no_dsa_can_take_has_its_access_log_line() {
    let mut d1 = Slapd::start(SlapdConfig::seeded("D1", &[DEMOCORP]));
    let dir = tempfile::tempdir().unwrap();
    let k = knowledge(dir.path(), &[("D1", d1.port)]);
    let file = dir.path().join("access.log");
    let router = router(&k, dir.path(), &file);
    let mut l = writer(&router.url).await;
    let r = add_on(&mut l, "before").await;
    assert_eq!(r.rc, 0, "{r:?}");
    d1.kill9();
    let r = add_on(&mut l, "after").await;
    assert_eq!(r.rc, 52, "{r:?}");
    let lines = add_lines(&file, &user_dn(DEMOCORP, "after"));
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(lines[0]["result"], 52, "{}", lines[0]);
    assert!(
        lines[0]["note"]
            .as_str()
            .is_some_and(|n| n.starts_with("answered by the router")),
        "{}",
        lines[0]
    );
}
