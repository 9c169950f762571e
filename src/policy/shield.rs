//! What a rule keeps from a client's results, resolved against the DSAs'
//! schema: the hidden attributes under all their names ([`Hidden`]) and
//! the subtrees entries must lie in (an alias dereferenced under an
//! allowed subtree may lead outside it). The schemas the DSAs publish
//! ([`Schemas`]) are kept per DSA, merged and swapped whole; each rule's
//! [`Shield`] is made once per policy and schema ([`Views`]), not per
//! operation.

use super::controls::{self, Named};
use super::rule::{Refusal, Rule, UNWILLING};
use super::schema::{AttrType, Hidden, Schema, Why};
use super::wire::Names;
use super::Policy;
use crate::dn::Dn;
use arc_swap::{ArcSwap, ArcSwapOption};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What one rule keeps from results: hidden attributes, the subtrees
/// entries must be in.
#[derive(Debug)]
pub struct Shield {
    pub hidden: Hidden,
    /// Empty: anywhere.
    pub subtrees: Vec<Dn>,
}

impl Shield {
    /// The shield of `rule` with `schema`; `None` when it hides nothing
    /// and allows every subtree.
    pub fn of(rule: &Rule, schema: &Arc<Schema>) -> Option<Shield> {
        if rule.hide.is_empty() && rule.subtrees.is_empty() {
            return None;
        }
        Some(Shield {
            hidden: schema.hidden(&rule.hide),
            subtrees: rule.subtrees.clone(),
        })
    }

    /// Whether an entry named `dn` (as the DSA sent it) may be returned:
    /// within the subtrees. A DN that cannot be read is not returned.
    pub fn admits(&self, dn: &[u8]) -> bool {
        if self.subtrees.is_empty() {
            return true;
        }
        let Some(d) = std::str::from_utf8(dn)
            .ok()
            .and_then(|s| Dn::parse_ldap(s).ok())
        else {
            return false;
        };
        self.subtrees.iter().any(|s| s.is_ancestor_or_self_of(&d))
    }
}

impl Shield {
    /// Whether a filter (of the request or a control) naming `n` may go
    /// on: no name of a hidden attribute or of a supertype of one, no
    /// name the schema cannot place, no extensible match without a type.
    /// Names only: the answer is the same whatever values are asserted.
    pub fn check_names(&self, rule: &Rule, n: &Names, what: &str) -> Result<(), Refusal> {
        if !self.hidden.any() {
            return Ok(());
        }
        if n.typeless {
            return Err(rule.refuse(
                UNWILLING,
                format!(
                    "{what}: an extensible match without an attribute type tests hidden attributes"
                ),
            ));
        }
        n.attrs
            .iter()
            .try_for_each(|a| self.check_attr(rule, a, what))
    }

    fn check_attr(&self, rule: &Rule, a: &str, what: &str) -> Result<(), Refusal> {
        let why = match self.hidden.refuses(a) {
            None => return Ok(()),
            Some(Why::Hidden) => "is hidden",
            Some(Why::Supertype) => "is a supertype of a hidden attribute",
            Some(Why::Unknown) => {
                "is not in the schema read from the DSAs (one's is not read yet), and may name a hidden attribute"
            }
        };
        Err(rule.refuse(
            UNWILLING,
            format!("{what}: attribute {a} {why}: filters, compares and controls may not name it"),
        ))
    }

    /// Whether request control `oid` (with `value`) may go on.
    pub fn check_control(
        &self,
        rule: &Rule,
        oid: &str,
        value: Option<&[u8]>,
    ) -> Result<(), Refusal> {
        if !self.hidden.any() {
            return Ok(());
        }
        let what = format!("control {oid}");
        match controls::named(oid, value) {
            Named::Nothing => Ok(()),
            Named::Tests(n) => self.check_names(rule, &n, &what),
            Named::Returns(Some(attrs)) => attrs
                .iter()
                .try_for_each(|a| self.check_attr(rule, a, &what)),
            Named::Returns(None) => Err(rule.refuse(
                UNWILLING,
                format!("{what} asks for every attribute, hidden ones too: name the attributes"),
            )),
            Named::Unknown => Err(rule.refuse(
                UNWILLING,
                format!(
                    "{what} is not known to name no hidden attribute (or its value cannot be read)"
                ),
            )),
        }
    }
}

/// What one DSA's schema read gave.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Read {
    types: Vec<AttrType>,
    /// Every value was read.
    whole: bool,
}

/// The schemas of the DSAs, and their merge.
#[derive(Default)]
pub struct Schemas {
    /// By DSA name; `None`: its schema could not be read.
    per_dsa: Mutex<BTreeMap<String, Option<Read>>>,
    merged: ArcSwap<Schema>,
    /// Moves when every schema is to be read again (a reload).
    asked: AtomicU64,
    /// By DSA name: `asked` when its schema was last read.
    done: Mutex<BTreeMap<String, u64>>,
}

