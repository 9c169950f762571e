//! The counting of failed binds, with time passed in.
#![allow(clippy::unwrap_used)]

use super::table::{Admit, Rule, Table};
use std::time::{Duration, Instant};

const S: Duration = Duration::from_secs(1);

fn rule(limit: u32) -> Rule {
    Rule {
        limit,
        window: 60 * S,
        backoff: 10 * S,
    }
}

/// One bind of `key` at `at`: admitted and failed (`Some(began)`), or
/// refused (`None`).
fn fail(t: &mut Table, r: &Rule, key: u64, at: Instant) -> Option<bool> {
    match t.admit(r, key, at) {
        Admit::Yes => Some(t.failed(r, key, at)),
        Admit::No | Admit::Wait => None,
    }
}

#[test]
fn the_limit_th_failure_begins_a_back_off_and_later_binds_are_refused() {
    let t0 = Instant::now();
    // (limit, failures in a row, what each attempt gave)
    let rows: [(u32, &[Option<bool>]); 3] = [
        (1, &[Some(true), None, None]),
        (3, &[Some(false), Some(false), Some(true), None, None]),
        (
            5,
            &[
                Some(false),
                Some(false),
                Some(false),
                Some(false),
                Some(true),
                None,
            ],
        ),
    ];
    for (limit, want) in rows {
        let r = rule(limit);
        let mut t = Table::new(16);
        let got: Vec<Option<bool>> = (0..want.len())
            .map(|i| fail(&mut t, &r, 7, t0 + S * i as u32))
            .collect();
        assert_eq!(got, want, "limit {limit}");
        assert!(t.blocked(7, t0 + S * want.len() as u32));
        assert!(!t.blocked(8, t0), "another key is not blocked");
    }
}

#[test]
fn a_limit_of_zero_counts_nothing() {
    let t0 = Instant::now();
    let r = rule(0);
    let mut t = Table::new(4);
    for i in 0..100 {
        assert_eq!(fail(&mut t, &r, 1, t0 + S * i), Some(false));
    }
    assert_eq!(t.len(), 0);
}

#[test]
fn the_back_off_ends_after_its_time_and_counting_starts_again() {
    let t0 = Instant::now();
    let r = rule(2);
    let mut t = Table::new(4);
    fail(&mut t, &r, 1, t0);
    assert_eq!(fail(&mut t, &r, 1, t0), Some(true));
    // Refused until the back-off (10 s) is over, to the instant.
    assert_eq!(t.admit(&r, 1, t0 + 9 * S), Admit::No);
    assert_eq!(
        t.admit(&r, 1, t0 + 10 * S - Duration::from_millis(1)),
        Admit::No
    );
    assert_eq!(fail(&mut t, &r, 1, t0 + 10 * S), Some(false));
    assert_eq!(fail(&mut t, &r, 1, t0 + 11 * S), Some(true));
}

#[test]
fn failures_outside_the_window_do_not_add_up() {
    let t0 = Instant::now();
    let r = rule(3);
    let mut t = Table::new(4);
    // Two failures, then the window (60 s) passes: two more do not reach 3.
    fail(&mut t, &r, 1, t0);
    fail(&mut t, &r, 1, t0 + S);
    assert_eq!(fail(&mut t, &r, 1, t0 + 60 * S), Some(false));
    assert_eq!(fail(&mut t, &r, 1, t0 + 61 * S), Some(false));
    assert_eq!(fail(&mut t, &r, 1, t0 + 62 * S), Some(true));
}

#[test]
fn a_success_resets_the_count() {
    let t0 = Instant::now();
    let r = rule(3);
    let mut t = Table::new(4);
    fail(&mut t, &r, 1, t0);
    fail(&mut t, &r, 1, t0);
    assert_eq!(t.admit(&r, 1, t0), Admit::Yes);
    t.succeeded(1);
    assert_eq!(t.len(), 0, "nothing left to keep");
    assert_eq!(fail(&mut t, &r, 1, t0), Some(false));
    assert_eq!(fail(&mut t, &r, 1, t0), Some(false));
    assert_eq!(fail(&mut t, &r, 1, t0), Some(true));
}

