//! Hostile and broken clients against a running router: each gets a Notice
//! of Disconnection or a clean close, never a hang or a crash, and a fresh
//! client is served afterwards. Also the limits: slow PDUs, too many
//! clients, too many outstanding operations.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::inproc::*;
use dsa_router::service::context::Config;
use ldap3_proto::proto::{LdapFilter, LdapOp, LdapResultCode, LdapSearchScope};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A search request body (inside the 0x63 element) with `filter` encoded.
fn search_body(base: &str, filter: &[u8]) -> Vec<u8> {
    let mut b = tlv(0x04, base.as_bytes());
    b.extend([0x0a, 0x01, 0x02, 0x0a, 0x01, 0x00]); // scope, deref
    b.extend([0x02, 0x01, 0x00, 0x02, 0x01, 0x00]); // size, time
    b.extend([0x01, 0x01, 0x00]); // typesOnly
    b.extend_from_slice(filter);
    b.extend([0x30, 0x00]); // attributes
    b
}

/// An LDAPMessage with raw message ID content octets.
fn message(id: &[u8], op: &[u8]) -> Vec<u8> {
    let mut body = tlv(0x02, id);
    body.extend_from_slice(op);
    tlv(0x30, &body)
}

fn present_oc() -> Vec<u8> {
    tlv(0x87, b"objectClass")
}

fn valid_search(id: u8) -> Vec<u8> {
    message(&[id], &tlv(0x63, &search_body(DEMOCORP, &present_oc())))
}

/// `controls [0]` holding a critical control of each OID (raw bytes).
fn controls(oids: &[&[u8]]) -> Vec<u8> {
    let each: Vec<u8> = oids
        .iter()
        .flat_map(|o| tlv(0x30, &[&tlv(0x04, o)[..], &[0x01, 0x01, 0xff]].concat()))
        .collect();
    tlv(0xa0, &each)
}

/// A valid search as message 1 with `after` after its protocolOp.
fn with_after_op(after: &[u8]) -> Vec<u8> {
    let mut body = tlv(0x02, &[1]);
    body.extend(tlv(0x63, &search_body(DEMOCORP, &present_oc())));
    body.extend_from_slice(after);
    tlv(0x30, &body)
}

struct Case {
    name: &'static str,
    cfg: fn(&mut Config),
    bytes: Vec<u8>,
    /// Close our write side after sending.
    half_close: bool,
}

fn defaults(_: &mut Config) {}

