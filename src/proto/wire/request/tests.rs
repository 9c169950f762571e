//! Tests of the request decoder: what client libraries encode, damaged
//! input, controls, nesting.

use super::*;
use ldap3_proto::proto::{
    LdapAddRequest, LdapAttribute, LdapCompareRequest, LdapDerefAliases, LdapFilter, LdapMsg,
    LdapOp, LdapSearchRequest, LdapSearchScope,
};
use proptest::prelude::*;

fn encode(msg: LdapMsg) -> Vec<u8> {
    let tag: lber::structure::StructureTag = msg.into();
    let mut b = bytes::BytesMut::new();
    lber::write::encode_into(&mut b, tag).expect("encodes");
    b.to_vec()
}

fn filter() -> impl Strategy<Value = LdapFilter> {
    let leaf = prop_oneof![
        ("[a-z]{1,6}", "[a-z0-9]{0,6}").prop_map(|(a, v)| LdapFilter::Equality(a, v)),
        "[a-z]{1,6}".prop_map(LdapFilter::Present),
        ("[a-z]{1,6}", "[a-z0-9]{0,6}").prop_map(|(a, v)| LdapFilter::GreaterOrEqual(a, v)),
    ];
    leaf.prop_recursive(4, 16, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 1..3).prop_map(LdapFilter::And),
            prop::collection::vec(inner.clone(), 1..3).prop_map(LdapFilter::Or),
            inner.prop_map(|f| LdapFilter::Not(Box::new(f))),
        ]
    })
}

/// A request as a real client library encodes it, and what the router
/// must read from it.
fn request() -> impl Strategy<Value = (Vec<u8>, i32, &'static str, String, u8)> {
    let dn = "(cn=[a-z]{1,8},)?(o=[A-Z]{1,6},)?c=[A-Z]{2}|";
    (1i32..i32::MAX, dn, 0u8..3, filter(), 0u8..3).prop_map(|(msgid, dn, scope, f, kind)| {
        let (op, name) = match kind {
            0 => (
                LdapOp::SearchRequest(LdapSearchRequest {
                    base: dn.clone(),
                    scope: match scope {
                        0 => LdapSearchScope::Base,
                        1 => LdapSearchScope::OneLevel,
                        _ => LdapSearchScope::Subtree,
                    },
                    aliases: LdapDerefAliases::Never,
                    sizelimit: 0,
                    timelimit: 0,
                    typesonly: false,
                    filter: f,
                    attrs: vec!["cn".into(), "+".into()],
                }),
                "search",
            ),
            1 => (
                LdapOp::CompareRequest(LdapCompareRequest {
                    dn: dn.clone(),
                    atype: "cn".into(),
                    val: b"x".to_vec(),
                }),
                "compare",
            ),
            _ => (
                LdapOp::AddRequest(LdapAddRequest {
                    dn: dn.clone(),
                    attributes: vec![LdapAttribute {
                        atype: "objectClass".into(),
                        vals: vec![b"top".to_vec()],
                    }],
                }),
                "add",
            ),
        };
        let pdu = encode(LdapMsg {
            msgid,
            op,
            ctrl: vec![],
        });
        (pdu, msgid, name, dn, scope)
    })
}