#[test]
fn binds_at_once_reach_the_dsa_no_more_than_the_limit() {
    let t0 = Instant::now();
    let r = rule(3);
    let mut t = Table::new(4);
    // (failures first, binds admitted at once of 10 tried)
    for (failures, admitted) in [(0, 3), (1, 2), (2, 1)] {
        let mut t = Table::new(4);
        for _ in 0..failures {
            fail(&mut t, &r, 1, t0);
        }
        let got: Vec<Admit> = (0..10).map(|_| t.admit(&r, 1, t0)).collect();
        let yes = got.iter().filter(|a| **a == Admit::Yes).count();
        assert_eq!(yes, admitted, "after {failures} failures: {got:?}");
        // The others wait: none is refused as in a back-off.
        assert!(got.iter().all(|a| *a != Admit::No), "{got:?}");
    }
    // An unanswered one (no DSA answered) frees its place.
    for _ in 0..3 {
        assert_eq!(t.admit(&r, 1, t0), Admit::Yes);
    }
    assert_eq!(t.admit(&r, 1, t0), Admit::Wait);
    t.abandoned(1);
    assert_eq!(t.admit(&r, 1, t0), Admit::Yes);
    // A success frees its place and resets; the key is forgotten once
    // nothing of it is in flight.
    for _ in 0..3 {
        t.succeeded(1);
    }
    assert!(t.is_empty());
}

#[tokio::test]
async fn a_bind_over_the_cap_waits_for_one_in_flight_then_goes_or_is_busy() {
    use super::{Config, Guard, Refused};
    use crate::proto::wire::response::rc::INVALID_CREDENTIALS;
    use std::sync::Arc;
    let mut cfg = Config::default();
    cfg.dn.limit = 2;
    let g = Arc::new(Guard::new(cfg));
    let addr: std::net::IpAddr = "192.0.2.7".parse().unwrap();
    let dn = crate::proto::dn::Dn::parse_ldap("uid=victim,o=x").unwrap();
    let first = g.admit(&dn, addr).unwrap();
    let second = g.admit(&dn, addr).unwrap();
    // Over the cap: busy after the wait.
    let over = g.admit_within(&dn, addr, Duration::from_millis(30)).await;
    assert_eq!(over.err(), Some(Refused::Busy));
    assert_eq!(g.busy(), 1);
    // Two waiting at once do not wake each other (a check that gave a
    // place back woke every waiter, itself included: they spun past the
    // deadline).
    let both = futures::future::join(
        g.admit_within(&dn, addr, Duration::from_millis(30)),
        g.admit_within(&dn, addr, Duration::from_millis(30)),
    );
    let (a, b) = tokio::time::timeout(5 * S, both)
        .await
        .expect("waiters over the cap ended at their deadline");
    assert_eq!(
        (a.err(), b.err()),
        (Some(Refused::Busy), Some(Refused::Busy))
    );
    assert_eq!(g.busy(), 3);
    // A waiter is admitted once one in flight ends without a failure.
    let g2 = g.clone();
    let dn2 = dn.clone();
    let waiter = tokio::spawn(async move { g2.admit_within(&dn2, addr, 10 * S).await.is_ok() });
    tokio::time::sleep(Duration::from_millis(20)).await;
    drop(first);
    assert!(waiter.await.unwrap(), "admitted once a place was freed");
    // The second fails, the third (the waiter's, dropped) freed nothing
    // more: one failure with one in flight reaches the limit of 2, so the
    // next waits; the failure of the one in flight begins the back-off,
    // and the waiter is refused as in a back-off, not busy.
    second.answered(INVALID_CREDENTIALS);
    let third = g.admit(&dn, addr).unwrap();
    let g3 = g.clone();
    let dn3 = dn.clone();
    let waiter = tokio::spawn(async move { g3.admit_within(&dn3, addr, 10 * S).await.err() });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(third.answered(INVALID_CREDENTIALS).dn);
    assert_eq!(waiter.await.unwrap(), Some(Refused::Dn));
}

