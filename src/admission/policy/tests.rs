#![allow(clippy::unwrap_used, clippy::panic)]

use super::rate::{Buckets, Limit, Meter, Over, Rates};
use super::rule::{Ask, Client, OpType};
use super::*;
use crate::proto::wire::frame;
use std::net::IpAddr;
use std::time::{Duration, Instant};

const FILE: &str = r#"
[[rule]]
name = "partners"
client = ["127.0.0.2/32", "10.1.0.0/16"]
allow = ["search"]
subtrees = ["ou=people,o=example"]
scopes = ["base", "one", "sub"]
size_limit = 50
hide = ["userPassword", "telephoneNumber"]
refuse_filters_on = ["employeeNumber"]

[[rule]]
name = "admins"
identity = ["ou=admins,o=example"]
tls = true

[[rule]]
name = "sasl-external"
sasl = ["external"]
allow = ["read"]

[[rule]]
client = ["192.168.0.0/16"]
bound = false
allow = []

[default]
allow = ["read", "extended"]
time_limit = 30

[rates]
address = { per_second = 10, burst = 20 }
identity_binds = { per_second = 1, burst = 3 }
"#;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn dn(s: &str) -> Dn {
    Dn::parse_ldap(s).unwrap()
}

/// Which rule decides for (address, identity, tls, sasl).
#[test]
fn first_match_wins_and_the_default_catches_the_rest() {
    let p = Policy::parse(FILE).unwrap();
    let admin = dn("uid=root,ou=admins,o=example");
    let user = dn("uid=u1,ou=people,o=example");
    // (address, identity, tls, SASL mechanism, the rule deciding)
    type Case<'a> = (&'a str, Option<&'a Dn>, bool, Option<&'a str>, &'a str);
    let cases: &[Case<'_>] = &[
        ("127.0.0.2", None, false, None, "partners"),
        ("127.0.0.2", Some(&admin), true, None, "partners"),
        ("10.1.200.3", Some(&user), false, None, "partners"),
        ("10.2.0.1", Some(&user), false, None, "default"),
        ("127.0.0.1", Some(&admin), true, None, "admins"),
        ("127.0.0.1", Some(&admin), false, None, "default"),
        ("127.0.0.1", Some(&user), true, None, "default"),
        (
            "127.0.0.1",
            Some(&user),
            false,
            Some("EXTERNAL"),
            "sasl-external",
        ),
        ("127.0.0.1", None, false, Some("EXTERNAL"), "sasl-external"),
        ("192.168.4.4", None, false, None, "rule 4"),
        ("::ffff:192.168.4.4", None, false, None, "rule 4"),
        ("192.168.4.4", Some(&user), false, None, "default"),
        ("127.0.0.1", None, false, None, "default"),
    ];
    for (addr, identity, tls, sasl, want) in cases {
        let c = Client {
            addr: ip(addr),
            identity: *identity,
            bound: identity.is_some() || sasl.is_some(),
            tls: *tls,
            sasl: *sasl,
            groups: None,
        };
        assert_eq!(
            p.decide(&c).name,
            *want,
            "{addr} {identity:?} tls={tls} {sasl:?}"
        );
    }
}

