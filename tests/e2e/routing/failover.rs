//! A write that never reached its DSA goes to the next DSA of the write
//! order: the write DSA is killed (`kill -9`), and at
//! once, before any probe can mark it down, `ldapmodify` through the
//! router: the router's connection to it is gone, the new connect is
//! refused, nothing was sent, and the write lands on the next DSA, with
//! its line in the access log.
//!
//! Needs slapd and ldap-utils (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support;

use std::collections::HashSet;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::dsas::inproc_checks::{sees, until};
use crate::support::inproc::*;
use ldap3::{Scope, SearchEntry};
use support::knowledge::{Dsa, Knowledge};
use support::router::Router;
use support::slapd::{
    ldap_tool, user_dn, writer_dn, Slapd, SlapdConfig, ToolOutput, ROUTER_PW, WRITER_PW,
};

const DEMOCORP: &str = "o=DEMOCORP,c=AU";

/// Knowledge: D1 then D2 for DEMOCORP, both writable; the write order is
/// D1, D2.
fn democorp_dsas(dir: &Path, dsas: &[(&str, u16)]) -> std::path::PathBuf {
    let names: Vec<&str> = dsas.iter().map(|d| d.0).collect();
    Knowledge::new()
        .dsas(dsas.iter().map(|(name, port)| {
            Dsa::new(name, *port)
                .prefix("<c AU><o DEMOCORP>")
                .router(ROUTER_PW)
                .flags("multi-write")
                .trust_conveyed()
        }))
        .write_precedence(&names)
        .write(dir)
}

fn add(url: &str, uid: &str) -> ToolOutput {
    let wdn = writer_dn(DEMOCORP);
    let dn = user_dn(DEMOCORP, uid);
    let ldif = format!(
        "dn: {dn}\nchangetype: add\nobjectClass: inetOrgPerson\nuid: {uid}\n\
         cn: {uid}\nsn: Example\n"
    );
    ldap_tool(
        "ldapmodify",
        &["-x", "-H", url, "-D", &wdn, "-w", WRITER_PW],
        Some(&ldif),
    )
}

/// Whether `dn` exists on `s` (searched directly, as the writer).
fn exists_on(s: &Slapd, dn: &str) -> bool {
    let wdn = writer_dn(DEMOCORP);
    let out = ldap_tool(
        "ldapsearch",
        &[
            "-x", "-LLL", "-H", &s.url, "-D", &wdn, "-w", WRITER_PW, "-b", dn, "-s", "base", "1.1",
        ],
        None,
    );
    out.code == Some(0) && out.stdout.contains("dn:")
}

/// The access log's JSON lines for an add of `dn`, once there is one.
fn add_lines(file: &Path, dn: &str) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines: Vec<serde_json::Value> = fs::read_to_string(file)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .filter(|v: &serde_json::Value| v["op"] == "add" && v["dn"] == dn)
            .collect();
        if !lines.is_empty() || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The router, with its access log in JSON, and probes far apart: it
/// learns of D1's death only from the operations it sends there.
fn router(k: &Path, dir: &Path, file: &Path) -> Router {
    Router::start_with(
        k,
        dir,
        &[
            "--access-log",
            file.to_str().unwrap(),
            "--access-log-format",
            "json",
            "--probe-interval",
            "60",
        ],
    )
}

/// An add of `uid` as the writer, on the client connection `l`.
async fn add_on(l: &mut ldap3::Ldap, uid: &str) -> ldap3::LdapResult {
    let dn = user_dn(DEMOCORP, uid);
    let attrs = vec![
        ("objectClass", HashSet::from(["inetOrgPerson"])),
        ("uid", HashSet::from([uid])),
        ("cn", HashSet::from([uid])),
        ("sn", HashSet::from(["Example"])),
    ];
    tokio::time::timeout(Duration::from_secs(30), l.add(&dn, attrs))
        .await
        .unwrap()
        .unwrap()
}

/// A client bound as the writer.
async fn writer(url: &str) -> ldap3::Ldap {
    let (conn, mut l) = ldap3::LdapConnAsync::new(url).await.unwrap();
    ldap3::drive!(conn);
    let r = l
        .simple_bind(&writer_dn(DEMOCORP), WRITER_PW)
        .await
        .unwrap();
    assert_eq!(r.rc, 0, "{r:?}");
    l
}

