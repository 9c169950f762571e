//! Many operations in flight on one client connection: pipelined
//! operations keep their message IDs, abandon stops a large search upstream,
//! and a reused message ID disconnects the client and frees its slots.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::dsas::inproc_checks::{dsa_total, sees};
use crate::support::inproc::*;
use ldap3::Scope;
use ldap3_proto::proto::{LdapFilter, LdapOp, LdapResultCode, LdapSearchScope};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_pipelined_operations_keep_their_message_ids() {
    #[derive(Debug, Clone, Copy)]
    enum Kind {
        Base(&'static str),
        People(&'static str),
        Compare(&'static str),
    }
    let h = Builder::default().start().await;
    let mut c = Raw::connect(h.addr).await;
    let mut want = BTreeMap::new();
    let mut bytes = Vec::new();
    for id in 1..=100i32 {
        let part = if id % 2 == 0 { DEMOCORP } else { CUSTOMER };
        let kind = match id % 3 {
            0 => Kind::Base(part),
            1 => Kind::People(part),
            _ => Kind::Compare(part),
        };
        bytes.extend(match kind {
            Kind::Base(p) => base_search(id, &format!("cn=served-by,{p}")),
            Kind::People(p) => encode(search_msg(
                id,
                &format!("ou=People,{p}"),
                LdapSearchScope::OneLevel,
                LdapFilter::Present("objectClass".into()),
                &["uid"],
            )),
            Kind::Compare(p) => compare_msg(
                id,
                &format!("uid=bob,ou=People,{p}"),
                "mail",
                "bob@example.com",
            ),
        });
        want.insert(id, kind);
    }
    c.send(&bytes).await.unwrap();

    let mut entries: HashMap<i32, Vec<LdapOp>> = HashMap::new();
    let mut finals: HashMap<i32, Vec<(LdapResultCode, String, &'static str)>> = HashMap::new();
    let deadline = Instant::now() + WAIT;
    while finals.len() < 100 {
        let left = deadline.saturating_duration_since(Instant::now());
        let m = match c.recv(left).await {
            Recv::Msg(m) => m,
            other => panic!(
                "after {} final responses: {other:?}; missing {:?}",
                finals.len(),
                want.keys()
                    .filter(|k| !finals.contains_key(k))
                    .collect::<Vec<_>>()
            ),
        };
        assert!(want.contains_key(&m.msgid), "unexpected message ID: {m:?}");
        assert!(
            !finals.contains_key(&m.msgid),
            "response after the final one for {}: {m:?}",
            m.msgid
        );
        let kind = match &m.op {
            LdapOp::SearchResultEntry(_) => {
                entries.entry(m.msgid).or_default().push(m.op.clone());
                continue;
            }
            LdapOp::SearchResultDone(_) => "search",
            LdapOp::CompareResult(_) => "compare",
            other => panic!("unexpected response {other:?}"),
        };
        let (code, text) = final_result(&m).unwrap();
        finals.entry(m.msgid).or_default().push((code, text, kind));
    }
    for (id, kind) in &want {
        let f = &finals[id];
        assert_eq!(f.len(), 1, "msgid {id}: exactly one final response");
        let (code, text, op) = &f[0];
        let e = entries.get(id).map_or(&[][..], |v| v.as_slice());
        let (part, dsas) = match kind {
            Kind::Base(p) | Kind::People(p) | Kind::Compare(p) if *p == DEMOCORP => {
                (*p, ["D1", "H1"])
            }
            Kind::Base(p) | Kind::People(p) | Kind::Compare(p) => (*p, ["C1", "C2"]),
        };
        let d = dsa_of(text).unwrap_or_default();
        assert!(
            dsas.contains(&d.as_str()),
            "msgid {id} ({kind:?} in {part}) answered by {d:?} ({text})"
        );
        match kind {
            Kind::Base(_) => {
                assert_eq!((op, code), (&"search", &LdapResultCode::Success), "{id}");
                assert_eq!(e.len(), 1, "msgid {id}: one entry");
                let LdapOp::SearchResultEntry(se) = &e[0] else {
                    panic!("entry")
                };
                let desc = &se
                    .attributes
                    .iter()
                    .find(|a| a.atype.eq_ignore_ascii_case("description"))
                    .unwrap()
                    .vals[0];
                assert_eq!(String::from_utf8_lossy(desc), d, "msgid {id}: served-by");
            }
            Kind::People(_) => {
                assert_eq!((op, code), (&"search", &LdapResultCode::Success), "{id}");
                assert_eq!(e.len(), 22, "msgid {id}: alice, bob and 20 users");
            }
            Kind::Compare(_) => {
                assert_eq!(
                    (op, code),
                    (&"compare", &LdapResultCode::CompareTrue),
                    "{id}"
                );
                assert!(e.is_empty(), "msgid {id}: no entries for a compare");
            }
        }
    }
    assert_eq!(
        entries.keys().filter(|k| !finals.contains_key(k)).count(),
        0,
        "entries for unknown operations"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandon_stops_a_large_search_upstream() {
    let _heavy = HEAVY.lock().await;
    const N: usize = 100_000;
    let t = Instant::now();
    let big = big_directory(BIG, "B1", N);
    println!("built a {}-entry directory in {:?}", big.len(), t.elapsed());
    // A client queue that cannot overflow: this test is about abandon, not
    // about slow readers (see `slow_reader_is_not_disconnected`).
    let h = Builder::default()
        .democorp(&["D1"])
        .extra("B1", BIG, big)
        .cfg(|c| c.client_queue = 2 * N)
        .start()
        .await;
    let b1 = h.dsa("B1");
    let mut c = Raw::connect(h.addr).await;
    c.send(&encode(search_msg(
        1,
        &format!("ou=Bulk,{BIG}"),
        LdapSearchScope::Subtree,
        LdapFilter::Present("objectClass".into()),
        &["uid"],
    )))
    .await
    .unwrap();
    let mut got = 0usize;
    while got < 5 {
        let m = c.msg("big search").await;
        assert_eq!(m.msgid, 1, "{m:?}");
        assert!(matches!(m.op, LdapOp::SearchResultEntry(_)), "{m:?}");
        got += 1;
    }
    c.send(&abandon_msg(2, 1)).await.unwrap();
    c.send(&base_search(3, &format!("cn=served-by,{BIG}")))
        .await
        .unwrap();
    // Everything up to the answer to message 3: stray entries of the
    // abandoned search may come first, but no SearchResultDone for it.
    let mut after = 0usize;
    loop {
        let m = c.msg("after abandon").await;
        match (m.msgid, &m.op) {
            (1, LdapOp::SearchResultEntry(_)) => after += 1,
            (3, LdapOp::SearchResultEntry(_)) => {}
            (3, LdapOp::SearchResultDone(r)) => {
                assert_eq!(r.code, LdapResultCode::Success, "{r:?}");
                break;
            }
            _ => panic!("unexpected after abandon: {m:?}"),
        }
    }
    let t = Instant::now();
    while b1.stats.searches_abandoned() == 0 && t.elapsed() < WAIT {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let sent = b1.stats.entries_sent();
    println!(
        "abandon: client read {got} entries, then {after} more; B1 sent {sent} of {N}, searches_abandoned = {}",
        b1.stats.searches_abandoned()
    );
    assert_eq!(
        b1.stats.searches_abandoned(),
        1,
        "the DSA saw the abandon and stopped the search"
    );
    assert!(
        sent < (N as u64) / 2,
        "far fewer than {N} entries sent: {sent}"
    );
    assert!(got + after < N / 2);
}

/// Every DSA's operations in flight from the router, summed.
fn in_flight(h: &Harness) -> i64 {
    dsa_total(h, |d| d.in_flight.into())
}

/// RFC 4511 4.1.1.1: a request reusing the message ID of one still
/// outstanding is a protocol error. The router disconnects the client with
/// a Notice of Disconnection (it could never tell their answers apart)
/// and its operations' slots on the DSAs are free at once; other clients
/// never see busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_message_id_disconnects_and_frees_its_slots() {
    let h = Builder::default().democorp(&["D1"]).start().await;
    h.dsa("D1").faults.set_delay(Duration::from_secs(2));
    let mut raw = Raw::connect(h.addr).await;
    for id in 1..=20 {
        raw.send(&base_search(id, DEMOCORP)).await.unwrap();
    }
    let t0 = Instant::now();
    while in_flight(&h) < 20 && t0.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(in_flight(&h), 20);
    // Message ID 7 again, while 7 is outstanding.
    raw.send(&base_search(7, DEMOCORP)).await.unwrap();
    let m = raw.msg("after a reused message ID").await;
    let (code, text) = notice(&m).unwrap_or_else(|| panic!("not a notice: {m:?}"));
    assert_eq!(code, LdapResultCode::ProtocolError, "{text}");
    assert!(text.contains("message ID 7"), "{text}");
    let t0 = Instant::now();
    while in_flight(&h) > 0 && t0.elapsed() < Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        in_flight(&h),
        0,
        "slots still taken {:?} after the client left",
        t0.elapsed()
    );
    // Another client is served (after D1's delay), not refused.
    h.dsa("D1").faults.set_delay(Duration::ZERO);
    let mut l = ldap(&h.url()).await;
    let (rc, found, text) = sees(&mut l, DEMOCORP, Scope::Base).await;
    assert_eq!((rc, found.len()), (0, 1), "{text}");
}
