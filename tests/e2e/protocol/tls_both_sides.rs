//! TLS end to end with real parts: the router as a process
//! (`dsa-router serve --ldaps-listen ... --tls-cert ... --dsa-ca ...`) in
//! front of TLS-only OpenLDAP slapds (one LDAPS-only, one that requires
//! StartTLS before any operation), driven by `ldapsearch -ZZ` and
//! `ldapsearch -H ldaps://` with `LDAPTLS_CACERT`. Certificates are made
//! here with `rcgen`. Also: a certificate swap with SIGHUP, a DSA whose
//! TLS fails, and a router that does not trust the DSAs' CA.
//!
//! Needs slapd and ldap-utils (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support;

use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use support::certs::Ca;
use support::knowledge::{Dsa, Knowledge};
use support::slapd::{
    pick_port, run_tool_env, seed_ldif, Slapd, SlapdConfig, SlapdTls, TlsMode, LDAPSEARCH,
    ROUTER_PW,
};

const DEMOCORP: &str = "o=DEMOCORP,c=AU";
const CUSTOMER: &str = "o=CUSTOMER,c=AU";
const ALICE: &str = "uid=alice,ou=people,o=DEMOCORP,c=AU";
const BIN: &str = env!("CARGO_BIN_EXE_dsa-router");

/// A `dsa-router serve` process; killed on drop.
struct Router {
    child: Child,
    plain: u16,
    ldaps: u16,
    log: PathBuf,
}

