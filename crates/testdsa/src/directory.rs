//! The in-memory entry store and its update operations.
//!
//! Entries live in a `BTreeMap` keyed by the reversed normalized DN (see
//! [`super::names`]), so a subtree is one contiguous range and a one-level
//! search is a range scan filtered by depth. The map sits behind an
//! `Arc<RwLock<..>>`: a [`Directory`] handle is cheap to clone and every
//! connection of a server shares it. The lock is never held across an
//! `.await`.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use ldap3_proto::proto::{LdapModify, LdapModifyType, LdapPartialAttribute, LdapResultCode};

use super::ldif;
use super::names::{dn_key, join_rdns, rdn_avas, split_rdns, Key};

/// One attribute of an entry: the type as first written and its values.
#[derive(Debug, Clone, PartialEq)]
pub struct Attr {
    pub name: String,
    pub vals: Vec<Vec<u8>>,
}

/// One directory entry: its DN as written and its attributes.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub dn: String,
    pub attrs: Vec<Attr>,
}

/// Case-insensitive, surrounding-space-insensitive value normalization.
pub fn norm_value(v: &[u8]) -> String {
    String::from_utf8_lossy(v).trim().to_lowercase()
}

impl Entry {
    pub fn new(dn: &str) -> Entry {
        Entry {
            dn: dn.to_string(),
            attrs: Vec::new(),
        }
    }

    /// The attribute named `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&Attr> {
        self.attrs
            .iter()
            .find(|a| a.name.eq_ignore_ascii_case(name))
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.attrs
            .iter()
            .position(|a| a.name.eq_ignore_ascii_case(name))
    }

    /// True when `name` has a value equal to `value` (case-insensitive).
    pub fn has_value(&self, name: &str, value: &[u8]) -> bool {
        let want = norm_value(value);
        self.get(name)
            .is_some_and(|a| a.vals.iter().any(|v| norm_value(v) == want))
    }

    /// Adds a value; returns false when an equal value was already there.
    pub fn add_value(&mut self, name: &str, value: Vec<u8>) -> bool {
        if self.has_value(name, &value) {
            return false;
        }
        match self.position(name) {
            Some(i) => self.attrs[i].vals.push(value),
            None => self.attrs.push(Attr {
                name: name.to_string(),
                vals: vec![value],
            }),
        }
        true
    }

    /// Removes one value; returns false when it was not there. An attribute
    /// left without values is removed.
    pub fn delete_value(&mut self, name: &str, value: &[u8]) -> bool {
        let want = norm_value(value);
        let Some(i) = self.position(name) else {
            return false;
        };
        let before = self.attrs[i].vals.len();
        self.attrs[i].vals.retain(|v| norm_value(v) != want);
        let removed = self.attrs[i].vals.len() != before;
        if self.attrs[i].vals.is_empty() {
            self.attrs.remove(i);
        }
        removed
    }

    /// Removes a whole attribute; returns false when it was not there.
    pub fn delete_attr(&mut self, name: &str) -> bool {
        match self.position(name) {
            Some(i) => {
                self.attrs.remove(i);
                true
            }
            None => false,
        }
    }

    /// Adds the values of the entry's own RDN when they are missing.
    fn add_rdn_values(&mut self) -> Result<(), String> {
        if let Some(rdn) = split_rdns(&self.dn)?.first() {
            for (ty, value) in rdn_avas(rdn)? {
                self.add_value(&ty, value.into_bytes());
            }
        }
        Ok(())
    }
}

/// An operation failure: result code, matched DN and diagnostic text.
#[derive(Debug, Clone, PartialEq)]
pub struct OpError {
    pub code: LdapResultCode,
    pub matched: String,
    pub msg: String,
}

impl OpError {
    pub fn new(code: LdapResultCode, msg: impl Into<String>) -> OpError {
        OpError {
            code,
            matched: String::new(),
            msg: msg.into(),
        }
    }
}

fn invalid_dn(e: String) -> OpError {
    OpError::new(LdapResultCode::InvalidDNSyntax, e)
}

/// The entries, keyed by reversed normalized DN.
#[derive(Debug, Default)]
pub struct Store {
    pub entries: BTreeMap<Key, Entry>,
}

impl Store {
    /// The entries of the subtree rooted at `base` (including `base` itself
    /// when it exists), in key order.
    pub fn subtree<'a>(&'a self, base: &'a Key) -> impl Iterator<Item = (&'a Key, &'a Entry)> + 'a {
        self.entries
            .range(base.clone()..)
            .take_while(move |(k, _)| k.starts_with(base))
    }

    /// True when some entry lies strictly below `key`.
    pub fn has_children(&self, key: &Key) -> bool {
        self.subtree(key).any(|(k, _)| k.len() > key.len())
    }

