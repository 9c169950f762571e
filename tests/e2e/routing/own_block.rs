//! The router's own block without `--name`: `check`, `explain` and `serve`
//! take the block at the router's listen address, else the one at a
//! listen-only address (`0.0.0.0`, `::`: no DSA answers there), and say
//! which; several alike are refused. The router never routes to, nor
//! health-checks, its own block. A block at an ordinary address that
//! reaches the router is found by the router's instance marker in its
//! root DSE: the first probe that meets it takes the block as the
//! router's own; `check --online` says the block is a dsa-router.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::knowledge::{Dsa, Knowledge};
use crate::support::ldap::{search, status};
use crate::support::router::{Router, TestDsaProcess};
use crate::support::slapd::pick_port;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `dsa-router ARGS`: exit code, stdout, stderr.
fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The packaged layout: router R1 at all interfaces, port 389, sharing
/// DSA1's prefix and group; DSA1 at `port`.
fn packaged(dir: &Path, port: u16) -> std::path::PathBuf {
    Knowledge::new()
        .dsa(
            Dsa::at_host("R1", "0.0.0.0", 389)
                .prefix("<dc com><dc example>")
                .flags("load-share")
                .load_share_group("EXAMPLE"),
        )
        .dsa(
            Dsa::new("DSA1", port)
                .prefix("<dc com><dc example>")
                .flags("multi-write, load-share")
                .load_share_group("EXAMPLE"),
        )
        .write(dir)
}

#[test]
fn explain_and_check_without_name_name_the_router_block_or_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let k = packaged(dir.path(), 1389);
    let k = k.to_str().unwrap();
    // (arguments, exit code, in stdout, in stderr, not in stdout)
    let taken =
        "DSA R1 is taken as the router's own block (its address 0.0.0.0:389 is a listen address";
    let cases: &[(&[&str], i32, &str, &str, &str)] = &[
        (
            &["explain", k, "dc=example,dc=com", "--op", "add"],
            0,
            "targets:   DSA1",
            taken,
            "R1",
        ),
        (
            &["check", k],
            0,
            "router R1 (prefix dc=example,dc=com): never a target",
            taken,
            "1. R1",
        ),
        // --name says it: nothing to tell.
        (&["check", k, "--name", "R1"], 0, "router R1", "", "1. R1"),
    ];
    for (args, code, out_has, err_has, out_lacks) in cases {
        let (c, out, err) = run(args);
        assert_eq!(c, *code, "{args:?}:\n{out}\n{err}");
        assert!(
            out.contains(out_has),
            "{args:?}: stdout lacks {out_has:?}:\n{out}"
        );
        assert!(
            !out.contains(out_lacks),
            "{args:?}: stdout has {out_lacks:?}:\n{out}"
        );
        if err_has.is_empty() {
            assert!(!err.contains("taken as"), "{args:?}: {err}");
        } else {
            assert!(
                err.contains(err_has),
                "{args:?}: stderr lacks {err_has:?}:\n{err}"
            );
        }
    }
    // The block at --listen is the router's, ahead of a listen-only one.
    let k2 = Knowledge::new()
        .dsa(Dsa::new("R1", 3389).prefix("<dc com><dc example>"))
        .dsa(Dsa::at_host("OLD", "0.0.0.0", 389).prefix("<dc com><dc example>"))
        .dsa(Dsa::new("DSA1", 1389).prefix("<dc com><dc example>"))
        .write_to(&dir.path().join("listen.dxg"));
    let (c, out, err) = run(&["explain", k2.to_str().unwrap(), "dc=example,dc=com"]);
    assert_eq!(c, 0, "{out}\n{err}");
    assert!(err.contains("DSA R1 is taken as the router's own block (its address 127.0.0.1:3389 is where this router listens)"), "{err}");
    assert!(out.contains("OLD") && !out.contains("R1"), "{out}");
    // Two blocks at listen-only addresses: which is the router's is not
    // guessed.
    let k3 = Knowledge::new()
        .dsa(Dsa::at_host("R1", "0.0.0.0", 389).prefix("<dc com><dc example>"))
        .dsa(Dsa::at_host("R2", "::", 389).prefix("<dc com><dc example>"))
        .dsa(Dsa::new("DSA1", 1389).prefix("<dc com><dc example>"))
        .write_to(&dir.path().join("two.dxg"));
    let k3 = k3.to_str().unwrap();
    for (args, code) in [
        (vec!["explain", k3, "dc=example,dc=com"], 2),
        (vec!["check", k3], 1),
    ] {
        let (c, out, err) = run(&args);
        assert_eq!(c, code, "{args:?}:\n{out}\n{err}");
        assert!(
            err.contains(
                "several DSAs look like the router's own block: R1 (its address 0.0.0.0:389"
            ) && err.contains("R2 (its address [::]:389")
                && err.contains("pass --name"),
            "{err}"
        );
        assert!(!out.contains("targets"), "{out}");
    }
    let (c, out, err) = run(&["explain", k3, "dc=example,dc=com", "--name", "R2"]);
    assert_eq!(c, 0, "{out}\n{err}");
}