#[test]
fn a_flood_of_distinct_keys_stays_within_capacity_and_keeps_back_offs() {
    let t0 = Instant::now();
    let r = rule(2);
    let mut t = Table::new(100);
    // A key in back-off first.
    fail(&mut t, &r, 0, t0);
    assert_eq!(fail(&mut t, &r, 0, t0), Some(true));
    for k in 1..100_000u64 {
        fail(&mut t, &r, k, t0 + Duration::from_micros(k));
        assert!(t.len() <= 100, "{} entries after {k} keys", t.len());
    }
    assert!(t.blocked(0, t0 + S), "the back-off outlived the flood");
}

#[test]
fn idle_entries_are_dropped_first_when_full() {
    let t0 = Instant::now();
    let r = rule(5);
    let mut t = Table::new(3);
    // Three keys failed once; the window passes for all of them.
    for k in 0..3 {
        fail(&mut t, &r, k, t0);
    }
    // Key 9 fails twice now; the table makes room without losing it.
    for k in 9..12 {
        fail(&mut t, &r, k, t0 + 61 * S);
    }
    fail(&mut t, &r, 9, t0 + 61 * S);
    assert_eq!(t.len(), 3);
    fail(&mut t, &r, 9, t0 + 62 * S);
    fail(&mut t, &r, 9, t0 + 62 * S);
    assert_eq!(
        fail(&mut t, &r, 9, t0 + 62 * S),
        Some(true),
        "5 failures of key 9 counted"
    );
}

#[test]
fn a_guessed_dn_is_refused_while_another_user_of_the_address_binds_until_the_address_limit() {
    use super::{Config, Guard, Refused};
    use crate::proto::wire::response::rc::{INVALID_CREDENTIALS, SUCCESS};
    let mut cfg = Config::default();
    cfg.dn.limit = 2;
    cfg.address.limit = 4;
    let g = std::sync::Arc::new(Guard::new(cfg));
    let addr: std::net::IpAddr = "192.0.2.7".parse().unwrap();
    let dn = |s: &str| crate::proto::dn::Dn::parse_ldap(s).unwrap();
    for _ in 0..2 {
        g.admit(&dn("uid=victim,o=x"), addr)
            .unwrap()
            .answered(INVALID_CREDENTIALS);
    }
    // The DN as routing compares it: case and spacing do not matter.
    assert_eq!(
        g.admit(&dn("UID=Victim, O=X"), addr).err(),
        Some(Refused::Dn)
    );
    // Another user of the address: binds, and a success does not reset
    // the address's count.
    g.admit(&dn("uid=other,o=x"), addr)
        .unwrap()
        .answered(SUCCESS);
    // A bind that got no answer counts nothing.
    drop(g.admit(&dn("uid=other,o=x"), addr).unwrap());
    let began = g
        .admit(&dn("uid=third,o=x"), addr)
        .unwrap()
        .answered(INVALID_CREDENTIALS);
    assert!(!began.address);
    let began = g
        .admit(&dn("uid=fourth,o=x"), addr)
        .unwrap()
        .answered(INVALID_CREDENTIALS);
    assert!(began.address, "the 4th failure from the address");
    assert_eq!(
        g.admit(&dn("uid=other,o=x"), addr).err(),
        Some(Refused::Address)
    );
    let elsewhere: std::net::IpAddr = "192.0.2.8".parse().unwrap();
    assert!(g.admit(&dn("uid=other,o=x"), elsewhere).is_ok());
    assert_eq!(g.refused(), 2);
    assert_eq!(g.backoffs(), 2);
}

