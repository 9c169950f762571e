//! README.md's "Put it in front of your own directory", run as written:
//! the blocks marked `<!-- own-directory ... -->` are taken from the
//! README, in order, against two real slapd holding `dc=example,dc=com`.
//!
//! * `<!-- own-directory file NAME -->`: the block is written to NAME;
//! * `<!-- own-directory -->`: the block runs in `bash -euo pipefail`;
//! * `<!-- own-directory serve -->`: the block runs in the background
//!   until the test ends; the test waits for the router to listen.
//!
//! The README says its ports are examples; the test puts free ports in
//! their place (3890 and 3891: the two slapd; 3389: the router; 8389: its
//! admin API), and nothing else changes. A renamed flag, a command that
//! fails or a block that goes missing fails the test.
#![allow(clippy::panic)]

use crate::support::slapd::{pick_port, Slapd, SlapdConfig};
use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SUFFIX: &str = "dc=example,dc=com";

/// One marked block of the README.
#[derive(Debug)]
enum Block {
    File(String, String),
    Run(String),
    Serve(String),
}

/// The marked blocks of `text`, in order.
fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(mark) = line
            .trim()
            .strip_prefix("<!-- own-directory")
            .and_then(|m| m.strip_suffix("-->"))
        else {
            continue;
        };
        let fence = lines.next().unwrap_or_default();
        assert!(
            fence.starts_with("```"),
            "README: a fenced block must follow `{line}`, found `{fence}`"
        );
        let body: Vec<&str> = lines
            .by_ref()
            .take_while(|l| !l.starts_with("```"))
            .collect();
        let body = body.join("\n") + "\n";
        let mark: Vec<&str> = mark.split_whitespace().collect();
        out.push(match mark.as_slice() {
            [] => Block::Run(body),
            ["serve"] => Block::Serve(body),
            ["file", name] => Block::File(name.to_string(), body),
            other => panic!("README: unknown own-directory mark {other:?}"),
        });
    }
    out
}

/// `text` with each example port (a number standing alone) replaced.
fn substitute(text: &str, ports: &[(&str, u16)]) -> String {
    let mut out = text.to_string();
    for (from, to) in ports {
        let mut s = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(i) = rest.find(from) {
            let before = rest[..i].chars().last();
            let after = rest[i + from.len()..].chars().next();
            let alone = !before.is_some_and(|c| c.is_ascii_digit())
                && !after.is_some_and(|c| c.is_ascii_digit());
            s.push_str(&rest[..i]);
            if alone {
                s.push_str(&to.to_string());
            } else {
                s.push_str(from);
            }
            rest = &rest[i + from.len()..];
        }
        s.push_str(rest);
        out = s;
    }
    out
}

/// `bash` with the router binary first on `PATH`, in `dir`, with a runtime
/// directory of its own (the control socket).
fn bash(dir: &Path) -> Command {
    let bin = Path::new(env!("CARGO_BIN_EXE_dsa-router"))
        .parent()
        .expect("the binary's directory")
        .to_path_buf();
    let path = std::env::var("PATH").unwrap_or_default();
    let mut cmd = Command::new("bash");
    cmd.current_dir(dir)
        .env("PATH", format!("{}:{path}", bin.display()))
        .env("RUNTIME_DIRECTORY", dir.join("run"))
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    cmd
}

/// The background `serve` block; its process group is ended on drop.
struct Background(Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", self.0.id())])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_serve(dir: &Path, script: &str, port: u16) -> Background {
    use std::os::unix::process::CommandExt;
    let log = fs::File::create(dir.join("serve.log")).expect("serve.log");
    let child = bash(dir)
        .args(["-euo", "pipefail", "-c", script])
        .process_group(0)
        .stdout(log.try_clone().expect("serve.log"))
        .stderr(log)
        .spawn()
        .expect("bash");
    let mut bg = Background(child);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = fs::read_to_string(dir.join("serve.log")).unwrap_or_default();
        if let Ok(Some(status)) = bg.0.try_wait() {
            panic!("README serve block exited ({status}):\n{script}\n{log}");
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
            && log.contains("dsa-router listening")
        {
            return bg;
        }
        assert!(
            Instant::now() < deadline,
            "README serve block not listening on {port} after 30 s:\n{script}\n{log}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn run(dir: &Path, script: &str) -> String {
    let out = bash(dir)
        .args(["-euo", "pipefail", "-c", script])
        .output()
        .expect("bash");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "README block failed ({}):\n{script}\nstdout:\n{stdout}\nstderr:\n{stderr}\nrouter log:\n{}",
        out.status,
        fs::read_to_string(dir.join("serve.log")).unwrap_or_default()
    );
    println!("$ {script}{stdout}");
    stdout
}

#[test]
fn readme_own_directory_runs_as_written() {
    let readme = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let blocks = blocks(&readme);
    let s1 = Slapd::start(SlapdConfig::seeded("DSA1", &[SUFFIX]));
    let s2 = Slapd::start(SlapdConfig::seeded("DSA2", &[SUFFIX]));
    let router_port = pick_port();
    let admin_port = pick_port();
    let ports = [
        ("3890", s1.port),
        ("3891", s2.port),
        ("3389", router_port),
        ("8389", admin_port),
    ];
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let mut seen = Vec::new();
    let mut outputs = String::new();
    let mut serve = None;
    for block in &blocks {
        match block {
            Block::File(name, body) => {
                fs::write(dir.join(name), substitute(body, &ports)).expect("write");
                seen.push(format!("file {name}"));
            }
            Block::Run(body) => {
                outputs.push_str(&run(dir, &substitute(body, &ports)));
                seen.push(body.clone());
            }
            Block::Serve(body) => {
                serve = Some(start_serve(dir, &substitute(body, &ports), router_port));
                seen.push(body.clone());
            }
        }
    }
    let seen = seen.join("\n");
    // The section keeps its steps: knowledge, check, explain, serve, a
    // search through the router, the router's state.
    for want in [
        "file router.dxg",
        "dsa-router check",
        "dsa-router explain",
        "dsa-router serve",
        "ldapsearch",
        "ctl",
    ] {
        assert!(
            seen.contains(want),
            "README's own-directory section lost `{want}`:\n{seen}"
        );
    }
    assert!(
        serve.is_some(),
        "README's own-directory section has no serve block"
    );
    assert!(
        outputs.contains(&format!("dn: {SUFFIX}")),
        "the search through the router did not return {SUFFIX}:\n{outputs}"
    );
    for dsa in ["DSA1", "DSA2"] {
        assert!(
            outputs
                .lines()
                .any(|l| l.contains(dsa) && l.contains(" up ")),
            "{dsa} is not up in the router's status:\n{outputs}"
        );
    }
    drop(serve);
    drop((s1, s2));
}

#[test]
fn ports_are_substituted_only_where_they_stand_alone() {
    let ports = [("3890", 1), ("3389", 2)];
    for (text, want) in [
        ("port 3890", "port 1"),
        ("127.0.0.1:3389/", "127.0.0.1:2/"),
        ("13890 38901", "13890 38901"),
        ("3890,3389", "1,2"),
    ] {
        assert_eq!(substitute(text, &ports), want, "{text}");
    }
}
