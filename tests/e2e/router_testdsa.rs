//! End-to-end tests of the router in process, in front of in-tree test
//! DSAs on loopback ports: read spreading by load-share group and
//! precedence, every operation's routing, pipelining, abandon, identity
//! isolation on shared connections, the router's own answers, unavailable
//! partitions, streaming isolation from a stalled client, and paged results.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::inproc::*;
use ldap3::controls::{ControlType, PagedResults};
use ldap3::exop::{Exop, WhoAmI, WhoAmIResp};
use ldap3::{Mod, Scope, SearchEntry};
use ldap3_proto::proto::{LdapFilter, LdapOp, LdapResultCode, LdapSearchScope};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

fn set<const N: usize>(v: [&str; N]) -> BTreeSet<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Sequential base searches: which DSAs answered, in order.
async fn spread(h: &Harness, n: usize) -> Vec<String> {
    let mut l = ldap(&h.url()).await;
    let mut seen = Vec::new();
    for _ in 0..n {
        seen.push(served_by(&mut l, DEMOCORP).await);
    }
    seen
}

fn assert_alternates(seen: &[String], want: BTreeSet<String>, case: &str) {
    let got: BTreeSet<String> = seen.iter().cloned().collect();
    assert_eq!(got, want, "{case}: DSAs that answered, in order {seen:?}");
    for w in seen.windows(2) {
        assert_ne!(w[0], w[1], "{case}: reads must alternate, got {seen:?}");
    }
}

// 1. Reads spread over the first load-share group, as the seed table says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_spread_over_first_group_and_follow_precedence() {
    let h = Builder::default().start().await;
    let seen = spread(&h, 20).await;
    println!("knowledge order D1,H1,H2,D2: {seen:?}");
    // Only D1 and H1 answer: neither GROUP2 nor the router's own block (R1,
    // in GROUP1, pointing at the router itself) is a target. (The DSAs'
    // operation counters also include the router's health probes.)
    assert_alternates(&seen, set(["D1", "H1"]), "no precedence");
    drop(h);

    let h = Builder::default().precedence(&["H2"]).start().await;
    let seen = spread(&h, 20).await;
    println!("set precedence = H2: {seen:?}");
    assert_alternates(&seen, set(["H2", "D2"]), "precedence H2");
}

// 1b. A client that names one base over and over, then another, then the
// first again, on one connection: each request goes to its own DN's
// partition (the session reuses the last DN it parsed only for the same
// text).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connection_switching_bases_routes_each_to_its_partition() {
    let h = Builder::default().start().await;
    let mut l = ldap(&h.url()).await;
    let democorp = set(["D1", "H1"]);
    let customer = set(["C1", "C2"]);
    for (i, (suffix, holders)) in [
        (DEMOCORP, &democorp),
        (DEMOCORP, &democorp),
        (CUSTOMER, &customer),
        (CUSTOMER, &customer),
        (DEMOCORP, &democorp),
        (CUSTOMER, &customer),
        (DEMOCORP, &democorp),
    ]
    .into_iter()
    .enumerate()
    {
        let by = served_by(&mut l, suffix).await;
        assert!(
            holders.contains(&by),
            "request {i} for {suffix} answered by {by}, not one of {holders:?}"
        );
    }
}

fn only_in(h: &Harness, dn: &str, holder: &str, others: &[&str]) {
    assert!(
        h.dsa(holder).dir.contains(dn),
        "{dn} must exist in {holder}"
    );
    for o in others {
        assert!(!h.dsa(o).dir.contains(dn), "{dn} must not exist in {o}");
    }
}