    /// The noSuchObject error for `key`, with the DN of its deepest existing
    /// ancestor as matched DN.
    pub fn no_such_object(&self, key: &Key, dn: &str) -> OpError {
        let matched = (1..key.len())
            .rev()
            .find_map(|n| self.entries.get(&key[..n]))
            .map(|e| e.dn.clone())
            .unwrap_or_default();
        OpError {
            code: LdapResultCode::NoSuchObject,
            matched,
            msg: format!("no such entry {dn:?}"),
        }
    }

    /// The entries that have no ancestor in the store (the naming contexts).
    pub fn top_level(&self) -> Vec<&Entry> {
        let mut out = Vec::new();
        let mut top: Option<&Key> = None;
        for (k, e) in &self.entries {
            if top.is_some_and(|t| k.starts_with(t)) {
                continue;
            }
            top = Some(k);
            out.push(e);
        }
        out
    }

    fn insert(&mut self, mut entry: Entry) -> Result<(), OpError> {
        let key = dn_key(&entry.dn).map_err(invalid_dn)?;
        if key.is_empty() {
            return Err(OpError::new(
                LdapResultCode::UnwillingToPerform,
                "cannot add the root DSE",
            ));
        }
        if self.entries.contains_key(&key) {
            return Err(OpError::new(
                LdapResultCode::EntryAlreadyExists,
                format!("entry {:?} already exists", entry.dn),
            ));
        }
        entry.add_rdn_values().map_err(invalid_dn)?;
        self.entries.insert(key, entry);
        Ok(())
    }

    /// LDAP add: the parent must exist, unless no ancestor exists at all (a
    /// new top-level entry).
    pub fn add(&mut self, dn: &str, attrs: Vec<LdapPartialAttribute>) -> Result<(), OpError> {
        let key = dn_key(dn).map_err(invalid_dn)?;
        if key.len() > 1 && !self.entries.contains_key(&key[..key.len() - 1]) {
            let err = self.no_such_object(&key, dn);
            if !err.matched.is_empty() {
                return Err(OpError {
                    msg: format!("parent of {dn:?} does not exist"),
                    ..err
                });
            }
        }
        let mut entry = Entry::new(dn);
        for a in attrs {
            for v in a.vals {
                entry.add_value(&a.atype, v);
            }
        }
        self.insert(entry)
    }

    /// LDAP delete of a leaf entry.
    pub fn delete(&mut self, dn: &str) -> Result<(), OpError> {
        let key = dn_key(dn).map_err(invalid_dn)?;
        if !self.entries.contains_key(&key) || key.is_empty() {
            return Err(self.no_such_object(&key, dn));
        }
        if self.has_children(&key) {
            return Err(OpError::new(
                LdapResultCode::NotAllowedOnNonLeaf,
                format!("entry {dn:?} has subordinates"),
            ));
        }
        self.entries.remove(&key);
        Ok(())
    }

    /// LDAP modify: all changes apply, or none.
    pub fn modify(&mut self, dn: &str, changes: Vec<LdapModify>) -> Result<(), OpError> {
        let key = dn_key(dn).map_err(invalid_dn)?;
        let Some(current) = self.entries.get(&key) else {
            return Err(self.no_such_object(&key, dn));
        };
        let mut entry = current.clone();
        for change in changes {
            let LdapPartialAttribute { atype, vals } = change.modification;
            match change.operation {
                LdapModifyType::Add => {
                    for v in vals {
                        if !entry.add_value(&atype, v) {
                            return Err(OpError::new(
                                LdapResultCode::AttributeOrValueExists,
                                format!("{atype} already has that value"),
                            ));
                        }
                    }
                }
                LdapModifyType::Delete if vals.is_empty() => {
                    if !entry.delete_attr(&atype) {
                        return Err(OpError::new(
                            LdapResultCode::NoSuchAttribute,
                            format!("no attribute {atype}"),
                        ));
                    }
                }
                LdapModifyType::Delete => {
                    for v in vals {
                        if !entry.delete_value(&atype, &v) {
                            return Err(OpError::new(
                                LdapResultCode::NoSuchAttribute,
                                format!("{atype} has no such value"),
                            ));
                        }
                    }
                }
                LdapModifyType::Replace => {
                    entry.delete_attr(&atype);
                    for v in vals {
                        entry.add_value(&atype, v);
                    }
                }
                LdapModifyType::Increment => increment(&mut entry, &atype, &vals)?,
            }
        }
        self.entries.insert(key, entry);
        Ok(())
    }

