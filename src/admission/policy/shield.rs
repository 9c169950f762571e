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
use crate::proto::dn::Dn;
use arc_swap::{ArcSwap, ArcSwapOption};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What one rule keeps from results: hidden attributes, the subtrees
/// entries must be in; and the attributes filters may not name
/// (`refuse_filters_on`, by every name too).
#[derive(Debug)]
pub struct Shield {
    pub hidden: Hidden,
    pub refused: Hidden,
    /// Empty: anywhere.
    pub subtrees: Vec<Dn>,
}

impl Shield {
    /// The shield of `rule` with `schema`; `None` when it hides nothing,
    /// refuses no filter and allows every subtree.
    pub fn of(rule: &Rule, schema: &Arc<Schema>) -> Option<Shield> {
        if rule.hide.is_empty() && rule.subtrees.is_empty() && rule.refuse_filters_on.is_empty() {
            return None;
        }
        Some(Shield {
            hidden: schema.hidden(&rule.hide),
            refused: schema.hidden(&rule.refuse_filters_on),
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

    /// Whether a filter or compare may name `a` under `refuse_filters_on`:
    /// not another name of one of its attributes, of a subtype or of a
    /// supertype (names the schema does not know are the rule's to
    /// judge as written).
    pub fn check_refused(&self, rule: &Rule, a: &str) -> Result<(), Refusal> {
        match self.refused.refuses(a) {
            Some(Why::Hidden | Why::Supertype) => Err(rule.refuse(
                UNWILLING,
                format!("filters and compares on attribute {a} are not allowed (refuse_filters_on, by another name)"),
            )),
            _ => Ok(()),
        }
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

/// Where one DSA's schema stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Known {
    /// Not read yet.
    Unread,
    /// The last read failed.
    Unreadable,
    Read(Read),
}

/// The schemas of the DSAs, and their merge.
#[derive(Default)]
pub struct Schemas {
    per_dsa: Mutex<BTreeMap<String, Known>>,
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
        let read = match read {
            Some((types, whole)) => Known::Read(Read { types, whole }),
            None => Known::Unreadable,
        };
        {
            let mut done = self.done.lock().unwrap_or_else(|p| p.into_inner());
            match &read {
                Known::Read(_) => done.insert(dsa.to_string(), self.asked.load(Ordering::Relaxed)),
                _ => done.remove(dsa),
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
                m.insert(d.clone(), Known::Unread);
                changed = true;
            }
        }
        if changed {
            self.merge(&m);
        }
    }

    fn merge(&self, m: &BTreeMap<String, Known>) {
        let read = || {
            m.values().filter_map(|k| match k {
                Known::Read(r) => Some(r),
                _ => None,
            })
        };
        let complete = read().count() == m.len() && read().all(|r| r.whole);
        let types = read().flat_map(|r| r.types.iter().cloned()).collect();
        self.merged.store(Arc::new(Schema::new(types, complete)));
    }

    /// Per DSA: `None` not read (yet, or its last read failed), else
    /// (types read, every value read).
    pub fn summary(&self) -> BTreeMap<String, Option<(usize, bool)>> {
        let m = self.per_dsa.lock().unwrap_or_else(|p| p.into_inner());
        m.iter()
            .map(|(k, r)| {
                let r = match r {
                    Known::Read(r) => Some((r.types.len(), r.whole)),
                    _ => None,
                };
                (k.clone(), r)
            })
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
#[path = "shield_tests.rs"]
mod tests;