// 2. Compare, bind and WhoAmI; writes land on the write-precedence DSA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_route_reads_to_group_and_writes_to_write_precedence() {
    let h = Builder::default().write_precedence(&["D2"]).start().await;
    let url = h.url();
    let mut l = ldap(&url).await;
    let readers = ["D1", "H1"];

    // WhoAmI, anonymous: the empty authzId.
    let (exop, _) = within("whoami", l.extended(WhoAmI))
        .await
        .unwrap()
        .success()
        .unwrap();
    assert_eq!(exop.parse::<WhoAmIResp>().authzid, "");

    // Compare is a read: GROUP1.
    let r = within(
        "compare",
        l.compare(ALICE, "mail", "alice@example.com".as_bytes()),
    )
    .await
    .unwrap();
    assert_eq!(r.0.rc, 6, "compareTrue expected: {:?}", r.0);
    let d = dsa_of(&r.0.text).unwrap_or_default();
    assert!(readers.contains(&d.as_str()), "compare answered by {d}");
    let r = within(
        "compare",
        l.compare(ALICE, "mail", "bob@example.com".as_bytes()),
    )
    .await
    .unwrap();
    assert_eq!(r.0.rc, 5, "compareFalse expected: {:?}", r.0);

    // A wrong password fails and leaves the client anonymous.
    let r = within("bad bind", l.simple_bind(ALICE, "bobpw"))
        .await
        .unwrap();
    assert_eq!(r.rc, 49, "invalidCredentials expected: {r:?}");
    let (exop, _) = within("whoami", l.extended(WhoAmI))
        .await
        .unwrap()
        .success()
        .unwrap();
    assert_eq!(exop.parse::<WhoAmIResp>().authzid, "");

    // Bind is a read too.
    let r = within("bind", l.simple_bind(ALICE, "alicepw"))
        .await
        .unwrap();
    assert_eq!(r.rc, 0, "bind: {r:?}");
    let d = dsa_of(&r.text).unwrap_or_default();
    assert!(readers.contains(&d.as_str()), "bind answered by {d}");
    let (exop, _) = within("whoami", l.extended(WhoAmI))
        .await
        .unwrap()
        .success()
        .unwrap();
    assert_eq!(exop.parse::<WhoAmIResp>().authzid, format!("dn:{ALICE}"));

    // Writes: D2 (write-precedence), and only D2.
    let others = ["D1", "H1", "H2"];
    let dn = "cn=Router Test,ou=People,o=DEMOCORP,c=AU";
    let r = within(
        "add",
        l.add(
            dn,
            vec![
                ("objectClass", HashSet::from(["top", "person"])),
                ("cn", HashSet::from(["Router Test"])),
                ("sn", HashSet::from(["Test"])),
            ],
        ),
    )
    .await
    .unwrap();
    assert_eq!((r.rc, r.text.as_str()), (0, "testdsa D2"), "add: {r:?}");
    only_in(&h, dn, "D2", &others);

    let r = within(
        "modify",
        l.modify(
            dn,
            vec![Mod::Replace("description", HashSet::from(["changed"]))],
        ),
    )
    .await
    .unwrap();
    assert_eq!((r.rc, r.text.as_str()), (0, "testdsa D2"), "modify: {r:?}");
    let e = h.dsa("D2").dir.entry(dn).unwrap();
    assert!(
        e.iter()
            .any(|(a, v)| a.eq_ignore_ascii_case("description") && v == &["changed"]),
        "modified entry on D2: {e:?}"
    );

    let renamed = "cn=Router Renamed,ou=People,o=DEMOCORP,c=AU";
    let r = within("modify DN", l.modifydn(dn, "cn=Router Renamed", true, None))
        .await
        .unwrap();
    assert_eq!((r.rc, r.text.as_str()), (0, "testdsa D2"), "modDN: {r:?}");
    only_in(&h, renamed, "D2", &others);
    for n in ["D1", "H1", "H2", "D2"] {
        assert!(!h.dsa(n).dir.contains(dn), "old name gone from {n}");
    }

    let r = within("delete", l.delete(renamed)).await.unwrap();
    assert_eq!((r.rc, r.text.as_str()), (0, "testdsa D2"), "delete: {r:?}");
    for n in ["D1", "H1", "H2", "D2"] {
        assert!(!h.dsa(n).dir.contains(renamed), "deleted from {n}");
    }

    // CUSTOMER has no write-precedence of its own: C1, first of its list.
    // (Anonymously: alice is a DEMOCORP identity that C1 does not know, so
    // her writes there are refused by C1 with authorizationDenied.)
    let cdn = "cn=Router Test,ou=People,o=CUSTOMER,c=AU";
    let mut anon = ldap(&url).await;
    let r = within(
        "add",
        anon.add(
            cdn,
            vec![
                ("objectClass", HashSet::from(["top", "person"])),
                ("sn", HashSet::from(["Test"])),
            ],
        ),
    )
    .await
    .unwrap();
    assert_eq!((r.rc, r.text.as_str()), (0, "testdsa C1"), "add: {r:?}");
    only_in(&h, cdn, "C1", &["C2"]);
}

// 3. 100 operations pipelined on one connection.
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

// 4. Abandon stops a large search on the DSA.
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

async fn sees(l: &mut ldap3::Ldap, base: &str, scope: Scope) -> (u32, Vec<String>, String) {
    let r = within(
        "search",
        l.search(base, scope, "(objectClass=*)", vec!["cn"]),
    )
    .await
    .unwrap();
    let dns =
        r.0.into_iter()
            .map(|e| SearchEntry::construct(e).dn)
            .collect();
    (r.1.rc, dns, r.1.text)
}