impl Router {
    fn start(dir: &Path, knowledge: &Path, extra: &[&str]) -> Router {
        let log = dir.join(format!("router-{}.log", pick_port()));
        for _ in 0..5 {
            let (plain, ldaps) = (pick_port(), pick_port());
            let (l, s) = (format!("127.0.0.1:{plain}"), format!("127.0.0.1:{ldaps}"));
            let mut args = vec![
                "serve",
                "--knowledge",
                knowledge.to_str().unwrap(),
                "--listen",
                &l,
                "--ldaps-listen",
                &s,
                "--admin",
                "none",
                "--probe-interval",
                "0.2",
                "--probe-timeout",
                "1",
                "--failback-hold",
                "0",
            ];
            args.extend_from_slice(extra);
            let child = Command::new(BIN)
                .args(&args)
                .env("DSA_ROUTER_LOG", "info")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(fs::File::create(&log).unwrap())
                .spawn()
                .unwrap();
            let mut r = Router {
                child,
                plain,
                ldaps,
                log: log.clone(),
            };
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                if let Ok(Some(_)) = r.child.try_wait() {
                    break;
                }
                let addr = SocketAddr::from(([127, 0, 0, 1], ldaps));
                if r.log_text().contains("listening for LDAPS")
                    && TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
                {
                    return r;
                }
                assert!(Instant::now() < deadline, "router: {}", r.log_text());
                thread::sleep(Duration::from_millis(10));
            }
            if !r.log_text().contains("Address already in use") {
                panic!("router exited: {}", r.log_text());
            }
        }
        panic!("could not start the router")
    }

    fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_log(&self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.log_text().contains(what) {
            assert!(
                Instant::now() < deadline,
                "no {what:?} in the router log:\n{}",
                self.log_text()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn hup(&self) {
        let out = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(out.success());
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `ldapsearch` at `url` trusting `ca`; `args` after the URL.
fn ldapsearch(url: &str, ca: &Path, args: &[&str]) -> support::slapd::ToolOutput {
    let mut a = vec!["-x", "-LLL", "-o", "nettimeout=5", "-H", url];
    a.extend_from_slice(args);
    run_tool_env(
        LDAPSEARCH,
        &a,
        None,
        Duration::from_secs(20),
        &[
            ("LDAPTLS_CACERT", ca.to_str().unwrap()),
            ("LDAPTLS_REQCERT", "demand"),
        ],
    )
}

fn tls_dsa(name: &str, o: &str, port: u16) -> Dsa {
    let prefix = format!("<c AU><o {o}>");
    Dsa::new(name, port)
        .prefix(&prefix)
        .dsa_name_only(&format!("{prefix}<cn {name}>"))
        .router(ROUTER_PW)
        .trust_conveyed()
}

#[test]
fn ldapsearch_zz_and_ldaps_through_the_router_to_tls_only_slapd() {
    Slapd::require();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = Ca::new(dir, "main");
    let other = Ca::new(dir, "other");
    let (scert, skey) = ca.server_files(dir, "slapd");
    let tls = |mode| SlapdTls {
        cert: scert.clone(),
        key: skey.clone(),
        ca: ca.pem.clone(),
        mode,
    };
    // D1: LDAPS only. C1: plain port, TLS required (StartTLS).
    let (t1, t2) = (tls(TlsMode::Ldaps), tls(TlsMode::StartTls));
    let d1 = thread::spawn(move || {
        Slapd::start_tls(
            SlapdConfig::new("D1", &[DEMOCORP], seed_ldif(DEMOCORP, "D1")),
            t1,
        )
    });
    let c1 = Slapd::start_tls(
        SlapdConfig::new("C1", &[CUSTOMER], seed_ldif(CUSTOMER, "C1")),
        t2,
    );
    let d1 = d1.join().unwrap();
    assert!(d1.url.starts_with("ldaps://"));
    // Without TLS, C1 answers nothing.
    let plain = ldapsearch(&c1.url, &ca.pem, &["-b", "", "-s", "base"]);
    assert!(!plain.success(), "C1 must require TLS: {plain:?}");

    let knowledge = Knowledge::new()
        .dsa(tls_dsa("D1", "DEMOCORP", d1.port).link_flags("dsp-ldap, ssl-encryption"))
        .dsa(tls_dsa("C1", "CUSTOMER", c1.port).set("dsa-router-tls", "starttls"))
        // Wrong on purpose: LDAPS towards C1's plain port.
        .dsa(tls_dsa("B1", "BAD", c1.port).set("dsa-router-tls", "ldaps"))
        .write(dir);
    let (rcert, rkey) = ca.server_files(dir, "router");
    let (rc, rk, dca) = (
        rcert.to_str().unwrap(),
        rkey.to_str().unwrap(),
        ca.pem.to_str().unwrap(),
    );
    let t0 = Instant::now();
    let r = Router::start(
        dir,
        &knowledge,
        &[
            "--tls-cert",
            rc,
            "--tls-key",
            rk,
            "--dsa-ca",
            dca,
            "--require-tls-for-bind",
        ],
    );
    let zz_url = format!("ldap://127.0.0.1:{}", r.plain);
    let ldaps_url = format!("ldaps://127.0.0.1:{}", r.ldaps);
    let served_by = |url: &str, suffix: &str, extra: &[&str]| {
        let base = format!("cn=served-by,{suffix}");
        let mut a = vec!["-b", base.as_str(), "-s", "base", "description"];
        a.extend_from_slice(extra);
        let out = ldapsearch(url, &ca.pem, &a);
        assert!(out.success(), "{url} {base}: {out:?}\n{}", r.log_text());
        out.stdout
    };

    // ldapsearch -ZZ (StartTLS), bound as alice: D1 over LDAPS, C1 over
    // StartTLS.
    let bind = ["-D", ALICE, "-w", "alicepw"];
    let zz: Vec<&str> = ["-ZZ"].iter().chain(bind.iter()).copied().collect();
    assert!(served_by(&zz_url, DEMOCORP, &zz).contains("description: D1"));
    assert!(served_by(&zz_url, CUSTOMER, &["-ZZ"]).contains("description: C1"));
    // ldaps://
    assert!(served_by(&ldaps_url, DEMOCORP, &bind).contains("description: D1"));
    assert!(served_by(&ldaps_url, CUSTOMER, &[]).contains("description: C1"));
    let out = ldapsearch(&ldaps_url, &ca.pem, &["-b", ALICE, "-s", "base", "mail"]);
    assert!(out.stdout.contains("mail: alice@"), "{out:?}");

    // A simple bind over plain LDAP: confidentialityRequired (13).
    let out = ldapsearch(&zz_url, &ca.pem, &[&bind[..], &["-b", ALICE]].concat());
    assert!(!out.success(), "{out:?}");
    assert!(out.stderr.contains("Confidentiality required"), "{out:?}");
    // A client that does not trust the router's certificate.
    let out = ldapsearch(&zz_url, &other.pem, &["-ZZ", "-b", ALICE]);
    assert!(!out.success(), "{out:?}");
    let out = ldapsearch(&ldaps_url, &other.pem, &["-b", ALICE]);
    assert!(!out.success(), "{out:?}");
    r.wait_log("TLS handshake failed");

    // B1's TLS fails (its port speaks plain LDAP): a clear error, no hang;
    // it is marked down, D1 and C1 stay up under TLS probes.
    let t = Instant::now();
    let out = ldapsearch(&zz_url, &ca.pem, &["-ZZ", "-b", "o=BAD,c=AU", "-s", "base"]);
    assert!(
        !out.success() && out.stderr.contains("unavailable"),
        "{out:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(10));
    r.wait_log("TLS to 127.0.0.1");
    r.wait_log("DSA down");
    let log = r.log_text();
    assert!(log.contains("dsa=B1") && log.contains("DSA down"), "{log}");
    for d in ["D1", "C1"] {
        assert!(
            !log.lines()
                .any(|l| l.contains("DSA down") && l.contains(&format!("dsa={d}"))),
            "{d} went down:\n{log}"
        );
    }

    // Certificate swap: a new certificate from another CA, SIGHUP.
    let _ = other.server_files(dir, "router");
    r.hup();
    r.wait_log("TLS certificate and key re-read");
    let out = ldapsearch(&zz_url, &other.pem, &["-ZZ", "-b", ALICE, "-s", "base"]);
    assert!(out.success(), "new certificate: {out:?}");
    let out = ldapsearch(&ldaps_url, &other.pem, &["-b", ALICE, "-s", "base"]);
    assert!(out.success(), "new certificate: {out:?}");
    let out = ldapsearch(&ldaps_url, &ca.pem, &["-b", ALICE, "-s", "base"]);
    assert!(!out.success(), "old certificate still served: {out:?}");
    // A broken key: the reload fails, the new certificate stays in use.
    fs::write(&rkey, "-----BEGIN PRIVATE KEY-----\n!!\n").unwrap();
    r.hup();
    r.wait_log("reload rejected");
    let out = ldapsearch(&ldaps_url, &other.pem, &["-b", ALICE, "-s", "base"]);
    assert!(out.success(), "after a failed reload: {out:?}");
    drop(r);

    // A router that does not trust the DSAs' CA: D1 and C1 unavailable,
    // with the reason in the log.
    let _ = ca.server_files(dir, "router");
    let r = Router::start(
        dir,
        &knowledge,
        &[
            "--tls-cert",
            rc,
            "--tls-key",
            rk,
            "--dsa-ca",
            other.pem.to_str().unwrap(),
        ],
    );
    let out = ldapsearch(
        &format!("ldaps://127.0.0.1:{}", r.ldaps),
        &ca.pem,
        &["-b", ALICE, "-s", "base"],
    );
    assert!(
        !out.success() && out.stderr.contains("unavailable"),
        "{out:?}"
    );
    r.wait_log("invalid peer certificate");
    drop(r);

    // Knowledge asking for TLS without --dsa-ca: refused at start.
    let out = Command::new(BIN)
        .args([
            "serve",
            "--knowledge",
            knowledge.to_str().unwrap(),
            "--admin",
            "none",
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--dsa-ca"));
    eprintln!("TLS end to end: {:?}", t0.elapsed());
}
