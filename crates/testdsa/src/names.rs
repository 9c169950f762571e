//! DN splitting and normalization for the test DSA.
//!
//! This is deliberately simpler than the crate's real DN module: a DN is a
//! comma-separated list of RDNs (backslash escapes and double-quoted values
//! are honoured when splitting), and an RDN is normalized by lower-casing the
//! attribute type and the unescaped, trimmed value. Multi-valued RDNs
//! (`a=1+b=2`) have their AVAs sorted so that their order does not matter.
//!
//! The store key of a DN is the list of its normalized RDNs in reverse order
//! (suffix first), so all entries of a subtree are contiguous in a
//! `BTreeMap` ordered by key.

/// A store key: normalized RDNs, suffix first. The root (empty DN) is the
/// empty key.
pub type Key = Vec<String>;

/// Splits `s` at every unescaped, unquoted occurrence of `sep`.
fn split_unescaped(s: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    let mut quoted = false;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        } else if c == sep && !quoted {
            parts.push(&s[start..i]);
            start = i + c.len_utf8();
        }
    }
    parts.push(&s[start..]);
    parts
}

/// Splits a DN into its RDN strings as written (trimmed). The empty DN (or
/// one of only spaces) has no RDNs.
pub fn split_rdns(dn: &str) -> Result<Vec<String>, String> {
    if dn.trim().is_empty() {
        return Ok(Vec::new());
    }
    split_unescaped(dn, ',')
        .into_iter()
        .map(|rdn| {
            let rdn = rdn.trim();
            if rdn.is_empty() {
                Err(format!("invalid DN {dn:?}: empty RDN"))
            } else if !rdn.contains('=') {
                Err(format!("invalid DN {dn:?}: RDN {rdn:?} has no '='"))
            } else {
                Ok(rdn.to_string())
            }
        })
        .collect()
}

/// Removes backslash escapes (`\,` and `\2C` forms) and surrounding double
/// quotes from an attribute value.
fn unescape(value: &str) -> String {
    let value = value.trim();
    let value = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value);
    let mut bytes = Vec::with_capacity(value.len());
    let raw = value.as_bytes();
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'\\' && i + 1 < raw.len() {
            let hex = raw.get(i + 1..i + 3).and_then(|h| {
                std::str::from_utf8(h)
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
            });
            match hex {
                Some(b) => {
                    bytes.push(b);
                    i += 3;
                }
                None => {
                    bytes.push(raw[i + 1]);
                    i += 2;
                }
            }
        } else {
            bytes.push(raw[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The attribute value assertions of one RDN as `(type, value)`, with the
/// value unescaped but not case-folded.
pub fn rdn_avas(rdn: &str) -> Result<Vec<(String, String)>, String> {
    split_unescaped(rdn, '+')
        .into_iter()
        .map(|ava| {
            let (ty, value) = ava
                .split_once('=')
                .ok_or_else(|| format!("invalid RDN {rdn:?}: {ava:?} has no '='"))?;
            let ty = ty.trim();
            if ty.is_empty() {
                return Err(format!("invalid RDN {rdn:?}: empty attribute type"));
            }
            Ok((ty.to_string(), unescape(value)))
        })
        .collect()
}

/// Normalizes one RDN: `type=value` lower-cased, AVAs sorted and joined by `+`.
pub fn normalize_rdn(rdn: &str) -> Result<String, String> {
    let mut avas: Vec<String> = rdn_avas(rdn)?
        .into_iter()
        .map(|(t, v)| format!("{}={}", t.to_lowercase(), v.trim().to_lowercase()))
        .collect();
    avas.sort();
    Ok(avas.join("+"))
}

/// The store key of a DN.
pub fn dn_key(dn: &str) -> Result<Key, String> {
    let mut key = split_rdns(dn)?
        .iter()
        .map(|r| normalize_rdn(r))
        .collect::<Result<Key, String>>()?;
    key.reverse();
    Ok(key)
}

/// True when two DNs name the same entry (per this module's normalization).
/// Unparsable DNs are never equal.
pub fn dn_eq(a: &str, b: &str) -> bool {
    matches!((dn_key(a), dn_key(b)), (Ok(a), Ok(b)) if a == b)
}

/// Rebuilds a DN string from RDN strings (leaf first).
pub fn join_rdns(rdns: &[String]) -> String {
    rdns.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_case_and_space_insensitive() {
        let a = dn_key("CN=Alice Smith , OU=People,o=Acme").expect("parse");
        let b = dn_key("cn=alice smith,ou=people,O=ACME").expect("parse");
        assert_eq!(a, b);
        assert_eq!(a, vec!["o=acme", "ou=people", "cn=alice smith"]);
        assert!(dn_key("").expect("root").is_empty());
    }

    #[test]
    fn escapes_and_multivalued_rdns() {
        assert_eq!(
            split_rdns(r"cn=Smith\, John,o=x").expect("split"),
            vec![r"cn=Smith\, John", "o=x"]
        );
        assert_eq!(
            dn_key(r"cn=Smith\2C John,o=x").expect("hex"),
            dn_key(r#"cn="Smith, John",o=x"#).expect("quoted")
        );
        assert_eq!(
            normalize_rdn("uid=a+CN=B").expect("rdn"),
            normalize_rdn("cn=b+uid=A").expect("rdn")
        );
        assert!(dn_key("cn=a,,o=x").is_err());
        assert!(dn_key("novalue,o=x").is_err());
        assert!(dn_eq("O=X", "o=x "));
    }
}
