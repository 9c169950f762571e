//! Distinguished names: parsing, normalization and ancestry.
//!
//! Two notations reach the router. LDAP strings (RFC 4514, leaf first:
//! `ou=Human Resources,o=DEMOCORP,c=AU`) arrive on the wire and may appear in
//! knowledge; knowledge files write DNs root first, one RDN per angle-bracket
//! pair (`<c AU><o DEMOCORP><ou "Human Resources">`). Both parse into one
//! [`Dn`], which keeps the display form and a normalized form side by side.
//!
//! Comparison follows architecture.md, "Partitions and comparison": attribute types compare case-insensitively
//! (a few well-known OIDs are mapped to their short names), values compare
//! after escapes are decoded in their RFC 4518 prepared form ([`prep`]:
//! mapped, case folded, NFKC, leading, trailing and repeated inner spaces
//! dropped), as DSAs compare them, and the attribute-value assertions of a
//! multi-valued RDN compare in any order (they are kept sorted). Every DN
//! the router compares or keys (routing, the failed-bind defence, rates,
//! policy identities, group members) goes through this one normalization.
//!
//! The two notations have a parser each: `ldap` (RFC 4514 strings) and
//! `angle` (the knowledge notation).

mod angle;
mod ldap;
pub mod prep;

use std::fmt;

/// Why a DN string was rejected; `offset` is a character offset into the
/// input, so callers can point a caret at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnError {
    pub offset: usize,
    pub message: String,
}

impl fmt::Display for DnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at character {})", self.message, self.offset + 1)
    }
}

impl std::error::Error for DnError {}

/// One attribute-value assertion: `type=value`, or `type=#hexstring`
/// (RFC 4514 2.4: the BER encoding of the value, in hex), which is kept as
/// written and never decoded (that would need the attribute's syntax):
/// it is written back as a hexstring, and is not equal to the string value
/// `\#...`.
///
/// Its four strings (the type and the decoded value as written, and their
/// normalized forms) share one buffer: a DN is parsed for every operation
/// the router routes, and one allocation per AVA is a quarter of four.
#[derive(Clone)]
pub struct Ava {
    /// Type, value, normalized type, normalized value, one after another.
    text: String,
    /// Where the first three end in `text`.
    ends: [usize; 3],
    /// The value is a hexstring (`#` and hex digits).
    hex: bool,
}

impl Ava {
    pub fn new(attr: &str, value: &str) -> Ava {
        Ava::build(attr, value, false)
    }

    /// An AVA whose value is the hexstring `hex` (`#04024142`; the caller
    /// checked it: `#` and an even number of hex digits).
    pub fn hex(attr: &str, hex: &str) -> Ava {
        Ava::build(attr, hex, true)
    }

    fn build(attr: &str, value: &str, hex: bool) -> Ava {
        let mut text = String::with_capacity(2 * (attr.len() + value.len()) + 8);
        text.push_str(attr);
        let a = text.len();
        text.push_str(value);
        let v = text.len();
        normalize_attr_into(attr, &mut text);
        let n = text.len();
        normalize_value_into(value, &mut text);
        Ava {
            text,
            ends: [a, v, n],
            hex,
        }
    }

    /// Whether the value is a hexstring ([`Ava::hex`]).
    pub fn is_hex(&self) -> bool {
        self.hex
    }

    /// The attribute type as written.
    pub fn attr(&self) -> &str {
        &self.text[..self.ends[0]]
    }

    /// The decoded value as written (escapes resolved); a hexstring's `#`
    /// and hex digits.
    pub fn value(&self) -> &str {
        &self.text[self.ends[0]..self.ends[1]]
    }

    fn norm_attr(&self) -> &str {
        &self.text[self.ends[1]..self.ends[2]]
    }

    fn norm_value(&self) -> &str {
        &self.text[self.ends[2]..]
    }

    fn key(&self) -> (&str, &str) {
        (self.norm_attr(), self.norm_value())
    }
}

impl fmt::Debug for Ava {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ava")
            .field("attr", &self.attr())
            .field("value", &self.value())
            .field("norm_attr", &self.norm_attr())
            .field("norm_value", &self.norm_value())
            .field("hex", &self.hex)
            .finish()
    }
}

/// A relative distinguished name: one or more AVAs, kept sorted by their
/// normalized form so that `cn=a+uid=b` equals `uid=b+cn=a`.
#[derive(Clone)]
pub struct Rdn {
    avas: Avas,
}

/// An RDN's AVAs: almost always one, kept without a vector of its own.
#[derive(Debug, Clone)]
enum Avas {
    One(Ava),
    Many(Vec<Ava>),
}