impl Schemas {
    /// Have every schema read again (the knowledge or policy re-read).
    pub fn refresh(&self) {
        self.asked.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether DSA `dsa`'s schema is to be read: never read, not read
    /// since the last reload, or its last read failed.
    pub fn due(&self, dsa: &str) -> bool {
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        done.get(dsa) != Some(&self.asked.load(Ordering::Relaxed))
    }

    /// The merged schema in force.
    pub fn current(&self) -> Arc<Schema> {
        self.merged.load_full()
    }

    /// What DSA `dsa`'s schema read gave: its types and whether every
    /// value was read, or `None` when it could not be read at all.
    /// Whether that changed what was known.
    pub fn set(&self, dsa: &str, read: Option<(Vec<AttrType>, bool)>) -> bool {
        let read = read.map(|(types, whole)| Read { types, whole });
        {
            let mut done = self.done.lock().unwrap_or_else(|p| p.into_inner());
            match &read {
                Some(_) => done.insert(dsa.to_string(), self.asked.load(Ordering::Relaxed)),
                None => done.remove(dsa),
            };
        }
        let mut m = self.per_dsa.lock().unwrap_or_else(|p| p.into_inner());
        if m.get(dsa) == Some(&read) {
            return false;
        }
        m.insert(dsa.to_string(), read);
        self.merge(&m);
        true
    }

    /// The DSAs the knowledge names now (the others' schemas are dropped,
    /// the new ones are unread until read).
    pub fn expect(&self, dsas: &[String]) {
        let mut m = self.per_dsa.lock().unwrap_or_else(|p| p.into_inner());
        let before = m.len();
        m.retain(|k, _| dsas.contains(k));
        let mut changed = m.len() != before;
        for d in dsas {
            if !m.contains_key(d) {
                m.insert(d.clone(), None);
                changed = true;
            }
        }
        if changed {
            self.merge(&m);
        }
    }

    fn merge(&self, m: &BTreeMap<String, Option<Read>>) {
        let complete = m.values().all(|r| r.as_ref().is_some_and(|r| r.whole));
        let types = m
            .values()
            .flatten()
            .flat_map(|r| r.types.iter().cloned())
            .collect();
        self.merged.store(Arc::new(Schema::new(types, complete)));
    }

    /// Per DSA: `None` unread, else (types read, every value read).
    pub fn summary(&self) -> BTreeMap<String, Option<(usize, bool)>> {
        let m = self.per_dsa.lock().unwrap_or_else(|p| p.into_inner());
        m.iter()
            .map(|(k, r)| (k.clone(), r.as_ref().map(|r| (r.types.len(), r.whole))))
            .collect()
    }
}

/// Every rule's shield for one policy and one schema.
pub struct Views {
    policy: Arc<Policy>,
    schema: Arc<Schema>,
    rules: Vec<Option<Arc<Shield>>>,
    default: Option<Arc<Shield>>,
}

impl Views {
    fn new(policy: &Arc<Policy>, schema: &Arc<Schema>) -> Views {
        let of = |r: &Rule| Shield::of(r, schema).map(Arc::new);
        Views {
            policy: policy.clone(),
            schema: schema.clone(),
            rules: policy.rules.iter().map(of).collect(),
            default: of(&policy.default),
        }
    }

    fn at(&self, rule: usize) -> Option<Arc<Shield>> {
        self.rules.get(rule).unwrap_or(&self.default).clone()
    }
}

/// The views in force, made again when the policy or the schema changes.
#[derive(Default)]
pub struct Shields {
    views: ArcSwapOption<Views>,
}

impl Shields {
    /// The shield of rule `rule` (index; past the end: the default) of
    /// `policy` with `schema`.
    pub fn get(
        &self,
        policy: &Arc<Policy>,
        schema: &Arc<Schema>,
        rule: usize,
    ) -> Option<Arc<Shield>> {
        let v = self.views.load();
        if let Some(v) = v.as_deref() {
            if Arc::ptr_eq(&v.policy, policy) && Arc::ptr_eq(&v.schema, schema) {
                return v.at(rule);
            }
        }
        let new = Views::new(policy, schema);
        let got = new.at(rule);
        self.views.store(Some(Arc::new(new)));
        got
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        s.set("D3", None);
        assert!(!s.current().complete, "D3 unreadable");
        s.expect(&["D1".into()]);
        assert!(s.current().complete);
        assert_eq!(s.summary().len(), 1);
    }

    fn hiding(hide: &[&str], complete: bool) -> (Rule, Shield) {
        let types = [
            "( 2.5.4.41 NAME 'name' )",
            "( 2.5.4.3 NAME ( 'cn' 'commonName' ) SUP name )",
            "( 2.5.4.4 NAME ( 'sn' 'surname' ) SUP name )",
            "( 0.9.2342.19200300.100.1.3 NAME ( 'mail' 'rfc822Mailbox' ) )",
            "( 0.9.2342.19200300.100.1.1 NAME ( 'uid' 'userid' ) )",
        ];
        let schema = Arc::new(Schema::new(
            types
                .iter()
                .map(|t| super::super::schema::parse(t).unwrap())
                .collect(),
            complete,
        ));
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
        let cases: Vec<((&str, Option<Vec<u8>>), bool)> = vec![
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
                (crate::wire::request::OID_PAGED_RESULTS, Some(vec![])),
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
            let h = crate::wire::frame::header(&msg).unwrap();
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
}
