//! The attribute types the DSAs know (their subschema's `attributeTypes`,
//! RFC 4512 4.1.2), as hidden attributes need them: every name and OID
//! of one type, and its supertype (`SUP`). From a rule's `hide` list and
//! the schema comes [`Hidden`]: the names entries lose (the hidden types
//! under every name, and all their subtypes) and the names filters,
//! compares and controls may not use (those, and every supertype: a
//! filter on `name` tests `sn`). Pure: no I/O.
//!
//! The schemas of all DSAs are merged: a name is taken as a name of a
//! hidden type when any DSA says so. While the schema of some DSA has not
//! been read, a name the merged schema does not know may be one of a
//! hidden type there, and is refused ([`Why::Unknown`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// One attribute type: its OID, its names and its supertype, lower case.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AttrType {
    pub oid: String,
    pub names: Vec<String>,
    pub sup: Option<String>,
}

impl AttrType {
    /// Its OID and names.
    fn keys(&self) -> impl Iterator<Item = &String> {
        std::iter::once(&self.oid).chain(&self.names)
    }
}

/// Why an attribute type description could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaError {
    /// Not `( numericoid ... )`.
    NotADescription,
    /// A quoted string without its closing quote.
    UnclosedQuote,
    /// A keyword without the value it takes.
    MissingValue(&'static str),
}

impl std::fmt::Display for SchemaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SchemaError::NotADescription => f.write_str("not an attribute type description"),
            SchemaError::UnclosedQuote => f.write_str("a quoted string is not closed"),
            SchemaError::MissingValue(k) => write!(f, "{k} without its value"),
        }
    }
}

impl std::error::Error for SchemaError {}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token<'a> {
    Open,
    Close,
    Quoted(&'a str),
    Word(&'a str),
}

fn tokens(s: &str) -> Result<Vec<Token<'_>>, SchemaError> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b' ' | b'\t' | b'\r' | b'\n' => i += 1,
            b'(' => {
                out.push(Token::Open);
                i += 1;
            }
            b')' => {
                out.push(Token::Close);
                i += 1;
            }
            b'\'' => {
                let rest = s.get(i + 1..).unwrap_or_default();
                let end = rest.find('\'').ok_or(SchemaError::UnclosedQuote)?;
                out.push(Token::Quoted(rest.get(..end).unwrap_or_default()));
                i += end + 2;
            }
            _ => {
                let start = i;
                while i < b.len()
                    && !matches!(b[i], b' ' | b'\t' | b'\r' | b'\n' | b'(' | b')' | b'\'')
                {
                    i += 1;
                }
                out.push(Token::Word(s.get(start..i).unwrap_or_default()));
            }
        }
    }
    Ok(out)
}

/// Keywords that take one word (an OID, a descriptor, a usage).
const ONE_WORD: [&str; 6] = ["SUP", "EQUALITY", "ORDERING", "SUBSTR", "SYNTAX", "USAGE"];

/// Parse one `attributeTypes` value (RFC 4512 4.1.2); keywords the
/// router has no use for (and extensions) are skipped.
pub fn parse(s: &str) -> Result<AttrType, SchemaError> {
    let t = tokens(s)?;
    let (Some(Token::Open), Some(Token::Word(oid)), Some(Token::Close)) =
        (t.first(), t.get(1), t.last())
    else {
        return Err(SchemaError::NotADescription);
    };
    let mut a = AttrType {
        oid: oid.to_ascii_lowercase(),
        ..AttrType::default()
    };
    let body = t.get(2..t.len() - 1).unwrap_or_default();
    let mut i = 0;
    while let Some(tok) = body.get(i) {
        i += 1;
        let Token::Word(k) = tok else {
            continue;
        };
        let k = k.to_ascii_uppercase();
        if k == "NAME" {
            a.names = qdescrs(body, &mut i).ok_or(SchemaError::MissingValue("NAME"))?;
        } else if let Some(&kw) = ONE_WORD.iter().find(|w| **w == k) {
            let Some(Token::Word(v)) = body.get(i) else {
                return Err(SchemaError::MissingValue(kw));
            };
            i += 1;
            if kw == "SUP" {
                a.sup = Some(v.to_ascii_lowercase());
            }
        } else {
            // DESC, extensions: quoted strings or a list of them; flags:
            // nothing.
            let _ = qdescrs(body, &mut i);
        }
    }
    Ok(a)
}