impl Rdn {
    pub fn new(mut avas: Vec<Ava>) -> Rdn {
        if avas.len() == 1 {
            if let Some(a) = avas.pop() {
                return Rdn::one(a);
            }
        }
        avas.sort_by(|a, b| (a.key(), a.hex).cmp(&(b.key(), b.hex)));
        Rdn {
            avas: Avas::Many(avas),
        }
    }

    /// An RDN of one AVA.
    pub fn one(ava: Ava) -> Rdn {
        Rdn {
            avas: Avas::One(ava),
        }
    }

    pub fn avas(&self) -> &[Ava] {
        match &self.avas {
            Avas::One(a) => std::slice::from_ref(a),
            Avas::Many(v) => v,
        }
    }
}

impl fmt::Debug for Rdn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rdn").field("avas", &self.avas()).finish()
    }
}

impl PartialEq for Rdn {
    fn eq(&self, other: &Rdn) -> bool {
        let (a, b) = (self.avas(), other.avas());
        a.len() == b.len()
            && a.iter()
                .zip(b.iter())
                .all(|(a, b)| a.key() == b.key() && a.hex == b.hex)
    }
}

impl Eq for Rdn {}

/// A distinguished name, RDNs stored leaf first as in LDAP strings.
#[derive(Debug, Clone, Default)]
pub struct Dn {
    rdns: Vec<Rdn>,
}

impl PartialEq for Dn {
    fn eq(&self, other: &Dn) -> bool {
        self.rdns == other.rdns
    }
}

impl Eq for Dn {}

/// The key of the DN made of `rdns`.
fn suffix_key(rdns: &[Rdn]) -> u64 {
    use std::hash::Hasher;
    let mut h = crate::base::fasthash::FastHasher::default();
    Dn::hash_rdns(rdns, &mut h);
    h.finish()
}

impl Dn {
    fn hash_rdns<H: std::hash::Hasher>(rdns: &[Rdn], state: &mut H) {
        use std::hash::Hash;
        for rdn in rdns {
            for ava in rdn.avas() {
                ava.norm_attr().hash(state);
                ava.norm_value().hash(state);
                if ava.hex {
                    0xfeu8.hash(state);
                }
            }
            0xffu8.hash(state);
        }
    }
}

impl std::hash::Hash for Dn {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        Dn::hash_rdns(&self.rdns, state);
    }
}

impl Dn {
    /// The null DN (the root).
    pub fn root() -> Dn {
        Dn { rdns: Vec::new() }
    }

    pub fn from_rdns(rdns: Vec<Rdn>) -> Dn {
        Dn { rdns }
    }

    pub fn is_root(&self) -> bool {
        self.rdns.is_empty()
    }

    /// Number of RDNs.
    pub fn depth(&self) -> usize {
        self.rdns.len()
    }

    /// RDNs, leaf first.
    pub fn rdns(&self) -> &[Rdn] {
        &self.rdns
    }

    /// A hash of the DN that equal DNs share (as [`Hash`] hashes it).
    pub fn key(&self) -> u64 {
        suffix_key(&self.rdns)
    }

    /// [`Dn::key`] of the DN itself, then of each ancestor up to the
    /// root (deepest first).
    pub fn ancestor_keys(&self) -> impl Iterator<Item = u64> + '_ {
        (0..=self.rdns.len()).map(move |k| suffix_key(&self.rdns[k..]))
    }

    /// True when `self` is `other` or one of its ancestors.
    pub fn is_ancestor_or_self_of(&self, other: &Dn) -> bool {
        let n = self.rdns.len();
        let m = other.rdns.len();
        n <= m && self.rdns[..] == other.rdns[m - n..]
    }

    /// The ancestor with `depth` RDNs (the root for 0).
    pub fn ancestor(&self, depth: usize) -> Dn {
        let n = self.rdns.len();
        let keep = depth.min(n);
        Dn {
            rdns: self.rdns[n - keep..].to_vec(),
        }
    }

    /// The normalized LDAP string: lowercase types and values, sorted AVAs,
    /// no insignificant spaces. Equal DNs have equal normalized strings.
    pub fn normalized(&self) -> String {
        self.ldap_string(|a| a.key())
    }

    /// The RFC 4514 string of the types and values `pick` chooses
    /// (hexstrings as they are, other values escaped).
    fn ldap_string(&self, pick: impl Fn(&Ava) -> (&str, &str)) -> String {
        let mut out = String::new();
        for (i, rdn) in self.rdns.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            for (j, ava) in rdn.avas().iter().enumerate() {
                if j > 0 {
                    out.push('+');
                }
                let (attr, value) = pick(ava);
                out.push_str(attr);
                out.push('=');
                if ava.hex {
                    out.push_str(value);
                } else {
                    escape_value_into(value, &mut out);
                }
            }
        }
        out
    }

    /// Parse an RFC 4514 string (leaf first). Legacy RFC 2253/1779 forms are
    /// accepted where unambiguous: `;` as a separator, quoted values, spaces
    /// around `=`, `,` and `+`.
    pub fn parse_ldap(s: &str) -> Result<Dn, DnError> {
        ldap::parse(s)
    }

    /// Parse the knowledge notation, root first: `<c AU><o DEMOCORP>`.
    /// `<>` and the empty string are the null DN. An AVA inside brackets is
    /// `type value` or `type=value`; `+` joins AVAs of one RDN; a value with
    /// spaces or specials is quoted.
    pub fn parse_knowledge(s: &str) -> Result<Dn, DnError> {
        angle::parse(s)
    }

    /// Parse either notation: angle-bracket form when the text starts with
    /// `<`, LDAP string form otherwise.
    pub fn parse_any(s: &str) -> Result<Dn, DnError> {
        let t = s.trim();
        if t.starts_with('<') || t == "\"\"" {
            angle::parse(s)
        } else {
            Dn::parse_ldap(s)
        }
    }
}

