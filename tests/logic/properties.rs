//! Property tests for the pure logic: DN parsing and normalization, the
//! knowledge parser on arbitrary input, and target selection.
#![allow(clippy::unwrap_used, clippy::panic)]

use dsa_router::directory::knowledge::{self, Memory, Snapshot};
use dsa_router::directory::route::{
    select_read, select_write, DsaId, DsaStatus, DsaView, RouteError, Table,
};
use dsa_router::proto::dn::Dn;
use proptest::prelude::*;
use std::path::Path;

fn attr() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("cn".to_string()),
        Just("CN".to_string()),
        Just("ou".to_string()),
        Just("o".to_string()),
        Just("uid".to_string()),
        Just("2.5.4.3".to_string()),
        "[a-z][a-z0-9-]{0,6}",
    ]
}

fn value() -> impl Strategy<Value = String> {
    // Any printable text incl. specials, spaces and non-ASCII.
    "[ a-zA-Z0-9,+;<>=#\"\\\\éß日]{1,12}".prop_filter("not only spaces", |s| !s.trim().is_empty())
}

fn dn_parts() -> impl Strategy<Value = Vec<Vec<(String, String)>>> {
    prop::collection::vec(prop::collection::vec((attr(), value()), 1..3), 0..5)
}

fn build(parts: &[Vec<(String, String)>]) -> Dn {
    use dsa_router::proto::dn::{Ava, Rdn};
    Dn::from_rdns(
        parts
            .iter()
            .map(|r| Rdn::new(r.iter().map(|(a, v)| Ava::new(a, v)).collect()))
            .collect(),
    )
}

struct View {
    status: Vec<DsaStatus>,
    in_flight: Vec<u32>,
    limit: Vec<Option<u32>>,
}

impl DsaView for View {
    fn status(&self, d: DsaId) -> DsaStatus {
        self.status[d]
    }
    fn in_flight(&self, d: DsaId) -> u32 {
        self.in_flight[d]
    }
    fn limit(&self, d: DsaId) -> Option<u32> {
        self.limit[d]
    }
}

/// Knowledge with `n` DSAs on one prefix in random groups.
fn knowledge_for(groups: &[u8], precedence: &[usize]) -> Snapshot {
    let mut text = String::new();
    for (i, g) in groups.iter().enumerate() {
        let group = match g {
            0 => String::new(),
            1 => "dsa-flags = load-share".to_string(),
            g => format!("dsa-flags = load-share load-share-group = G{g}"),
        };
        text.push_str(&format!(
            "set dsa D{i} = {{ prefix = <c AU> address = tcp h port 1 {group} }};\n"
        ));
    }
    if !precedence.is_empty() {
        let names: Vec<String> = precedence
            .iter()
            .map(|p| format!("D{}", p % groups.len()))
            .collect();
        text.push_str(&format!("set precedence = {};\n", names.join(", ")));
    }
    knowledge::load_from(Path::new("k.dxg"), &Memory::default().with("k.dxg", &text)).unwrap()
}