/// The must-show: `kill -9` of the write DSA, then at once `ldapmodify`
/// (which binds first, then writes): success on the next DSA, and a line
/// for it in the access log.
#[test]
fn ldapmodify_after_kill_9_of_the_write_dsa_lands_on_the_next_one() {
    let mut d1 = Slapd::start(SlapdConfig::seeded("D1", &[DEMOCORP]));
    let d2 = Slapd::start(SlapdConfig::seeded("D2", &[DEMOCORP]));
    let dir = tempfile::tempdir().unwrap();
    let k = democorp_dsas(dir.path(), &[("D1", d1.port), ("D2", d2.port)]);
    let file = dir.path().join("access.log");
    let router = router(&k, dir.path(), &file);
    let out = add(&router.url, "before");
    assert!(out.success(), "{out:?}");
    let before = user_dn(DEMOCORP, "before");
    assert!(exists_on(&d1, &before) && !exists_on(&d2, &before));

    d1.kill9();
    let out = add(&router.url, "after");
    assert!(out.success(), "the write after kill -9 of D1: {out:?}");
    let after = user_dn(DEMOCORP, "after");
    assert!(exists_on(&d2, &after), "the write landed on D2");
    let lines = add_lines(&file, &after);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(lines[0]["dsa"], "D2", "{}", lines[0]);
    assert_eq!(lines[0]["result"], 0, "{}", lines[0]);
}

/// The write itself meets the dead DSA: a client bound before the kill
/// writes on the same connection. Its DSA is still up for the router; the
/// connect is refused, nothing was sent, and the write goes to D2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_connect_is_refused_goes_to_the_next_dsa_and_is_logged() {
    let mut d1 = Slapd::start(SlapdConfig::seeded("D1", &[DEMOCORP]));
    let d2 = Slapd::start(SlapdConfig::seeded("D2", &[DEMOCORP]));
    let dir = tempfile::tempdir().unwrap();
    let k = democorp_dsas(dir.path(), &[("D1", d1.port), ("D2", d2.port)]);
    let file = dir.path().join("access.log");
    let router = router(&k, dir.path(), &file);
    let mut l = writer(&router.url).await;
    let r = add_on(&mut l, "before").await;
    assert_eq!(r.rc, 0, "{r:?}");
    assert!(exists_on(&d1, &user_dn(DEMOCORP, "before")));

    d1.kill9();
    let r = add_on(&mut l, "after").await;
    assert_eq!(r.rc, 0, "the write after kill -9 of D1: {r:?}");
    let after = user_dn(DEMOCORP, "after");
    assert!(exists_on(&d2, &after), "the write landed on D2");
    let lines = add_lines(&file, &after);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(lines[0]["dsa"], "D2", "{}", lines[0]);
    assert_eq!(lines[0]["result"], 0, "{}", lines[0]);
    let log = router.log_text();
    assert!(
        log.contains("sending a write that was never sent to the next target"),
        "{log}"
    );
}

/// A write that fails because no DSA can take it (the only one is dead)
/// is answered by the router, and has its access-log line too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_no_dsa_can_take_has_its_access_log_line() {
    let mut d1 = Slapd::start(SlapdConfig::seeded("D1", &[DEMOCORP]));
    let dir = tempfile::tempdir().unwrap();
    let k = democorp_dsas(dir.path(), &[("D1", d1.port)]);
    let file = dir.path().join("access.log");
    let router = router(&k, dir.path(), &file);
    let mut l = writer(&router.url).await;
    let r = add_on(&mut l, "before").await;
    assert_eq!(r.rc, 0, "{r:?}");
    d1.kill9();
    let r = add_on(&mut l, "after").await;
    assert_eq!(r.rc, 52, "{r:?}");
    let lines = add_lines(&file, &user_dn(DEMOCORP, "after"));
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(lines[0]["result"], 52, "{}", lines[0]);
    assert!(
        lines[0]["note"]
            .as_str()
            .is_some_and(|n| n.starts_with("answered by the router")),
        "{}",
        lines[0]
    );
}