impl fmt::Display for Dn {
    /// The LDAP string form as written (types and value case kept), escaped
    /// per RFC 4514.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.ldap_string(|a| (a.attr(), a.value())))
    }
}

/// Append the normalized form of attribute type `attr` to `out`:
/// lower case, a few well-known OIDs and long names mapped to their short
/// names.
fn normalize_attr_into(attr: &str, out: &mut String) {
    let start = out.len();
    out.push_str(attr.trim());
    out[start..].make_ascii_lowercase();
    // `OID.2.5.4.3` (RFC 1779's form) is `2.5.4.3`; `oid.cn` is a type of
    // its own, not `cn`.
    let numeric_oid = |rest: &str| {
        !rest.is_empty()
            && rest
                .split('.')
                .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    if out[start..].strip_prefix("oid.").is_some_and(numeric_oid) {
        out.drain(start..start + 4);
    }
    let short = match &out[start..] {
        "2.5.4.3" => "cn",
        "2.5.4.6" => "c",
        "2.5.4.7" => "l",
        "2.5.4.8" => "st",
        "2.5.4.9" => "street",
        "2.5.4.10" => "o",
        "2.5.4.11" => "ou",
        "0.9.2342.19200300.100.1.1" => "uid",
        "0.9.2342.19200300.100.1.25" => "dc",
        "commonname" => "cn",
        "countryname" => "c",
        "organizationname" => "o",
        "organizationalunitname" => "ou",
        "userid" => "uid",
        "domaincomponent" => "dc",
        "localityname" => "l",
        "stateorprovincename" => "st",
        _ => return,
    };
    out.truncate(start);
    out.push_str(short);
}

/// Append `value` prepared as DSAs compare it ([`prep`]: RFC 4518
/// mapping, case folding, NFKC, insignificant spaces) to `out`.
fn normalize_value_into(value: &str, out: &mut String) {
    prep::prepare_into(value, out);
}

/// RFC 4514 section 2.4 escaping.
fn escape_value_into(value: &str, out: &mut String) {
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, '"' | '+' | ',' | ';' | '<' | '>' | '\\')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if c == '\0' {
            out.push_str("\\00");
        } else if special {
            out.push('\\');
            out.push(c);
        } else {
            out.push(c);
        }
    }
}

fn is_attr_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_'
}

fn check_attr(attr: &str, offset: usize) -> Result<(), DnError> {
    let err = |m: &str| DnError {
        offset,
        message: m.to_string(),
    };
    let first = attr
        .chars()
        .next()
        .ok_or_else(|| err("missing attribute type"))?;
    if !attr.chars().all(is_attr_char) {
        return Err(err("invalid character in attribute type"));
    }
    if first.is_ascii_digit() {
        // numericoid: digits separated by single dots
        if attr
            .split('.')
            .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(err("invalid numeric OID attribute type"));
        }
    } else if !first.is_ascii_alphabetic() {
        return Err(err("attribute type must start with a letter or digit"));
    }
    Ok(())
}