#[test]
fn serve_without_name_neither_routes_to_nor_probes_its_own_block() {
    let dir = tempfile::tempdir().unwrap();
    let dsa1 = TestDsaProcess::start("DSA1", "dc=example,dc=com");
    let k = packaged(dir.path(), dsa1.port);
    let admin = format!("127.0.0.1:{}", pick_port());
    let r = Router::start_with(
        &k,
        dir.path(),
        &["--admin", &admin, "--probe-interval", "1"],
    );
    // Probes have run.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let st = status(&admin);
    assert_eq!(st["router"], "R1", "{st}");
    let dsas: Vec<&str> = st["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["dsas"].as_array().unwrap())
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(dsas, ["DSA1"], "{st}");
    for _ in 0..4 {
        let out = search(
            &r.url,
            None,
            &[],
            "dc=example,dc=com",
            "base",
            "(objectClass=*)",
            &["1.1"],
        );
        assert!(out.success(), "{}", out.stderr);
    }
    let log = r.log_text();
    assert!(
        log.contains("DSA R1 is taken as the router's own block (its address 0.0.0.0:389 is a listen address"),
        "{log}"
    );
    assert!(
        !log.contains("dsa=R1"),
        "the router probed its own block:\n{log}"
    );
}

#[test]
fn serve_without_name_refuses_knowledge_with_two_router_like_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let k = Knowledge::new()
        .dsa(Dsa::at_host("R1", "0.0.0.0", 389).prefix("<dc com><dc example>"))
        .dsa(Dsa::at_host("R2", "::", 389).prefix("<dc com><dc example>"))
        .dsa(Dsa::new("DSA1", pick_port()).prefix("<dc com><dc example>"))
        .write(dir.path());
    let listen = format!("127.0.0.1:{}", pick_port());
    let (c, _, err) = run(&[
        "serve",
        "--knowledge",
        k.to_str().unwrap(),
        "--listen",
        &listen,
        "--admin",
        "none",
        "--control-socket",
        "none",
    ]);
    assert_eq!(c, 1, "{err}");
    assert!(
        err.contains("several DSAs look like the router's own block"),
        "{err}"
    );
}

/// A TCP relay from 127.0.0.2 (a port of its own) to the address it is
/// pointed at: the router's block at an ordinary address that reaches the
/// router (as behind a port forward or NAT), neither its listen address
/// nor a listen-only one.
struct Relay {
    port: u16,
    target: Arc<Mutex<Option<SocketAddr>>>,
    accepted: Arc<AtomicUsize>,
}

impl Relay {
    fn start() -> Relay {
        let l = TcpListener::bind("127.0.0.2:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let target: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let accepted = Arc::new(AtomicUsize::new(0));
        let (t, n) = (target.clone(), accepted.clone());
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(down) = s else { continue };
                n.fetch_add(1, Ordering::SeqCst);
                // Not pointed yet: the connection closes.
                let Some(to) = *t.lock().unwrap() else {
                    continue;
                };
                let Ok(up) = TcpStream::connect(to) else {
                    continue;
                };
                let (mut d2, mut u2) = (down.try_clone().unwrap(), up.try_clone().unwrap());
                let (mut d, mut u) = (down, up);
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut d2, &mut u2);
                    let _ = u2.shutdown(std::net::Shutdown::Write);
                });
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut u, &mut d);
                    let _ = d.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        Relay {
            port,
            target,
            accepted,
        }
    }
}

