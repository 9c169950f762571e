//! The settings file (`serve --config FILE`) through a real router process
//! in front of slapd: a router started from the file alone, every table
//! set, serves a search and does what each table says; `config
//! --defaults` loads as it is; a bad value and an unknown key are refused
//! naming the file and the setting (by `serve` and by `check --config`);
//! a flag overrides the file, the file overrides knowledge's `set
//! dsa-router-*`; a reload re-reads the file and names what needs a
//! restart.
//!
//! Needs slapd and ldap-utils (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use support::router::Router;
use support::slapd::{ldap_tool, user_dn, Slapd, SlapdConfig, ROUTER_PW};

const DEMOCORP: &str = "o=DEMOCORP,c=AU";

/// An anonymous base search for alice through `url`: her uid.
fn search_alice(url: &str) {
    let alice = user_dn(DEMOCORP, "alice");
    let args = [
        "-x",
        "-LLL",
        "-H",
        url,
        "-b",
        alice.as_str(),
        "-s",
        "base",
        "uid",
    ];
    let out = ldap_tool("ldapsearch", &args, None);
    assert_eq!(out.code, Some(0), "{} {}", out.stdout, out.stderr);
    assert!(out.stdout.contains("uid: alice"), "{}", out.stdout);
}

/// `dsa-router ARGS`: (exit code, stdout, stderr).
fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The lines of `path` once it has at least `n`, at most 10 s.
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