fn cases() -> Vec<Case> {
    let case = |name, bytes| Case {
        name,
        cfg: defaults,
        bytes,
        half_close: false,
    };
    let mut huge_base = String::from("cn=");
    huge_base.push_str(&"x".repeat(2000));
    huge_base.push_str(",o=DEMOCORP,c=AU");
    let search = valid_search(1);
    vec![
        case(
            "garbage bytes",
            b"\x00\xff\x13\x37 this is not LDAP at all \xde\xad\xbe\xef".to_vec(),
        ),
        case(
            "an HTTP request",
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        ),
        case(
            "first tag SET (0x31), not SEQUENCE",
            vec![0x31, 0x05, 0x02, 0x01, 0x01, 0x42, 0x00],
        ),
        case(
            "first tag OCTET STRING (0x04)",
            vec![0x04, 0x03, b'a', b'b', b'c'],
        ),
        case(
            "indefinite length 0x30 0x80",
            vec![0x30, 0x80, 0x02, 0x01, 0x01, 0x42, 0x00, 0x00, 0x00],
        ),
        case(
            "length claiming 2 GiB",
            vec![0x30, 0x84, 0x80, 0x00, 0x00, 0x00, 0x02, 0x01, 0x01, 0x63],
        ),
        case(
            "length claiming 2 GiB - 1",
            vec![0x30, 0x84, 0x7f, 0xff, 0xff, 0xff, 0x02, 0x01, 0x01, 0x63],
        ),
        case(
            "length of 5 length octets",
            vec![0x30, 0x85, 0x00, 0x00, 0x00, 0x00, 0x05, 0x02, 0x01, 0x01],
        ),
        Case {
            name: "request PDU larger than max_request_pdu (1024)",
            cfg: |c| c.max_request_pdu = 1024,
            bytes: message(&[1], &tlv(0x63, &search_body(&huge_base, &present_oc()))),
            half_close: false,
        },
        case(
            "filter nested 10,000 levels deep",
            message(
                &[1],
                &tlv(
                    0x63,
                    &search_body(DEMOCORP, &nest(0xa0, 10_000, &present_oc())),
                ),
            ),
        ),
        case(
            "SEQUENCE nested 10,000 levels deep",
            nest(0x30, 10_000, &[0x02, 0x01, 0x01, 0x42, 0x00]),
        ),
        case(
            "protocolOp nested 10,000 levels deep",
            message(&[1], &nest(0x63, 10_000, &[0x04, 0x00])),
        ),
        case(
            "message ID -1 (search)",
            message(&[0xff], &tlv(0x63, &search_body(DEMOCORP, &present_oc()))),
        ),
        case(
            "message ID -1 (unbind)",
            vec![0x30, 0x05, 0x02, 0x01, 0xff, 0x42, 0x00],
        ),
        case(
            "message ID of 5 octets",
            message(
                &[0x01, 0x00, 0x00, 0x00, 0x00],
                &tlv(0x63, &search_body(DEMOCORP, &present_oc())),
            ),
        ),
        case(
            "empty message ID",
            message(&[], &tlv(0x63, &search_body(DEMOCORP, &present_oc()))),
        ),
        case(
            "search whose protocolOp overruns the PDU",
            vec![0x30, 0x07, 0x02, 0x01, 0x01, 0x63, 0x05, 0x04, 0x00],
        ),
        case(
            "search with only a base DN",
            message(&[1], &tlv(0x63, &tlv(0x04, DEMOCORP.as_bytes()))),
        ),
        case(
            "bind request without credentials",
            message(&[1], &tlv(0x60, &[0x02, 0x01, 0x03, 0x04, 0x00])),
        ),
        case(
            "unknown application tag [30] primitive",
            message(&[1], &[0x5e, 0x00]),
        ),
        case(
            "unknown application tag [25] constructed",
            message(&[1], &tlv(0x79, &[0x04, 0x00])),
        ),
        case(
            "a response PDU (BindResponse) from a client",
            message(
                &[1],
                &tlv(0x61, &[0x0a, 0x01, 0x00, 0x04, 0x00, 0x04, 0x00]),
            ),
        ),
        case("no protocolOp", message(&[1], &[])),
        case(
            "control OID of proxied authorization with a trailing NUL",
            with_after_op(&controls(&[b"2.16.840.1.113730.3.4.18\0"])),
        ),
        case(
            "control OID that is a name",
            with_after_op(&controls(&[b"manageDsaIT"])),
        ),
        case(
            "a second controls element",
            with_after_op(&[controls(&[b"1.2.3"]), controls(&[b"1.2.3"])].concat()),
        ),
        Case {
            name: "half a search, then the client half-closes",
            cfg: defaults,
            bytes: search[..search.len() / 2].to_vec(),
            half_close: true,
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_input_gets_a_notice_or_a_close() {
    let mut report = Vec::new();
    for c in cases() {
        let h = Builder::default().cfg(c.cfg).start().await;
        let mut raw = Raw::connect(h.addr).await;
        // A write may fail if the router has already closed: fine.
        let wrote = raw.send(&c.bytes).await;
        if c.half_close {
            use tokio::io::AsyncWriteExt;
            let _ = raw.wr.shutdown().await;
        }
        let (end, at) = expect_disconnect(&mut raw, Duration::from_secs(5), c.name).await;
        if let End::Notice { code, closed, .. } = &end {
            assert!(closed, "{}: connection left open after the notice", c.name);
            assert_ne!(*code, LdapResultCode::Success, "{}", c.name);
        }
        report.push(format!(
            "{:<50} {} bytes{} -> {end:?} after {at:?}",
            c.name,
            c.bytes.len(),
            if wrote.is_err() {
                " (write failed)"
            } else {
                ""
            }
        ));
        assert_serves(h.addr, c.name).await;
        assert!(h.serving(), "{}: the accept loop ended", c.name);
    }
    for r in report {
        println!("{r}");
    }
}

/// The other attacks above, all at once on one router, then a fresh client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_malformed_clients_at_once() {
    let h = Builder::default()
        .cfg(|c| c.max_request_pdu = 1024)
        .start()
        .await;
    let mut tasks = Vec::new();
    for c in cases() {
        let addr = h.addr;
        tasks.push(tokio::spawn(async move {
            let mut raw = Raw::connect(addr).await;
            let _ = raw.send(&c.bytes).await;
            if c.half_close {
                use tokio::io::AsyncWriteExt;
                let _ = raw.wr.shutdown().await;
            }
            expect_disconnect(&mut raw, Duration::from_secs(5), c.name).await;
        }));
    }
    for t in tasks {
        within("malformed client", t).await.unwrap();
    }
    assert_serves(h.addr, "after concurrent malformed clients").await;
}

/// A client that sends half a PDU and stops is disconnected after
/// `pdu_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_half_pdu_is_disconnected() {
    let h = Builder::default()
        .cfg(|c| c.pdu_timeout = Duration::from_secs(1))
        .start()
        .await;
    let pdu = valid_search(1);
    let mut raw = Raw::connect(h.addr).await;
    raw.send(&pdu[..pdu.len() / 2]).await.unwrap();
    let (end, at) = expect_disconnect(&mut raw, Duration::from_secs(5), "slowloris").await;
    println!("half a PDU: {end:?} after {at:?}");
    assert!(
        at >= Duration::from_millis(800),
        "disconnected before pdu_timeout: {at:?}"
    );
    assert!(at < Duration::from_secs(4), "pdu_timeout 1 s took {at:?}");
    assert_serves(h.addr, "after slowloris").await;
}

/// A client that trickles a PDU one byte at a time, each byte within
/// `pdu_timeout` of the last, still leaves the PDU incomplete far longer
/// than `pdu_timeout` ("Close a client that leaves a PDU incomplete this
/// long").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_trickle_is_disconnected() {
    let h = Builder::default()
        .cfg(|c| c.pdu_timeout = Duration::from_secs(1))
        .start()
        .await;
    // A long PDU, so that trickling it takes well over pdu_timeout.
    let pdu = message(
        &[1],
        &tlv(
            0x63,
            &search_body(&format!("cn={},{DEMOCORP}", "y".repeat(60)), &present_oc()),
        ),
    );
    let mut raw = Raw::connect(h.addr).await;
    let t0 = Instant::now();
    let mut sent = 0;
    let mut closed_at = None;
    for &b in &pdu[..pdu.len() - 1] {
        if raw.send(&[b]).await.is_err() {
            closed_at = Some(t0.elapsed());
            break;
        }
        sent += 1;
        // Anything from the router (a notice, a close) ends the trickle.
        match raw.recv(Duration::from_millis(300)).await {
            Recv::Timeout => {}
            other => {
                closed_at = Some(t0.elapsed());
                println!("router ended the trickle after {sent} bytes: {other:?}");
                break;
            }
        }
        if t0.elapsed() > Duration::from_secs(6) {
            break;
        }
    }
    println!(
        "trickled {sent} of {} bytes over {:?}; disconnected: {closed_at:?}",
        pdu.len(),
        t0.elapsed()
    );
    let at = closed_at.unwrap_or_else(|| {
        panic!(
            "still connected after {:?} with an incomplete PDU (pdu_timeout 1 s)",
            t0.elapsed()
        )
    });
    assert!(
        at < Duration::from_secs(3),
        "disconnected only after {at:?}"
    );
    assert_serves(h.addr, "after trickle").await;
}

