//! A partition prefix that no DSA of it holds: written leaf first, `<dc
//! example><dc com>` (LDAP order, the natural slip), it becomes partition
//! `dc=com,dc=example`. The router compares each prefix with its DSAs'
//! `namingContexts` and warns, with the likely fix: in the log at start
//! and after a reload, in `/status`, and in `check --online`; against the
//! in-tree test DSA, and against slapd.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::knowledge::{Dsa, Knowledge};
use crate::support::ldap::status;
use crate::support::router::{Router, TestDsaProcess};
use crate::support::slapd::{pick_port, Slapd, SlapdConfig};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const FIX: &str = "did you mean dc=example,dc=com? (prefix = <dc com><dc example>";

/// Knowledge with DSA1 at `port` under `prefix`.
fn knowledge(path: &Path, port: u16, prefix: &str) -> std::path::PathBuf {
    Knowledge::new()
        .dsa(Dsa::new("DSA1", port).prefix(prefix))
        .write_to(path)
}

/// `/status`'s prefix warnings, once there are `n` (within 15 s).
fn warnings(admin: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let st = status(admin);
        let w = st["prefix_warnings"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if w.len() == n || Instant::now() > deadline {
            return w;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The reversed prefix against a DSA at `port` holding dc=example,dc=com:
/// warned at start, gone after the fix is reloaded, warned again after a
/// reload brings it back.
fn reversed_prefix_is_warned(port: u16) {
    let dir = tempfile::tempdir().unwrap();
    let k = knowledge(&dir.path().join("r.dxg"), port, "<dc example><dc com>");
    let admin = format!("127.0.0.1:{}", pick_port());
    let r = Router::start_with(
        &k,
        dir.path(),
        &["--admin", &admin, "--probe-interval", "1"],
    );
    let w = warnings(&admin, 1);
    assert_eq!(w.len(), 1, "{w:?}\n{}", r.log_text());
    assert_eq!(w[0]["partition"], "dc=com,dc=example", "{w:?}");
    assert_eq!(w[0]["suggestion"], "dc=example,dc=com", "{w:?}");
    let msg = w[0]["message"].as_str().unwrap();
    assert!(
        msg.contains("no DSA of it holds this prefix (DSA1 holds dc=example,dc=com")
            && msg.contains(FIX),
        "{msg}"
    );
    let log = logged(&r, 1);
    assert!(log.contains(FIX), "{log}");
    // `ctl status` shows it.
    let out = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .args(["ctl", "--admin", &admin, "status"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("WARNING: partition dc=com,dc=example") && text.contains(FIX),
        "{text}"
    );
    // Fixed and reloaded: no warning.
    knowledge(&k, port, "<dc com><dc example>");
    let (ok, out) = ctl_reload(&r);
    assert!(ok, "{out}");
    assert_eq!(warnings(&admin, 0).len(), 0);
    // Broken again: warned again, after the reload.
    knowledge(&k, port, "<dc example><dc com>");
    let (ok, out) = ctl_reload(&r);
    assert!(ok, "{out}");
    assert_eq!(warnings(&admin, 1).len(), 1);
    logged(&r, 2);
}

/// The router's log once it has warned `n` times of the prefix.
fn logged(r: &Router, n: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let log = r.log_text();
        if log
            .matches("partition dc=com,dc=example: no DSA of it holds this prefix")
            .count()
            >= n
        {
            return log;
        }
        assert!(Instant::now() < deadline, "not warned {n} time(s):\n{log}");
    }
}

fn ctl_reload(r: &Router) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .args(["ctl", "--control-socket"])
        .arg(&r.control)
        .arg("reload")
        .env_remove("DSA_ROUTER_ADMIN_TOKEN")
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn a_reversed_prefix_is_warned_against_the_test_dsa() {
    let d = TestDsaProcess::start("DSA1", "dc=example,dc=com");
    reversed_prefix_is_warned(d.port);
}

#[test]
fn a_reversed_prefix_is_warned_against_slapd() {
    Slapd::require();
    let s = Slapd::start(SlapdConfig::seeded("DSA1", &["dc=example,dc=com"]));
    reversed_prefix_is_warned(s.port);
}

#[test]
fn check_online_asks_the_dsas_what_they_hold() {
    let d = TestDsaProcess::start("DSA1", "dc=example,dc=com");
    let dir = tempfile::tempdir().unwrap();
    let down = pick_port();
    let k = Knowledge::new()
        .dsa(Dsa::new("DSA1", d.port).prefix("<dc example><dc com>"))
        .dsa(Dsa::new("GONE", down).prefix("<c NZ>"))
        .write(dir.path());
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
            .arg("check")
            .arg(&k)
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = run(&["--online"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("online: 1 of 2 DSA(s) answered; 1 prefix warning(s)"),
        "{out}"
    );
    assert!(
        err.contains("warning: partition dc=com,dc=example: no DSA of it holds this prefix")
            && err.contains(FIX),
        "{err}"
    );
    assert!(err.contains("online: DSA GONE not read"), "{err}");
    // Offline, nothing is asked.
    let (code, out, err) = run(&[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        !out.contains("online") && !err.contains("did you mean"),
        "{out}{err}"
    );
}
