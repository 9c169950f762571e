//! The access log through a real router process in front of slapd: the
//! JSON format parses line by line with every field, the text format keeps
//! its `key=value` shape, and SIGUSR1 (or `ctl reopen-logs`) reopens the
//! file after logrotate moved it, losing no line.
//!
//! Needs slapd and ldap-utils (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use support::router::Router;
use support::slapd::{ldap_tool, user_dn, Slapd, SlapdConfig, ALICE_PW, ROUTER_PW};

const DEMOCORP: &str = "o=DEMOCORP,c=AU";

fn read_alice(url: &str, bind: bool) {
    let alice = user_dn(DEMOCORP, "alice");
    let mut args = vec!["-x", "-LLL", "-H", url, "-b", alice.as_str(), "-s", "base"];
    if bind {
        args.extend(["-D", alice.as_str(), "-w", ALICE_PW]);
    }
    args.push("uid");
    let out = ldap_tool("ldapsearch", &args, None);
    assert_eq!(out.code, Some(0), "{} {}", out.stdout, out.stderr);
}

/// The file's lines once it holds at least `n` (the writer thread writes
/// every `access::INTERVAL`).
fn lines_of(path: &Path, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        if lines.len() >= n || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn json_lines_to_a_file_reopened_on_sigusr1_and_ctl() {
    let s = Slapd::start(SlapdConfig::seeded("D1", &[DEMOCORP]));
    let dir = tempfile::tempdir().unwrap();
    let k = support::slapd::one_dsa_knowledge(dir.path(), s.port, ROUTER_PW);
    let file = dir.path().join("access.log");
    let router = Router::start_with(
        &k,
        dir.path(),
        &[
            "--access-log",
            file.to_str().unwrap(),
            "--access-log-format",
            "json",
        ],
    );
    read_alice(&router.url, false);
    read_alice(&router.url, true);
    // An anonymous bind (answered by the router), a search, alice's bind, a
    // search.
    let lines = lines_of(&file, 4);
    assert_eq!(lines.len(), 4, "{lines:#?}");
    let parsed: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let searches: Vec<&serde_json::Value> = parsed.iter().filter(|v| v["op"] == "search").collect();
    assert_eq!(searches.len(), 2, "{lines:#?}");
    for v in &searches {
        assert_eq!(v["dn"], user_dn(DEMOCORP, "alice"), "{v}");
        assert_eq!(v["dsa"], "D1", "{v}");
        assert_eq!(v["result"], 0, "{v}");
        assert!(v["latency_us"].is_u64(), "{v}");
        assert!(
            v["client"].as_str().unwrap().starts_with("127.0.0.1:"),
            "{v}"
        );
        assert!(v["time"].as_str().unwrap().ends_with('Z'), "{v}");
        assert!(
            v["partition"]
                .as_str()
                .unwrap()
                .eq_ignore_ascii_case(DEMOCORP),
            "{v}"
        );
    }
    let bind = parsed
        .iter()
        .find(|v| v["op"] == "bind")
        .expect("a bind line");
    assert_eq!(bind["result"], 0, "{bind}");
    // Not one access line on stderr.
    assert!(
        !router.log_text().contains(" access: "),
        "{}",
        router.log_text()
    );

    // logrotate: move the file, SIGUSR1, and the next lines go to a new file.
    let rotated = dir.path().join("access.log.1");
    fs::rename(&file, &rotated).unwrap();
    let st = std::process::Command::new("kill")
        .args(["-USR1", &router.pid().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !file.exists() {
        assert!(Instant::now() < deadline, "no new file after SIGUSR1");
        std::thread::sleep(Duration::from_millis(20));
    }
    read_alice(&router.url, false);
    let after = lines_of(&file, 2);
    assert_eq!(after.len(), 2, "{after:#?}");
    assert!(after[1].contains("\"op\":\"search\""), "{after:#?}");
    assert_eq!(
        fs::read_to_string(&rotated).unwrap().lines().count(),
        lines.len()
    );

    // Again with `ctl reopen-logs` (what the Debian package's logrotate
    // file runs) in place of the signal.
    let rotated2 = dir.path().join("access.log.2");
    fs::rename(&file, &rotated2).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .args(["ctl", "--control-socket"])
        .arg(&router.control)
        .arg("reopen-logs")
        .env_remove("DSA_ROUTER_ADMIN_TOKEN")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        said.trim(),
        format!("the access log {} is reopened", file.display())
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !file.exists() {
        assert!(
            Instant::now() < deadline,
            "no new file after ctl reopen-logs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    read_alice(&router.url, false);
    let third = lines_of(&file, 2);
    assert_eq!(third.len(), 2, "{third:#?}");
    assert_eq!(fs::read_to_string(&rotated2).unwrap().lines().count(), 2);
}

#[test]
fn text_lines_on_stderr_keep_their_shape() {
    let s = Slapd::start(SlapdConfig::seeded("D1", &[DEMOCORP]));
    let dir = tempfile::tempdir().unwrap();
    let k = support::slapd::one_dsa_knowledge(dir.path(), s.port, ROUTER_PW);
    let router = Router::start(&k, dir.path());
    read_alice(&router.url, false);
    let alice = user_dn(DEMOCORP, "alice");
    let deadline = Instant::now() + Duration::from_secs(10);
    let line = loop {
        let log = router.log_text();
        if let Some(l) = log
            .lines()
            .find(|l| l.contains(" INFO access: ") && l.contains("op=\"search\""))
        {
            break l.to_string();
        }
        assert!(Instant::now() < deadline, "no access line:\n{log}");
    };
    let fields = format!("op=\"search\" dn={alice} partition=");
    assert!(line.contains(&fields), "{line}");
    assert!(line.contains(" dsa=D1 result=0 latency_us="), "{line}");
    assert_eq!(router.access_dsas("search", &alice), ["D1"]);
}