#[test]
fn serve_finds_its_own_block_at_an_ordinary_address_by_its_instance_marker() {
    let dir = tempfile::tempdir().unwrap();
    let dsa1 = TestDsaProcess::start("DSA1", "dc=example,dc=com");
    let relay = Relay::start();
    // R1 at 127.0.0.2, a port the router does not listen on: nothing in
    // the address says it is the router's.
    let k = Knowledge::new()
        .dsa(
            Dsa::at_host("R1", "127.0.0.2", relay.port)
                .prefix("<dc com><dc example>")
                .flags("load-share")
                .load_share_group("EXAMPLE"),
        )
        .dsa(
            Dsa::new("DSA1", dsa1.port)
                .prefix("<dc com><dc example>")
                .flags("multi-write, load-share")
                .load_share_group("EXAMPLE"),
        )
        .write(dir.path());
    let admin = format!("127.0.0.1:{}", pick_port());
    let r = Router::start_with(
        &k,
        dir.path(),
        &["--admin", &admin, "--probe-interval", "1"],
    );
    let router: SocketAddr = r.url.trim_start_matches("ldap://").parse().unwrap();
    *relay.target.lock().unwrap() = Some(router);
    let said = "knowledge block R1 is this router itself (its root DSE carries this process's instance marker)";
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut log = r.log_text();
    while !log.contains(said) {
        assert!(
            Instant::now() < deadline,
            "R1 not found to be the router:\n{log}"
        );
        log = r.log_text();
    }
    assert!(log.contains("pass --name R1 to say so"), "{log}");
    let st = status(&admin);
    let warnings = st["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{st}");
    assert!(
        warnings[0]
            .as_str()
            .unwrap()
            .starts_with("knowledge block R1 is this router itself"),
        "{st}"
    );
    let r1 = st["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["dsas"].as_array().unwrap())
        .find(|d| d["name"] == "R1")
        .unwrap()
        .clone();
    assert_eq!(r1["state"], "disabled", "{r1}");
    assert!(
        r1["reason"]
            .as_str()
            .unwrap()
            .starts_with("this router itself"),
        "{r1}"
    );
    // Never routed to: every search goes to DSA1.
    for _ in 0..8 {
        let out = search(
            &r.url,
            None,
            &[],
            "dc=example,dc=com",
            "base",
            "(objectClass=*)",
            &["1.1"],
        );
        assert!(out.success(), "{}", out.stderr);
    }
    // (Before the first probe met the marker, the router's own reads of
    // R1 may have gone through it: judged are the lines after.)
    let log = r.log_text();
    let after = &log[log.find(said).unwrap()..];
    let dsas: Vec<&str> = after
        .lines()
        .filter(|l| l.contains(" access: ") && l.contains("op=\"search\" dn=dc=example,dc=com "))
        .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("dsa=")))
        .collect();
    // The router's own read that went through R1 before the marker was
    // met may be logged just after the warning (its inner half, sent on to
    // DSA1): at least the 8 searches, every one of them by DSA1.
    assert!(
        dsas.len() >= 8 && dsas.iter().all(|d| *d == "DSA1"),
        "{dsas:?}\n{log}"
    );
    // Never probed again: no new connection through the relay over
    // several probe intervals.
    std::thread::sleep(Duration::from_millis(1500));
    let seen = relay.accepted.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(3500));
    assert_eq!(
        relay.accepted.load(Ordering::SeqCst),
        seen,
        "R1 was probed again"
    );

    // check --online meets a dsa-router at R1's address and says so; R1
    // is left out of the prefix comparison.
    let (c, out, err) = run(&["check", k.to_str().unwrap(), "--online"]);
    assert_eq!(c, 0, "{out}\n{err}");
    assert!(
        err.contains("warning: DSA R1 answers as a dsa-router (its root DSE carries a dsaRouterInstance marker)")
            && err.contains("pass --name R1"),
        "{err}"
    );
    assert!(
        out.contains("online: 2 of 2 DSA(s) answered, 1 of them a dsa-router; 0 prefix warning(s)"),
        "{out}"
    );
}
