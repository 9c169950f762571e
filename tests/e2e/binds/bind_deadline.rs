//! Bind deadlines learned from what binds take: a DSA whose binds were
//! answered in about a millisecond and that starts swallowing them costs
//! the next bind a fraction of a second, not `--bind-timeout`; a DSA whose
//! binds all take 300 ms under load is waited for and never ejected; a
//! bind goes to one DSA at a time, so a wrong password is tried on one.

use super::bind_ejection::{bind_ejections, report, timed_bind};
use crate::support::inproc::*;
use std::time::{Duration, Instant};

const BIND_TIMEOUT: Duration = Duration::from_secs(5);

/// D1 then D2 for binds (D1 first by precedence), --bind-timeout 5 s;
/// once the health probes' connections (a bind each) are open.
async fn two_dsas() -> Harness {
    let h = Builder::default()
        .democorp(&["D1", "D2"])
        .precedence(&["D1", "D2"])
        .cfg(|c| c.bind_timeout = BIND_TIMEOUT)
        .start()
        .await;
    let t0 = Instant::now();
    while binds_seen(&h).0 == 0 || binds_seen(&h).1 == 0 {
        assert!(t0.elapsed() < Duration::from_secs(5), "no probe binds");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    h
}

/// The binds each DSA has received so far.
fn binds_seen(h: &Harness) -> (u64, u64) {
    (h.dsa("D1").stats.binds(), h.dsa("D2").stats.binds())
}

fn ms(d: &[Duration]) -> Vec<u128> {
    d.iter().map(|t| t.as_millis()).collect()
}

/// D1 answers twenty binds in about a millisecond, then swallows binds
/// (still answering its probes). The next bind is given up on D1 after
/// its learned deadline and answered by D2 well under a second (not
/// --bind-timeout's 5 s); the next ones wait longer on D1 each (the
/// deadline doubles), and the third given up in a row ejects D1 for
/// binds: later binds go to D2 at once. D1 stays up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dsa_that_starts_swallowing_binds_costs_the_next_bind_its_learned_deadline() {
    let h = two_dsas().await;
    let mut fast = Vec::new();
    for _ in 0..20 {
        let (rc, t) = timed_bind(&h.url()).await;
        assert_eq!(rc, 0);
        fast.push(t);
    }
    let before = binds_seen(&h);
    assert_eq!(before.1, 1, "D1 took every bind: {before:?}");
    h.dsa("D1").faults.set_hang_binds(true);
    let mut took = Vec::new();
    for _ in 0..5 {
        let (rc, t) = timed_bind(&h.url()).await;
        assert_eq!(rc, 0, "the bind succeeds on D2");
        took.push(t);
    }
    let after = binds_seen(&h);
    println!(
        "binds while D1 answered (ms): {:?}\nbinds once D1 swallows binds (ms): {:?} (--bind-timeout {} s)\nbinds seen by D1, D2 over those five: {}, {}",
        ms(&fast),
        ms(&took),
        BIND_TIMEOUT.as_secs(),
        after.0 - before.0,
        after.1 - before.1,
    );
    assert!(
        took[0] < Duration::from_secs(1),
        "the first bind after D1 stopped answering binds: {took:?}"
    );
    // Given up on D1 at 100, 200 and 400 ms, then D1 is ejected for binds.
    for t in &took[..3] {
        assert!(*t >= Duration::from_millis(90), "{took:?}");
    }
    for t in &took[3..] {
        assert!(*t < Duration::from_millis(90), "D1 is skipped: {took:?}");
    }
    assert_eq!((after.0 - before.0, after.1 - before.1), (3, 5));
    let d1 = report(&h, "D1");
    assert_eq!(d1.state, "up", "D1 answers its probes: {}", d1.reason);
    let why = d1.bind_ejected.unwrap_or_default();
    assert!(why.contains("binds time out"), "{why:?}");
    assert_eq!(bind_ejections(&h), "dsa_router_bind_ejections_total 1");
}

/// D1's binds all take 300 ms; eight clients bind at once, five times
/// each. Every bind is answered by D1 (the deadline follows its times),
/// none is given up, D1 is never ejected for binds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dsa_whose_binds_take_300_ms_under_load_is_waited_for_not_ejected() {
    let h = two_dsas().await;
    h.dsa("D1").faults.set_delay(Duration::from_millis(300));
    let start = binds_seen(&h);
    let t0 = Instant::now();
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let url = h.url();
            tokio::spawn(async move {
                let mut out = Vec::new();
                for _ in 0..5 {
                    out.push(timed_bind(&url).await);
                }
                out
            })
        })
        .collect();
    let mut took = Vec::new();
    for c in clients {
        for (rc, t) in c.await.expect("client") {
            assert_eq!(rc, 0);
            took.push(t);
        }
    }
    let wall = t0.elapsed();
    took.sort_unstable();
    let now = binds_seen(&h);
    let seen = (now.0 - start.0, now.1 - start.1);
    println!(
        "40 binds by 8 clients at once, D1's binds taking 300 ms: in {} ms; each (ms) min {} median {} max {}; binds seen by D1, D2: {}, {}",
        wall.as_millis(),
        took[0].as_millis(),
        took[took.len() / 2].as_millis(),
        took[took.len() - 1].as_millis(),
        seen.0,
        seen.1
    );
    assert_eq!(seen, (40, 0), "every bind answered by D1, none given up");
    assert!(took[0] >= Duration::from_millis(290), "{took:?}");
    assert_eq!(report(&h, "D1").bind_ejected, None);
    assert_eq!(bind_ejections(&h), "dsa_router_bind_ejections_total 0");
}

/// A wrong password goes to one DSA: D1 says invalidCredentials and D2
/// never sees the bind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_tried_on_one_dsa_only() {
    let h = two_dsas().await;
    for _ in 0..10 {
        let (rc, _) = timed_bind(&h.url()).await;
        assert_eq!(rc, 0);
    }
    let before = binds_seen(&h);
    let mut l = ldap(&h.url()).await;
    let r = within("bind", l.simple_bind(ALICE, "not-her-password"))
        .await
        .expect("bind answered");
    let after = binds_seen(&h);
    let seen = (after.0 - before.0, after.1 - before.1);
    println!(
        "a wrong password: result {}, binds seen by D1, D2: {seen:?}",
        r.rc
    );
    assert_eq!(r.rc, 49, "invalidCredentials");
    assert_eq!(seen, (1, 0));
}