#[test]
fn rules_allow_operations_subtrees_and_scopes() {
    let p = Policy::parse(FILE).unwrap();
    let partners = &p.rules[0];
    let people = dn("ou=people,o=example");
    let alice = dn("uid=alice,ou=people,o=example");
    let suffix = dn("o=example");
    fn ask(op: OpType, d: &Dn, scope: Option<u8>) -> Ask<'_> {
        Ask {
            op,
            dn: Some(d),
            scope,
        }
    }
    let cases: &[(Ask<'_>, Option<u8>)] = &[
        (ask(OpType::Search, &people, Some(2)), None),
        (ask(OpType::Search, &alice, Some(0)), None),
        (ask(OpType::Search, &suffix, Some(2)), Some(50)),
        (ask(OpType::Search, &people, Some(3)), Some(53)),
        (ask(OpType::Compare, &alice, None), Some(50)),
        (ask(OpType::Modify, &alice, None), Some(50)),
    ];
    for (a, want) in cases {
        let got = partners.check(a);
        assert_eq!(got.as_ref().err().map(|r| r.code), *want, "{a:?}: {got:?}");
        if let Err(r) = got {
            assert!(
                r.message.contains("policy rule \"partners\""),
                "{}",
                r.message
            );
        }
    }
    let r = partners
        .check(&ask(OpType::Search, &suffix, Some(2)))
        .unwrap_err();
    assert!(
        r.message
            .contains("outside the subtrees it allows (ou=people,o=example)"),
        "{}",
        r.message
    );
    // The default: reads and extended operations; a rule allowing
    // nothing refuses everything.
    assert!(p.default.check(&ask(OpType::Compare, &alice, None)).is_ok());
    assert_eq!(
        p.default
            .check(&ask(OpType::Add, &alice, None))
            .unwrap_err()
            .code,
        50
    );
    assert_eq!(
        p.rules[3]
            .check(&ask(OpType::Search, &alice, Some(0)))
            .unwrap_err()
            .code,
        50
    );
    assert!(p.rules[1].is_open());
    assert!(!p.default.is_open());
}

#[test]
fn limits_are_clamped_never_raised() {
    let p = Policy::parse(FILE).unwrap();
    let partners = &p.rules[0];
    for (asked, want) in [((0, 0), (50, 0)), ((10, 5), (10, 5)), ((500, 9), (50, 9))] {
        assert_eq!(partners.clamp(asked.0, asked.1), want);
    }
    assert_eq!(p.default.clamp(0, 60), (0, 30));
    assert_eq!(p.default.clamp(7, 10), (7, 10));
}

#[test]
fn hidden_and_refused_attributes() {
    let p = Policy::parse(FILE).unwrap();
    let r = &p.rules[0];
    for (attr, code) in [
        ("userPassword", Some(53)),
        ("USERPASSWORD;binary", Some(53)),
        ("employeeNumber", Some(53)),
        ("cn", None),
        ("mail", None),
    ] {
        assert_eq!(r.check_attr(attr).err().map(|e| e.code), code, "{attr}");
    }
    assert!(rule::hidden(&r.hide, b"telephoneNumber;lang-en"));
    assert!(rule::hidden(&r.hide, b"TELEPHONENUMBER"));
    assert!(!rule::hidden(&r.hide, b"telephone"));
}

#[test]
fn bad_files_are_refused_with_the_reason() {
    for (text, says) in [
        (
            "[[rule]]\nallow = [\"serch\"]",
            "unknown operation \"serch\"",
        ),
        ("[[rule]]\nscopes = [\"deep\"]", "unknown scope"),
        ("[[rule]]\nclient = [\"10.0.0.0/40\"]", "prefix length"),
        ("[[rule]]\nidentity = [\"not a dn\"]", "identity"),
        ("[[rule]]\ngroups = [\"cn=x\"]", "unknown field"),
        (
            "[[rule]]\nname = \"a\"\n[[rule]]\nname = \"a\"",
            "two rules",
        ),
        (
            "[default]\nclient = [\"10.0.0.0/8\"]",
            "matches every client",
        ),
        ("[rates]\naddress = { per_second = 1 }", "burst"),
    ] {
        let e = Policy::parse(text).unwrap_err();
        assert!(e.to_string().contains(says), "{text}: {e}");
    }
    let empty = Policy::parse("").unwrap();
    assert!(empty.rules.is_empty() && empty.default.is_open());
}

#[test]
fn buckets_refill_at_their_rate_and_allow_the_burst() {
    let b = Buckets::default();
    let l = Limit {
        per_second: 10.0,
        burst: 5,
    };
    let t0 = Instant::now();
    let took = (0..8).filter(|_| b.take("a", &l, t0)).count();
    assert_eq!(took, 5, "the burst");
    assert!(b.take("b", &l, t0), "another key has its own bucket");
    assert!(!b.take("a", &l, t0 + Duration::from_millis(50)));
    assert!(
        b.take("a", &l, t0 + Duration::from_millis(110)),
        "one token after 100 ms"
    );
    assert!(!b.take("a", &l, t0 + Duration::from_millis(120)));
}

