//! Reloads that would take the DSAs away: an empty or cut-short root
//! file, or one that drops every DSA of a partition in use, is refused
//! (the old knowledge keeps serving, and the answer says why and how to
//! force), and applied with `ctl reload --force`. Under `--watch`, a file
//! is read only once it stops changing: one written in two halves is read
//! once, whole.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::knowledge::{Dsa, Knowledge};
use crate::support::ldap::{get, search, status};
use crate::support::router::{Router, TestDsaProcess};
use crate::support::slapd::pick_port;
use std::process::Command;
use std::time::{Duration, Instant};

/// `dsa-router ctl --control-socket SOCK ARGS`: success and its output.
fn ctl(r: &Router, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .args(["ctl", "--control-socket"])
        .arg(&r.control)
        .args(args)
        .env_remove("DSA_ROUTER_ADMIN_TOKEN")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Whether a base search of `base` through `r` succeeds.
fn serves(r: &Router, base: &str) -> bool {
    search(&r.url, None, &[], base, "base", "(objectClass=*)", &["1.1"]).success()
}

#[test]
fn a_reload_that_removes_every_dsa_is_refused_unless_forced() {
    let a = TestDsaProcess::start("A", "dc=example,dc=com");
    let b = TestDsaProcess::start("B", "o=other");
    let dir = tempfile::tempdir().unwrap();
    let both = Knowledge::new()
        .dsa(Dsa::new("A", a.port).prefix("<dc com><dc example>"))
        .dsa(Dsa::new("B", b.port).prefix("<o other>"));
    let k = both.write(dir.path());
    let admin = format!("127.0.0.1:{}", pick_port());
    let r = Router::start_with(&k, dir.path(), &["--admin", &admin]);
    assert!(serves(&r, "dc=example,dc=com") && serves(&r, "o=other"));
    // (root file's new text, refused because, then still served)
    let only_b = Knowledge::new().dsa(Dsa::new("B", b.port).prefix("<o other>"));
    let cases: &[(&str, &str)] = &[
        (
            "",
            "the new knowledge has no DSA to route to (it had 2; is a file empty or cut short?)",
        ),
        (
            "# cut short\n",
            "the new knowledge has no DSA to route to (it had 2; is a file empty or cut short?)",
        ),
        (
            only_b.text(),
            "it removes every DSA of partition(s) in use: dc=example,dc=com (was A)",
        ),
    ];
    for (text, why) in cases {
        std::fs::write(&k, text).unwrap();
        let (ok, out) = ctl(&r, &["reload"]);
        assert!(!ok, "{text:?} reloaded: {out}");
        assert!(
            out.contains(why)
                && out.contains("the old knowledge keeps serving")
                && out.contains("dsa-router ctl reload --force"),
            "{text:?}: {out}"
        );
        assert!(
            serves(&r, "dc=example,dc=com") && serves(&r, "o=other"),
            "{text:?}"
        );
        let st = status(&admin);
        assert_eq!(st["last_reload"]["ok"], false, "{st}");
        assert_eq!(st["partitions"].as_array().unwrap().len(), 2, "{st}");
    }
    // A partition no longer in use... is still in use here: A served. A
    // reload that keeps every partition is an edit, applied.
    std::fs::write(&k, both.text()).unwrap();
    let (ok, out) = ctl(&r, &["reload"]);
    assert!(ok, "{out}");
    // Forced: applied.
    std::fs::write(&k, "").unwrap();
    let (ok, out) = ctl(&r, &["reload", "--force"]);
    assert!(
        ok && out.contains("0 DSA(s)") && out.contains("removed [A, B]"),
        "{out}"
    );
    assert!(!serves(&r, "dc=example,dc=com"));
}

#[test]
fn watch_reads_a_file_written_in_two_halves_once_it_is_whole() {
    let a = TestDsaProcess::start("A", "dc=example,dc=com");
    let dir = tempfile::tempdir().unwrap();
    let mut k_now = Knowledge::new().dsa(Dsa::new("A", a.port).prefix("<dc com><dc example>"));
    let k = k_now.write(dir.path());
    let admin = format!("127.0.0.1:{}", pick_port());
    let r = Router::start_with(&k, dir.path(), &["--admin", &admin, "--watch"]);
    assert!(serves(&r, "dc=example,dc=com"));
    let partitions = || status(&admin)["partitions"].as_array().unwrap().len();
    for round in 1..=4 {
        // One more partition; the first half ends inside its block: read
        // alone, an error.
        k_now =
            k_now.dsa(Dsa::new(&format!("X{round}"), pick_port()).prefix(&format!("<o x{round}>")));
        let text = k_now.text();
        let half = text.len() - 25;
        // The watch polls every second, from the end of its last reload:
        // the half is in place when it next looks.
        std::thread::sleep(Duration::from_millis(700));
        std::fs::write(&k, &text[..half]).unwrap();
        std::thread::sleep(Duration::from_millis(400));
        std::fs::write(&k, text).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while partitions() != 1 + round {
            assert!(
                Instant::now() < deadline,
                "round {round}: not reloaded:\n{}",
                r.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let metrics = get(&admin, "/metrics");
        assert!(
            metrics.contains(&format!("dsa_router_reloads_total {round}"))
                && metrics.contains("dsa_router_reload_failures_total 0"),
            "round {round}: a half-written file was read:\n{metrics}\n{}",
            r.log_text()
        );
        assert!(serves(&r, "dc=example,dc=com"));
    }
}