impl From<DnError> for crate::base::error::Error {
    fn from(e: DnError) -> crate::base::error::Error {
        crate::base::error::Error::new(
            crate::base::error::Kind::InvalidDn,
            format!("invalid DN: {e}"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> String {
        match Dn::parse_any(s) {
            Ok(dn) => dn.normalized(),
            Err(e) => format!("ERR {e}"),
        }
    }

    #[test]
    fn equivalent_forms_normalize_alike() {
        let cases: &[(&str, &str)] = &[
            ("o=DEMOCORP,c=AU", "o=democorp,c=au"),
            ("O = DemoCorp , C=au", "o=democorp,c=au"),
            ("<c AU><o DEMOCORP>", "o=democorp,c=au"),
            ("<c=AU><o=DEMOCORP>", "o=democorp,c=au"),
            (
                "<c AU><o DEMOCORP><ou \"Human Resources\">",
                "ou=human resources,o=democorp,c=au",
            ),
            (
                "ou=Human   Resources ,o=DEMOCORP;c=AU",
                "ou=human resources,o=democorp,c=au",
            ),
            ("cn=a+uid=b,o=x", "cn=a+uid=b,o=x"),
            ("uid=b+cn=a,o=x", "cn=a+uid=b,o=x"),
            ("cn=J\\2c Smith,o=x", "cn=j\\, smith,o=x"),
            ("cn=\"J, Smith\",o=x", "cn=j\\, smith,o=x"),
            ("2.5.4.3=Bob,O=X", "cn=bob,o=x"),
            ("CN=Bob\\ ,o=x", "cn=bob,o=x"),
            ("", ""),
            ("<>", ""),
            ("\"\"", ""),
            ("cn=#04024869,o=x", "cn=#04024869,o=x"),
            ("cn=#0402486A,o=x", "cn=#0402486a,o=x"),
            ("cn=\\#04024869,o=x", "cn=\\#04024869,o=x"),
            ("cn=Émile,o=X", "cn=émile,o=x"),
        ];
        for (input, want) in cases {
            assert_eq!(n(input), *want, "input {input:?}");
        }
    }

    #[test]
    fn invalid_dns_are_errors() {
        for bad in [
            "cn",
            "=x",
            "cn=x,",
            "cn=x,,o=y",
            "cn=\"x",
            "cn=x\\",
            "cn=x\\zz",
            "1.=x",
            "c n=x",
            "<c AU",
            "<c AU><>",
            "<c>",
            "c AU>",
            "cn=a<b",
            "cn=#abc",
        ] {
            assert!(Dn::parse_any(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn ancestry() {
        let p = Dn::parse_any("<c AU><o DEMOCORP>").expect("dn");
        let c = Dn::parse_any("cn=x, ou=y, o=democorp, c=au").expect("dn");
        assert!(p.is_ancestor_or_self_of(&c));
        assert!(p.is_ancestor_or_self_of(&p));
        assert!(!c.is_ancestor_or_self_of(&p));
        assert!(Dn::root().is_ancestor_or_self_of(&c));
        assert_eq!(c.ancestor(2), p);
    }

    /// A hexstring value is written back as one, and is not the string
    /// value that starts with `#`.
    #[test]
    fn hex_values_stay_hexstrings() {
        for (s, shown) in [
            ("cn=#04024142,o=x", "cn=#04024142,o=x"),
            ("CN = #0402414A , o=x", "CN=#0402414A,o=x"),
            ("cn=#04024142+uid=a,o=x", "cn=#04024142+uid=a,o=x"),
            ("cn=\\#04024142,o=x", "cn=\\#04024142,o=x"),
            ("cn=\\2304024142,o=x", "cn=\\#04024142,o=x"),
        ] {
            let dn = Dn::parse_ldap(s).expect("dn");
            assert_eq!(dn.to_string(), shown, "{s}");
            assert_eq!(Dn::parse_ldap(shown).expect("dn"), dn, "{s}");
        }
        let hex = Dn::parse_ldap("cn=#04024142,o=x").expect("dn");
        let string = Dn::parse_ldap("cn=\\#04024142,o=x").expect("dn");
        assert!(hex.rdns()[0].avas()[0].is_hex());
        assert!(!string.rdns()[0].avas()[0].is_hex());
        assert_ne!(hex, string);
        assert_ne!(hex.key(), string.key());
        assert_eq!(hex, Dn::parse_ldap("CN=#04024142,O=X").expect("dn"));
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "cn=J\\, Smith+uid=7,o=DEMOCORP,c=AU",
            "cn=\\ lead,o=x",
            "cn=a\\\\b",
        ] {
            let dn = Dn::parse_ldap(s).expect("dn");
            let again = Dn::parse_ldap(&dn.to_string()).expect("dn");
            assert_eq!(dn, again, "{s}");
        }
    }
}