    /// LDAP modify DN: rename and/or move an entry with its subtree.
    pub fn modify_dn(
        &mut self,
        dn: &str,
        new_rdn: &str,
        delete_old: bool,
        new_superior: Option<&str>,
    ) -> Result<String, OpError> {
        let old_key = dn_key(dn).map_err(invalid_dn)?;
        if old_key.is_empty() || !self.entries.contains_key(&old_key) {
            return Err(self.no_such_object(&old_key, dn));
        }
        let old_rdns = split_rdns(dn).map_err(invalid_dn)?;
        let new_rdns = split_rdns(new_rdn).map_err(invalid_dn)?;
        let [new_rdn] = new_rdns.as_slice() else {
            return Err(OpError::new(
                LdapResultCode::InvalidDNSyntax,
                "newrdn must be one RDN",
            ));
        };
        let parent_dn = match new_superior {
            Some(sup) => {
                let sup_key = dn_key(sup).map_err(invalid_dn)?;
                if !sup_key.is_empty() && !self.entries.contains_key(&sup_key) {
                    return Err(self.no_such_object(&sup_key, sup));
                }
                if sup_key.starts_with(&old_key) {
                    return Err(OpError::new(
                        LdapResultCode::UnwillingToPerform,
                        "cannot move an entry below itself",
                    ));
                }
                sup.trim().to_string()
            }
            None => join_rdns(&old_rdns[1..]),
        };
        let new_dn = if parent_dn.is_empty() {
            new_rdn.clone()
        } else {
            format!("{new_rdn},{parent_dn}")
        };
        let new_key = dn_key(&new_dn).map_err(invalid_dn)?;
        if new_key != old_key && self.entries.contains_key(&new_key) {
            return Err(OpError::new(
                LdapResultCode::EntryAlreadyExists,
                format!("entry {new_dn:?} already exists"),
            ));
        }
        let moved: Vec<Key> = self.subtree(&old_key).map(|(k, _)| k.clone()).collect();
        let mut batch = Vec::with_capacity(moved.len());
        for k in moved {
            let Some(mut e) = self.entries.remove(&k) else {
                continue;
            };
            let depth_below = k.len() - old_key.len();
            let rdns = split_rdns(&e.dn).map_err(invalid_dn)?;
            let mut key = new_key.clone();
            key.extend_from_slice(&k[old_key.len()..]);
            if depth_below == 0 {
                if delete_old {
                    for (ty, value) in rdn_avas(&old_rdns[0]).map_err(invalid_dn)? {
                        e.delete_value(&ty, value.as_bytes());
                    }
                }
                e.dn = new_dn.clone();
                e.add_rdn_values().map_err(invalid_dn)?;
            } else {
                e.dn = format!(
                    "{},{new_dn}",
                    join_rdns(&rdns[..depth_below.min(rdns.len())])
                );
            }
            batch.push((key, e));
        }
        self.entries.extend(batch);
        Ok(new_dn)
    }
}

/// RFC 4525 increment of an integer attribute.
fn increment(entry: &mut Entry, atype: &str, vals: &[Vec<u8>]) -> Result<(), OpError> {
    let parse = |v: &[u8]| String::from_utf8_lossy(v).trim().parse::<i64>().ok();
    let [delta] = vals else {
        return Err(OpError::new(
            LdapResultCode::ProtocolError,
            "increment needs one value",
        ));
    };
    let delta = parse(delta).ok_or_else(|| {
        OpError::new(
            LdapResultCode::InvalidAttributeSyntax,
            "increment is not an integer",
        )
    })?;
    let Some(attr) = entry
        .attrs
        .iter_mut()
        .find(|a| a.name.eq_ignore_ascii_case(atype))
    else {
        return Err(OpError::new(
            LdapResultCode::NoSuchAttribute,
            format!("no attribute {atype}"),
        ));
    };
    for v in attr.vals.iter_mut() {
        let n = parse(v).ok_or_else(|| {
            OpError::new(
                LdapResultCode::InvalidAttributeSyntax,
                "value is not an integer",
            )
        })?;
        *v = (n + delta).to_string().into_bytes();
    }
    Ok(())
}

/// A shared, thread-safe handle on an in-memory directory. Clones share the
/// same entries, so updates made through the protocol are visible to every
/// clone.
#[derive(Debug, Clone, Default)]
pub struct Directory {
    inner: Arc<RwLock<Store>>,
}