/// A settings file with every table set, for a router at `listen` with
/// control socket `control`; `extra` goes at the end of `[dsas]`.
fn every_table(dir: &Path, knowledge: &Path, listen: &str, control: &str, extra: &str) -> PathBuf {
    let access = dir.join("access.log");
    let text = format!(
        r#"# A router from this file alone.
[router]
knowledge = "{k}"
threads = 1
drain-timeout = "5s"

[listen]
listen = "{listen}"
idle-timeout = "15m"
max-clients = 100

[tls]
require-tls-for-bind = false

[dsas]
probe-interval = "200ms"
failback-hold = 0
connect-timeout = "2s"
hedge-budget = 3
{extra}

[limits]
max-request-pdu = "4MiB"
client-queue-bytes = "16MiB"

[replication]
read-your-writes = "2s"

[policy]
failed-bind-limit = 3
failed-bind-window = "1m"

[admin]
admin = "none"
control-socket = "{control}"

[logs]
access-log = "{access}"
access-log-format = "json"

[traces]
otlp-sample = 0.5
"#,
        k = knowledge.display(),
        access = access.display(),
    );
    let path = dir.join("router.toml");
    fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_router_from_the_settings_file_alone_serves_with_every_table_applied() {
    let s = Slapd::start(SlapdConfig::seeded("D1", &[DEMOCORP]));
    let dir = tempfile::tempdir().unwrap();
    let k = support::slapd::one_dsa_knowledge(dir.path(), s.port, ROUTER_PW);
    // Knowledge's own setting: the file's hedge-budget overrides it.
    let text = fs::read_to_string(&k).unwrap();
    fs::write(
        &k,
        format!("{text}set dsa-router-hedge-budget = 7;\nset dsa-router-max-ejection = 20;\n"),
    )
    .unwrap();
    let d = dir.path().to_path_buf();
    let r = Router::start_args(dir.path(), |listen, control| {
        let file = every_table(&d, &k, listen, control, "");
        vec![
            "serve".into(),
            "--config".into(),
            file.to_str().unwrap().into(),
        ]
    });
    search_alice(&r.url);
    // [logs]: the access log went to the file, as JSON.
    let lines = lines_of(&dir.path().join("access.log"), 1);
    assert!(!lines.is_empty(), "no access log line");
    let v: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert!(v.is_object(), "{}", lines[0]);
    // [admin]: the control socket is where the file says.
    assert!(
        r.control.exists(),
        "no control socket at {}",
        r.control.display()
    );
    // Knowledge's settings: overridden by the file, or in force, said so.
    let log = r.log_text();
    assert!(log.contains("settings file read"), "{log}");
    assert!(
        log.contains(
            "set dsa-router-hedge-budget = 7 is overridden by hedge-budget from [dsas] in"
        ),
        "{log}"
    );
    assert!(
        log.contains("set dsa-router-max-ejection = 20 is in force"),
        "{log}"
    );
}

#[test]
fn a_flag_overrides_the_file() {
    let s = Slapd::start(SlapdConfig::seeded("D1", &[DEMOCORP]));
    let dir = tempfile::tempdir().unwrap();
    let k = support::slapd::one_dsa_knowledge(dir.path(), s.port, ROUTER_PW);
    let text = fs::read_to_string(&k).unwrap();
    fs::write(&k, format!("{text}set dsa-router-hedge-budget = 7;\n")).unwrap();
    let d = dir.path().to_path_buf();
    let r = Router::start_args(dir.path(), |listen, control| {
        let file = every_table(&d, &k, listen, control, "");
        let file = file.to_str().unwrap();
        [
            "serve",
            "--config",
            file,
            "--access-log-format",
            "text",
            "--hedge-budget",
            "2",
        ]
        .map(String::from)
        .to_vec()
    });
    search_alice(&r.url);
    let lines = lines_of(&dir.path().join("access.log"), 1);
    assert!(!lines.is_empty(), "no access log line");
    assert!(
        serde_json::from_str::<serde_json::Value>(&lines[0]).is_err() && lines[0].contains("op="),
        "text, as the flag says, not the file's json: {}",
        lines[0]
    );
    let log = r.log_text();
    assert!(
        log.contains(
            "set dsa-router-hedge-budget = 7 is overridden by hedge-budget from the command line"
        ),
        "{log}"
    );
}

#[test]
fn config_defaults_loads_as_it_is() {
    let s = Slapd::start(SlapdConfig::seeded("D1", &[DEMOCORP]));
    let dir = tempfile::tempdir().unwrap();
    let k = support::slapd::one_dsa_knowledge(dir.path(), s.port, ROUTER_PW);
    let (code, defaults, err) = run(&["config", "--defaults"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(defaults.contains("[listen]\n") && defaults.contains("idle-timeout = \"15m\""));
    let file = dir.path().join("defaults.toml");
    fs::write(&file, &defaults).unwrap();
    let (code, out, err) = run(&[
        "check",
        "--config",
        file.to_str().unwrap(),
        k.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("valid"), "{out}");
    // Unchanged, with only what it leaves to the operator given as flags.
    let r = Router::start_with(&k, dir.path(), &["--config", file.to_str().unwrap()]);
    search_alice(&r.url);
}

#[test]
fn bad_values_and_unknown_keys_are_refused_naming_the_file_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    fs::write(
        &file,
        "[router]\nknowledge = \"/nonexistent/router.dxg\"\n[listen]\nidle-timeout = \"15x\"\nidle-timout = \"15m\"\n[limits]\nmax-request-pdu = \"2GiB\"\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    for args in [vec!["serve", "--config", f], vec!["check", "--config", f]] {
        let (code, out, err) = run(&args);
        assert_ne!(code, Some(0), "{args:?}: {out}{err}");
        for want in [
            format!("settings file {f}: [listen] idle-timeout = \"15x\": \"15x\" is not a duration"),
            format!("settings file {f}: [listen] idle-timout: unknown setting; did you mean idle-timeout?"),
            "[limits] max-request-pdu = \"2GiB\": 2GiB is out of range: from 64 bytes to 1GiB".to_string(),
        ] {
            assert!(err.contains(&want), "{args:?}: want {want}\n{err}");
        }
    }
    // The same mistakes as flags: refused with the range.
    let (code, _, err) = run(&["serve", "--knowledge", "/k", "--idle-timeout", "15x"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("--idle-timeout: \"15x\" is not a duration"),
        "{err}"
    );
    let (code, _, err) = run(&["serve", "--knowledge", "/k", "--bind-timeout", "0.01"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("from 100ms to 1h"), "{err}");
}

#[test]
fn a_reload_rereads_the_file_and_names_what_needs_a_restart() {
    let s = Slapd::start(SlapdConfig::seeded("D1", &[DEMOCORP]));
    let dir = tempfile::tempdir().unwrap();
    let k = support::slapd::one_dsa_knowledge(dir.path(), s.port, ROUTER_PW);
    let d = dir.path().to_path_buf();
    let kk = k.clone();
    let r = Router::start_args(dir.path(), |listen, control| {
        let file = every_table(&d, &kk, listen, control, "");
        vec![
            "serve".into(),
            "--config".into(),
            file.to_str().unwrap().into(),
        ]
    });
    let file = dir.path().join("router.toml");
    let text = fs::read_to_string(&file).unwrap();
    let changed = text
        .replace("idle-timeout = \"15m\"", "idle-timeout = \"20m\"")
        .replace("hedge-budget = 3", "hedge-budget = 4");
    fs::write(&file, changed).unwrap();
    let ctl = |args: &[&str]| {
        let control = r.control.to_str().unwrap();
        let mut all = vec!["ctl", "--control-socket", control];
        all.extend_from_slice(args);
        run(&all)
    };
    let (code, out, err) = ctl(&["reload"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let said = format!("{out}{err}");
    assert!(said.contains("settings file re-read"), "{said}");
    assert!(
        said.contains("after a restart: [listen] idle-timeout"),
        "{said}"
    );
    assert!(
        !said.contains("hedge-budget"),
        "hedge-budget changes live: {said}"
    );
    // A bad value: the reload is refused, naming the setting.
    fs::write(
        &file,
        text.replace("hedge-budget = 3", "hedge-budget = \"x\""),
    )
    .unwrap();
    let (code, out, err) = ctl(&["reload"]);
    assert_ne!(code, Some(0), "{out}{err}");
    assert!(
        format!("{out}{err}").contains("[dsas] hedge-budget"),
        "{out}{err}"
    );
    search_alice(&r.url);
}
