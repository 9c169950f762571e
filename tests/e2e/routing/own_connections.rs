//! Own DSA connections and spares: bound idle clients pin no DSA
//! connection, the logins of one client connection each bind on a spare, and
//! an anonymous connection of its own is never a spare bound as another.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::dsas::inproc_checks::{dsa_total, sees, until};
use crate::support::inproc::*;
use ldap3::controls::PagedResults;
use ldap3::Scope;
use std::time::{Duration, Instant};

/// Bound clients on DSAs that trust the router share its connection: their
/// bind connections are not kept, so 30 idle bound clients hold no DSA
/// connection each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bound_idle_clients_do_not_pin_dsa_connections() {
    let h = Builder::default()
        .democorp(&["D1"])
        .cfg(|c| c.health = None)
        .start()
        .await;
    let mut clients = Vec::new();
    for _ in 0..30 {
        let mut l = bound(&h.url(), ALICE, "alicepw").await;
        let (rc, _, text) = sees(&mut l, DEMOCORP, Scope::Base).await;
        assert_eq!(rc, 0, "{text}");
        clients.push(l);
    }
    // The connections the binds used are given back; wait for that rather
    // than for a fixed time (30 pinned connections never get there).
    until("at most 3 connections open to D1", || {
        h.dsa("D1").stats.open_connections() <= 3
    })
    .await;
    let open = h.dsa("D1").stats.open_connections();
    assert!(
        open <= 3,
        "{open} connections open to D1 for 30 idle bound clients"
    );
    drop(clients);
}

/// A router over D1 where every bound client runs on connections of its
/// own, bound as itself, with `spares` spare connections per DSA.
async fn own_connections_and_spares(spares: usize) -> Harness {
    Builder::default()
        .democorp(&["D1"])
        .cfg(|c| {
            c.health = None;
            c.own_connection = dsa_router::service::config::OwnConnection::Always;
            c.spare_connections = spares;
        })
        .start()
        .await
}

/// One connection per login (connect, bind, search, unbind, as web
/// applications do): each bind runs on a DSA connection an earlier login
/// gave back (a spare), so D1 accepts a few connections for 20 logins, not
/// 20; every login sees exactly what its own identity may (the router's
/// identity reads SECRET, alice does not), so a spare never lends its last
/// client's identity. A connection that carried a control other than the
/// password policy request is closed, not kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logins_of_a_connection_each_bind_on_spare_dsa_connections() {
    // One spare: what the last login gave back.
    let h = own_connections_and_spares(1).await;
    let login = |dn: &'static str, pw: &'static str, control: bool| {
        let url = h.url();
        async move {
            let mut l = bound(&url, dn, pw).await;
            let r = if control {
                within(
                    "search",
                    l.with_controls(ldap3::controls::ManageDsaIt).search(
                        SECRET,
                        Scope::Base,
                        "(objectClass=*)",
                        vec!["cn"],
                    ),
                )
                .await
            } else {
                within(
                    "search",
                    l.search(SECRET, Scope::Base, "(objectClass=*)", vec!["cn"]),
                )
                .await
            }
            .unwrap();
            let _ = l.unbind().await;
            // The router gives the connection back when the session ends.
            tokio::time::sleep(Duration::from_millis(50)).await;
            (r.1.rc, r.0.len())
        }
    };
    let d1 = &h.dsa("D1").stats;
    let before = d1.connections();
    for i in 0..20 {
        if i % 2 == 0 {
            assert_eq!(
                login(ROUTER_ID, "routerpw", false).await,
                (0, 1),
                "login {i}"
            );
        } else {
            let (rc, n) = login(ALICE, "alicepw", false).await;
            assert!(
                rc == 32 && n == 0,
                "login {i}: alice saw SECRET: rc {rc}, {n} entries"
            );
        }
    }
    let opened = d1.connections() - before;
    assert!(
        opened <= 3,
        "D1 accepted {opened} connections for 20 logins"
    );
    // A login whose connection carried another control: its connection is
    // closed, so the next login needs a new one.
    assert_eq!(login(ROUTER_ID, "routerpw", true).await.0, 0);
    let before = d1.connections();
    assert_eq!(login(ROUTER_ID, "routerpw", false).await, (0, 1));
    assert_eq!(d1.connections() - before, 1, "a used connection was reused");
}

/// A spare keeps the identity of the bind it last carried, so it only
/// ever serves a bind: an anonymous client that needs a connection of its
/// own (a paged search) gets a new one, and never reads as the spare's
/// last client (the router's identity, which reads SECRET).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anonymous_connection_of_its_own_is_never_a_spare_bound_as_another() {
    let h = own_connections_and_spares(4).await;
    let spares = |h: &Harness| dsa_total(h, |d| d.spare_connections);
    let mut l = bound(&h.url(), ROUTER_ID, "routerpw").await;
    let (rc, found, text) = sees(&mut l, SECRET, Scope::Base).await;
    assert_eq!((rc, found.len()), (0, 1), "{text}");
    let _ = l.unbind().await;
    let t0 = Instant::now();
    while spares(&h) == 0 && t0.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        spares(&h) > 0,
        "the router's connection was not kept as a spare"
    );
    let mut anon = ldap(&h.url()).await;
    let r = within(
        "paged search",
        anon.with_controls(PagedResults {
            size: 10,
            cookie: vec![],
        })
        .search(SECRET, Scope::Base, "(objectClass=*)", vec!["cn"]),
    )
    .await
    .unwrap();
    assert!(
        r.0.is_empty() && r.1.rc == 32,
        "an anonymous paged search saw SECRET: rc {}, {} entries",
        r.1.rc,
        r.0.len()
    );
}
