//! Health, readiness and what a monitoring system reads, against a
//! `dsa-router serve` process in front of real slapd:
//! * `/healthz` answers 200 and `/readyz` 200 while every partition has a
//!   DSA up, over TCP without a token and on the control socket; with the
//!   one DSA of a partition stopped, `/readyz` answers 503 naming that
//!   partition's prefix (and not the other), `ctl ready` exits 1 saying
//!   so and `dsa_router_partition_available` is 0; once it is back, 200,
//!   `ctl ready` exits 0;
//! * the live `/metrics`, after operations, passes `promtool check
//!   metrics` without a message and has exactly the families of the
//!   catalog the reference page lists, with its label names;
//! * a read-only token (`--admin-read-token`) reads `/metrics` and
//!   `/status` and gets 403 for every state change, which changes nothing;
//!   without a token those reads get 401; the control token still works.
//!
//! Needs slapd, ldap-utils and promtool (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use super::admin_api::{get, http, router, unix_http, unreachable_dsas};
use crate::support::knowledge::{Dsa, Knowledge};
use crate::support::slapd::{ldap_tool, pick_port, user_dn, Slapd, SlapdConfig, ROUTER_PW};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const DEMOCORP: &str = "o=DEMOCORP,c=AU";
const CUSTOMER: &str = "o=CUSTOMER,c=AU";

/// Probes every 200 ms, down after one failure, up after one success.
const PROBES: &[&str] = &[
    "--probe-interval",
    "200ms",
    "--fall",
    "1",
    "--rise",
    "1",
    "--connect-timeout",
    "1s",
];

/// Knowledge with D1 for DEMOCORP and C1 for CUSTOMER.
fn two_partitions(dir: &std::path::Path, d1: u16, c1: u16) -> std::path::PathBuf {
    Knowledge::new()
        .dsa(
            Dsa::new("D1", d1)
                .prefix("<c AU><o DEMOCORP>")
                .router(ROUTER_PW)
                .trust_conveyed(),
        )
        .dsa(
            Dsa::new("C1", c1)
                .prefix("<c AU><o CUSTOMER>")
                .router(ROUTER_PW)
                .trust_conveyed(),
        )
        .write(dir)
}

/// `dsa-router ctl --admin ADMIN ready`: (exit code, stdout, stderr).
fn ctl_ready(admin: &str) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .args(["ctl", "--admin", admin, "ready"])
        .env_remove("DSA_ROUTER_ADMIN_TOKEN")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits (at most 15 s) until `/readyz` answers `status`.
