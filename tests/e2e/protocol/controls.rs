//! Requests whose controls slapd reads otherwise than the router, through
//! the router against real slapd: a control type with a trailing NUL (slapd
//! compares C strings), non-numeric control types, anything after the
//! controls element. The router disconnects such clients with
//! `protocolError` before anything reaches a DSA.
//!
//! Needs slapd and ldap-utils (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support;

use support::router::Router;
use support::slapd::{router_dn, user_dn, Slapd, SlapdConfig, ALICE_PW, ROUTER_PW};

const DEMOCORP: &str = "o=DEMOCORP,c=AU";

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// `pdu` (one LDAPMessage) with `after` appended inside its SEQUENCE.
fn with_after(pdu: &[u8], after: &[u8]) -> Vec<u8> {
    use support::inproc::tlv;
    let head = match pdu[1] {
        n if n < 0x80 => 2,
        n => 2 + usize::from(n & 0x7f),
    };
    tlv(0x30, &[&pdu[head..], after].concat())
}

/// `controls [0]` holding `(oid, critical, value)` controls, raw bytes.
fn controls(each: &[(&[u8], bool, Option<&str>)]) -> Vec<u8> {
    use support::inproc::tlv;
    let mut body = Vec::new();
    for (oid, critical, value) in each {
        let mut c = tlv(0x04, oid);
        c.extend([0x01, 0x01, if *critical { 0xff } else { 0x00 }]);
        if let Some(v) = value {
            c.extend(tlv(0x04, v.as_bytes()));
        }
        body.extend(tlv(0x30, &c));
    }
    tlv(0xa0, &body)
}

/// Bind as alice, then send `request` (message 2): what comes back, in
/// words (for the report), and how the connection ended.
async fn bound_then(addr: std::net::SocketAddr, request: &[u8]) -> (String, support::inproc::End) {
    use ldap3_proto::proto::{LdapBindCred, LdapBindRequest, LdapMsg, LdapOp};
    use std::time::Duration;
    use support::inproc::{encode, expect_disconnect, final_result, notice, End, Raw, Recv};
    let mut raw = Raw::connect(addr).await;
    let bind = encode(LdapMsg {
        msgid: 1,
        op: LdapOp::BindRequest(LdapBindRequest {
            version: 3,
            dn: user_dn(DEMOCORP, "alice"),
            cred: LdapBindCred::Simple(ALICE_PW.to_string()),
        }),
        ctrl: vec![],
    });
    raw.send(&bind).await.unwrap();
    let m = raw.msg("bind").await;
    assert_eq!(
        final_result(&m).map(|r| r.0),
        Some(ldap3_proto::proto::LdapResultCode::Success),
        "{m:?}"
    );
    raw.send(request).await.unwrap();
    let mut seen = Vec::new();
    loop {
        match raw.recv(Duration::from_secs(3)).await {
            Recv::Msg(m) if notice(&m).is_some() => {
                seen.push(format!("notice {:?}", notice(&m)));
                let (end, _) = expect_disconnect(&mut raw, Duration::from_secs(3), "after").await;
                let end = match (end, notice(&m)) {
                    (End::Closed | End::Error(_), Some((code, message))) => End::Notice {
                        code,
                        message,
                        closed: true,
                    },
                    (e, _) => e,
                };
                return (seen.join("; "), end);
            }
            Recv::Msg(m) => {
                seen.push(match final_result(&m) {
                    Some(r) => format!("result {r:?}"),
                    None => "entry".to_string(),
                });
                if final_result(&m).is_some() {
                    return (seen.join("; "), End::Error("still connected".into()));
                }
            }
            other => {
                seen.push(format!("{other:?}"));
                return (seen.join("; "), End::Closed);
            }
        }
    }
}

/// Controls slapd reads otherwise than a byte compare (an OID with a
/// trailing NUL is proxied authorization to it: it compares C strings),
/// non-numeric control OIDs, and anything after the controls element (a
/// second controls element the router would not have looked at): the
/// router answers a Notice of Disconnection with `protocolError` and
/// closes, as slapd does for controls it cannot decode (`decoding
/// controls error`); nothing reaches the DSA. slapd itself (2.5) takes
/// these requests: it is printed, not asserted. A request with an unknown
/// numeric control is served as before.
#[test]
fn controls_slapd_reads_otherwise_are_protocol_errors() {
    use ldap3_proto::proto::{LdapFilter, LdapResultCode, LdapSearchScope};
    use support::inproc::{encode, search_msg, End};
    let s = Slapd::start(SlapdConfig::seeded("CONTROLS", &[DEMOCORP]));
    let dir = tempfile::tempdir().unwrap();
    let router = Router::start(
        &support::slapd::one_dsa_knowledge(dir.path(), s.port, ROUTER_PW),
        dir.path(),
    );
    let addr = |url: &str| {
        url.trim_start_matches("ldap://")
            .trim_end_matches('/')
            .parse()
            .unwrap()
    };
    let search = encode(search_msg(
        2,
        &format!("ou=restricted,{DEMOCORP}"),
        LdapSearchScope::Subtree,
        LdapFilter::Present("objectClass".into()),
        &["cn"],
    ));
    let me = format!("dn:{}", router_dn(DEMOCORP));
    let proxy: &[u8] = b"2.16.840.1.113730.3.4.18";
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "proxied authorization OID with a trailing NUL, as the router",
            controls(&[(b"2.16.840.1.113730.3.4.18\0", true, Some(&me))]),
        ),
        (
            "control type that is a name",
            controls(&[(b"manageDsaIT", false, None)]),
        ),
        (
            "control type with a leading zero",
            controls(&[(b"1.3.6.1.4.1.4203.01.10.1", false, None)]),
        ),
        (
            "a second controls element, proxied authorization as the router",
            [
                controls(&[(b"1.2.3.4", false, None)]),
                controls(&[(proxy, true, Some(&me))]),
            ]
            .concat(),
        ),
        (
            "an OCTET STRING after the controls",
            [
                controls(&[(b"1.2.3.4", false, None)]),
                support::inproc::tlv(0x04, b"x"),
            ]
            .concat(),
        ),
    ];
    let rt = rt();
    for (what, after) in &cases {
        let request = with_after(&search, after);
        let (direct, _) = rt.block_on(bound_then(addr(&s.url), &request));
        let (via, end) = rt.block_on(bound_then(addr(&router.url), &request));
        println!("{what}:\n  slapd:  {direct}\n  router: {via}");
        match end {
            End::Notice {
                code: LdapResultCode::ProtocolError,
                message,
                closed: true,
            } => assert!(message.starts_with("dsa-router: "), "{what}: {message}"),
            other => {
                panic!("{what}: expected a protocolError notice and a close, got {other:?} ({via})")
            }
        }
    }
    // Well-formed: an unknown numeric control, not critical, after which
    // nothing follows, is passed to the DSA, which ignores it.
    let own = encode(search_msg(
        2,
        &user_dn(DEMOCORP, "alice"),
        LdapSearchScope::Base,
        LdapFilter::Present("objectClass".into()),
        &["cn"],
    ));
    let ok = with_after(&own, &controls(&[(b"1.2.3.4", false, None)]));
    let (via, end) = rt.block_on(bound_then(addr(&router.url), &ok));
    assert_eq!(via, "entry; result (Success, \"\")");
    assert!(matches!(end, End::Error(_)), "still connected: {end:?}");
    let log = router.log_text();
    assert!(
        log.contains("control type is not a numeric OID")
            && log.contains("unexpected element after the controls"),
        "{log}"
    );
}