/// `qdescr` or `( qdescr ... )` at `*i`, lower case.
fn qdescrs(body: &[Token<'_>], i: &mut usize) -> Option<Vec<String>> {
    match body.get(*i)? {
        Token::Quoted(q) => {
            *i += 1;
            Some(vec![q.to_ascii_lowercase()])
        }
        Token::Open => {
            let mut out = Vec::new();
            *i += 1;
            loop {
                match body.get(*i)? {
                    Token::Quoted(q) => out.push(q.to_ascii_lowercase()),
                    Token::Close => break,
                    _ => {}
                }
                *i += 1;
            }
            *i += 1;
            Some(out)
        }
        _ => None,
    }
}

/// The merged schema of the DSAs.
#[derive(Debug, Default)]
pub struct Schema {
    types: Vec<AttrType>,
    /// Name or OID (lower case) to the types it names.
    by_key: HashMap<String, Vec<usize>>,
    /// Whether every DSA's schema was read.
    pub complete: bool,
}

impl Schema {
    /// A schema of `types`; `complete` when every DSA's was read.
    pub fn new(types: Vec<AttrType>, complete: bool) -> Schema {
        let mut by_key: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, t) in types.iter().enumerate() {
            for k in t.keys() {
                by_key.entry(k.clone()).or_default().push(i);
            }
        }
        Schema {
            types,
            by_key,
            complete,
        }
    }

    /// Whether a DSA knows `key` (lower case, no options).
    pub fn knows(&self, key: &str) -> bool {
        self.by_key.contains_key(key)
    }

    fn named(&self, key: &str) -> &[usize] {
        self.by_key.get(key).map_or(&[], Vec::as_slice)
    }

    /// Whether type `i` is `set` or a subtype of one of it.
    fn under(&self, i: usize, set: &HashSet<usize>) -> bool {
        let mut at = i;
        for _ in 0..=self.types.len() {
            if set.contains(&at) {
                return true;
            }
            let sup = self.types.get(at).and_then(|t| t.sup.as_deref());
            match sup.and_then(|s| self.named(s).first()) {
                Some(&up) => at = up,
                None => return false,
            }
        }
        false
    }

    /// What `hide` (lower case names, no options) hides with this schema.
    pub fn hidden(self: &Arc<Self>, hide: &[String]) -> Hidden {
        let mut seeds: HashSet<usize> = HashSet::new();
        for h in hide {
            seeds.extend(self.named(h));
        }
        // A type named like a hidden one in any DSA is hidden too.
        let mut more = true;
        while more {
            more = false;
            for (i, t) in self.types.iter().enumerate() {
                if !seeds.contains(&i)
                    && t.keys()
                        .any(|k| self.named(k).iter().any(|j| seeds.contains(j)))
                {
                    seeds.insert(i);
                    more = true;
                }
            }
        }
        let hidden: HashSet<usize> = (0..self.types.len())
            .filter(|&i| self.under(i, &seeds))
            .collect();
        let mut strip: HashSet<String> = hide.iter().cloned().collect();
        for &i in &hidden {
            strip.extend(
                self.types
                    .get(i)
                    .into_iter()
                    .flat_map(AttrType::keys)
                    .cloned(),
            );
        }
        let mut sups = HashSet::new();
        for &i in &hidden {
            let mut at = self.types.get(i).and_then(|t| t.sup.clone());
            while let Some(s) = at.take() {
                if strip.contains(&s) || !sups.insert(s.clone()) {
                    continue;
                }
                for &j in self.named(&s) {
                    let t = self.types.get(j);
                    sups.extend(t.into_iter().flat_map(AttrType::keys).cloned());
                    at = t.and_then(|t| t.sup.clone());
                }
            }
        }
        sups.retain(|s| !strip.contains(s));
        Hidden {
            schema: self.clone(),
            strip,
            sups,
            any: !hide.is_empty(),
        }
    }
}

/// Why a name may not be used in a filter, a compare or a control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// A name of a hidden attribute type or of one of its subtypes.
    Hidden,
    /// A name of a supertype of one (a filter on it tests the hidden).
    Supertype,
    /// A name no DSA whose schema was read knows, while another's was
    /// not read.
    Unknown,
}

/// What one rule's `hide` hides, with the schema it was resolved with.
#[derive(Debug, Default)]
pub struct Hidden {
    schema: Arc<Schema>,
    /// Names and OIDs entries lose (lower case).
    strip: HashSet<String>,
    /// Names and OIDs of their supertypes (lower case).
    sups: HashSet<String>,
    /// Whether anything is hidden.
    any: bool,
}

/// An attribute description without its options.
fn base(attr: &[u8]) -> &[u8] {
    attr.split(|&b| b == b';').next().unwrap_or_default()
}

fn lower(attr: &[u8]) -> String {
    String::from_utf8_lossy(base(attr))
        .trim()
        .to_ascii_lowercase()
}

impl Hidden {
    /// Whether anything is hidden.
    pub fn any(&self) -> bool {
        self.any
    }

    /// Whether an entry's attribute `attr` (options and all) is hidden.
    pub fn strips(&self, attr: &[u8]) -> bool {
        self.any && self.strip.contains(&lower(attr))
    }

    /// Why a filter, compare or control may not name `attr`, if not.
    pub fn refuses(&self, attr: &str) -> Option<Why> {
        if !self.any {
            return None;
        }
        let key = lower(attr.as_bytes());
        if self.strip.contains(&key) {
            Some(Why::Hidden)
        } else if self.sups.contains(&key) {
            Some(Why::Supertype)
        } else if !self.schema.complete && !self.schema.knows(&key) {
            Some(Why::Unknown)
        } else {
            None
        }
    }
}

#[cfg(test)]
#[path = "schema_tests.rs"]
mod tests;