fn status() -> impl Strategy<Value = DsaStatus> {
    prop_oneof![
        4 => Just(DsaStatus::Up),
        1 => Just(DsaStatus::Down),
        1 => Just(DsaStatus::Disabled),
        1 => Just(DsaStatus::Draining),
        1 => Just(DsaStatus::Ejected),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn display_then_parse_is_identity(parts in dn_parts()) {
        let dn = build(&parts);
        let text = dn.to_string();
        let again = Dn::parse_ldap(&text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        prop_assert_eq!(&again, &dn, "{:?}", text);
    }

    #[test]
    fn normalization_is_idempotent_and_decides_equality(parts in dn_parts()) {
        let dn = build(&parts);
        let n1 = dn.normalized();
        let n2 = Dn::parse_ldap(&n1).unwrap().normalized();
        prop_assert_eq!(&n1, &n2);
        // Case and extra spaces do not matter.
        let shouted = Dn::parse_ldap(&dn.to_string().to_ascii_uppercase());
        if let Ok(s) = shouted {
            prop_assert_eq!(s.normalized().to_lowercase(), n1.to_lowercase());
        }
    }

    /// Any text that parses as a DN normalises to a DN that parses again
    /// to the same normal form (the fuzzer once found `oid.1uid=`, whose
    /// normal form did not parse).
    #[test]
    fn any_parsed_dn_normalises_to_a_fixed_point(s in "((oid\\.|OID\\.)?[a-z0-9.]{1,6}=[a-z0-9 \\\\,+=#]{0,6},?){1,3}") {
        if let Ok(dn) = Dn::parse_ldap(&s) {
            let n1 = dn.normalized();
            let again = Dn::parse_ldap(&n1);
            prop_assert!(again.is_ok(), "{:?} normalises to {:?}, which does not parse", s, n1);
            prop_assert_eq!(again.unwrap().normalized(), n1);
        }
    }

    /// Random mixes of the look-alikes slapd takes for one value
    /// (fullwidth forms, long s, case, NBSP/U+3000/TAB/CR/LF at either
    /// end, soft hyphens and zero width spaces inside) prepare to the
    /// value: one DN, one key.
    #[test]
    fn look_alike_mixes_are_the_plain_dn(
        picks in prop::collection::vec(0u8..4, 8),
        ends in prop::collection::vec(0usize..7, 0..4),
        inner in prop::collection::vec(0usize..3, 0..3),
    ) {
        let plain = "user1997";
        let mut v = String::new();
        for (i, c) in plain.chars().enumerate() {
            match picks[i] {
                1 => v.push(c.to_ascii_uppercase()),
                2 => v.push(char::from_u32(c as u32 - 0x21 + 0xff01).unwrap()),
                3 if c == 's' => v.push('\u{17f}'),
                _ => v.push(c),
            }
            if i == 3 {
                for &k in &inner {
                    v.push(['\u{ad}', '\u{200b}', '\u{feff}'][k]);
                }
            }
        }
        let pad: String = ends.iter().map(|&k| [' ', '\u{a0}', '\u{3000}', '\t', '\r', '\n', '\u{2003}'][k]).collect();
        let text = format!("uid={pad}{v}{pad},ou=people,o=DEMOCORP,c=AU");
        let want = Dn::parse_ldap("uid=user1997,ou=people,o=DEMOCORP,c=AU").unwrap();
        let got = Dn::parse_ldap(&text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        prop_assert_eq!(&got, &want, "{:?}", text);
        prop_assert_eq!(got.key(), want.key());
        prop_assert_eq!(got.normalized(), want.normalized());
    }

    /// Preparation is idempotent on any text, and any DN in any script
    /// normalises to a fixed point.
    #[test]
    fn preparing_any_text_is_idempotent(s in "\\PC{0,16}", t in "[\\x00-\\x{2fff}]{0,12}") {
        use dsa_router::proto::dn::prep::prepare;
        for x in [&s, &t] {
            let once = prepare(x);
            prop_assert_eq!(prepare(&once), once.clone(), "{:?}", x);
            if let Ok(dn) = Dn::parse_ldap(&format!("cn={x},o=x")) {
                let n1 = dn.normalized();
                let again = Dn::parse_ldap(&n1).map_err(|e| TestCaseError::fail(format!("{n1:?}: {e}")))?;
                prop_assert_eq!(again.normalized(), n1);
            }
        }
    }

    #[test]
    fn dn_parser_never_panics(s in "\\PC{0,40}") {
        let _ = Dn::parse_any(&s);
        let _ = Dn::parse_knowledge(&s);
    }

    #[test]
    fn knowledge_parser_never_panics(s in "[ -~\\n\\t]{0,200}") {
        let _ = knowledge::load_from(Path::new("r.dxg"), &Memory::default().with("r.dxg", &s));
    }

    #[test]
    fn knowledge_parser_never_panics_on_mangled_valid_input(cut in 0usize..400, junk in "[ -~]{0,5}") {
        let base = "set dsa \"D1\" = {\n prefix = <c AU><o DEMOCORP>\n address = tcp \"h\" port 1, ipv6 \"::1\" port 2\n dsa-flags = load-share\n load-share-group = \"G\"\n};\nset precedence = D1;\n";
        let cut = cut.min(base.len());
        let mut s = base[..cut].to_string();
        s.push_str(&junk);
        s.push_str(&base[cut..]);
        let _ = knowledge::load_from(Path::new("r.dxg"), &Memory::default().with("r.dxg", &s));
    }

    #[test]
    fn selection_never_picks_an_ineligible_or_saturated_dsa(
        groups in prop::collection::vec(0u8..4, 1..8),
        precedence in prop::collection::vec(0usize..8, 0..3),
        statuses in prop::collection::vec(status(), 8),
        in_flight in prop::collection::vec(0u32..4, 8),
        limits in prop::collection::vec(prop::option::of(1u32..4), 8),
        tick in any::<usize>(),
    ) {
        let snap = knowledge_for(&groups, &precedence);
        let table = Table::build(&snap, None).unwrap();
        let p = &table.partitions()[0];
        let v = View { status: statuses, in_flight, limit: limits };
        match select_read(p, &v, tick) {
            Ok(c) => {
                prop_assert!(v.status(c.dsa).eligible());
                prop_assert!(!v.saturated(c.dsa));
                // The chosen group is the first group with an eligible member.
                let first = p.groups.iter().position(|g| g.members.iter().any(|&m| v.status(m).eligible()));
                prop_assert_eq!(Some(c.group), first);
                // And the pick is least in flight among the open members.
                let least = p.groups[c.group].members.iter()
                    .filter(|&&m| v.status(m).eligible() && !v.saturated(m))
                    .map(|&m| v.in_flight(m)).min();
                prop_assert_eq!(Some(v.in_flight(c.dsa)), least);
            }
            Err(RouteError::Unavailable) => {
                prop_assert!(p.order.iter().all(|&m| !v.status(m).eligible()));
            }
            Err(RouteError::Busy { group }) => {
                let g = &p.groups[group];
                prop_assert!(g.members.iter().filter(|&&m| v.status(m).eligible()).all(|&m| v.saturated(m)));
            }
            Err(RouteError::ReadOnly) => prop_assert!(false, "reads never meet read-only"),
        }
        // Writes: the first eligible DSA of the write order; only when none
        // is, the first one ejected as a read outlier (ejection judges
        // reads); never one down, disabled or draining.
        let first = p.write_order.iter().copied().find(|&m| v.status(m).eligible()).or_else(|| {
            p.write_order.iter().copied().find(|&m| v.status(m) == DsaStatus::Ejected)
        });
        match select_write(p, &v) {
            Ok(c) => prop_assert_eq!(Some(c.dsa), first),
            Err(RouteError::Unavailable) => prop_assert_eq!(first, None),
            Err(_) => {}
        }
    }

    #[test]
    fn rotation_spreads_sequential_picks_evenly(n in 1usize..7, rounds in 1usize..20, start in 0usize..1_000_000) {
        let snap = knowledge_for(&vec![2u8; n], &[]);
        let table = Table::build(&snap, None).unwrap();
        let p = &table.partitions()[0];
        let v = View { status: vec![DsaStatus::Up; n], in_flight: vec![0; n], limit: vec![None; n] };
        let mut counts = vec![0usize; n];
        for t in 0..(n * rounds) {
            counts[select_read(p, &v, start.wrapping_add(t)).unwrap().dsa] += 1;
        }
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        prop_assert!(max - min <= 1, "{:?}", counts);
    }
}