/// Search on `raw` and expect success.
async fn search_ok(raw: &mut Raw, id: i32, what: &str) {
    raw.send(&base_search(id, &format!("cn=served-by,{DEMOCORP}")))
        .await
        .unwrap();
    loop {
        let m = raw.msg(what).await;
        assert_eq!(m.msgid, id, "{what}: {m:?}");
        if let LdapOp::SearchResultDone(r) = &m.op {
            assert_eq!(r.code, LdapResultCode::Success, "{what}: {r:?}");
            return;
        }
    }
}

/// Past `max_clients`, a new connection gets a Notice of Disconnection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_max_clients_get_a_notice() {
    const MAX: usize = 3;
    let h = Builder::default()
        .cfg(|c| c.max_clients = MAX)
        .start()
        .await;
    let mut clients = Vec::new();
    for i in 0..MAX {
        let mut c = Raw::connect(h.addr).await;
        search_ok(&mut c, 1, &format!("client {i}")).await;
        clients.push(c);
    }
    for extra in 0..2 {
        let mut c = Raw::connect(h.addr).await;
        let (end, at) = expect_disconnect(&mut c, Duration::from_secs(5), "extra client").await;
        println!(
            "client {} of max {MAX}: {end:?} after {at:?}",
            MAX + 1 + extra
        );
        match end {
            End::Notice { code, closed, .. } => {
                assert_ne!(code, LdapResultCode::Success);
                assert!(closed, "closed after the notice");
            }
            other => panic!("extra client: expected a Notice of Disconnection, got {other:?}"),
        }
    }
    // The admitted clients are unaffected.
    for (i, c) in clients.iter_mut().enumerate() {
        search_ok(c, 2, &format!("client {i} again")).await;
    }
    // One leaves; its slot is freed (asynchronously: retry briefly).
    let mut gone = clients.pop().unwrap();
    gone.send(&[0x30, 0x05, 0x02, 0x01, 0x03, 0x42, 0x00])
        .await
        .unwrap();
    assert!(matches!(
        gone.recv(WAIT).await,
        Recv::Closed | Recv::Error(_)
    ));
    let t0 = Instant::now();
    loop {
        let mut c = Raw::connect(h.addr).await;
        c.send(&base_search(1, &format!("cn=served-by,{DEMOCORP}")))
            .await
            .unwrap();
        match c.recv(WAIT).await {
            Recv::Msg(m) if notice(&m).is_some() && t0.elapsed() < WAIT => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Recv::Msg(m) if m.msgid == 1 => break,
            other => panic!("fresh client after a slot was freed: {other:?}"),
        }
    }
    println!("slot freed after {:?}", t0.elapsed());
}