fn readyz_becomes(admin: &str, status: u16) -> super::admin_api::Resp {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = get(admin, "/readyz");
        if r.status == status {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz still {} (wanted {status}): {}",
            r.status,
            r.body
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn readyz_names_the_partition_with_no_dsa_up_until_it_returns() {
    Slapd::require();
    let d1 = Slapd::start(SlapdConfig::seeded("D1", &[DEMOCORP]));
    let mut c1 = Slapd::start(SlapdConfig::seeded("C1", &[CUSTOMER]));
    let dir = tempfile::tempdir().unwrap();
    let k = two_partitions(dir.path(), d1.port, c1.port);
    let admin = format!("127.0.0.1:{}", pick_port());
    // `router` turns probes off; these flags come later and win.
    let r = router(&k, dir.path(), &admin, PROBES);
    let ok = readyz_becomes(&admin, 200);
    assert_eq!(ok.json()["ready"], true, "{}", ok.body);
    assert_eq!(get(&admin, "/healthz").status, 200);
    assert_eq!(unix_http(&r.control, "GET", "/readyz").status, 200);
    assert_eq!(unix_http(&r.control, "GET", "/healthz").status, 200);
    let (code, out, err) = ctl_ready(&admin);
    assert_eq!(code, Some(0), "{out} {err}");
    assert_eq!(out.trim(), "ready");

    c1.stop();
    let down = readyz_becomes(&admin, 503);
    let body = down.json();
    assert_eq!(body["ready"], false, "{}", down.body);
    assert_eq!(
        body["unavailable_partitions"],
        serde_json::json!([CUSTOMER]),
        "{}",
        down.body
    );
    let why = body["error"].as_str().unwrap();
    assert!(why.contains(CUSTOMER) && !why.contains(DEMOCORP), "{why}");
    assert_eq!(get(&admin, "/healthz").status, 200, "alive while not ready");
    assert_eq!(unix_http(&r.control, "GET", "/readyz").status, 503);
    let (code, _, err) = ctl_ready(&admin);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("503") && err.contains(CUSTOMER), "{err}");
    let metrics = get(&admin, "/metrics").body;
    for (prefix, v) in [(CUSTOMER, 0), (DEMOCORP, 1)] {
        let line = format!("dsa_router_partition_available{{partition=\"{prefix}\"}} {v}");
        assert!(metrics.contains(&line), "no {line} in\n{metrics}");
    }

    c1.restart();
    readyz_becomes(&admin, 200);
    let (code, out, err) = ctl_ready(&admin);
    assert_eq!(code, Some(0), "{out} {err}");
}

/// The families of an exposition: name to (type, label names seen).
fn families(text: &str) -> BTreeMap<String, (String, BTreeSet<String>)> {
    let mut out: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            out.insert(name.to_string(), (kind.to_string(), BTreeSet::new()));
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let series = line.rsplit_once(' ').unwrap().0;
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|b| out.get(*b).is_some_and(|f| f.0 == "histogram"))
            })
            .unwrap_or(name);
        let entry = out
            .get_mut(family)
            .unwrap_or_else(|| panic!("sample without # TYPE: {line}"));
        for pair in labels.trim_end_matches('}').split("\",") {
            if let Some((k, _)) = pair.split_once("=\"") {
                if k != "le" {
                    entry.1.insert(k.trim_start_matches(',').to_string());
                }
            }
        }
    }
    out
}

