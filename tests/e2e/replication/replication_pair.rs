//! Reads that follow replication across a multi-provider pair: two slapd providers `A` (serverID 1) and `B` (serverID 2)
//! replicating each other (`replica::pair`), both taking writes, in one
//! load-share group behind the router. Their `contextCSN` has one value per
//! server ID, and the router keeps per server ID the newest CSN: a write
//! through the router (to `A`, the first write DSA) has a CSN of server ID
//! 001, and `B` serves its reads only once `B`'s CSN for 001 has reached
//! it, whatever `B`'s own writes (server ID 002, made directly on `B`
//! meanwhile, which are newer) say. Lag: each pulls the other every 2 s
//! (refreshOnly), so `B` answers with data up to 2 s old.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use support::replica::{
    self, add, csn, dsa, position_of, read, reads_by_dn, router, status, wait_for, writer, Mode,
};

const SUFFIX: &str = "o=DEMOCORP,c=AU";

/// `dn` read through the router: `Ok(None)` when not found, `Err` with the
/// router's answer when it failed.
async fn try_read(l: &mut ldap3::Ldap, dn: &str, attrs: &[&str]) -> Result<Option<String>, String> {
    let r = l
        .search(dn, ldap3::Scope::Base, "(objectClass=*)", attrs.to_vec())
        .await
        .map_err(|e| e.to_string())?;
    let ldap3::SearchResult(entries, res) = r;
    match res.rc {
        0 => Ok(entries.into_iter().next().map(|e| {
            let e = ldap3::SearchEntry::construct(e);
            e.attrs
                .get("entryCSN")
                .and_then(|v| v.first())
                .cloned()
                .unwrap_or_default()
        })),
        32 => Ok(None),
        rc => Err(format!("result {rc} {}", res.text)),
    }
}

/// A read back that did not find the client's own entry.
struct Stale {
    dn: String,
    /// Its index among the reads of `dn`.
    k: usize,
    what: String,
    /// The entry's CSN (as the first read found it).
    w: String,
    /// The router's positions of B and A for server ID 001 at the time.
    b001: String,
    a001: String,
}

