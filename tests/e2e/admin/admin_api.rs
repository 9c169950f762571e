//! The admin API's defences, against a `dsa-router serve` process (raw
//! HTTP, so that each test sets `Host` and `Origin` as a browser on another
//! site would):
//! * without a token the TCP API is read-only: every state change gets
//!   403, from any origin, with any header; a foreign `Host` (DNS
//!   rebinding) cannot even read; `ctl` changes state through the control
//!   socket;
//! * another local user (`nobody`) changes nothing, over TCP or the
//!   control socket, and no program of theirs is started (`/upgrade` takes
//!   no binary);
//! * `--admin 0.0.0.0:PORT` without a token does not start; with one it
//!   does: state changes need the token, reads do not;
//! * every response carries the CSP, frame, nosniff and referrer headers;
//! * DSA names with `"` and `\` (and a DN with `\,`) make `/metrics` that
//!   `prometheus_client` parses back to the same names;
//! * a reload of knowledge with a broken password line is refused naming
//!   file, line and column, and the password is nowhere: not in the
//!   response, `/status`, `ctl` or the log.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::knowledge::{Dsa, Knowledge};
use crate::support::router::Router;
use crate::support::slapd::pick_port;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// An HTTP response: status, headers (names in lower case), body.
pub(super) struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Resp {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map_or("", |(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// One HTTP/1.0 request to `addr` with exactly these headers (no `Host`
/// unless given).
pub(super) fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Resp {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    exchange(s, method, path, headers, body)
}

/// One HTTP/1.0 request on the control socket at `path`.
pub(super) fn unix_http(socket: &Path, method: &str, path: &str) -> Resp {
    let s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    exchange(s, method, path, &[("Host", "localhost")], "")
}

/// Send the request, read the response to its end.
fn exchange(
    mut s: impl Read + Write,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Resp {
    let mut req = format!("{method} {path} HTTP/1.0\r\n");
    for (k, v) in headers {
        req += &format!("{k}: {v}\r\n");
    }
    req += &format!("Content-Length: {}\r\n\r\n{body}", body.len());
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Resp {
        status,
        headers,
        body: body.to_string(),
    }
}

/// A GET with the API's own `Host`.
pub(super) fn get(admin: &str, path: &str) -> Resp {
    http(admin, "GET", path, &[("Host", admin)], "")
}

/// One DSA per name (quoted, escapes as knowledge writes them) on a port
/// where nothing listens, in one load-share group.
pub(super) fn unreachable_dsas(names: &[&str]) -> Knowledge {
    Knowledge::new().dsas(names.iter().map(|n| {
        Dsa::new(n, pick_port())
            .prefix("<c AU><o DEMOCORP>")
            .flags("load-share")
            .load_share_group("G")
    }))
}

/// A router with its admin API on `admin` (`extra` options more), once
/// the API answers.
pub(super) fn router(k: &Path, dir: &Path, admin: &str, extra: &[&str]) -> Router {
    // No probes and no position reads: nothing but the API changes a
    // DSA's state (a failed connection of the contextCSN poller to these
    // DSAs, where nothing listens, would mark them down).
    let mut args = vec![
        "--admin",
        admin,
        "--probe-interval",
        "0",
        "--csn-interval",
        "0",
    ];
    args.extend_from_slice(extra);
    let r = Router::start_with(k, dir, &args);
    let port = admin.rsplit_once(':').unwrap().1;
    let local = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(&local).is_err() {
        assert!(
            Instant::now() < deadline,
            "no admin API on {admin}:\n{}",
            r.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    r
}

/// The state of DSA `name` in `/status`.
fn state(admin: &str, name: &str) -> String {
    let st = get(admin, "/status").json();
    st["partitions"][0]["dsas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .map(|d| d["state"].as_str().unwrap().to_string())
        .unwrap_or_else(|| panic!("no {name} in {st}"))
}

#[test]
fn without_a_token_every_post_and_foreign_hosts_get_403_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let k = unreachable_dsas(&["D1", "D2"]).write(dir.path());
    let port = pick_port();
    let admin = format!("127.0.0.1:{port}");
    let rt = router(&k, dir.path(), &admin, &[]);
    let before = state(&admin, "D1");
    let own = format!("http://{admin}");
    // DNS rebinding: evil.example resolves to 127.0.0.1, the page reads.
    let evil_host = format!("evil.example:{port}");
    let evil_origin = format!("http://evil.example:{port}");
    for host in [evil_host.as_str(), "evil.example", "127.0.0.1:1"] {
        let r = http(&admin, "GET", "/status", &[("Host", host)], "");
        assert_eq!(r.status, 403, "GET /status with Host {host}: {}", r.body);
        assert!(
            r.json()["error"].as_str().unwrap().contains("Host"),
            "{}",
            r.body
        );
    }
    assert_eq!(
        http(&admin, "GET", "/", &[("Host", &evil_host)], "").status,
        403
    );
    assert_eq!(
        http(&admin, "GET", "/status", &[], "").status,
        403,
        "no Host"
    );
    for host in [
        admin.clone(),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ] {
        let r = http(&admin, "GET", "/status", &[("Host", &host)], "");
        assert_eq!(r.status, 200, "GET /status with Host {host}: {}", r.body);
    }
    // A form of another site (text/plain: no preflight), with and without
    // the header, and from a rebound name.
    let form = [
        ("Host", admin.as_str()),
        ("Origin", "http://evil.example"),
        ("Content-Type", "text/plain"),
    ];
    let same_origin = [
        ("Host", admin.as_str()),
        ("Origin", own.as_str()),
        ("X-Dsa-Router", "1"),
    ];
    let refused: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("/dsas/D1/drain", form.to_vec()),
        (
            "/dsas/D1/disable",
            [&form[..], &[("X-Dsa-Router", "1")]].concat(),
        ),
        ("/reload", form.to_vec()),
        (
            "/dsas/D1/drain",
            vec![
                ("Host", &evil_host),
                ("Origin", &evil_origin),
                ("X-Dsa-Router", "1"),
            ],
        ),
        (
            "/dsas/D1/drain",
            vec![("Host", &admin), ("Origin", "null"), ("X-Dsa-Router", "1")],
        ),
        // Same origin, but no header: a form cannot add one.
        (
            "/dsas/D1/drain",
            vec![
                ("Host", &admin),
                ("Origin", &own),
                ("Content-Type", "application/x-www-form-urlencoded"),
            ],
        ),
        ("/dsas/D1/disable", vec![("Host", &admin)]),
        ("/reload", vec![("Host", &admin)]),
        // The API's own page, and anything on this machine: same origin,
        // with the header the API once asked for, still read-only.
        ("/dsas/D1/drain", same_origin.to_vec()),
        ("/dsas/D1/disable", same_origin.to_vec()),
        ("/reload", same_origin.to_vec()),
        ("/upgrade", same_origin.to_vec()),
        ("/shutdown", same_origin.to_vec()),
    ];
    for (path, headers) in &refused {
        let r = http(&admin, "POST", path, headers, "a=b");
        assert_eq!(r.status, 403, "POST {path} {headers:?}: {}", r.body);
        assert_eq!(r.json()["ok"], false);
    }
    assert_eq!(state(&admin, "D1"), before, "a refused request changed D1");
    let st = get(&admin, "/status").json();
    assert!(st["last_reload"].is_null(), "a refused reload ran: {st}");
    let r = http(&admin, "POST", "/dsas/D1/drain", &same_origin, "");
    let why = r.json()["error"].as_str().unwrap().to_string();
    assert!(why.contains("read-only") && why.contains("ctl"), "{why}");
    // The control socket drains.
    let r = unix_http(&rt.control, "POST", "/dsas/D1/drain");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(state(&admin, "D1"), "draining");
}

#[test]
fn every_admin_response_carries_the_csp_frame_nosniff_and_referrer_headers() {
    let dir = tempfile::tempdir().unwrap();
    let k = unreachable_dsas(&["D1"]).write(dir.path());
    let admin = format!("127.0.0.1:{}", pick_port());
    let _r = router(&k, dir.path(), &admin, &[]);
    let page = get(&admin, "/");
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<script>"), "{}", page.body);
    let responses = [
        ("page", page),
        ("status", get(&admin, "/status")),
        ("metrics", get(&admin, "/metrics")),
        ("404", get(&admin, "/nothing")),
        (
            "403",
            http(&admin, "POST", "/reload", &[("Host", &admin)], ""),
        ),
    ];
    for (what, r) in &responses {
        let csp = r.header("content-security-policy");
        for want in [
            "default-src 'none'",
            "frame-ancestors 'none'",
            "script-src 'sha256-",
            "style-src 'sha256-",
        ] {
            assert!(csp.contains(want), "{what}: CSP {csp:?} lacks {want}");
        }
        assert!(!csp.contains("unsafe"), "{what}: {csp}");
        assert_eq!(r.header("x-content-type-options"), "nosniff", "{what}");
        assert_eq!(r.header("referrer-policy"), "no-referrer", "{what}");
        assert_eq!(r.header("x-frame-options"), "DENY", "{what}");
    }
}

/// `dsa-router ctl --admin ADDR --control-socket PATH ARGS`: success,
/// stdout and stderr.
fn ctl(admin: &str, control: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .args(["ctl", "--admin", admin])
        .arg("--control-socket")
        .arg(control)
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

#[test]
fn ctl_drains_enables_and_reloads_through_the_control_socket() {
    let dir = tempfile::tempdir().unwrap();
    let k = unreachable_dsas(&["D1", "D2"]).write(dir.path());
    let admin = format!("127.0.0.1:{}", pick_port());
    let r = router(&k, dir.path(), &admin, &[]);
    let mode = std::fs::metadata(&r.control).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the control socket's mode");
    let before = state(&admin, "D1");
    let (ok, out) = ctl(&admin, &r.control, &["drain", "D1"]);
    assert!(ok && out.contains("D1: draining"), "{out}");
    assert_eq!(state(&admin, "D1"), "draining");
    let (ok, out) = ctl(&admin, &r.control, &["enable", "D1"]);
    assert!(ok, "{out}");
    assert_eq!(state(&admin, "D1"), before, "enabled: its health again");
    let (ok, out) = ctl(&admin, &r.control, &["reload"]);
    assert!(ok, "{out}");
    let (ok, out) = ctl(&admin, &r.control, &["status"]);
    assert!(ok && out.contains("D2"), "{out}");
    // No router at the socket: ctl says so and changes nothing.
    let (ok, out) = ctl(&admin, &dir.path().join("nothing.sock"), &["drain", "D1"]);
    assert!(!ok && out.contains("control socket"), "{out}");
}

/// `curl ARGS` as user `nobody` (runuser): the HTTP status it printed
/// (`-w %{http_code}`; 000 when it could not connect), or `None` when this
/// test cannot switch users (not root, no runuser or curl).
fn curl_as_nobody(args: &[&str]) -> Option<String> {
    let out = Command::new("runuser")
        .args(["-u", "nobody", "--", "curl", "-s", "-o", "/dev/null"])
        .args(["-w", "%{http_code}", "-m", "20", "-X", "POST"])
        .args(args)
        .output()
        .ok()?;
    let code = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (code.len() == 3).then_some(code)
}

#[test]
fn another_local_user_changes_nothing_over_tcp_or_the_control_socket_and_starts_no_program() {
    if curl_as_nobody(&["http://127.0.0.1:1/"]).is_none() {
        eprintln!("skipped: cannot run curl as nobody (runuser needs root)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // nobody may enter the directory (the control socket is in it).
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let k = unreachable_dsas(&["D1", "D2"]).write(dir.path());
    let admin = format!("127.0.0.1:{}", pick_port());
    let r = router(&k, dir.path(), &admin, &[]);
    // A program of the attacker's, which leaves a mark when it runs.
    let mark = dir.path().join("ran");
    let prog = dir.path().join("prog");
    std::fs::write(
        &prog,
        format!("#!/bin/sh\ntouch {}\nexec sleep 60\n", mark.display()),
    )
    .unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let before = state(&admin, "D1");
    let upgrade = format!("/upgrade?binary={}", prog.display());
    let paths = [
        "/dsas/D1/disable",
        "/dsas/D1/drain",
        "/dsas/D1/enable",
        "/reload",
        upgrade.as_str(),
        "/upgrade",
        "/shutdown",
    ];
    let socket = r.control.to_str().unwrap();
    for path in paths {
        // Over TCP, with the header the API once asked for.
        let url = format!("http://{admin}{path}");
        let code = curl_as_nobody(&["-H", "X-Dsa-Router: 1", &url]);
        assert_eq!(code.as_deref(), Some("403"), "nobody: POST {url}");
        // The control socket: its mode keeps nobody from connecting.
        let local = format!("http://localhost{path}");
        let code = curl_as_nobody(&["--unix-socket", socket, &local]);
        assert_eq!(code.as_deref(), Some("000"), "nobody connected to {socket}");
    }
    // With the mode opened, the peer's credentials still refuse nobody.
    std::fs::set_permissions(&r.control, std::fs::Permissions::from_mode(0o666)).unwrap();
    for path in paths {
        let local = format!("http://localhost{path}");
        let code = curl_as_nobody(&["--unix-socket", socket, &local]);
        assert_eq!(
            code.as_deref(),
            Some("403"),
            "nobody: POST {path} on {socket}"
        );
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(!mark.exists(), "nobody's program was started");
    assert_eq!(state(&admin, "D1"), before, "a refused request changed D1");
    let st = get(&admin, "/status").json();
    assert!(st["last_reload"].is_null(), "a refused reload ran: {st}");
    assert_eq!(st["draining"], false, "a refused shutdown drains: {st}");
    let log = r.log_text();
    assert!(log.contains("control socket: request refused"), "{log}");
    assert!(!log.contains("upgrade asked"), "{log}");
    // Root still controls the router through the socket.
    let ok = unix_http(&r.control, "POST", "/dsas/D1/drain");
    assert_eq!(ok.status, 200, "{}", ok.body);
}

#[test]
fn a_non_loopback_admin_address_without_a_token_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let k = unreachable_dsas(&["D1"]).write(dir.path());
    for extra in [&[][..], &["--admin-token", ""][..]] {
        let (listen, port) = (pick_port(), pick_port());
        let mut child = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
            .args(["serve", "--knowledge", k.to_str().unwrap()])
            .args(["--listen", &format!("127.0.0.1:{listen}")])
            .args(["--admin", &format!("0.0.0.0:{port}")])
            .args(extra)
            .env_remove("DSA_ROUTER_ADMIN_TOKEN")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("--admin 0.0.0.0 without a token ({extra:?}) started");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert!(!status.success(), "{err}");
        assert!(
            err.contains("not a loopback address") && err.contains("--admin-token"),
            "{err}"
        );
        assert!(
            !err.contains("dsa-router listening"),
            "it listened first: {err}"
        );
    }
    // With a token it starts; it answers under any name with the token,
    // and /metrics needs none (Prometheus holds no key that stops the
    // router) from a name of its own or an IP address.
    let port = pick_port();
    let _r = router(
        &k,
        dir.path(),
        &format!("0.0.0.0:{port}"),
        &["--admin-token", "t0k3n"],
    );
    let admin = format!("127.0.0.1:{port}");
    let named = [("Host", "router.example.net:8389")];
    assert_eq!(http(&admin, "GET", "/status", &named, "").status, 403);
    let by_ip = format!("192.0.2.7:{port}");
    assert_eq!(get(&admin, "/metrics").status, 200);
    // /status lists client sessions: with a token, for its holders only.
    assert_eq!(
        http(&admin, "GET", "/status", &[("Host", &by_ip)], "").status,
        401
    );
    let auth = [
        ("Host", "router.example.net:8389"),
        ("Authorization", "Bearer t0k3n"),
    ];
    assert_eq!(http(&admin, "GET", "/status", &auth, "").status, 200);
    let r = http(&admin, "POST", "/dsas/D1/drain", &auth, "");
    assert_eq!(
        r.status, 200,
        "the token alone authorizes a change: {}",
        r.body
    );
    // Stopping and upgrading the router need the token too (the header
    // X-Dsa-Router alone is not enough): /shutdown had no check of its own.
    let headed = [("Host", by_ip.as_str()), ("X-Dsa-Router", "1")];
    for path in ["/shutdown", "/upgrade"] {
        let r = http(&admin, "POST", path, &headed, "");
        assert_eq!(r.status, 401, "POST {path} without the token: {}", r.body);
    }
    assert_eq!(
        http(&admin, "GET", "/status", &auth, "").status,
        200,
        "still serving"
    );
}

const PARSE_METRICS: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        out.append({"name": s.name, "labels": s.labels})
print(json.dumps(out))
"#;

#[test]
fn dsa_names_with_quotes_and_backslashes_make_metrics_that_prometheus_client_parses() {
    let names = ["q\"uote", "back\\slash", "__proto__", "both\\\"\\\\"];
    let dir = tempfile::tempdir().unwrap();
    // A partition whose DN holds an escaped comma (a backslash).
    let k = unreachable_dsas(&names)
        .dsa(Dsa::new("D9", pick_port()).prefix("\"o=Smith\\\\, Jones,c=AU\""))
        .write(dir.path());
    let admin = format!("127.0.0.1:{}", pick_port());
    let _r = router(&k, dir.path(), &admin, &[]);
    let body = get(&admin, "/metrics").body;
    let mut py = Command::new("python3")
        .args(["-c", PARSE_METRICS])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (scripts/install-deps.sh)");
    py.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = py.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus_client cannot parse /metrics: {}\n{body}",
        String::from_utf8_lossy(&out.stderr)
    );
    let samples: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let up: Vec<&Value> = samples
        .iter()
        .filter(|s| s["name"] == "dsa_router_dsa_up")
        .collect();
    let mut got: Vec<&str> = up
        .iter()
        .map(|s| s["labels"]["dsa"].as_str().unwrap())
        .collect();
    got.sort_unstable();
    let mut want = names.to_vec();
    want.push("D9");
    want.sort_unstable();
    assert_eq!(got, want, "{body}");
    let d9 = up.iter().find(|s| s["labels"]["dsa"] == "D9").unwrap();
    let status = get(&admin, "/status").json();
    let prefixes: Vec<&str> = status["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["prefix"].as_str().unwrap())
        .collect();
    let partition = d9["labels"]["partition"].as_str().unwrap();
    assert!(partition.contains('\\'), "{partition}");
    assert!(
        prefixes.contains(&partition),
        "{partition} not in {prefixes:?}"
    );
}

#[test]
fn a_rejected_reload_names_the_place_and_shows_the_password_nowhere() {
    let dir = tempfile::tempdir().unwrap();
    let k = unreachable_dsas(&["D1"]).write(dir.path());
    let admin = format!("127.0.0.1:{}", pick_port());
    let r = router(&k, dir.path(), &admin, &[]);
    let good = std::fs::read_to_string(&k).unwrap();
    // The broken line: the second of the block after `good`.
    let at = good.lines().count() + 2;
    // Unterminated, then without its '=' (the message would quote it).
    for (line, column, why) in [
        (
            "  ldap-dsa-password = \"Hunter2-S3cret\n",
            23,
            "unterminated string",
        ),
        (
            "  ldap-dsa-password \"Hunter2-S3cret\"\n",
            21,
            "expected '='",
        ),
    ] {
        let place = format!(":{at}:{column}");
        let broken = format!(
            "{good}set dsa D2 = {{\n{line}  prefix = <c NZ> address = tcp \"127.0.0.1\" port 1 }};\n"
        );
        std::fs::write(&k, broken).unwrap();
        let resp = unix_http(&r.control, "POST", "/reload");
        assert_eq!(resp.status, 422, "{}", resp.body);
        let error = resp.json()["error"].as_str().unwrap().to_string();
        let want = format!("{}{place}", k.display());
        assert!(
            error.contains(&want) && error.contains(why),
            "the reload error lacks {want} or {why}:\n{error}"
        );
        let status = get(&admin, "/status").body;
        assert!(status.contains(&want) && status.contains(why), "{status}");
        let (ok, out) = ctl(&admin, &r.control, &["reload"]);
        assert!(!ok && out.contains(&want), "{out}");
        for (what, text) in [
            ("response", &resp.body),
            ("/status", &status),
            ("ctl", &out),
        ] {
            assert!(
                !text.contains("Hunter2"),
                "the password in the {what}:\n{text}"
            );
        }
    }
    let log = r.log_text();
    assert!(log.contains("reload rejected"), "{log}");
    assert!(!log.contains("Hunter2"), "the password in the log:\n{log}");
}