// 5. Identity: each client gets exactly its own access, on a shared DSA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identities_do_not_leak_between_clients() {
    // One DEMOCORP DSA, so every operation below shares it.
    let h = Builder::default().democorp(&["D1"]).start().await;
    let url = h.url();
    let restricted = "ou=Restricted,o=DEMOCORP,c=AU";

    let mut anon = ldap(&url).await;
    let (rc, dns, text) = sees(&mut anon, SECRET, Scope::Base).await;
    assert!(
        dns.is_empty() && rc == 32,
        "anonymous: rc {rc} {dns:?} {text}"
    );
    let (rc, dns, text) = sees(&mut anon, restricted, Scope::Subtree).await;
    assert!(
        dns.is_empty() && rc == 32,
        "anonymous: rc {rc} {dns:?} {text}"
    );

    let mut alice = bound(&url, ALICE, "alicepw").await;
    let mut router = bound(&url, ROUTER_ID, "routerpw").await;
    let (rc, dns, text) = sees(&mut alice, SECRET, Scope::Base).await;
    assert!(dns.is_empty() && rc == 32, "alice: rc {rc} {dns:?} {text}");
    let (rc, dns, _) = sees(&mut alice, DEMOCORP, Scope::Subtree).await;
    assert_eq!(rc, 0);
    assert!(
        !dns.iter()
            .any(|d| d.to_ascii_lowercase().contains("restricted")),
        "alice's subtree search shows restricted entries: {dns:?}"
    );
    let (rc, dns, text) = sees(&mut router, SECRET, Scope::Base).await;
    assert_eq!((rc, dns.len()), (0, 1), "router identity: {text}");

    for round in 0..20 {
        let ((arc, adns, atext), (rrc, rdns, rtext), (nrc, ndns, _)) = tokio::join!(
            sees(&mut alice, SECRET, Scope::Base),
            sees(&mut router, SECRET, Scope::Base),
            sees(&mut anon, SECRET, Scope::Base),
        );
        assert!(
            adns.is_empty() && arc == 32,
            "round {round}: alice saw {adns:?} (rc {arc}, {atext})"
        );
        assert!(
            rdns.len() == 1 && rrc == 0,
            "round {round}: router identity saw {rdns:?} (rc {rrc}, {rtext})"
        );
        assert!(ndns.is_empty() && nrc == 32, "round {round}: anonymous");
        assert_eq!(dsa_of(&atext).as_deref(), Some("D1"));
        assert_eq!(dsa_of(&rtext).as_deref(), Some("D1"));
        let ((arc, _, _), (rrc, rdns, _)) = tokio::join!(
            sees(&mut alice, restricted, Scope::Subtree),
            sees(&mut router, restricted, Scope::Subtree),
        );
        assert_eq!(arc, 32, "round {round}: alice subtree of ou=Restricted");
        assert_eq!((rrc, rdns.len()), (0, 2), "round {round}: router subtree");
    }
    let (exop, _) = within("whoami", alice.extended(WhoAmI))
        .await
        .unwrap()
        .success()
        .unwrap();
    assert_eq!(exop.parse::<WhoAmIResp>().authzid, format!("dn:{ALICE}"));
}

// 6. What the router answers itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_answers_root_dse_no_partition_and_extended_ops() {
    let h = Builder::default().start().await;
    let mut l = ldap(&h.url()).await;

    for base in ["o=Nowhere,c=US", "c=NZ", "cn=x,o=Elsewhere"] {
        let r = within(
            "search",
            l.search(base, Scope::Base, "(objectClass=*)", vec!["cn"]),
        )
        .await
        .unwrap();
        assert_eq!(r.1.rc, 32, "search {base}: {:?}", r.1);
    }
    let r = within("compare", l.compare("cn=x,o=Nowhere", "cn", "x".as_bytes()))
        .await
        .unwrap();
    assert_eq!(r.0.rc, 32, "compare under no partition: {:?}", r.0);

    let r = within(
        "root DSE",
        l.search("", Scope::Base, "(objectClass=*)", vec!["namingContexts"]),
    )
    .await
    .unwrap();
    let (entries, _) = r.success().unwrap();
    assert_eq!(entries.len(), 1);
    let e = SearchEntry::construct(entries.into_iter().next().unwrap());
    let nc: BTreeSet<String> = e
        .attrs
        .get("namingContexts")
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|v| v.replace(' ', "").to_ascii_lowercase())
        .collect();
    println!("namingContexts: {nc:?}");
    assert_eq!(nc, set(["o=democorp,c=au", "o=customer,c=au"]));

    let start_tls = Exop {
        name: Some("1.3.6.1.4.1.1466.20037".into()),
        val: None,
    };
    let r = within("StartTLS", l.extended(start_tls)).await.unwrap();
    println!("StartTLS: rc {} {}", r.1.rc, r.1.text);
    assert_ne!(r.1.rc, 0, "StartTLS must not succeed: {:?}", r.1);

    let unknown = Exop {
        name: Some("1.3.6.1.4.1.99999.1.2.3".into()),
        val: Some(b"x".to_vec()),
    };
    let r = within("unknown exop", l.extended(unknown)).await.unwrap();
    assert_eq!(r.1.rc, 2, "unknown extended op: {:?}", r.1);

    // The session goes on after both.
    let d = served_by(&mut l, DEMOCORP).await;
    assert!(["D1", "H1"].contains(&d.as_str()));
}