/// 200 add-then-read-back tries (20 clients at once) through the router,
/// while a client writes directly on `B` every 50 ms: no stale read, reads
/// reach `B` once its position for `A`'s server ID has the write, and
/// `B`'s newer CSNs of its own server ID never make it look caught up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_provider_reads_follow_positions_per_server_id() {
    let (a, b) = tokio::task::spawn_blocking(|| replica::pair(SUFFIX, Mode::RefreshOnly(2)))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let k = replica::load_share_knowledge(
        dir.path(),
        &[("A", a.port, "multi-write"), ("B", b.port, "multi-write")],
    );
    let (r, admin) = router(dir.path(), &k, &["--csn-interval", "50ms"]);
    let adm = admin.clone();
    tokio::task::spawn_blocking(move || {
        wait_for("positions", Duration::from_secs(10), || {
            position_of(&adm, "B", "001").is_some() && position_of(&adm, "A", "001").is_some()
        })
    })
    .await
    .unwrap();

    // Writes made directly on B (server ID 002), every 50 ms.
    let done = Arc::new(AtomicBool::new(false));
    let direct_writes = Arc::new(AtomicUsize::new(0));
    let direct = {
        let (url, done, n) = (b.url.clone(), done.clone(), direct_writes.clone());
        tokio::spawn(async move {
            let mut l = writer(&url, SUFFIX).await;
            let dn = format!("uid=user0001,ou=people,{SUFFIX}");
            while !done.load(Ordering::Relaxed) {
                let i = n.fetch_add(1, Ordering::Relaxed);
                let v = HashSet::from([format!("direct on B {i}")]);
                l.modify(&dn, vec![ldap3::Mod::Replace("description".to_string(), v)])
                    .await
                    .unwrap()
                    .success()
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    // The router's view of B's position for A's server ID, for all clients.
    let known = Arc::new(Mutex::new(String::new()));
    let known_a = Arc::new(Mutex::new(String::new()));
    let watcher = {
        let (known, known_a, done, admin) =
            (known.clone(), known_a.clone(), done.clone(), admin.clone());
        thread::spawn(move || {
            let mut lags = Vec::new();
            while !done.load(Ordering::Relaxed) {
                let st = status(&admin);
                let rep = &dsa(&st, "B")["replication"];
                if let Some(p) = rep["positions"]["001"].as_str() {
                    *known.lock().unwrap() = p.to_string();
                }
                if let Some(p) = dsa(&st, "A")["replication"]["positions"]["001"].as_str() {
                    *known_a.lock().unwrap() = p.to_string();
                }
                lags.extend(rep["lag_s"].as_f64());
                thread::sleep(Duration::from_millis(20));
            }
            lags
        })
    };
    let started = Instant::now();
    let clients: Vec<_> = (0..20)
        .map(|t| {
            let (url, known, known_a) = (r.url.clone(), known.clone(), known_a.clone());
            tokio::spawn(async move {
                let mut l = writer(&url, SUFFIX).await;
                let mut stale = Vec::new();
                // Which read of `dn` (its index among the DN's reads in the
                // access log) found nothing, and what the router showed.
                let mut note = |dn: &str, k: usize, what: &str, w: &str| {
                    stale.push(Stale {
                        dn: dn.to_string(),
                        k,
                        what: what.to_string(),
                        w: w.to_string(),
                        b001: known.lock().unwrap().clone(),
                        a001: known_a.lock().unwrap().clone(),
                    })
                };
                for i in 0..10 {
                    let dn = add(&mut l, SUFFIX, &format!("pair{t}x{i}")).await;
                    let w = match try_read(&mut l, &dn, &["entryCSN"]).await {
                        Ok(Some(w)) => w,
                        Ok(None) => {
                            note(&dn, 0, "first read after the add", "?");
                            continue;
                        }
                        Err(e) => {
                            note(
                                &dn,
                                0,
                                &format!("first read after the add failed: {e}"),
                                "?",
                            );
                            continue;
                        }
                    };
                    // While the router shows B behind on server ID 001
                    // (B's own 002 is newer all along), a read every
                    // 100 ms: A has it, B not yet.
                    let t0 = Instant::now();
                    let mut k = 1;
                    while *known.lock().unwrap() < w {
                        assert!(t0.elapsed() < Duration::from_secs(15), "B never caught up");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        match try_read(&mut l, &dn, &["1.1"]).await {
                            Ok(Some(_)) => {}
                            Ok(None) => note(&dn, k, "read while B was shown behind", &w),
                            Err(e) => note(&dn, k, &format!("read failed: {e}"), &w),
                        }
                        k += 1;
                    }
                    for _ in 0..2 {
                        match try_read(&mut l, &dn, &["1.1"]).await {
                            Ok(Some(_)) => {}
                            Ok(None) => note(&dn, k, "read once B had the write", &w),
                            Err(e) => note(&dn, k, &format!("read failed: {e}"), &w),
                        }
                        k += 1;
                    }
                }
                stale
            })
        })
        .collect();
    let mut stale = Vec::new();
    for h in clients {
        stale.extend(h.await.unwrap());
    }
    let took = started.elapsed();
    done.store(true, Ordering::Relaxed);
    direct.await.unwrap();
    let lags = watcher.join().unwrap();
    let max_lag = lags.iter().copied().fold(0.0, f64::max);
    // What the router shows: both server IDs (and the seed's) per DSA.
    let st = status(&admin);
    let shown = |n: &str| dsa(&st, n)["replication"]["positions"].clone();
    let writes = direct_writes.load(Ordering::Relaxed);
    assert!(
        shown("B")["002"].is_string() && shown("A")["002"].is_string(),
        "B's own writes have server ID 002: {st}"
    );
    let by_dn = reads_by_dn(&r);
    let why: Vec<String> = stale
        .iter()
        .map(|s| {
            let from = by_dn.get(&s.dn).and_then(|d| d.get(s.k));
            format!(
                "{} (read {}) of {} (entryCSN {}) served by {from:?}; \
                 router showed B at {} and A at {} for server ID 001",
                s.what, s.k, s.dn, s.w, s.b001, s.a001
            )
        })
        .collect();
    // What the router saw of the DSAs' health meanwhile (a DSA marked
    // down under load, a write that went to B).
    let log = r.log_text();
    let health: Vec<&str> = log
        .lines()
        .filter(|l| {
            ["DSA down", "DSA up", "cannot reach", "re-sending"]
                .iter()
                .any(|w| l.contains(w))
        })
        .take(20)
        .collect();
    println!("router's health changes: {health:#?}");
    assert!(
        stale.is_empty(),
        "{} stale or failed reads:\n{}\nhealth changes and re-sent reads: {health:#?}",
        stale.len(),
        why.join("\n")
    );
    let stale = stale.len();
    let (mut first_b, mut during, mut during_b, mut later, mut later_b) = (0, 0, 0, 0, 0);
    let adds = log.matches("op=\"add\"").count();
    for (dn, dsas) in by_dn.iter().filter(|(d, _)| d.starts_with("uid=pair")) {
        assert!(dsas.len() >= 3, "{dn}: {dsas:?}");
        let n = dsas.len();
        first_b += usize::from(dsas[0] == "B");
        during += n - 3;
        during_b += dsas[1..n - 2].iter().filter(|d| *d == "B").count();
        later += 2;
        later_b += dsas[n - 2..].iter().filter(|d| *d == "B").count();
    }
    assert_eq!(adds, 200, "adds through the router");
    let on_a = log
        .lines()
        .filter(|l| l.contains("access") && l.contains("op=\"add\"") && l.contains("dsa=A"))
        .count();
    assert!(
        on_a == 200 || !health.is_empty(),
        "{on_a} of 200 writes went to A with no health change"
    );
    assert_eq!(
        by_dn.keys().filter(|d| d.starts_with("uid=pair")).count(),
        200
    );
    let share = later_b as f64 / later.max(1) as f64;
    println!(
        "multi-provider pair (refreshOnly 2 s each way), {writes} direct writes on B (server ID 002) meanwhile: \
         200 tries through the router in {took:?}, {stale} stale reads; first read-back on B: {first_b} of 200; \
         reads while the router showed B behind on server ID 001: {during_b} of {during} on B; \
         reads once B's position for server ID 001 had the write: {later_b} of {later} on B ({:.0}%); \
         B's lag seen up to {max_lag:.3} s; positions A {} B {}",
        share * 100.0,
        shown("A"),
        shown("B")
    );
    assert!(writes > 20, "only {writes} direct writes on B");
    // Least-busy over both once B has it: about half (pinned: 0%).
    assert!(
        share >= 0.2,
        "only {:.0}% of the reads after B caught up went to B",
        share * 100.0
    );
    drop((r, a, b));
}

/// The DSA that took a client's write goes down before the other has it
/// (`B` pulls every 59 s): the client's read back fails (unavailable)
/// rather than go to `B` and miss the write, and the router does not
/// re-send it there either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_back_never_goes_to_a_dsa_without_the_write_when_the_writer_is_down() {
    let (mut a, b) = tokio::task::spawn_blocking(|| replica::pair(SUFFIX, Mode::RefreshOnly(59)))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let k = replica::load_share_knowledge(
        dir.path(),
        &[("A", a.port, "multi-write"), ("B", b.port, "multi-write")],
    );
    let (r, admin) = router(dir.path(), &k, &["--csn-interval", "50ms"]);
    let adm = admin.clone();
    tokio::task::spawn_blocking(move || {
        wait_for("positions", Duration::from_secs(10), || {
            position_of(&adm, "B", "001").is_some() && position_of(&adm, "A", "001").is_some()
        })
    })
    .await
    .unwrap();
    let mut l = writer(&r.url, SUFFIX).await;
    let dn = add(&mut l, SUFFIX, "downwriter").await;
    let w = csn(&read(&mut l, &dn, &["entryCSN"])
        .await
        .expect("read back on A"));
    // The router knows the write's position; B has not pulled it.
    let adm = admin.clone();
    let w2 = w.clone();
    tokio::task::spawn_blocking(move || {
        wait_for("A's position", Duration::from_secs(10), || {
            position_of(&adm, "A", "001").is_some_and(|p| p >= w2)
        })
    })
    .await
    .unwrap();
    assert!(
        read(&mut l, &dn, &["1.1"]).await.is_some(),
        "read back on A"
    );
    assert!(position_of(&admin, "B", "001").is_some_and(|p| p < w));
    a.kill9();
    let adm = admin.clone();
    tokio::task::spawn_blocking(move || {
        wait_for("A down", Duration::from_secs(10), || {
            dsa(&status(&adm), "A")["state"] == "down"
        })
    })
    .await
    .unwrap();
    let ldap3::SearchResult(entries, res) = l
        .search(&dn, ldap3::Scope::Base, "(objectClass=*)", vec!["1.1"])
        .await
        .unwrap();
    assert!(
        res.rc != 0 && res.rc != 32 && entries.is_empty(),
        "read back with its DSA down: result {} {:?} ({} entries): B does not have it",
        res.rc,
        res.text,
        entries.len()
    );
    assert!(
        res.text.contains("B has not reached the client's write"),
        "the refusal names why B may not serve: {}",
        res.text
    );
    assert!(position_of(&admin, "B", "001").is_some_and(|p| p < w));
    let from_b = r
        .access_dsas("search", &dn)
        .iter()
        .filter(|d| *d == "B")
        .count();
    assert_eq!(from_b, 0, "reads of {dn} served by B");
    drop((r, a, b));
}
