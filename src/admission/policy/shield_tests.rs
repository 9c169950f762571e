#![allow(clippy::unwrap_used)]

use super::*;

/// (control OID, value), allowed.
type ControlCase = ((&'static str, Option<Vec<u8>>), bool);

#[test]
fn the_merge_is_complete_when_every_expected_dsa_was_read_whole() {
    let s = Schemas::default();
    assert!(!s.current().complete, "nothing read yet");
    assert!(s.due("D1"));
    s.expect(&["D1".into(), "D2".into()]);
    let t = vec![AttrType {
        oid: "2.5.4.4".into(),
        names: vec!["sn".into()],
        sup: None,
    }];
    s.set("D1", Some((t.clone(), true)));
    assert!(!s.current().complete, "D2 unread");
    assert!(!s.due("D1") && s.due("D2"));
    s.refresh();
    assert!(s.due("D1"), "a reload reads every schema again");
    assert!(s.current().knows("sn"));
    s.set("D2", Some((Vec::new(), false)));
    assert!(!s.current().complete, "D2 read in part");
    s.set("D2", Some((Vec::new(), true)));
    assert!(s.current().complete);
    let before = s.current();
    s.set("D2", Some((Vec::new(), true)));
    assert!(
        Arc::ptr_eq(&before, &s.current()),
        "unchanged: not made again"
    );
    s.expect(&["D1".into(), "D3".into()]);
    assert!(!s.current().complete, "D3 new, unread");
    assert!(s.set("D3", None), "a first failure is news (logged)");
    assert!(!s.set("D3", None), "the same failure again is not");
    assert!(!s.current().complete, "D3 unreadable");
    s.expect(&["D1".into()]);
    assert!(s.current().complete);
    assert_eq!(s.summary().len(), 1);
}

fn schema(complete: bool) -> Arc<Schema> {
    let types = [
        "( 2.5.4.41 NAME 'name' )",
        "( 2.5.4.3 NAME ( 'cn' 'commonName' ) SUP name )",
        "( 2.5.4.4 NAME ( 'sn' 'surname' ) SUP name )",
        "( 0.9.2342.19200300.100.1.3 NAME ( 'mail' 'rfc822Mailbox' ) )",
        "( 0.9.2342.19200300.100.1.1 NAME ( 'uid' 'userid' ) )",
    ];
    Arc::new(Schema::new(
        types
            .iter()
            .map(|t| super::super::schema::parse(t).unwrap())
            .collect(),
        complete,
    ))
}

fn hiding(hide: &[&str], complete: bool) -> (Rule, Shield) {
    let schema = schema(complete);
    let rule = Rule {
        name: "r".into(),
        hide: hide
            .iter()
            .map(|h| h.to_string())
            .collect::<Vec<_>>()
            .into(),
        ..Rule::default()
    };
    let sh = Shield::of(&rule, &schema).unwrap();
    (rule, sh)
}

fn el(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![tag, body.len() as u8];
    v.extend_from_slice(body);
    v
}

#[test]
fn filters_and_controls_are_checked_by_the_names_they_use() {
    let (rule, sh) = hiding(&["mail", "sn"], true);
    let names = |a: &[&str], typeless| Names {
        attrs: a.iter().map(|x| x.to_string()).collect(),
        typeless,
    };
    // (names, allowed)
    let cases: [(Names, bool); 9] = [
        (names(&["uid", "cn", "objectClass"], false), true),
        (names(&["uid", "rfc822Mailbox"], false), false),
        (names(&["0.9.2342.19200300.100.1.3"], false), false),
        (names(&["SURNAME;lang-en"], false), false),
        (names(&["2.5.4.4"], false), false),
        (names(&["name"], false), false),
        (names(&["2.5.4.41"], false), false),
        (names(&["uid"], true), false),
        (names(&[], false), true),
    ];
    for (n, ok) in cases {
        let got = sh.check_names(&rule, &n, "search");
        assert_eq!(got.is_ok(), ok, "{n:?}: {got:?}");
        if let Err(r) = got {
            assert_eq!(r.code, UNWILLING);
            assert!(r.message.contains("policy rule \"r\""), "{}", r.message);
        }
    }
    let assertion = |f: Vec<u8>| (controls::OID_ASSERTION, Some(f));
    let eq = |a: &str| el(0xa3, &[el(0x04, a.as_bytes()), el(0x04, b"v")].concat());
    let list = |a: &[&str]| {
        el(
            0x30,
            &a.iter()
                .flat_map(|x| el(0x04, x.as_bytes()))
                .collect::<Vec<_>>(),
        )
    };
    let cases: Vec<ControlCase> = vec![
        (assertion(eq("uid")), true),
        (assertion(eq("rfc822mailbox")), false),
        (assertion(el(0xa9, &el(0x83, b"v"))), false),
        (
            (
                controls::OID_SORT,
                Some(el(0x30, &el(0x30, &el(0x04, b"cn")))),
            ),
            true,
        ),
        (
            (
                controls::OID_SORT,
                Some(el(0x30, &el(0x30, &el(0x04, b"surname")))),
            ),
            false,
        ),
        ((controls::OID_PRE_READ, Some(list(&["cn", "uid"]))), true),
        ((controls::OID_PRE_READ, Some(list(&["cn", "mail"]))), false),
        ((controls::OID_POST_READ, Some(list(&["*"]))), false),
        ((controls::OID_POST_READ, Some(list(&[]))), false),
        (
            (controls::OID_MATCHED_VALUES, Some(el(0x30, &eq("name")))),
            false,
        ),
        (
            (crate::proto::wire::request::OID_PAGED_RESULTS, Some(vec![])),
            true,
        ),
        (("1.2.3.4", None), false),
    ];
    for ((oid, v), ok) in cases {
        let got = sh.check_control(&rule, oid, v.as_deref());
        assert_eq!(got.is_ok(), ok, "{oid} {v:02x?}: {got:?}");
    }
    // Nothing hidden: nothing checked (subtrees alone).
    let open = Rule {
        subtrees: vec![Dn::parse_ldap("o=x").unwrap()],
        ..Rule::default()
    };
    let osh = Shield::of(&open, &Arc::new(Schema::default())).unwrap();
    assert!(osh.check_control(&open, "1.2.3.4", None).is_ok());
    assert!(osh
        .check_names(&open, &names(&["x"], true), "search")
        .is_ok());
}

#[test]
fn refused_filters_are_refused_by_every_name() {
    let rule = Rule {
        name: "r".into(),
        refuse_filters_on: vec!["mail".into(), "sn".into()],
        ..Rule::default()
    };
    let sh = Shield::of(&rule, &schema(true)).unwrap();
    for (a, ok) in [
        ("rfc822Mailbox", false),
        ("0.9.2342.19200300.100.1.3", false),
        ("surname;lang-en", false),
        ("name", false),
        ("uid", true),
        ("unknownToTheSchema", true),
    ] {
        assert_eq!(sh.check_refused(&rule, a).is_ok(), ok, "{a}");
    }
    assert!(!sh.hidden.any(), "nothing hidden: no control checked");
}

#[test]
fn an_unread_schema_refuses_unknown_names() {
    let (rule, sh) = hiding(&["mail"], false);
    let n = |a: &str| Names {
        attrs: vec![a.to_string()],
        typeless: false,
    };
    assert!(sh.check_names(&rule, &n("uid"), "search").is_ok());
    let e = sh.check_names(&rule, &n("email"), "search").unwrap_err();
    assert!(e.message.contains("not in the schema"), "{}", e.message);
}

#[test]
fn a_modify_dn_lands_within_the_subtrees_or_is_refused() {
    let rule = Rule {
        name: "r".into(),
        subtrees: vec![Dn::parse_ldap("ou=people,o=x").unwrap()],
        ..Rule::default()
    };
    let moddn = |dn: &str, rdn: &str, sup: Option<&str>| {
        let mut op = [
            el(0x04, dn.as_bytes()),
            el(0x04, rdn.as_bytes()),
            el(0x01, &[0xff]),
        ]
        .concat();
        if let Some(s) = sup {
            op.extend(el(0x80, s.as_bytes()));
        }
        let msg = el(0x30, &[el(0x02, &[5]), el(0x6c, &op)].concat());
        let h = crate::proto::wire::frame::header(&msg).unwrap();
        let d = Dn::parse_ldap(dn).unwrap();
        rule.check_moved(super::super::wire::moddn_new_dn(&d, &msg, &h).as_ref())
    };
    let cases = [
        ("uid=a,ou=people,o=x", "uid=b", None, Ok(())),
        (
            "uid=a,ou=people,o=x",
            "uid=a",
            Some("ou=sub,ou=people,o=x"),
            Ok(()),
        ),
        (
            "uid=a,ou=people,o=x",
            "uid=a",
            Some("ou=moved,o=x"),
            Err(50),
        ),
        ("uid=a,ou=people,o=x", "uid=a", Some("o=x"), Err(50)),
        // The subtree's own entry renamed: it lands outside itself.
        ("ou=people,o=x", "ou=staff", None, Err(50)),
        ("uid=a,ou=people,o=x", "uid=a", Some("not a dn"), Err(53)),
        ("uid=a,ou=people,o=x", "uid=a,ou=x", None, Err(53)),
    ];
    for (dn, rdn, sup, want) in cases {
        let got = moddn(dn, rdn, sup).map_err(|r| r.code);
        assert_eq!(got, want, "{dn} -> {rdn} under {sup:?}");
    }
    assert!(Rule::default().check_moved(None).is_ok(), "no subtrees");
}

#[test]
fn entries_outside_the_subtrees_are_not_admitted() {
    let rule = Rule {
        subtrees: vec![Dn::parse_ldap("ou=people,o=x").unwrap()],
        ..Rule::default()
    };
    let sh = Shield::of(&rule, &Arc::new(Schema::default())).unwrap();
    let cases: [(&[u8], bool); 6] = [
        (b"ou=people,o=x", true),
        (b"uid=a,OU=People,O=X", true),
        (b"uid=a,ou=staff,o=x", false),
        (b"o=x", false),
        (b"", false),
        (b"uid=a,ou=people,o=x,,", false),
    ];
    for (dn, want) in cases {
        assert_eq!(sh.admits(dn), want, "{}", String::from_utf8_lossy(dn));
    }
    assert!(Shield::of(&Rule::default(), &Arc::new(Schema::default())).is_none());
}