#[test]
fn live_metrics_pass_promtool_and_match_the_catalog() {
    Slapd::require();
    let d1 = Slapd::start(SlapdConfig::seeded("D1", &[DEMOCORP]));
    let dir = tempfile::tempdir().unwrap();
    let k = crate::support::slapd::one_dsa_knowledge(dir.path(), d1.port, ROUTER_PW);
    let admin = format!("127.0.0.1:{}", pick_port());
    let r = router(&k, dir.path(), &admin, PROBES);
    readyz_becomes(&admin, 200);
    let alice = user_dn(DEMOCORP, "alice");
    for _ in 0..3 {
        let out = ldap_tool(
            "ldapsearch",
            &[
                "-x", "-LLL", "-H", &r.url, "-b", &alice, "-s", "base", "uid",
            ],
            None,
        );
        assert_eq!(out.code, Some(0), "{}", out.stderr);
    }
    let out = ldap_tool(
        "ldapwhoami",
        &[
            "-x",
            "-H",
            r.url.as_str(),
            "-D",
            alice.as_str(),
            "-w",
            "alicepw",
        ],
        None,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    // One reload (applied) for the reload series.
    let reload = unix_http(&r.control, "POST", "/reload");
    assert_eq!(reload.status, 200, "{}", reload.body);
    let text = get(&admin, "/metrics").body;

    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("promtool: {e} (scripts/install-deps.sh installs Debian's prometheus)")
        });
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let lint = promtool.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&lint.stdout),
        String::from_utf8_lossy(&lint.stderr)
    );
    assert!(
        lint.status.success() && said.trim().is_empty(),
        "promtool check metrics: {said}\n{text}"
    );

    let seen = families(&text);
    let catalog: BTreeMap<&str, _> = dsa_router::observe::catalog::ALL
        .iter()
        .map(|f| (f.name, f))
        .collect();
    let seen_names: BTreeSet<&str> = seen.keys().map(String::as_str).collect();
    let listed: BTreeSet<&str> = catalog.keys().copied().collect();
    assert_eq!(
        seen_names, listed,
        "/metrics and the catalog (docs/reference.md) differ"
    );
    for (name, (kind, labels)) in &seen {
        let f = catalog[name.as_str()];
        assert_eq!(kind, f.kind.as_str(), "{name}");
        let want: BTreeSet<String> = f.labels.iter().map(|l| l.to_string()).collect();
        assert!(
            labels.is_subset(&want),
            "{name}: labels {labels:?}, catalog {want:?}"
        );
    }
    // Samples where operations were done: histograms, per DSA too.
    for want in [
        "dsa_router_operation_duration_seconds_bucket{op=\"search\",le=\"120\"} 3",
        "dsa_router_dsa_operation_duration_seconds_count{dsa=\"D1\"}",
        "dsa_router_dsa_probe_duration_seconds_count{dsa=\"D1\"}",
        "dsa_router_last_reload_success 1",
        "dsa_router_client_connections_open ",
        "process_open_fds ",
        "dsa_router_cpu_threshold_ratio 0",
    ] {
        assert!(text.contains(want), "no {want} in\n{text}");
    }
    assert!(
        text.contains(&format!(
            "dsa_router_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );
    assert!(!text.lines().any(|l| l.ends_with(" -1")), "{text}");
}

#[test]
fn a_read_only_token_reads_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let k = unreachable_dsas(&["D1", "D2"]).write(dir.path());
    let admin = format!("127.0.0.1:{}", pick_port());
    let rt = router(
        &k,
        dir.path(),
        &admin,
        &[
            "--admin-token",
            "ctl-secret",
            "--admin-read-token",
            "read-secret",
        ],
    );
    let read = [
        ("Host", admin.as_str()),
        ("Authorization", "Bearer read-secret"),
    ];
    let control = [
        ("Host", admin.as_str()),
        ("Authorization", "Bearer ctl-secret"),
    ];
    // Without a token: reads of names and metrics need one; health does not.
    for path in ["/metrics", "/status"] {
        let r = get(&admin, path);
        assert_eq!(r.status, 401, "GET {path}: {}", r.body);
        assert!(
            r.json()["error"].as_str().unwrap().contains("token"),
            "{}",
            r.body
        );
    }
    assert_eq!(get(&admin, "/healthz").status, 200);
    assert_eq!(get(&admin, "/readyz").status, 200);
    // With it: reads, also under a name the API does not know (a scraper's).
    for path in ["/metrics", "/status", "/"] {
        let r = http(&admin, "GET", path, &read, "");
        assert_eq!(r.status, 200, "GET {path}: {}", r.body);
    }
    let named = [
        ("Host", "router1.example.net:8389"),
        ("Authorization", "Bearer read-secret"),
    ];
    let r = http(&admin, "GET", "/metrics", &named, "");
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.body.contains("dsa_router_dsa_up{dsa=\"D1\""),
        "{}",
        r.body
    );
    // Every state change refused, naming why.
    for path in [
        "/dsas/D1/disable",
        "/dsas/D1/drain",
        "/dsas/D1/enable",
        "/reload",
        "/upgrade",
        "/shutdown",
    ] {
        let r = http(&admin, "POST", path, &read, "");
        assert_eq!(r.status, 403, "POST {path}: {}", r.body);
        let why = r.json()["error"].as_str().unwrap().to_string();
        assert!(why.contains("read-only token"), "{why}");
    }
    let st = http(&admin, "GET", "/status", &read, "").json();
    let d1 = &st["partitions"][0]["dsas"][0];
    assert_eq!(
        (&d1["name"], &d1["state"]),
        (&"D1".into(), &"up".into()),
        "{st}"
    );
    assert!(st["last_reload"].is_null(), "a refused reload ran: {st}");
    assert_eq!(get(&admin, "/healthz").status, 200, "still serving");
    // The control token still controls.
    let r = http(&admin, "POST", "/dsas/D1/drain", &control, "");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["state"], "draining", "{}", r.body);
    let r = http(&admin, "POST", "/dsas/D1/enable", &control, "");
    assert_eq!(r.status, 200, "{}", r.body);
    // The token is nowhere in the log.
    let log = rt.log_text();
    assert!(
        !log.contains("read-secret") && !log.contains("ctl-secret"),
        "{log}"
    );
}
