//! Ejection for binds: a DSA that hangs binds while it
//! answers searches (its probes succeed, so it stays up) costs one bind
//! `--bind-timeout`; later binds go to the next DSA at once until its
//! ejection ends, `/status` says why and `/metrics` counts it. The last
//! DSA able to take binds is never ejected.

use crate::support::inproc::*;
use dsa_router::app::admin::status::{status, DsaReport};
use std::time::{Duration, Instant};

/// A simple bind as alice on a new connection: its result code and how
/// long it took.
pub(super) async fn timed_bind(url: &str) -> (u32, Duration) {
    let mut l = ldap(url).await;
    let t0 = Instant::now();
    let r = within("bind", l.simple_bind(ALICE, "alicepw"))
        .await
        .expect("bind answered");
    (r.rc, t0.elapsed())
}

pub(super) fn report(h: &Harness, name: &str) -> DsaReport {
    status(&h.router)
        .partitions
        .into_iter()
        .flat_map(|p| p.dsas)
        .find(|d| d.name == name)
        .expect("the DSA in /status")
}

pub(super) fn bind_ejections(h: &Harness) -> String {
    dsa_router::app::admin::metrics_text(&h.router)
        .lines()
        .find(|l| l.starts_with("dsa_router_bind_ejections_total "))
        .unwrap_or_default()
        .to_string()
}

/// D1 then D2 for binds (D1 first by precedence); D1 hangs binds.
async fn d1_hangs_binds(bind_timeout: Duration, ejection_time: Duration) -> Harness {
    let h = Builder::default()
        .democorp(&["D1", "D2"])
        .precedence(&["D1", "D2"])
        .cfg(|c| {
            c.bind_timeout = bind_timeout;
            c.tail.ejection_time = ejection_time;
        })
        .start()
        .await;
    h.dsa("D1").faults.set_hang_binds(true);
    h
}

/// Three binds through a DSA that hangs binds: the first is answered by
/// the next DSA once --bind-timeout has passed, the next two at once;
/// the DSA stays up, `/status` says it is ejected for binds and why, and
/// the ejection is counted. When it ends, binds try the DSA again, and
/// the next ejection lasts twice as long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dsa_whose_binds_time_out_is_ejected_for_binds() {
    let bind_timeout = Duration::from_secs(1);
    let ejection_time = Duration::from_secs(2);
    let h = d1_hangs_binds(bind_timeout, ejection_time).await;
    let mut took = Vec::new();
    for _ in 0..3 {
        let (rc, t) = timed_bind(&h.url()).await;
        assert_eq!(rc, 0, "the bind succeeds on D2");
        took.push(t);
    }
    println!("three binds with D1 hanging binds: {took:?}");
    assert!(
        took[0] >= bind_timeout - Duration::from_millis(50)
            && took[0] < bind_timeout + Duration::from_secs(1),
        "the first bind waits --bind-timeout on D1, then D2 answers: {took:?}"
    );
    for t in &took[1..] {
        assert!(
            // Not another --bind-timeout on D1 (1 s); half of it leaves a
            // loaded machine room.
            *t < bind_timeout / 2,
            "later binds go to D2 at once: {took:?}"
        );
    }
    let d1 = report(&h, "D1");
    assert_eq!(d1.state, "up", "D1 answers its probes: {}", d1.reason);
    let why = d1.bind_ejected.clone().unwrap_or_default();
    assert!(
        why.contains("binds time out") && why.contains("ejected for binds for 2 s"),
        "{why:?}"
    );
    assert!(d1.reason.contains("binds time out"), "{}", d1.reason);
    assert_eq!(report(&h, "D2").bind_ejected, None);
    assert_eq!(bind_ejections(&h), "dsa_router_bind_ejections_total 1");
    // Back once the ejection time is over: the next bind tries D1 again,
    // waits, and ejects it for twice as long.
    let t0 = Instant::now();
    while report(&h, "D1").bind_ejected.is_some() {
        assert!(t0.elapsed() < ejection_time * 3, "the ejection never ends");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (rc, t) = timed_bind(&h.url()).await;
    assert_eq!(rc, 0);
    assert!(
        t >= bind_timeout - Duration::from_millis(50),
        "D1 tried again: {t:?}"
    );
    let why = report(&h, "D1").bind_ejected.unwrap_or_default();
    assert!(why.contains("ejected for binds for 4 s"), "{why:?}");
    assert_eq!(bind_ejections(&h), "dsa_router_bind_ejections_total 2");
}

/// A partition whose only DSA hangs binds: each bind waits there and
/// fails, and the DSA is never ejected for binds (nothing else could
/// take them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_dsa_able_to_take_binds_is_never_ejected_for_them() {
    let bind_timeout = Duration::from_millis(500);
    let h = Builder::default()
        .democorp(&["D1"])
        .cfg(|c| c.bind_timeout = bind_timeout)
        .start()
        .await;
    h.dsa("D1").faults.set_hang_binds(true);
    for _ in 0..2 {
        let (rc, t) = timed_bind(&h.url()).await;
        assert_eq!(rc, 52, "no DSA answered the bind");
        assert!(t >= bind_timeout - Duration::from_millis(50), "{t:?}");
    }
    assert_eq!(report(&h, "D1").bind_ejected, None);
    assert_eq!(bind_ejections(&h), "dsa_router_bind_ejections_total 0");
}
