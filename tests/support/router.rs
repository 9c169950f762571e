//! A `dsa-router serve` process for tests that run the router as a real
//! process in front of real DSAs.
#![allow(clippy::unwrap_used, clippy::panic)]

use super::slapd::{pick_port, run_tool};
use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long the router may take to start listening.
const ROUTER_START: Duration = Duration::from_secs(30);

/// A `dsa-router serve` process; killed on drop.
pub struct Router {
    pub url: String,
    /// The router's control socket (`ctl --control-socket`).
    pub control: PathBuf,
    child: Child,
    log: PathBuf,
}

impl Router {
    pub fn start(knowledge: &Path, dir: &Path) -> Router {
        Router::start_with(knowledge, dir, &[])
    }

    /// [`Router::start`] with more `serve` options.
    pub fn start_with(knowledge: &Path, dir: &Path, extra: &[&str]) -> Router {
        let knowledge = knowledge.to_str().unwrap();
        Router::start_args(dir, |listen, control| {
            let mut args = vec!["serve", "--knowledge", knowledge, "--listen", listen];
            // Parallel tests each run a router: no shared admin port.
            if serve_has_admin_option() && !extra.contains(&"--admin") {
                args.extend(["--admin", "none"]);
            }
            // Each router its own control socket, in the test's directory.
            if serve_has_control_socket_option() && !extra.contains(&"--control-socket") {
                args.extend(["--control-socket", control]);
            }
            // DSAs that come back serve after `--rise` good probes, unless
            // the test is about the failback hold-down.
            if !extra.contains(&"--failback-hold") {
                args.extend(["--failback-hold", "0"]);
            }
            args.extend_from_slice(extra);
            args.into_iter().map(String::from).collect()
        })
    }

    /// A router started with the arguments `args` makes of its listen
    /// address and control socket (`serve ...`), listening on that
    /// address.
    pub fn start_args(dir: &Path, args: impl Fn(&str, &str) -> Vec<String>) -> Router {
        let log = dir.join("router.log");
        let mut last = String::new();
        // A port picked by binding :0 may be taken before the router binds
        // it: then try another.
        for _ in 0..5 {
            let port = pick_port();
            // Its own control socket, also where a test runs two routers
            // in one directory.
            let control = dir.join(format!("control-{port}.sock"));
            let control_arg = control.to_str().unwrap().to_string();
            let err = fs::File::create(&log).unwrap();
            let listen = format!("127.0.0.1:{port}");
            let args = args(&listen, &control_arg);
            let child = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
                .args(&args)
                .env("DSA_ROUTER_LOG", "info")
                .env("NO_COLOR", "1")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(err)
                .spawn()
                .unwrap();
            let mut r = Router {
                control: control.clone(),
                child,
                url: format!("ldap://127.0.0.1:{port}"),
                log: log.clone(),
            };
            let deadline = Instant::now() + ROUTER_START;
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            loop {
                if let Ok(Some(status)) = r.child.try_wait() {
                    last = format!("router exited ({status}):\n{}", r.log_text());
                    break;
                }
                if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
                    && r.log_now().contains("dsa-router listening")
                {
                    return r;
                }
                assert!(
                    Instant::now() < deadline,
                    "router not listening on {port} after {ROUTER_START:?}:\n{}",
                    r.log_text()
                );
                thread::sleep(Duration::from_millis(10));
            }
            if !last.contains("Address already in use") {
                break;
            }
        }
        panic!("could not start the router: {last}")
    }

    /// The router's log so far, without terminal colours. Access-log lines
    /// are written by a writer thread every `access::INTERVAL`: this waits
    /// for one round, then until the log has not grown for two more (a
    /// loaded machine may run the writer late; a fixed wait lost lines
    /// there), at most 10 s.
    pub fn log_text(&self) -> String {
        let round = dsa_router::observe::access::INTERVAL;
        std::thread::sleep(round + Duration::from_millis(50));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut last = self.log_now();
        loop {
            std::thread::sleep(round * 2);
            let now = self.log_now();
            if now.len() == last.len() || std::time::Instant::now() > deadline {
                return now;
            }
            last = now;
        }
    }

    /// The router's log so far, without waiting for the access log.
    fn log_now(&self) -> String {
        strip_ansi(&fs::read_to_string(&self.log).unwrap_or_default())
    }

    /// The router's exit status once it exits, waiting at most `wait`.
    pub fn wait_exit(&mut self, wait: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + wait;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// The router's process ID (for signals).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The DSA names of the access-log lines for operation `op` on `dn`.
    pub fn access_dsas(&self, op: &str, dn: &str) -> Vec<String> {
        self.log_text()
            .lines()
            .filter(|l| {
                l.contains("access")
                    && l.contains(&format!("op=\"{op}\""))
                    && (l.contains(&format!("dn={dn} ")) || l.contains(&format!("dn=\"{dn}\"")))
            })
            .filter_map(|l| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix("dsa="))
                    .map(|d| d.trim_matches('"').to_string())
            })
            .collect()
    }
}

/// Whether `serve` has `--admin` (an admin API listener on a fixed default
/// port, which parallel routers would fight over).
fn serve_has_admin_option() -> bool {
    serve_help().contains("--admin ")
}

/// Whether `serve` has `--control-socket` (a default path parallel
/// routers would fight over).
fn serve_has_control_socket_option() -> bool {
    serve_help().contains("--control-socket ")
}

/// `serve --help` of the binary under test (tests also run against older
/// builds, which lack some options).
fn serve_help() -> &'static str {
    static HELP: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HELP.get_or_init(|| {
        run_tool(
            env!("CARGO_BIN_EXE_dsa-router"),
            &["serve", "--help"],
            None,
            Duration::from_secs(30),
        )
        .stdout
    })
}

/// `s` without ANSI escape sequences (`ESC [ ... letter`).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `dsa-router testdsa` process (the in-memory test DSA) holding
/// generated data under `suffix`; killed on drop.
pub struct TestDsaProcess {
    child: Child,
    pub port: u16,
}

impl TestDsaProcess {
    /// Start one named `name`, once it accepts connections.
    pub fn start(name: &str, suffix: &str) -> TestDsaProcess {
        let port = super::slapd::pick_port();
        let child = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
            .args(["testdsa", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--name", name, "--suffix", suffix])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let p = TestDsaProcess { child, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "test DSA {name} did not start");
            thread::sleep(Duration::from_millis(20));
        }
        p
    }
}

impl Drop for TestDsaProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
