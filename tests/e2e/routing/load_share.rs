//! Reads spread over a load-share group and follow precedence (architecture.md, "Reads"):
//! in process in front of test DSAs, and through a router process in front
//! of real slapd (D1, H1 in GROUP1, H2, D2 in GROUP2; see [`crate::dsas::five_dsas`]).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::dsas::five_dsas::{served_by, setup, CUSTOMER, DEMOCORP};
use crate::dsas::inproc_checks::set;
use crate::support;
use crate::support::inproc::*;
use std::collections::{BTreeMap, BTreeSet};

/// Sequential base searches: which DSAs answered, in order.
async fn spread(h: &Harness, n: usize) -> Vec<String> {
    let mut l = ldap(&h.url()).await;
    let mut seen = Vec::new();
    for _ in 0..n {
        seen.push(support::inproc::served_by(&mut l, DEMOCORP).await);
    }
    seen
}

/// Exactly `want` answered, each at least a quarter of the reads. Not a
/// strict alternation: the router's own reads (health probes, replication
/// positions) count as in flight too, and on a loaded machine one can
/// overlap a client's read and send it to the other DSA twice in a row.
/// The rotation itself is a property test of its own (tests/logic
/// `rotation_spreads_sequential_picks_evenly`).
fn assert_spread_over(seen: &[String], want: BTreeSet<String>, case: &str) {
    let got: BTreeSet<String> = seen.iter().cloned().collect();
    assert_eq!(got, want, "{case}: DSAs that answered, in order {seen:?}");
    for (n, c) in count(seen) {
        assert!(
            c * 4 >= seen.len(),
            "{case}: {n} answered only {c} of {}: {seen:?}",
            seen.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_spread_over_first_group_and_follow_precedence() {
    let h = Builder::default().start().await;
    let seen = spread(&h, 20).await;
    println!("knowledge order D1,H1,H2,D2: {seen:?}");
    // Only D1 and H1 answer: neither GROUP2 nor the router's own block (R1,
    // in GROUP1, pointing at the router itself) is a target. (The DSAs'
    // operation counters also include the router's health probes.)
    assert_spread_over(&seen, set(["D1", "H1"]), "no precedence");
    drop(h);

    let h = Builder::default().precedence(&["H2"]).start().await;
    let seen = spread(&h, 20).await;
    println!("set precedence = H2: {seen:?}");
    assert_spread_over(&seen, set(["H2", "D2"]), "precedence H2");
}

fn count(names: &[String]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for n in names {
        *m.entry(n.clone()).or_insert(0) += 1;
    }
    m
}

/// 20 sequential base searches through the router: who answered each.
fn twenty_reads(url: &str) -> BTreeMap<String, usize> {
    let who: Vec<String> = (0..20).map(|_| served_by(url, None, DEMOCORP)).collect();
    count(&who)
}

/// 20 sequential reads are answered by exactly `want`, and (nothing in
/// flight, so rotation alternates evenly) each by at least 5 of them.
fn assert_twenty_reads_spread(url: &str, want: &[&str], why: &str) {
    let seen = twenty_reads(url);
    let names: BTreeSet<&str> = seen.keys().map(|k| k.as_str()).collect();
    assert_eq!(
        names,
        want.iter().copied().collect::<BTreeSet<&str>>(),
        "{why}; got {seen:?}"
    );
    for (n, c) in &seen {
        assert!(*c >= 5, "{n} answered only {c} of 20: {seen:?}");
    }
}

#[test]
fn reads_spread_over_first_group() {
    let s = setup("");
    assert_twenty_reads_spread(
        &s.router.url,
        &["D1", "H1"],
        "knowledge order D1,H1,H2,D2: reads go to GROUP1 (D1, H1), both used",
    );
    // CUSTOMER goes to C1.
    assert_eq!(served_by(&s.router.url, None, CUSTOMER), "C1");
}

#[test]
fn reads_follow_precedence() {
    let s = setup("set precedence = H2;\n");
    assert_twenty_reads_spread(
        &s.router.url,
        &["D2", "H2"],
        "precedence H2 puts GROUP2 (H2, D2) first",
    );
}