async fn assert_unavailable(h: &Harness, base: &str, case: &str) {
    let mut l = ldap(&h.url()).await;
    let t = Instant::now();
    let r = within(
        case,
        l.search(base, Scope::Base, "(objectClass=*)", vec!["cn"]),
    )
    .await
    .unwrap();
    println!("{case}: rc {} in {:?}: {}", r.1.rc, t.elapsed(), r.1.text);
    assert!(
        r.1.rc == 52 || (r.1.rc != 0 && r.1.text.starts_with("dsa-router")),
        "{case}: expected unavailable (52), got {:?}",
        r.1
    );
    assert!(r.0.is_empty());
    // The other partition is unaffected.
    let d = served_by(&mut l, DEMOCORP).await;
    assert!(["D1", "H1"].contains(&d.as_str()), "{case}");
}

// 7. A partition none of whose DSAs answers: a clear error, no hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_with_no_dsa_reachable_is_unavailable() {
    let h = Builder::default().start().await;
    for n in ["C1", "C2"] {
        h.dsa(n).faults.set_refuse(true);
    }
    for i in 0..3 {
        assert_unavailable(&h, CUSTOMER, &format!("refusing, try {i}")).await;
    }
    drop(h);

    let mut h = Builder::default().start().await;
    for n in ["C1", "C2"] {
        h.take_dsa(n).shutdown().await;
    }
    for i in 0..3 {
        assert_unavailable(&h, CUSTOMER, &format!("shut down, try {i}")).await;
    }
}

/// A stalled client: a small receive buffer, one search of all of
/// `ou=Bulk` under BIG (all attributes), and no reads.
async fn stalled_bulk_search(addr: std::net::SocketAddr) -> Raw {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let stream = within("connect", sock.connect(addr)).await.unwrap();
    let mut raw = Raw::from_stream(stream);
    raw.send(&encode(search_msg(
        1,
        &format!("ou=Bulk,{BIG}"),
        LdapSearchScope::Subtree,
        LdapFilter::Present("objectClass".into()),
        &[],
    )))
    .await
    .unwrap();
    raw
}

// 8. A client that stops reading stalls nobody else, and memory stays
// bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_client_does_not_stall_others_or_grow_memory() {
    let _heavy = HEAVY.lock().await;
    const N: u64 = 100_000;
    let big = big_directory(BIG, "B1", N as usize);
    let h = Builder::default()
        .democorp(&["D1"])
        .extra("B1", BIG, big)
        .start()
        .await;
    let b1 = h.dsa("B1");
    let mut other = ldap(&h.url()).await;
    for _ in 0..20 {
        assert_eq!(served_by(&mut other, BIG).await, "B1");
    }
    let rss_before = rss_kib();

    let mut stalled = stalled_bulk_search(h.addr).await;

    // The other client's base searches on the same DSA (the same shared
    // upstream connection: both are anonymous), from the moment the big
    // search starts until B1 has stopped sending it (the router abandoned
    // it, or it completed into the router's buffers), and at least 300.
    let t0 = Instant::now();
    let mut lat = Vec::new();
    let mut during = 0usize;
    let mut rss_max = rss_before;
    let mut streaming_for = None;
    loop {
        let streaming = b1.stats.searches_abandoned() == 0 && b1.stats.entries_sent() < N + 1;
        if !streaming && streaming_for.is_none() {
            streaming_for = Some(t0.elapsed());
        }
        if (!streaming && lat.len() >= 300) || t0.elapsed() > WAIT {
            break;
        }
        let t = Instant::now();
        assert_eq!(served_by(&mut other, BIG).await, "B1");
        lat.push(t.elapsed());
        if streaming {
            during += 1;
        }
        rss_max = rss_max.max(rss_kib());
    }
    let rss_after = rss_kib();
    let mut sorted = lat.clone();
    sorted.sort();
    let max = *sorted.last().unwrap();
    println!(
        "stalled client: B1 streamed for {streaming_for:?}, sent {} of {N} entries, searches abandoned {}",
        b1.stats.entries_sent(),
        b1.stats.searches_abandoned()
    );
    println!(
        "other client's base searches: n={} ({during} while B1 was streaming) p50={:?} p99={:?} max={max:?}",
        sorted.len(),
        sorted[sorted.len() / 2],
        sorted[sorted.len() * 99 / 100],
    );
    println!(
        "RSS before {rss_before} KiB, max during {rss_max} KiB, after {rss_after} KiB (growth {} KiB)",
        rss_max.saturating_sub(rss_before)
    );
    assert!(
        during >= 10,
        "only {during} searches while the stall lasted"
    );
    assert!(
        streaming_for.is_some(),
        "B1 still streaming after {WAIT:?}: the stalled search was neither abandoned nor finished"
    );
    assert!(max < Duration::from_millis(200), "max latency {max:?}");
    let growth = rss_max.saturating_sub(rss_before);
    assert!(growth < 200 * 1024, "RSS grew by {growth} KiB");

    // What became of the stalled client (for the report).
    let mut n = 0usize;
    let end = loop {
        match stalled.recv(Duration::from_secs(5)).await {
            Recv::Msg(m) => {
                if let Some(x) = notice(&m) {
                    break format!("notice {x:?} after {n} entries");
                }
                if let Some(x) = final_result(&m) {
                    break format!("final result {x:?} after {n} entries");
                }
                n += 1;
            }
            other => break format!("{other:?} after {n} entries"),
        }
    };
    println!("stalled client, once it read again: {end}");
    assert!(h.serving());
}

