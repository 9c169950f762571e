#![allow(clippy::unwrap_used)]

use super::*;

fn el(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![tag, body.len() as u8];
    v.extend_from_slice(body);
    v
}

fn ava(tag: u8, attr: &str, val: &str) -> Vec<u8> {
    el(
        tag,
        &[el(0x04, attr.as_bytes()), el(0x04, val.as_bytes())].concat(),
    )
}

fn names(attrs: &[&str], typeless: bool) -> Named {
    Named::Tests(Names {
        attrs: attrs.iter().map(|a| a.to_string()).collect(),
        typeless,
    })
}

fn list(items: &[&str]) -> Vec<u8> {
    let body: Vec<u8> = items.iter().flat_map(|i| el(0x04, i.as_bytes())).collect();
    el(0x30, &body)
}

#[test]
fn controls_name_what_they_test_or_return() {
    // (mail=user0001*) as an assertion: a substrings filter.
    let substr = el(
        0xa4,
        &[el(0x04, b"mail"), el(0x30, &el(0x80, b"user0001"))].concat(),
    );
    let typeless = el(
        0xa9,
        &[el(0x81, b"caseIgnoreIA5Match"), el(0x83, b"x@example.com")].concat(),
    );
    let and = el(0xa0, &[ava(0xa3, "cn", "x"), typeless.clone()].concat());
    let sort = el(
        0x30,
        &[
            el(0x30, &el(0x04, b"sn")),
            el(
                0x30,
                &[
                    el(0x04, b"cn"),
                    el(0x80, b"caseIgnoreOrderingMatch"),
                    el(0x81, &[0xff]),
                ]
                .concat(),
            ),
        ]
        .concat(),
    );
    let mv = el(
        0x30,
        &[ava(0xa3, "mail", "x"), el(0x87, b"surname")].concat(),
    );
    let cases: Vec<(&str, Option<Vec<u8>>, Named)> = vec![
        (OID_ASSERTION, Some(substr.clone()), names(&["mail"], false)),
        (OID_ASSERTION, Some(typeless.clone()), names(&[], true)),
        (OID_ASSERTION, Some(and), names(&["cn"], true)),
        (OID_ASSERTION, Some(vec![0xa4, 0x10]), Named::Unknown),
        (OID_ASSERTION, None, Named::Unknown),
        (
            OID_MATCHED_VALUES,
            Some(mv),
            names(&["mail", "surname"], false),
        ),
        (
            OID_MATCHED_VALUES,
            Some(el(0x30, &typeless)),
            names(&[], true),
        ),
        (OID_SORT, Some(sort), names(&["sn", "cn"], false)),
        (OID_SORT, Some(el(0x30, &el(0x31, b""))), Named::Unknown),
        (
            OID_PRE_READ,
            Some(list(&["mail"])),
            Named::Returns(Some(vec!["mail".into()])),
        ),
        (
            OID_POST_READ,
            Some(list(&["cn", "1.1"])),
            Named::Returns(Some(vec!["cn".into()])),
        ),
        (OID_PRE_READ, Some(list(&[])), Named::Returns(None)),
        (OID_PRE_READ, Some(list(&["cn", "*"])), Named::Returns(None)),
        (OID_POST_READ, Some(list(&["+"])), Named::Returns(None)),
        (
            OID_POST_READ,
            Some(list(&["@inetOrgPerson"])),
            Named::Returns(None),
        ),
        (
            OID_POST_READ,
            Some([list(&["cn"]), vec![0]].concat()),
            Named::Unknown,
        ),
        (OID_POST_READ, None, Named::Unknown),
        (
            crate::proto::wire::request::OID_PAGED_RESULTS,
            Some(vec![1]),
            Named::Nothing,
        ),
        ("2.16.840.1.113730.3.4.2", None, Named::Nothing),
        // The dereference control names attributes: not known, refused.
        (
            "1.3.6.1.4.1.4203.666.5.16",
            Some(list(&["member"])),
            Named::Unknown,
        ),
    ];
    for (oid, value, want) in cases {
        assert_eq!(named(oid, value.as_deref()), want, "{oid} {value:02x?}");
    }
    // Truncated anywhere: an answer, no panic.
    for n in 0..substr.len() {
        let _ = named(OID_ASSERTION, Some(&substr[..n]));
        let _ = named(OID_SORT, Some(&substr[..n]));
        let _ = named(OID_PRE_READ, Some(&substr[..n]));
        let _ = named(OID_MATCHED_VALUES, Some(&substr[..n]));
    }
}