/// A guesser at one address backs the DN off from that address only: the
/// user binds from another; guesses spread over addresses meet the DN's
/// ceiling, which refuses it from every address.
#[test]
fn a_guessers_back_off_holds_at_its_address_and_the_ceiling_everywhere() {
    use super::{Config, Guard, Refused};
    use crate::proto::wire::response::rc::{INVALID_CREDENTIALS, SUCCESS};
    let mut cfg = Config::default();
    cfg.dn.limit = 2;
    cfg.ceiling.limit = 5;
    let g = std::sync::Arc::new(Guard::new(cfg));
    let at = |i: u8| std::net::IpAddr::from([127, 0, 0, i]);
    let victim = crate::proto::dn::Dn::parse_ldap("uid=victim,o=x").unwrap();
    for _ in 0..2 {
        g.admit(&victim, at(2))
            .unwrap()
            .answered(INVALID_CREDENTIALS);
    }
    assert_eq!(g.admit(&victim, at(2)).err(), Some(Refused::Dn));
    // The user, from another address, binds (and so resets the DN's
    // count from all addresses, not the guesser's back-off).
    g.admit(&victim, at(3)).unwrap().answered(SUCCESS);
    assert_eq!(g.admit(&victim, at(2)).err(), Some(Refused::Dn));
    // Spread out: two guesses from each of three more addresses; the
    // fifth failure from all reaches the ceiling.
    let mut began = Vec::new();
    for i in 4..7 {
        for _ in 0..2 {
            match g.admit(&victim, at(i)) {
                Ok(t) => began.push(t.answered(INVALID_CREDENTIALS).ceiling),
                Err(why) => began.push(why == Refused::Ceiling),
            }
        }
    }
    assert_eq!(began, [false, false, false, false, true, true]);
    assert_eq!(g.admit(&victim, at(3)).err(), Some(Refused::Ceiling));
    assert_eq!(g.admit(&victim, at(9)).err(), Some(Refused::Ceiling));
    // Another DN is not concerned.
    let other = crate::proto::dn::Dn::parse_ldap("uid=other,o=x").unwrap();
    assert!(g.admit(&other, at(2)).is_ok());
}

/// A SASL user name and a DN are different keys; a `dn:` name is the DN.
#[test]
fn sasl_names_are_keys_of_their_own() {
    use super::{Config, Guard, Refused};
    use crate::proto::wire::response::rc::INVALID_CREDENTIALS;
    use crate::proto::wire::sasl_name::Who;
    let mut cfg = Config::default();
    cfg.dn.limit = 1;
    let g = std::sync::Arc::new(Guard::new(cfg));
    let at = std::net::IpAddr::from([127, 0, 0, 2]);
    let dn = crate::proto::dn::Dn::parse_ldap("uid=alice,o=x").unwrap();
    g.admit(&Who::Name("alice".into()), at)
        .unwrap()
        .answered(INVALID_CREDENTIALS);
    assert_eq!(
        g.admit(&Who::Name("alice".into()), at).err(),
        Some(Refused::Dn)
    );
    g.admit(&Who::Dn(dn.clone()), at)
        .unwrap()
        .answered(INVALID_CREDENTIALS);
    assert_eq!(g.admit(&dn, at).err(), Some(Refused::Dn));
}

/// An IPv6 guesser counts by its /64: fresh addresses of its network
/// share its back-off; another network binds.
#[test]
fn an_ipv6_guesser_counts_by_its_network() {
    use super::{Config, Guard, Refused};
    use crate::proto::wire::response::rc::INVALID_CREDENTIALS;
    let mut cfg = Config::default();
    cfg.dn.limit = 2;
    cfg.ceiling.limit = 100;
    let g = std::sync::Arc::new(Guard::new(cfg));
    let at = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    let victim = crate::proto::dn::Dn::parse_ldap("uid=victim,o=x").unwrap();
    for a in ["2001:db8:7:1::1", "2001:db8:7:1::2"] {
        g.admit(&victim, at(a))
            .unwrap()
            .answered(INVALID_CREDENTIALS);
    }
    for i in 3..40 {
        let a = at(&format!("2001:db8:7:1:{i:x}::{i:x}"));
        assert_eq!(g.admit(&victim, a).err(), Some(Refused::Dn), "{a}");
    }
    assert!(g.admit(&victim, at("2001:db8:7:2::1")).is_ok());
}