#[test]
fn buckets_stay_bounded_under_a_flood_of_keys() {
    let b = Buckets::default();
    let l = Limit {
        per_second: 1.0,
        burst: 2,
    };
    let t0 = Instant::now();
    for i in 0..100_000u32 {
        b.take(i, &l, t0);
    }
    assert!(b.len() <= rate::CAPACITY, "{}", b.len());
}

#[test]
fn the_meter_keeps_binds_apart_and_names_the_rate() {
    let m = Meter::default();
    let r = Rates {
        address: Some(Limit {
            per_second: 0.001,
            burst: 2,
        }),
        identity_binds: Some(Limit {
            per_second: 0.001,
            burst: 1,
        }),
        ..Rates::default()
    };
    let (a, b) = (ip("127.0.0.2"), ip("127.0.0.1"));
    let t = Instant::now();
    assert_eq!(m.take(&r, false, a, None, t), Ok(()));
    assert_eq!(m.take(&r, false, a, None, t), Ok(()));
    assert_eq!(m.take(&r, false, a, None, t), Err(Over::Address));
    assert_eq!(
        m.take(&r, false, b, None, t),
        Ok(()),
        "another address is served"
    );
    assert_eq!(m.take(&r, true, a, Some("cn=x"), t), Ok(()), "binds apart");
    assert_eq!(m.take(&r, true, b, Some("cn=x"), t), Err(Over::Identity));
    assert_eq!(m.take(&r, true, b, Some("cn=y"), t), Ok(()));
}

// ---- PDUs ----

fn el(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![tag];
    let mut l = bytes::BytesMut::new();
    crate::proto::wire::ber::put_len(&mut l, body.len());
    v.extend_from_slice(&l);
    v.extend_from_slice(body);
    v
}

fn cat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

/// A search request with `filter` (encoded) and limits.
fn search(size: u32, time: u32, filter: Vec<u8>) -> Vec<u8> {
    let int = |v: u32| el(0x02, &v.to_be_bytes());
    let op = el(
        0x63,
        &cat(&[
            el(0x04, b"ou=people,o=example"),
            el(0x0a, &[2]),
            el(0x0a, &[0]),
            int(size),
            int(time),
            el(0x01, &[0]),
            filter,
            el(0x30, &el(0x04, b"cn")),
        ]),
    );
    let ctrl = el(0xa0, &el(0x30, &el(0x04, b"1.2.3")));
    el(0x30, &cat(&[el(0x02, &[7]), op, ctrl]))
}

#[test]
fn filters_name_their_attributes() {
    let eq = |a: &[u8]| el(0xa3, &cat(&[el(0x04, a), el(0x04, b"x")]));
    let filter = el(
        0xa0,
        &cat(&[
            eq(b"cn"),
            el(0xa2, &el(0x87, b"userPassword")),
            el(
                0xa1,
                &cat(&[
                    eq(b"mail"),
                    el(0xa4, &cat(&[el(0x04, b"sn"), el(0x30, &el(0x80, b"a"))])),
                ]),
            ),
            el(
                0xa9,
                &cat(&[
                    el(0x81, b"caseIgnoreMatch"),
                    el(0x82, b"employeeNumber"),
                    el(0x83, b"1"),
                ]),
            ),
        ]),
    );
    let pdu = search(0, 0, filter);
    let h = frame::header(&pdu).unwrap();
    assert_eq!(
        wire::filter_attrs(&pdu, &h).unwrap(),
        ["cn", "userPassword", "mail", "sn", "employeeNumber"]
    );
    assert_eq!(wire::search_limits(&pdu, &h), Some((0, 0)));
}

#[test]
fn limits_are_rewritten_and_the_rest_kept() {
    let pdu = search(0, 600, el(0x87, b"objectClass"));
    let h = frame::header(&pdu).unwrap();
    let out = wire::with_limits(&pdu, &h, 50, 30).unwrap();
    let oh = frame::header(&out).unwrap();
    assert_eq!(oh.msgid, 7);
    assert_eq!(wire::search_limits(&out, &oh), Some((50, 30)));
    assert_eq!(wire::filter_attrs(&out, &oh).unwrap(), ["objectClass"]);
    assert_eq!(&out[oh.op_end..], &pdu[h.op_end..], "controls kept");
    let head = crate::proto::wire::search::head(&out, &oh).unwrap();
    assert_eq!((head.size_limit, head.time_limit, head.scope), (50, 30, 2));
    // Large values, and values with the high bit set, stay positive.
    for v in [128, 255, 65_535, 1 << 31, u32::MAX] {
        let o = wire::with_limits(&pdu, &h, v, v).unwrap();
        let oh = frame::header(&o).unwrap();
        assert_eq!(wire::search_limits(&o, &oh), Some((v, v)), "{v}");
    }
}

