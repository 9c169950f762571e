//! A DSA's name ([`DsaName`]): compared and hashed ignoring ASCII case, as
//! DXserver compares DSA names, and shared rather than copied.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// A DSA's name as the knowledge spells it. `D1` and `d1` are one DSA:
/// equality, ordering and hashing ignore ASCII case, so maps keyed by it
/// need no lower-cased copies; clones share one allocation.
#[derive(Clone)]
pub struct DsaName(Arc<str>);

impl DsaName {
    pub fn new(name: &str) -> DsaName {
        DsaName(Arc::from(name))
    }

    /// The name as the knowledge spells it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `other` names this DSA (ASCII case ignored).
    pub fn is(&self, other: &str) -> bool {
        self.0.eq_ignore_ascii_case(other)
    }
}

impl std::ops::Deref for DsaName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl PartialEq for DsaName {
    fn eq(&self, other: &DsaName) -> bool {
        self.is(&other.0)
    }
}

impl Eq for DsaName {}

impl PartialEq<str> for DsaName {
    fn eq(&self, other: &str) -> bool {
        self.is(other)
    }
}

impl PartialEq<&str> for DsaName {
    fn eq(&self, other: &&str) -> bool {
        self.is(other)
    }
}

impl PartialEq<String> for DsaName {
    fn eq(&self, other: &String) -> bool {
        self.is(other)
    }
}

impl Hash for DsaName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        for b in self.0.bytes() {
            state.write_u8(b.to_ascii_lowercase());
        }
        state.write_u8(0xff);
    }
}

impl Ord for DsaName {
    fn cmp(&self, other: &DsaName) -> std::cmp::Ordering {
        let a = self.0.bytes().map(|b| b.to_ascii_lowercase());
        a.cmp(other.0.bytes().map(|b| b.to_ascii_lowercase()))
    }
}

impl PartialOrd for DsaName {
    fn partial_cmp(&self, other: &DsaName) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for DsaName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for DsaName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl From<&str> for DsaName {
    fn from(s: &str) -> DsaName {
        DsaName::new(s)
    }
}

impl From<String> for DsaName {
    fn from(s: String) -> DsaName {
        DsaName(Arc::from(s))
    }
}

impl From<&DsaName> for String {
    fn from(n: &DsaName) -> String {
        n.0.to_string()
    }
}

impl serde::Serialize for DsaName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::DsaName;
    use std::collections::HashMap;

    #[test]
    fn names_differing_in_ascii_case_are_one_dsa() {
        let table = [
            ("D1", "d1", true),
            ("GROUP1-dsa", "group1-DSA", true),
            ("D1", "D2", false),
            ("D1", "D1 ", false),
            ("Ä1", "ä1", false),
        ];
        for (a, b, same) in table {
            let (x, y) = (DsaName::from(a), DsaName::from(b));
            assert_eq!(x == y, same, "{a} vs {b}");
            assert_eq!(x.cmp(&y).is_eq(), same, "{a} vs {b}");
            let mut m = HashMap::new();
            m.insert(x.clone(), 1);
            assert_eq!(m.contains_key(&y), same, "{a} vs {b} as keys");
            assert_eq!(x.to_string(), a, "spelling kept");
        }
    }
}

/// A DSA's place in the knowledge's DSA list (the snapshot's `dsas`, in
/// knowledge order), which the per-DSA state and connection pools of the
/// same snapshot follow: a typed index, valid within one snapshot (names
/// survive reloads, places may not).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DsaId(usize);

impl DsaId {
    /// The DSA at `index` in the list.
    pub fn new(index: usize) -> DsaId {
        DsaId(index)
    }

    /// Its index in the list.
    pub fn index(self) -> usize {
        self.0
    }

    /// Every place in a list of `len` DSAs, in order.
    pub fn all(len: usize) -> impl Iterator<Item = DsaId> {
        (0..len).map(DsaId::new)
    }
}

impl fmt::Debug for DsaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

impl fmt::Display for DsaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Lists that follow the knowledge's DSA order are indexed by place.
impl<T> std::ops::Index<DsaId> for Vec<T> {
    type Output = T;

    fn index(&self, id: DsaId) -> &T {
        &self[id.index()]
    }
}

impl<T> std::ops::Index<DsaId> for [T] {
    type Output = T;

    fn index(&self, id: DsaId) -> &T {
        &self[id.index()]
    }
}

impl<T> std::ops::IndexMut<DsaId> for Vec<T> {
    fn index_mut(&mut self, id: DsaId) -> &mut T {
        &mut self[id.index()]
    }
}
