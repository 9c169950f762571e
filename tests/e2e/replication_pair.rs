//! Reads that follow replication across a multi-provider pair (issue 38,
//! point 5): two slapd providers `A` (serverID 1) and `B` (serverID 2)
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
    let k = replica::knowledge(
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
    let watcher = {
        let (known, done, admin) = (known.clone(), done.clone(), admin.clone());
        thread::spawn(move || {
            let mut lags = Vec::new();
            while !done.load(Ordering::Relaxed) {
                let st = status(&admin);
                let rep = &dsa(&st, "B")["replication"];
                if let Some(p) = rep["positions"]["001"].as_str() {
                    *known.lock().unwrap() = p.to_string();
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
            let (url, known) = (r.url.clone(), known.clone());
            tokio::spawn(async move {
                let mut l = writer(&url, SUFFIX).await;
                let mut stale = 0;
                for i in 0..10 {
                    let dn = add(&mut l, SUFFIX, &format!("pair{t}x{i}")).await;
                    let Some(e) = read(&mut l, &dn, &["entryCSN"]).await else {
                        stale += 1;
                        continue;
                    };
                    let w = csn(&e);
                    assert!(w.contains("#001#"), "a write through the router to A: {w}");
                    // While the router shows B behind on server ID 001
                    // (B's own 002 is newer all along), a read every
                    // 100 ms: A has it, B not yet.
                    let t0 = Instant::now();
                    while *known.lock().unwrap() < w {
                        assert!(t0.elapsed() < Duration::from_secs(15), "B never caught up");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        stale += usize::from(read(&mut l, &dn, &["1.1"]).await.is_none());
                    }
                    for _ in 0..2 {
                        stale += usize::from(read(&mut l, &dn, &["1.1"]).await.is_none());
                    }
                }
                stale
            })
        })
        .collect();
    let mut stale = 0;
    for h in clients {
        stale += h.await.unwrap();
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
    assert_eq!(stale, 0, "stale reads");
    let by_dn = reads_by_dn(&r);
    let (mut first_b, mut during, mut during_b, mut later, mut later_b) = (0, 0, 0, 0, 0);
    let adds = r.log_text().matches("op=\"add\"").count();
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
    assert_eq!(
        r.access_dsas("add", &format!("uid=pair0x0,ou=people,{SUFFIX}")),
        ["A"],
        "writes go to the first write DSA"
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