#[test]
fn entries_lose_hidden_attributes() {
    let attr = |t: &[u8], v: &[u8]| el(0x30, &cat(&[el(0x04, t), el(0x31, &el(0x04, v))]));
    let entry = el(
        0x30,
        &cat(&[
            el(0x02, &[7]),
            el(
                0x64,
                &cat(&[
                    el(0x04, b"uid=alice,ou=people,o=example"),
                    el(
                        0x30,
                        &cat(&[
                            attr(b"cn", b"Alice"),
                            attr(b"userPassword", b"secret"),
                            attr(b"mail", b"a@x"),
                        ]),
                    ),
                ]),
            ),
        ]),
    );
    let h = frame::header(&entry).unwrap();
    let hide: Vec<String> = vec!["userpassword".into()];
    let out = wire::strip_entry(&entry, &h, |a| rule::hidden(&hide, a)).unwrap();
    let want = el(
        0x30,
        &cat(&[
            el(0x02, &[7]),
            el(
                0x64,
                &cat(&[
                    el(0x04, b"uid=alice,ou=people,o=example"),
                    el(0x30, &cat(&[attr(b"cn", b"Alice"), attr(b"mail", b"a@x")])),
                ]),
            ),
        ]),
    );
    assert_eq!(&out[..], &want[..]);
    let none: Vec<String> = vec!["sn".into()];
    assert!(wire::strip_entry(&entry, &h, |a| rule::hidden(&none, a)).is_none());
}

#[test]
fn compares_name_their_attribute() {
    let ava = el(0x30, &cat(&[el(0x04, b"userPassword"), el(0x04, b"x")]));
    let pdu = el(
        0x30,
        &cat(&[
            el(0x02, &[3]),
            el(0x6e, &cat(&[el(0x04, b"uid=a,o=example"), ava])),
        ]),
    );
    let h = frame::header(&pdu).unwrap();
    assert_eq!(
        wire::compare_attr(&pdu, &h).as_deref(),
        Some("userPassword")
    );
}

#[test]
fn the_packaged_example_parses() {
    let p = Policy::parse(include_str!("../../../packaging/policy.toml")).unwrap();
    let names: Vec<&str> = p.rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "suspended",
            "partners",
            "admins",
            "helpdesk",
            "services",
            "anonymous"
        ]
    );
    assert_eq!(p.group_names().len(), 3);
    assert!(p.rates.identity_binds.is_some());
}

const GROUPS: &str = r#"
[groups]
refresh = 2

[[rule]]
name = "blocked"
member_of = ["cn=blocked,ou=groups,o=example"]
if_group_unreadable = "match"
allow = []

[[rule]]
name = "admins"
member_of = ["cn=admins,ou=groups,o=example", "CN=Admins2, ou=groups,o=example"]

[default]
allow = ["read"]
"#;

fn sets(of: &[(&str, Option<&[&str]>)]) -> groups::Sets {
    of.iter()
        .map(|(g, m)| {
            let key = crate::proto::dn::Dn::parse_ldap(g).unwrap().normalized();
            let members = m.map(|m| {
                Arc::new(
                    m.iter()
                        .map(|d| crate::proto::dn::Dn::parse_ldap(d).unwrap().normalized())
                        .collect(),
                )
            });
            let g = groups::Group {
                name: g.to_string(),
                members,
                ..Default::default()
            };
            (key, g)
        })
        .collect()
}

fn client<'a>(
    who: Option<&'a crate::proto::dn::Dn>,
    groups: Option<&'a groups::Sets>,
) -> Client<'a> {
    Client {
        addr: ip("127.0.0.1"),
        identity: who,
        bound: who.is_some(),
        tls: false,
        sasl: None,
        groups,
    }
}