impl Directory {
    /// Loads a directory from LDIF content records. Entries need not be in
    /// parent-first order, and an entry whose ancestors are all absent is a
    /// top-level entry (a naming context).
    pub fn from_ldif(text: &str) -> Result<Directory, String> {
        let mut store = Store::default();
        for rec in ldif::parse(text)? {
            let mut entry = Entry::new(rec.dn.trim());
            for (name, value) in rec.attrs {
                entry.add_value(&name, value);
            }
            store
                .insert(entry)
                .map_err(|e| format!("line {}: {}", rec.line, e.msg))?;
        }
        Ok(Directory {
            inner: Arc::new(RwLock::new(store)),
        })
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.read(|s| s.entries.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when an entry with this DN exists.
    pub fn contains(&self, dn: &str) -> bool {
        dn_key(dn).is_ok_and(|k| self.read(|s| s.entries.contains_key(&k)))
    }

    /// A copy of the entry `dn` as `(attribute, values)` pairs, with values
    /// as lossy UTF-8, for tests and diagnostics.
    pub fn entry(&self, dn: &str) -> Option<Vec<(String, Vec<String>)>> {
        let key = dn_key(dn).ok()?;
        self.read(|s| {
            s.entries.get(&key).map(|e| {
                e.attrs
                    .iter()
                    .map(|a| {
                        let vals = a
                            .vals
                            .iter()
                            .map(|v| String::from_utf8_lossy(v).into_owned());
                        (a.name.clone(), vals.collect())
                    })
                    .collect()
            })
        })
    }

    /// Runs `f` with shared access to the store.
    pub(crate) fn read<R>(&self, f: impl FnOnce(&Store) -> R) -> R {
        let guard = self.inner.read().unwrap_or_else(|e| e.into_inner());
        f(&guard)
    }

    /// Runs `f` with exclusive access to the store.
    pub(crate) fn write<R>(&self, f: impl FnOnce(&mut Store) -> R) -> R {
        let mut guard = self.inner.write().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LDIF: &str = "dn: o=Acme\no: Acme\n\ndn: ou=People,o=Acme\n\n\
                        dn: cn=Bob,ou=People,o=Acme\ncn: Bob\n\ndn: dc=other\n\n\
                        dn: cn=orphan,ou=missing,dc=other\n";

    fn keys(d: &Directory) -> Vec<String> {
        d.read(|s| s.entries.values().map(|e| e.dn.clone()).collect())
    }

    #[test]
    fn loads_and_finds_naming_contexts() {
        let d = Directory::from_ldif(LDIF).expect("load");
        assert_eq!(d.len(), 5);
        assert!(d.contains("CN=bob, ou=people,o=acme"));
        let tops: Vec<String> = d.read(|s| s.top_level().iter().map(|e| e.dn.clone()).collect());
        assert_eq!(tops, vec!["dc=other", "o=Acme"]);
        // RDN values are added when missing.
        let ou = d.entry("ou=people,o=acme").expect("entry");
        assert_eq!(ou, vec![("ou".to_string(), vec!["People".to_string()])]);
        let err = Directory::from_ldif("dn: o=x\n\ndn: O=X\n").expect_err("duplicate");
        assert!(err.starts_with("line 3:"), "{err}");
    }

    #[test]
    fn add_delete_rules() {
        let d = Directory::from_ldif(LDIF).expect("load");
        d.write(|s| {
            let e = s.add("cn=x,ou=nope,o=acme", vec![]).expect_err("no parent");
            assert_eq!(
                (e.code, e.matched.as_str()),
                (LdapResultCode::NoSuchObject, "o=Acme")
            );
            s.add("o=new", vec![]).expect("new top-level");
            let e = s
                .add("cn=bob,ou=people,o=acme", vec![])
                .expect_err("exists");
            assert_eq!(e.code, LdapResultCode::EntryAlreadyExists);
            let e = s.delete("ou=people,o=acme").expect_err("non-leaf");
            assert_eq!(e.code, LdapResultCode::NotAllowedOnNonLeaf);
            s.delete("cn=bob,ou=people,o=acme").expect("leaf");
        });
        assert_eq!(d.len(), 5);
    }

    #[test]
    fn modify_dn_moves_subtree() {
        let d = Directory::from_ldif(LDIF).expect("load");
        let new_dn = d
            .write(|s| s.modify_dn("ou=People,o=Acme", "ou=Staff", true, Some("dc=other")))
            .expect("moddn");
        assert_eq!(new_dn, "ou=Staff,dc=other");
        let all = keys(&d);
        assert!(
            all.contains(&"cn=Bob,ou=Staff,dc=other".to_string()),
            "{all:?}"
        );
        assert!(!d.contains("ou=people,o=acme"));
        let staff = d.entry("ou=staff,dc=other").expect("moved");
        assert_eq!(staff, vec![("ou".to_string(), vec!["Staff".to_string()])]);
        let e = d
            .write(|s| s.modify_dn("dc=other", "dc=x", true, Some("ou=staff,dc=other")))
            .expect_err("below itself");
        assert_eq!(e.code, LdapResultCode::UnwillingToPerform);
    }
}
