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

use support::router::Router;
use support::slapd::{admin_dn, ldap_tool, Slapd, SlapdConfig, ToolOutput, ADMIN_PW};

const DEMOCORP: &str = "o=DEMOCORP,c=AU";

fn show(what: &str, out: &ToolOutput) -> String {
    format!(
        "{what}: exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.code, out.stdout, out.stderr
    )
}

/// `set dsa` blocks for `dsas` (name, slapd, flags), all holding
/// `o=DEMOCORP,c=AU`, in that order.
fn knowledge(dir: &Path, dsas: &[(&str, &Slapd, &str)]) -> PathBuf {
    let mut k = String::new();
    for (name, s, flags) in dsas {
        k += &format!(
            "set dsa \"{name}\" =\n{{\n\
             \x20   prefix            = <c AU><o DEMOCORP>\n\
             \x20   dsa-name          = <c AU><o DEMOCORP><cn {name}>\n\
             \x20   address           = tcp \"127.0.0.1\" port {port}\n\
             \x20   dsa-flags         = {flags}\n\
             }};\n",
            port = s.port
        );
    }
    let path = dir.join("router.dxg");
    fs::write(&path, k).unwrap();
    path
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
    let k = knowledge(
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
    let k = knowledge(dir.path(), &[("RO", &ro, "read-only")]);
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