/// Hedged reads and outlier ejection: D1 and H1 share reads; D1 stops
/// answering (every response held 5 s). With the defaults, a read waiting
/// on D1 is hedged to H1 after the floor (10 ms), the first answer wins and
/// entries are never doubled; D1 is soon ejected, shown in `/status` with
/// the reason. With hedging and ejection off, a read that lands on D1 waits
/// the 5 s (the test would see the behaviour break).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dsa_that_stops_answering_costs_reads_milliseconds_not_seconds() {
    for tail in [true, false] {
        let h = Builder::default()
            .democorp(&["D1", "H1"])
            .cfg(|c| {
                // Probes would take D1 down after 3 s; the point here is
                // what happens before they do.
                c.health = None;
                if !tail {
                    c.tail.hedge_budget = 0;
                    c.tail.max_ejection = 0;
                }
            })
            .start()
            .await;
        let mut l = ldap(&h.url()).await;
        let people = format!("ou=People,{DEMOCORP}");
        let (rc, want, _) = sees(&mut l, &people, Scope::Subtree).await;
        assert!(rc == 0 && want.len() > 3, "{rc} {want:?}");
        h.dsa("D1").faults.set_delay(Duration::from_secs(5));
        let mut worst = Duration::ZERO;
        let reads = if tail { 100 } else { 4 };
        for i in 0..reads {
            let t0 = Instant::now();
            let (rc, got, text) = if i % 2 == 0 {
                sees(&mut l, &people, Scope::Subtree).await
            } else {
                let (rc, got, text) = sees(&mut l, DEMOCORP, Scope::Base).await;
                assert_eq!(got.len(), 1, "read {i}: {got:?}");
                (rc, want.clone(), text)
            };
            worst = worst.max(t0.elapsed());
            assert_eq!(rc, 0, "read {i}: {text}");
            let mut sorted = got.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(
                sorted.len(),
                got.len(),
                "read {i}: entries doubled: {got:?}"
            );
            assert_eq!(got.len(), want.len(), "read {i}: {got:?}");
        }
        let m = &h.router.backend.metrics;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        let (sent, won, ejections) = (
            load(&m.hedges_sent),
            load(&m.hedges_won),
            load(&m.ejections),
        );
        println!(
            "tail {tail}: worst read {worst:?}, hedges {sent} (won {won}), ejections {ejections}"
        );
        if !tail {
            assert!(
                worst >= Duration::from_secs(4),
                "without hedging a read on D1 should wait: worst {worst:?}"
            );
            assert_eq!((sent, ejections), (0, 0));
            h.dsa("D1").faults.set_delay(Duration::ZERO);
            continue;
        }
        assert!(worst < Duration::from_secs(1), "worst read {worst:?}");
        assert!(sent >= 1 && won >= 1, "hedges {sent}, won {won}");
        assert!(
            sent <= 20,
            "{sent} hedges for 100 reads: D1 was not ejected"
        );
        assert_eq!(ejections, 1);
        let st = dsa_router::app::admin::status::status(&h.router);
        let d1 = st
            .partitions
            .iter()
            .flat_map(|p| &p.dsas)
            .find(|d| d.name == "D1")
            .unwrap();
        assert_eq!(d1.state, "ejected", "{d1:?}");
        let why = d1.ejected.as_deref().unwrap_or_default();
        assert!(why.contains("ejected for 10 s"), "{why}");
        assert!(d1.reason.contains("outlier"), "{}", d1.reason);
        h.dsa("D1").faults.set_delay(Duration::ZERO);
    }
}

/// The client's read of DEMOCORP is answered within a second, while
/// `waiting` waits.
async fn reads_democorp_at_once(client: &ldap3::Ldap, waiting: &str) {
    let t0 = Instant::now();
    let (rc, found, text) = sees(&mut client.clone(), DEMOCORP, Scope::Base).await;
    let took = t0.elapsed();
    assert_eq!((rc, found.len()), (0, 1), "{text}");
    assert!(
        took < Duration::from_secs(1),
        "the DEMOCORP read waited {took:?} behind {waiting}"
    );
}