#[test]
fn member_of_matches_members_of_the_groups_read() {
    let p = Policy::parse(GROUPS).unwrap();
    assert!(p.uses_groups());
    assert_eq!(p.groups.refresh(), Duration::from_secs(2));
    assert_eq!(p.group_names().len(), 3);
    let alice = crate::proto::dn::Dn::parse_ldap("uid=alice,ou=people,o=example").unwrap();
    let bob = crate::proto::dn::Dn::parse_ldap("UID=Bob, ou=people,o=example").unwrap();
    let read = sets(&[
        (
            "cn=blocked,ou=groups,o=example",
            Some(&["uid=bob,ou=people,o=example"]),
        ),
        (
            "cn=admins,ou=groups,o=example",
            Some(&["uid=carol,ou=people,o=example"]),
        ),
        (
            "cn=admins2,ou=groups,o=example",
            Some(&["uid=alice,OU=people,o=example"]),
        ),
    ]);
    let (alice, bob) = (Some(&alice), Some(&bob));
    assert_eq!(p.decide(&client(alice, Some(&read))).name, "admins");
    assert_eq!(p.decide(&client(bob, Some(&read))).name, "blocked");
    assert_eq!(p.decide(&client(None, Some(&read))).name, "default");
    // Nothing read: the deny list fails closed for bound clients, the
    // grant is skipped; anonymous clients are members of nothing.
    let none = groups::Sets::new();
    assert_eq!(p.decide(&client(alice, Some(&none))).name, "blocked");
    assert_eq!(p.decide(&client(alice, None)).name, "blocked");
    assert_eq!(p.decide(&client(None, None)).name, "default");
    let blocked_read = sets(&[
        ("cn=blocked,ou=groups,o=example", Some(&[])),
        ("cn=admins,ou=groups,o=example", None),
    ]);
    let r = &p.rules[1];
    assert_eq!(
        r.mismatch(&client(alice, Some(&blocked_read))),
        Some("member_of (a group not read)")
    );
    // A member of a group read wins over another group not read.
    let half = sets(&[
        ("cn=blocked,ou=groups,o=example", Some(&[])),
        (
            "cn=admins2,ou=groups,o=example",
            Some(&["uid=alice,ou=people,o=example"]),
        ),
    ]);
    assert_eq!(p.decide(&client(alice, Some(&half))).name, "admins");
}

#[test]
fn member_of_is_checked_when_read() {
    for (text, want) in [
        (
            "[default]\nmember_of = [\"cn=g,o=example\"]\n",
            "the default rule matches every client",
        ),
        (
            "[[rule]]\nif_group_unreadable = \"match\"\n",
            "if_group_unreadable without member_of",
        ),
        ("[[rule]]\nmember_of = [\"not a dn\"]\n", "member_of"),
        (
            "[[rule]]\nmember_of = [\"cn=g\"]\nif_group_unreadable = \"maybe\"\n",
            "unknown variant",
        ),
        ("[groups]\nrefreh = 5\n", "unknown field"),
    ] {
        let e = Policy::parse(text).unwrap_err();
        assert!(e.to_string().contains(want), "{text}: {e}");
    }
    assert_eq!(groups::member_dn("uid=a,o=x#'0101'B"), "uid=a,o=x");
    assert_eq!(groups::member_dn("uid=a#b,o=x"), "uid=a#b,o=x");
}

#[test]
fn the_generation_moves_when_a_set_changes() {
    let g = groups::Groups::default();
    let a = || sets(&[("cn=g,o=example", Some(&["uid=a,o=example"]))]);
    let g0 = g.generation();
    g.store(a());
    let g1 = g.generation();
    assert_ne!(g0, g1);
    g.store(a());
    assert_eq!(g.generation(), g1, "the same sets: no new decisions");
    g.store(sets(&[("cn=g,o=example", Some(&[]))]));
    assert_ne!(g.generation(), g1);
    let g2 = g.generation();
    g.store(sets(&[("cn=g,o=example", None)]));
    assert_ne!(g.generation(), g2, "turning unreadable moves it");
}