/// Past `max_outstanding`, further operations get busy (51).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_over_max_outstanding_get_busy() {
    const MAX: usize = 4;
    const SENT: i32 = 12;
    let h = Builder::default()
        .cfg(|c| c.max_outstanding = MAX)
        .start()
        .await;
    for n in ["D1", "H1"] {
        h.dsa(n).faults.set_delay(Duration::from_millis(700));
    }
    let mut raw = Raw::connect(h.addr).await;
    let mut bytes = Vec::new();
    for id in 1..=SENT {
        bytes.extend(base_search(id, &format!("cn=served-by,{DEMOCORP}")));
    }
    raw.send(&bytes).await.unwrap();
    let mut finals = BTreeMap::new();
    while finals.len() < SENT as usize {
        let m = raw.msg("pipelined searches").await;
        if let Some((code, text)) = final_result(&m) {
            assert!(
                finals.insert(m.msgid, (code, text)).is_none(),
                "two final responses for {}",
                m.msgid
            );
        }
    }
    let busy: Vec<i32> = finals
        .iter()
        .filter(|(_, (c, _))| *c == LdapResultCode::Busy)
        .map(|(id, _)| *id)
        .collect();
    let ok: Vec<i32> = finals
        .iter()
        .filter(|(_, (c, _))| *c == LdapResultCode::Success)
        .map(|(id, _)| *id)
        .collect();
    println!("max_outstanding {MAX}: success {ok:?}, busy {busy:?}");
    assert_eq!(ok, (1..=MAX as i32).collect::<Vec<_>>(), "{finals:?}");
    assert_eq!(
        busy,
        ((MAX as i32 + 1)..=SENT).collect::<Vec<_>>(),
        "{finals:?}"
    );
    // The connection is usable again once the operations are done.
    for n in ["D1", "H1"] {
        h.dsa(n).faults.set_delay(Duration::ZERO);
    }
    search_ok(&mut raw, 100, "after busy").await;
    assert_serves(h.addr, "after busy").await;
}