/// No head-of-line blocking: a bound client's read of CUSTOMER, whose
/// DSAs accept connections but never answer (the router's bind on its new
/// shared connection hangs), does not hold up the same client's next read
/// of DEMOCORP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_dsa_does_not_hold_up_the_clients_other_reads() {
    let h = Builder::default()
        .democorp(&["D1"])
        .cfg(|c| c.health = None)
        .start()
        .await;
    for n in ["C1", "C2"] {
        h.dsa(n).faults.set_blackhole(true);
    }
    let alice = bound(&h.url(), ALICE, "alicepw").await;
    // Warm DEMOCORP's shared connection first.
    let (rc, _, text) = sees(&mut alice.clone(), DEMOCORP, Scope::Base).await;
    assert_eq!(rc, 0, "{text}");
    let silent_ops = || h.dsa("C1").stats.operations() + h.dsa("C2").stats.operations();
    let before = silent_ops();
    let mut stuck = alice.clone();
    let waiting = tokio::spawn(async move {
        let _ = stuck
            .search(CUSTOMER, Scope::Base, "(objectClass=*)", vec!["cn"])
            .await;
    });
    // The CUSTOMER read (or the bind before it) has reached a silent DSA.
    until("the CUSTOMER read at C1 or C2", || silent_ops() > before).await;
    reads_democorp_at_once(&alice, "the CUSTOMER read").await;
    waiting.abort();
}

/// No head-of-line blocking on a client's own connections either: with
/// every bound client on connections of its own, a read of EXTRA, whose
/// first DSA accepts connections but never answers (the replay of the
/// client's bind there hangs), does not hold up the client's next read of
/// DEMOCORP; a second read of EXTRA waits behind the first for the same
/// connection; when the bind times out both go to the next DSA and are
/// answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_dsa_does_not_hold_up_reads_on_the_clients_own_connections() {
    const EXTRA: &str = "o=Extra,c=AU";
    // Both EXTRA DSAs know alice (her DEMOCORP entry), so her bind can be
    // replayed there.
    let extra = |n: &str| {
        let ldif = format!(
            "{}dn: {EXTRA}\nobjectClass: top\nobjectClass: organization\no: Extra\ndescription: {n}\n\n",
            dsa_testdsa::seed_ldif(DEMOCORP, n)
        );
        dsa_testdsa::Directory::from_ldif(&ldif).expect("LDIF")
    };
    let bind_timeout = Duration::from_secs(3);
    let h = Builder::default()
        .democorp(&["D1"])
        .extra("X1", EXTRA, extra("X1"))
        .extra("X2", EXTRA, extra("X2"))
        .cfg(|c| {
            c.health = None;
            c.own_connection = dsa_router::service::config::OwnConnection::Always;
            c.bind_timeout = bind_timeout;
        })
        .start()
        .await;
    h.dsa("X1").faults.set_blackhole(true);
    let alice = bound(&h.url(), ALICE, "alicepw").await;
    let (rc, _, text) = sees(&mut alice.clone(), DEMOCORP, Scope::Base).await;
    assert_eq!(rc, 0, "{text}");
    let extra_read = |mut l: ldap3::Ldap| async move {
        let t0 = Instant::now();
        let r = l
            .search(EXTRA, Scope::Base, "(objectClass=*)", vec!["description"])
            .await
            .unwrap()
            .success()
            .map(|(es, _)| {
                es.into_iter()
                    .flat_map(|e| SearchEntry::construct(e).attrs.remove("description"))
                    .flatten()
                    .collect::<Vec<_>>()
            });
        (t0.elapsed(), r)
    };
    let x1_ops = h.dsa("X1").stats.operations();
    let first = tokio::spawn(extra_read(alice.clone()));
    // The first EXTRA read has reached X1 (its bind replay hangs there).
    until("the first EXTRA read at X1", || {
        h.dsa("X1").stats.operations() > x1_ops
    })
    .await;
    let second = tokio::spawn(extra_read(alice.clone()));
    tokio::time::sleep(Duration::from_millis(100)).await;
    reads_democorp_at_once(&alice, "the EXTRA reads").await;
    let (took1, r1) = first.await.unwrap();
    let (_, r2) = second.await.unwrap();
    assert_eq!(r1.expect("first EXTRA read"), vec!["X2".to_string()]);
    assert_eq!(r2.expect("second EXTRA read"), vec!["X2".to_string()]);
    assert!(
        took1 >= bind_timeout - Duration::from_millis(100)
            && took1 < bind_timeout + Duration::from_secs(2),
        "the first EXTRA read took {took1:?}: not sent on once X1's bind timed out"
    );
    assert!(h.dsa("X1").stats.connections() >= 1, "X1 was never tried");
}