// 8a'. A stalled client whose queue overflows is disconnected and holds
// nothing afterwards, though it still does not read: its writer gives up
// on the full socket instead of waiting on it forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overflowed_stalled_client_releases_its_session() {
    let _heavy = HEAVY.lock().await;
    // More than the kernel's socket buffers hold, so the writer meets a
    // full socket.
    const N: usize = 100_000;
    let big = big_directory(BIG, "B1", N);
    let h = Builder::default()
        .democorp(&["D1"])
        .extra("B1", BIG, big)
        .cfg(|c| c.client_queue_bytes = 256 * 1024)
        .start()
        .await;
    let mut other = ldap(&h.url()).await;
    assert_eq!(served_by(&mut other, BIG).await, "B1");
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let stream = within("connect", sock.connect(h.addr)).await.unwrap();
    let mut stalled = Raw::from_stream(stream);
    let search = search_msg(
        1,
        &format!("ou=Bulk,{BIG}"),
        LdapSearchScope::Subtree,
        LdapFilter::Present("objectClass".into()),
        &[],
    );
    stalled.send(&encode(search)).await.unwrap();
    let clients = || {
        h.router
            .metrics
            .clients
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let t0 = Instant::now();
    while clients() > 1 && t0.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        clients(),
        1,
        "the stalled client's session is still there after {:?}",
        t0.elapsed()
    );
    assert_eq!(served_by(&mut other, BIG).await, "B1");
    drop(stalled);
}

// 8b. A client that reads, but pauses briefly, as any client processing
// its results may, while a DSA streams a large result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_reader_is_not_disconnected() {
    let _heavy = HEAVY.lock().await;
    const N: usize = 20_000;
    let big = big_directory(BIG, "B1", N);
    let h = Builder::default()
        .democorp(&["D1"])
        .extra("B1", BIG, big)
        .start()
        .await;
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
    let first = c.msg("first entry").await;
    assert!(
        matches!(first.op, LdapOp::SearchResultEntry(_)),
        "{first:?}"
    );
    // The client is busy for a moment (the scenario itself, not a wait).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut n = 1usize;
    let end = loop {
        match c.recv(WAIT).await {
            Recv::Msg(m) => match m.op {
                LdapOp::SearchResultEntry(_) => n += 1,
                _ => break format!("{m:?}"),
            },
            other => break format!("{other:?}"),
        }
    };
    println!("slow reader: {n} entries, then {end}");
    assert_eq!(n, N + 1, "entries before the end ({end})");
    assert!(
        end.contains("SearchResultDone") && end.contains("Success"),
        "{end}"
    );
}

// 9. Paged results through the router.
async fn page_through(
    l: &mut ldap3::Ldap,
    base: &str,
    cookie: &mut Vec<u8>,
) -> (Vec<String>, u32, String) {
    let r = within(
        "paged search",
        l.with_controls(PagedResults {
            size: 5,
            cookie: cookie.clone(),
        })
        .search(base, Scope::Subtree, "(objectClass=*)", vec!["1.1"]),
    )
    .await
    .unwrap();
    let dns =
        r.0.into_iter()
            .map(|e| SearchEntry::construct(e).dn)
            .collect::<Vec<_>>();
    assert!(dns.len() <= 5, "page of {} entries", dns.len());
    *cookie =
        r.1.ctrls
            .iter()
            .find(|c| matches!(c.0, Some(ControlType::PagedResults)))
            .map(|c| c.1.parse::<PagedResults>().cookie)
            .unwrap_or_default();
    (dns, r.1.rc, r.1.text)
}