/// A filter nested just within the decoder's limit still works; the
/// nesting limit is not hit by ordinary requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moderately_nested_filter_is_served() {
    let h = Builder::default().start().await;
    let mut raw = Raw::connect(h.addr).await;
    let mut f = LdapFilter::Present("objectClass".into());
    for _ in 0..10 {
        f = LdapFilter::And(vec![f]);
    }
    raw.send(&encode(search_msg(
        7,
        &format!("cn=served-by,{DEMOCORP}"),
        LdapSearchScope::Base,
        f,
        &["description"],
    )))
    .await
    .unwrap();
    loop {
        let m = raw.msg("nested filter").await;
        assert_eq!(m.msgid, 7, "{m:?}");
        if let LdapOp::SearchResultDone(r) = &m.op {
            assert_eq!(r.code, LdapResultCode::Success, "{r:?}");
            break;
        }
    }
}

/// Requests whose operation decodes far enough to be routed but whose body
/// is malformed deeper down (a truncated attribute value assertion or
/// filter). Whatever the router does with them, they must not disturb
/// other clients' operations on the shared upstream connection, nor the
/// DSA's availability for everyone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_inner_fields_do_not_disturb_other_clients() {
    let bad_compare = message(
        &[1],
        &tlv(0x6e, &{
            let mut b = tlv(0x04, format!("cn=served-by,{DEMOCORP}").as_bytes());
            b.extend([0x30, 0x04, 0x04, 0x02, b'c', b'n']); // AVA without a value
            b
        }),
    );
    let bad_filter = message(
        &[1],
        &tlv(
            0x63,
            &search_body(DEMOCORP, &[0xa3, 0x04, 0x04, 0x02, b'c', b'n']), // equality without a value
        ),
    );
    let mut failures = Vec::new();
    for (name, bytes) in [
        ("compare with a truncated assertion", bad_compare),
        ("search with a truncated equality filter", bad_filter),
    ] {
        // One DEMOCORP DSA, slow enough that the other client's search is
        // in flight on the shared connection when the bad request arrives.
        let h = Builder::default().democorp(&["D1"]).start().await;
        h.dsa("D1").faults.set_delay(Duration::from_millis(300));
        let mut other = Raw::connect(h.addr).await;
        other
            .send(&base_search(9, &format!("cn=served-by,{DEMOCORP}")))
            .await
            .unwrap();
        let mut bad = Raw::connect(h.addr).await;
        bad.send(&bytes).await.unwrap();
        let outcome = match bad.recv(WAIT).await {
            Recv::Msg(m) => format!("{:?}", notice(&m).or_else(|| final_result(&m))),
            other => format!("{other:?}"),
        };
        let mut other_result = None;
        while other_result.is_none() {
            let m = other.msg(name).await;
            other_result = final_result(&m);
        }
        h.dsa("D1").faults.set_delay(Duration::ZERO);
        let mut fresh = Vec::new();
        for i in 0..3 {
            let mut c = Raw::connect(h.addr).await;
            c.send(&base_search(1, &format!("cn=served-by,{DEMOCORP}")))
                .await
                .unwrap();
            let r = loop {
                let m = c.msg(name).await;
                if let Some(r) = final_result(&m) {
                    break r;
                }
            };
            fresh.push(format!("fresh client {i}: {r:?}"));
            if r.0 != LdapResultCode::Success {
                failures.push(format!("{name}: fresh client {i} got {r:?}"));
            }
        }
        // How long until the partition serves again.
        let t0 = Instant::now();
        let recovered = loop {
            let mut c = Raw::connect(h.addr).await;
            c.send(&base_search(1, &format!("cn=served-by,{DEMOCORP}")))
                .await
                .unwrap();
            let r = loop {
                let m = c.msg(name).await;
                if let Some(r) = final_result(&m) {
                    break r;
                }
            };
            if r.0 == LdapResultCode::Success || t0.elapsed() > Duration::from_secs(20) {
                break r.0 == LdapResultCode::Success;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        println!("{name}: bad client got {outcome}; other client's in-flight search got {other_result:?}; {fresh:?}; partition serving again: {recovered} after {:?}", t0.elapsed());
        let (code, text) = other_result.unwrap();
        if code != LdapResultCode::Success {
            failures.push(format!(
                "{name}: another client's in-flight search got {code:?} ({text})"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