proptest! {
    /// Requests encoded by another implementation decode to what they
    /// say.
    #[test]
    fn decodes_what_a_client_library_encodes((pdu, msgid, name, dn, scope) in request()) {
        let r = decode(&pdu).expect("a valid request decodes");
        prop_assert_eq!(r.msgid, msgid);
        prop_assert_eq!(r.op.name(), name);
        match &r.op {
            Op::Search { base, scope: s, .. } => {
                prop_assert_eq!(base, &dn);
                prop_assert_eq!(*s, scope);
            }
            Op::Compare { dn: d } | Op::Add { dn: d } => prop_assert_eq!(d, &dn),
            other => prop_assert!(false, "unexpected {:?}", other),
        }
    }

    /// Any byte changed or cut: no panic, and whatever is accepted is
    /// well-formed BER by another parser too.
    #[test]
    fn damaged_requests_never_panic_and_accepted_ones_parse(
        (pdu, ..) in request(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bad = pdu.clone();
        let i = at.index(bad.len());
        bad[i] = byte;
        bad.truncate(cut.index(bad.len()) + 1);
        if decode(&bad).is_ok() {
            let parsed = lber::parse::Parser::new(MAX_DEPTH).parse(&bad);
            prop_assert!(parsed.is_ok_and(|(rest, _)| rest.is_empty()));
        }
    }
}

/// `tag` around `body` (short or long form length).
fn tlv(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![tag];
    let mut b = bytes::BytesMut::new();
    crate::proto::wire::ber::put_len(&mut b, body.len());
    v.extend_from_slice(&b);
    v.extend_from_slice(body);
    v
}

/// A delete of `o=x` as message 1, with `after` following the op.
fn delete_with(after: &[u8]) -> Vec<u8> {
    let mut body = vec![0x02, 0x01, 0x01];
    body.extend(tlv(0x4a, b"o=x"));
    body.extend_from_slice(after);
    tlv(0x30, &body)
}

fn control(oid: &[u8]) -> Vec<u8> {
    tlv(0x30, &[&tlv(0x04, oid)[..], &[0x01, 0x01, 0xff]].concat())
}

#[test]
fn numeric_oids_are_rfc_4512_numericoids() {
    for (oid, ok) in [
        ("2.16.840.1.113730.3.4.18", true),
        ("1.2.840.113556.1.4.319", true),
        ("0.0", true),
        ("1.0.3", true),
        ("2.16.840.1.113730.3.4.18\0", false),
        ("\u{0}2.16.840.1.113730.3.4.18", false),
        ("2.16.840.1.113730.3.4.18 ", false),
        (" 1.2", false),
        ("1", false),
        ("", false),
        ("1.", false),
        (".1.2", false),
        ("1..2", false),
        ("1.02.3", false),
        ("01.2", false),
        ("1.2.00", false),
        ("abc", false),
        ("cn", false),
        ("1.2.3a", false),
        ("1.2.-3", false),
        ("1.2.+3", false),
        ("１.２", false),
    ] {
        assert_eq!(is_numeric_oid(oid), ok, "{oid:?}");
    }
}

proptest! {
    /// Numbers joined by dots are OIDs exactly when there are two or
    /// more and none has a leading zero.
    #[test]
    fn dotted_numbers_are_oids_unless_a_leading_zero(parts in prop::collection::vec("0|[1-9][0-9]{0,5}|0[0-9]{1,3}", 1..6)) {
        let oid = parts.join(".");
        let want = parts.len() >= 2 && parts.iter().all(|p| p == "0" || !p.starts_with('0'));
        prop_assert_eq!(is_numeric_oid(&oid), want, "{:?}", oid);
    }

    /// Any character but a digit or a dot makes it not an OID.
    #[test]
    fn any_other_character_makes_it_not_an_oid(at in any::<prop::sample::Index>(), c in any::<char>().prop_filter("not a digit or dot", |c| !c.is_ascii_digit() && *c != '.')) {
        let mut oid: Vec<char> = "1.3.6.1.4.1.4203.1.11.3".chars().collect();
        oid.insert(at.index(oid.len() + 1), c);
        let oid: String = oid.into_iter().collect();
        prop_assert!(!is_numeric_oid(&oid), "{:?}", oid);
    }
}

#[test]
fn controls_must_have_numeric_oids_and_end_the_message() {
    let ctrls = |oids: &[&[u8]]| {
        tlv(
            0xa0,
            &oids.iter().map(|o| control(o)).collect::<Vec<_>>().concat(),
        )
    };
    let ok = |after: &[u8]| decode(&delete_with(after)).map(|r| r.controls.len());
    let bad = |after: &[u8]| {
        let e = decode(&delete_with(after)).expect_err("rejected");
        assert_eq!(e.msgid, Some(1), "{e:?}");
        e.message
    };
    assert_eq!(ok(&[]), Ok(0));
    assert_eq!(ok(&tlv(0xa0, &[])), Ok(0));
    assert_eq!(ok(&ctrls(&[OID_PROXIED_AUTHZ.as_bytes()])), Ok(1));
    assert_eq!(ok(&ctrls(&[b"1.2.3", b"0.9"])), Ok(2));
    for (what, after, why) in [
        (
            "proxied authorization OID with a trailing NUL",
            ctrls(&[b"2.16.840.1.113730.3.4.18\0"]),
            "control type is not a numeric OID",
        ),
        (
            "a name, not an OID",
            ctrls(&[b"abc"]),
            "control type is not a numeric OID",
        ),
        (
            "an empty OID",
            ctrls(&[b""]),
            "control type is not a numeric OID",
        ),
        (
            "a leading zero",
            ctrls(&[b"1.02.3"]),
            "control type is not a numeric OID",
        ),
        (
            "one component",
            ctrls(&[b"1"]),
            "control type is not a numeric OID",
        ),
        (
            "a bad OID after a good one",
            ctrls(&[b"1.2.3", b"1.2.3 "]),
            "control type is not a numeric OID",
        ),
        (
            "a second controls element",
            [ctrls(&[b"1.2.3"]), ctrls(&[OID_PROXIED_AUTHZ.as_bytes()])].concat(),
            "unexpected element after the controls",
        ),
        (
            "two empty controls elements",
            [tlv(0xa0, &[]), tlv(0xa0, &[])].concat(),
            "unexpected element after the controls",
        ),
        (
            "an OCTET STRING after the controls",
            [ctrls(&[b"1.2.3"]), tlv(0x04, b"x")].concat(),
            "unexpected element after the controls",
        ),
        (
            "a NULL after the controls",
            [ctrls(&[]), vec![0x05, 0x00]].concat(),
            "unexpected element after the controls",
        ),
        (
            "a NULL instead of controls",
            vec![0x05, 0x00],
            "unexpected element after protocolOp",
        ),
    ] {
        assert_eq!(bad(&after), why, "{what}");
    }
}

#[test]
fn decode_errors_are_protocol_errors() {
    let e = decode(&[0x30, 0x03, 0x02, 0x01, 0x01]).expect_err("no protocolOp");
    assert_eq!(e.msgid, Some(1));
    let e = crate::base::error::Error::from(e);
    assert_eq!(e.kind, crate::base::error::Kind::Protocol);
    assert_eq!(e.message(), "dsa-router: missing protocolOp");
}

#[test]
fn nesting_limit_and_lengths() {
    // A NOT nested past the limit inside a search filter.
    let mut f = LdapFilter::Present("cn".into());
    for _ in 0..MAX_DEPTH {
        f = LdapFilter::Not(Box::new(f));
    }
    let pdu = encode(LdapMsg {
        msgid: 1,
        op: LdapOp::SearchRequest(LdapSearchRequest {
            base: "c=AU".into(),
            scope: LdapSearchScope::Subtree,
            aliases: LdapDerefAliases::Never,
            sizelimit: 0,
            timelimit: 0,
            typesonly: false,
            filter: f,
            attrs: vec![],
        }),
        ctrl: vec![],
    });
    let e = decode(&pdu).expect_err("too deep");
    assert_eq!(e.message, "malformed BER or nesting too deep");
    // Indefinite length (forbidden in LDAP) and a length past the end.
    assert!(decode(&[0x30, 0x80, 0x02, 0x01, 0x01, 0x42, 0x00, 0x00, 0x00]).is_err());
    assert!(decode(&[0x30, 0x05, 0x02, 0x01, 0x01, 0x42, 0x05]).is_err());
    // A whole unbind request.
    let ok = decode(&[0x30, 0x05, 0x02, 0x01, 0x07, 0x42, 0x00]).expect("unbind");
    assert_eq!((ok.msgid, ok.op.name()), (7, "unbind"));
    // Root DSE attributes are kept; other searches' are not needed.
    let root = encode(LdapMsg {
        msgid: 2,
        op: LdapOp::SearchRequest(LdapSearchRequest {
            base: String::new(),
            scope: LdapSearchScope::Base,
            aliases: LdapDerefAliases::Never,
            sizelimit: 0,
            timelimit: 0,
            typesonly: false,
            filter: LdapFilter::Present("objectClass".into()),
            attrs: vec!["supportedControl".into()],
        }),
        ctrl: vec![],
    });
    let op = decode(&root).expect("root DSE search").op;
    let want = vec!["supportedControl".to_string()];
    assert!(
        matches!(&op, Op::Search { attrs, filter_is_present_oc: true, .. } if *attrs == want),
        "{op:?}"
    );
}

#[test]
fn extended_request_names_must_be_numeric_oids() {
    let ext = |name: &[u8]| {
        let mut body = tlv(0x02, &[1]);
        body.extend(tlv(0x77, &tlv(0x80, name)));
        tlv(0x30, &body)
    };
    let ok = decode(&ext(b"1.3.6.1.4.1.4203.1.11.1")).expect("Password Modify");
    assert!(matches!(ok.op, Op::Extended { ref oid, .. } if oid == "1.3.6.1.4.1.4203.1.11.1"));
    for name in [
        &b"1.3.6.1.4.1.4203.1.11.1\0"[..],
        b"1.3.6.1.4.1.1466.20037\0",
        b"startTLS",
        b"",
    ] {
        let e = decode(&ext(name)).expect_err("refused");
        assert_eq!(
            e.message, "extended request name is not a numeric OID",
            "{name:?}"
        );
    }
}
