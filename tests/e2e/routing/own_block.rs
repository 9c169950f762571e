//! The router's own block without `--name`: `check`, `explain` and `serve`
//! take the block at the router's listen address, else the one at a
//! listen-only address (`0.0.0.0`, `::`: no DSA answers there), and say
//! which; several alike are refused. The router never routes to, nor
//! health-checks, its own block.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::knowledge::{Dsa, Knowledge};
use crate::support::ldap::{search, status};
use crate::support::router::{Router, TestDsaProcess};
use crate::support::slapd::pick_port;
use std::path::Path;
use std::process::Command;

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