fn people(suffix: &str) -> BTreeSet<String> {
    let mut s = BTreeSet::new();
    s.insert(format!("ou=People,{suffix}"));
    for u in ["alice", "bob"] {
        s.insert(format!("uid={u},ou=People,{suffix}"));
    }
    for i in 0..20 {
        s.insert(format!("uid=user{i:04},ou=People,{suffix}"));
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paged_results_return_every_entry_once() {
    let h = Builder::default().start().await;
    let mut l = ldap(&h.url()).await;
    let base = format!("ou=People,{DEMOCORP}");
    let mut cookie = Vec::new();
    let mut all = Vec::new();
    let mut pages = 0;
    let mut dsas = BTreeSet::new();
    loop {
        let (dns, rc, text) = page_through(&mut l, &base, &mut cookie).await;
        assert_eq!(rc, 0, "page {pages}: {text}");
        dsas.insert(dsa_of(&text).unwrap_or_default());
        pages += 1;
        all.extend(dns);
        if cookie.is_empty() {
            break;
        }
        assert!(pages < 50, "paging does not end");
    }
    println!("{} entries in {pages} pages from {dsas:?}", all.len());
    let uniq: BTreeSet<String> = all.iter().cloned().collect();
    assert_eq!(uniq.len(), all.len(), "an entry came twice: {all:?}");
    assert_eq!(uniq, people(DEMOCORP));
    assert_eq!(pages, 5, "23 entries in pages of 5");
    assert_eq!(
        dsas.len(),
        1,
        "all pages from the DSA that issued the cookie"
    );
}

// 9b. Two paged searches interleaved on one connection. The first pages go
// to D1 and H1 (the read rotation), and each DSA issues its own cookies, so
// the two cookies may be equal byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interleaved_paged_searches_on_one_connection() {
    let h = Builder::default().start().await;
    let mut l = ldap(&h.url()).await;
    let bases = [format!("ou=People,{DEMOCORP}"), DEMOCORP.to_string()];
    let mut cookies = [Vec::new(), Vec::new()];
    let mut got: [Vec<String>; 2] = [Vec::new(), Vec::new()];
    let mut done = [false, false];
    let mut log = Vec::new();
    let mut errors = Vec::new();
    let mut page = 0;
    while !(done[0] && done[1]) && errors.is_empty() {
        page += 1;
        assert!(page < 50, "paging does not end");
        for s in 0..2 {
            if done[s] {
                continue;
            }
            let sent = String::from_utf8_lossy(&cookies[s]).into_owned();
            let (dns, rc, text) = page_through(&mut l, &bases[s], &mut cookies[s]).await;
            let name = ["A", "B"][s];
            log.push(format!(
                "search {name} page {page}: cookie sent {sent:?} -> rc {rc} ({text}), {} entries, next cookie {:?}",
                dns.len(),
                String::from_utf8_lossy(&cookies[s])
            ));
            if rc != 0 {
                errors.push(format!("search {name} page {page}: rc {rc} {text}"));
            }
            got[s].extend(dns);
            done[s] = cookies[s].is_empty();
        }
    }
    for line in &log {
        println!("{line}");
    }
    let want_a = people(DEMOCORP);
    let mut want_b = want_a.clone();
    for dn in [
        DEMOCORP.to_string(),
        format!("cn=served-by,{DEMOCORP}"),
        format!("cn=router,{DEMOCORP}"),
    ] {
        want_b.insert(dn);
    }
    for (s, want) in [want_a, want_b].iter().enumerate() {
        let name = ["A", "B"][s];
        let set: BTreeSet<String> = got[s].iter().cloned().collect();
        let foreign: Vec<&String> = set.difference(want).collect();
        if !foreign.is_empty() {
            errors.push(format!(
                "search {name} returned entries outside its base: {foreign:?}"
            ));
        }
        if set.len() != got[s].len() {
            errors.push(format!("search {name} returned duplicates"));
        }
        if errors.is_empty() && &set != want {
            errors.push(format!(
                "search {name} missed {:?}",
                want.difference(&set).collect::<Vec<_>>()
            ));
        }
    }
    assert!(errors.is_empty(), "{errors:#?}");
}

/// Read-your-writes: D1 and H1 share reads and do not replicate (test
/// DSAs), so a read right after a write misses it whenever it lands on the
/// DSA that did not take the write, unless the router keeps the client's
/// reads on that DSA for a while after its write (the default, 5 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_after_a_write_see_it_with_read_your_writes() {
    for affinity in [true, false] {
        let h = Builder::default()
            .democorp(&["D1", "H1"])
            .cfg(|c| {
                if !affinity {
                    c.read_your_writes = Duration::ZERO;
                }
            })
            .start()
            .await;
        // Anonymous: the spanning search also reaches CUSTOMER, whose DSAs
        // do not know DEMOCORP identities.
        let mut l = ldap(&h.url()).await;
        let (mut misses, mut spanning_misses) = (0, 0);
        for i in 0..200 {
            let dn = format!("cn=ryw{i},ou=People,o=DEMOCORP,c=AU");
            let r = within(
                "add",
                l.add(
                    &dn,
                    vec![
                        ("objectClass", HashSet::from(["top", "person"])),
                        ("sn", HashSet::from(["Test"])),
                    ],
                ),
            )
            .await
            .unwrap();
            assert_eq!(r.rc, 0, "add {dn}: {r:?}");
            let (rc, found, _) = sees(&mut l, &dn, Scope::Base).await;
            if rc != 0 || found.is_empty() {
                misses += 1;
            }
            // And, every other time (so that reads do not keep one parity
            // of the rotation), a search spanning DEMOCORP and CUSTOMER.
            if i % 2 == 1 {
                continue;
            }
            let r = within(
                "spanning search",
                l.search("c=AU", Scope::Subtree, &format!("(cn=ryw{i})"), vec!["cn"]),
            )
            .await
            .unwrap();
            if r.1.rc != 0 || r.0.len() != 1 {
                spanning_misses += 1;
            }
        }
        if affinity {
            assert_eq!(misses, 0, "reads after writes missed with affinity on");
            assert_eq!(
                spanning_misses, 0,
                "spanning searches missed with affinity on"
            );
        } else {
            assert!(
                misses > 20,
                "only {misses} misses without affinity: the test would not see it break"
            );
            assert!(
                spanning_misses > 10,
                "only {spanning_misses} spanning misses without affinity"
            );
        }
        println!(
            "read-your-writes {affinity}: {misses} misses in 200, {spanning_misses} in 100 spanning searches"
        );
    }
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
        let m = &h.router.metrics;
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
        let st = dsa_router::admin::status::status(&h.router);
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

/// A figure of every DSA's `/status`, summed.
fn dsa_total(h: &Harness, f: impl Fn(&dsa_router::admin::status::DsaReport) -> i64) -> i64 {
    dsa_router::admin::status::status(&h.router)
        .partitions
        .iter()
        .flat_map(|p| &p.dsas)
        .map(f)
        .sum()
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
    let mut stuck = alice.clone();
    let waiting = tokio::spawn(async move {
        let _ = stuck
            .search(CUSTOMER, Scope::Base, "(objectClass=*)", vec!["cn"])
            .await;
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    reads_democorp_at_once(&alice, "the CUSTOMER read").await;
    waiting.abort();
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
            c.own_connection = dsa_router::config::OwnConnection::Always;
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
    let first = tokio::spawn(extra_read(alice.clone()));
    tokio::time::sleep(Duration::from_millis(200)).await;
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
    tokio::time::sleep(Duration::from_millis(300)).await;
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
            c.own_connection = dsa_router::config::OwnConnection::Always;
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

/// A client that pipelines requests the router answers itself (root DSE)
/// and never reads holds at most its queue: the router stops reading its
/// requests while the queue is full, and other clients stay prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_its_local_answers_holds_a_bounded_queue() {
    let _heavy = HEAVY.lock().await;
    let h = Builder::default()
        .democorp(&["D1"])
        .cfg(|c| {
            c.client_queue_bytes = 1 << 20;
        })
        .start()
        .await;
    let before = rss_kib();
    let sock = tokio::net::TcpStream::connect(h.addr).await.unwrap();
    let (_rd, mut wr) = sock.into_split();
    let writing = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let mut batch = Vec::new();
        for id in 1..=1000 {
            batch.extend_from_slice(&base_search(id, ""));
        }
        // 400,000 root DSE searches: ~200 MB of answers if nothing bounded
        // them.
        for _ in 0..400 {
            if wr.write_all(&batch).await.is_err() {
                break;
            }
        }
    });
    tokio::time::sleep(Duration::from_secs(4)).await;
    let grown = rss_kib().saturating_sub(before);
    // Another client is answered promptly meanwhile.
    let t0 = Instant::now();
    let mut l = ldap(&h.url()).await;
    let (rc, _, text) = sees(&mut l, DEMOCORP, Scope::Base).await;
    assert_eq!(rc, 0, "{text}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    writing.abort();
    assert!(
        grown < 64 * 1024,
        "RSS grew by {grown} KiB for one client that does not read"
    );
}

/// Responses queued for all clients are bounded router-wide
/// (`--max-response-memory`), not only per client: four clients that each
/// start a 60,000-entry search and never read would queue megabytes each
/// within their own bound (16 MiB); with a 512 KiB budget the total stays
/// near it, and clients with a backlog whose responses would go over are
/// disconnected (their searches abandoned upstream).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_queued_for_all_clients_are_bounded_router_wide() {
    let _heavy = HEAVY.lock().await;
    const N: u64 = 60_000;
    const BUDGET: usize = 512 * 1024;
    let h = Builder::default()
        .democorp(&["D1"])
        .extra("B1", BIG, big_directory(BIG, "B1", N as usize))
        .cfg(|c| c.max_response_memory = BUDGET)
        .start()
        .await;
    let b1 = h.dsa("B1");
    let mut stalled = Vec::new();
    for _ in 0..4 {
        stalled.push(stalled_bulk_search(h.addr).await);
    }
    // Until B1 has nothing more to send: every search abandoned by the
    // router or sent whole.
    let t0 = Instant::now();
    let mut most = 0;
    loop {
        most = most.max(h.router.queued_response_bytes());
        let abandoned = b1.stats.searches_abandoned();
        let sent = b1.stats.entries_sent();
        if abandoned + sent / (N + 1) >= 4 || t0.elapsed() > Duration::from_secs(20) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let disconnects = h.router.response_memory_disconnects();
    assert!(
        disconnects >= 1 && b1.stats.searches_abandoned() >= 1,
        "no client was disconnected for the budget ({disconnects}; abandoned {}; most queued {most} bytes)",
        b1.stats.searches_abandoned()
    );
    // Over by at most one response per client (an empty queue takes one).
    assert!(
        most <= BUDGET + 4 * 1024,
        "{most} bytes queued for all clients, budget {BUDGET}"
    );
    // Others are served meanwhile and after.
    let mut other = ldap(&h.url()).await;
    assert_eq!(served_by(&mut other, BIG).await, "B1");
    drop(stalled);
}

/// Clients that each send most of a large request and stop hold memory
/// the router counts: beyond `--max-request-memory` the client that would
/// go over is disconnected (busy), the others keep their connections, a
/// normal client is served, and the count is back to zero when they leave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incomplete_large_requests_are_bounded_in_total() {
    let h = Builder::default()
        .democorp(&["D1"])
        .cfg(|c| {
            c.max_request_pdu = 4 << 20;
            c.max_request_memory = 10 << 20;
        })
        .start()
        .await;
    // An add of ~4 MiB announced, 3 MiB of it sent.
    let mut head = vec![0x30, 0x83];
    let len: usize = (4 << 20) - 16;
    head.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8]);
    let body = vec![0x04u8; 3 << 20];
    let mut clients = Vec::new();
    let mut refused = 0;
    for i in 0..5 {
        let mut raw = Raw::connect(h.addr).await;
        raw.send(&head).await.unwrap();
        let _ = raw.send(&body).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        match raw.recv(Duration::from_millis(300)).await {
            Recv::Msg(m) => {
                let (code, text) = notice(&m).unwrap_or_else(|| panic!("client {i}: {m:?}"));
                assert_eq!(code, LdapResultCode::Busy, "{text}");
                refused += 1;
            }
            Recv::Timeout => clients.push(raw),
            other => panic!("client {i}: {other:?}"),
        }
    }
    assert!(
        refused >= 1 && clients.len() >= 2,
        "refused {refused}, kept {}",
        clients.len()
    );
    let held = h
        .router
        .request_memory
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(held <= 10 << 20, "{held} bytes counted");
    let mut l = ldap(&h.url()).await;
    let (rc, found, text) = sees(&mut l, DEMOCORP, Scope::Base).await;
    assert_eq!((rc, found.len()), (0, 1), "{text}");
    drop(clients);
    let t0 = Instant::now();
    while h
        .router
        .request_memory
        .load(std::sync::atomic::Ordering::Relaxed)
        > 0
        && t0.elapsed() < Duration::from_secs(5)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        h.router
            .request_memory
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

/// The Grafana dashboard in `docker/` asks only for metrics the router
/// exports: every `dsa_router_*` name in its queries appears in `/metrics`
/// (histogram series by their base name).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grafana_dashboard_queries_metrics_that_exist() {
    let h = Builder::default().democorp(&["D1"]).start().await;
    let mut l = ldap(&h.url()).await;
    let _ = sees(&mut l, DEMOCORP, Scope::Base).await;
    let text = dsa_router::admin::metrics_text(&h.router);
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docker/grafana-dashboard.json");
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut names = BTreeSet::new();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().unwrap();
            for (i, _) in expr.match_indices("dsa_router_") {
                let name: String = expr[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                names.insert(name);
            }
        }
    }
    assert!(names.len() >= 10, "{names:?}");
    for n in names {
        let base = n.strip_suffix("_bucket").unwrap_or(&n);
        assert!(
            text.lines().any(|l| l.starts_with(base)),
            "the dashboard queries {n}, which /metrics does not export"
        );
    }
}
