//! Worker threads (`crate::workers`): sessions move between workers at a
//! request, keeping their identity and every request they sent; and the
//! balancer takes a second worker into use when the first is busy, moving
//! sessions to it.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::dsas::inproc_checks::until;
use crate::support::inproc::*;
use crate::support::ldap::authzid;
use ldap3_proto::proto::LdapOp;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_moves_to_another_worker_with_its_identity_and_pipelined_requests() {
    // Both workers take clients (--spread-above 0): the first client goes
    // to worker 0, the second to worker 1.
    let h = Builder::default().workers(2, 0.0).start().await;
    let w = h.workers.clone().unwrap();
    let dn = format!("uid=user0001,ou=People,{DEMOCORP}");
    let mut a = bound(&h.url(), &dn, "pw").await;
    let mut b = Raw::connect(h.addr).await;
    until("two sessions, one on each worker", || {
        w.sessions() == vec![1, 1]
    })
    .await;
    assert_eq!(authzid(&mut a).await, format!("dn:{dn}"));

    // Worker 0 asks one session to leave for worker 1: the bound client
    // moves at its next request and is still itself there.
    w.ask(0, 1, 1);
    assert_eq!(authzid(&mut a).await, format!("dn:{dn}"), "after the move");
    assert_eq!(w.sessions(), vec![0, 2]);
    assert_eq!(w.moves(), 1);
    // Its reads and writes run on worker 1's DSA connections.
    let seen = served_by(&mut a, DEMOCORP).await;
    assert!(["D1", "H1"].contains(&seen.as_str()), "served by {seen}");

    // The raw client (on worker 1) moves while it pipelines: 30 searches
    // in one write, taken off worker 1 with the bytes already read, all
    // answered on worker 0.
    w.ask(1, 1, 0);
    let target = format!("cn=served-by,{DEMOCORP}");
    let mut burst = Vec::new();
    for id in 1..=30 {
        burst.extend(base_search(id, &target));
    }
    b.send(&burst).await.unwrap();
    let mut done = Vec::new();
    while done.len() < 30 {
        let m = b.msg("pipelined search").await;
        match m.op {
            LdapOp::SearchResultEntry(_) => {}
            LdapOp::SearchResultDone(r) => {
                assert_eq!(r.code, ldap3_proto::proto::LdapResultCode::Success);
                done.push(m.msgid);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    // Each answered once (reads spread over two DSAs: in any order).
    done.sort_unstable();
    assert_eq!(done, (1..=30).collect::<Vec<_>>(), "every request, once");
    assert_eq!(w.moves(), 2);
    let s = w.sessions();
    assert_eq!(s.iter().sum::<usize>(), 2, "{s:?}");
    // Both clients keep working wherever they are.
    assert_eq!(authzid(&mut a).await, format!("dn:{dn}"));
    b.send(&base_search(31, &target)).await.unwrap();
    let _ = b.msg("entry").await;
    assert!(matches!(
        b.msg("done").await.op,
        LdapOp::SearchResultDone(_)
    ));

    // A client that leaves is counted out of the worker it ended on.
    drop(b);
    a.unbind().await.unwrap();
    until("no sessions left", || w.sessions() == vec![0, 0]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_worker_brings_another_into_use_and_sessions_move_to_it() {
    // --spread-above 1: any load makes worker 0 "busy".
    let h = Builder::default().workers(2, 0.01).start().await;
    let w = h.workers.clone().unwrap();
    assert_eq!(w.in_use(), 1, "one worker in use at the start");
    // Four clients connect while the router is idle: all on worker 0.
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(ldap(&h.url()).await);
    }
    until("four sessions on worker 0", || w.sessions() == vec![4, 0]).await;
    // They get busy: the balancer takes worker 1 into use and moves some
    // of them there at their next request; every search succeeds. The
    // four search at once, so worker 0's share of a CPU stands out from
    // worker 1's by more than the balancer's margin even when other jobs
    // hold both cores (four clients taking turns left worker 0 too idle
    // there: sessions stayed [4, 0] for 20 s).
    let end = Instant::now() + Duration::from_secs(30);
    let mut ops = 0;
    while Instant::now() < end && !(w.in_use() == 2 && w.sessions()[1] > 0) {
        let seen =
            futures::future::join_all(clients.iter_mut().map(|l| served_by(l, DEMOCORP))).await;
        for s in seen {
            assert!(["D1", "H1"].contains(&s.as_str()), "served by {s}");
            ops += 1;
        }
    }
    let s = w.sessions();
    println!(
        "after {ops} searches: workers in use {}, sessions {s:?}, moves {}",
        w.in_use(),
        w.moves()
    );
    assert_eq!(w.in_use(), 2, "a second worker in use");
    assert!(s[1] > 0 && s[0] + s[1] == 4, "sessions spread: {s:?}");
    assert!(w.moves() > 0);
    // Metrics show it.
    let m = dsa_router::app::admin::metrics_text(&h.router);
    assert!(m.contains("dsa_router_workers_in_use 2"), "{m}");
    assert!(
        m.contains("dsa_router_worker_sessions{worker=\"1\"}"),
        "{m}"
    );
    // Moved or not, every client goes on working.
    for l in &mut clients {
        served_by(l, DEMOCORP).await;
    }
}
