//! What a client's request controls name, for rules that hide
//! attributes: a control carrying a filter or an attribute list is
//! checked as the request itself would be. The assertion control (RFC
//! 4528) and the matched-values control (RFC 3876) carry filters; server
//! side sorting (RFC 2891) sort keys, whose order tells values; the pre-
//! and post-read controls (RFC 4527) the attributes of an entry returned
//! with the response. Controls known to carry neither go as they are;
//! any other is refused, since what it makes the DSA return or test is
//! not known. Pure: no I/O; values are read, never trusted.

use super::wire::{filter_value_names, Names};
use crate::proto::wire::ber;

pub const OID_ASSERTION: &str = "1.3.6.1.1.12";
pub const OID_MATCHED_VALUES: &str = "1.2.826.0.1.3344810.2.3";
pub const OID_SORT: &str = "1.2.840.113556.1.4.473";
pub const OID_PRE_READ: &str = "1.3.6.1.1.13.1";
pub const OID_POST_READ: &str = crate::proto::wire::postread::OID_POST_READ;

/// Controls that name no attribute and test no value.
const HARMLESS: [&str; 19] = [
    crate::proto::wire::request::OID_PAGED_RESULTS,
    crate::proto::wire::request::OID_PROXIED_AUTHZ,
    "2.16.840.1.113730.3.4.12",   // proxied authorization v1
    "2.16.840.1.113730.3.4.2",    // manageDsaIT
    "1.3.6.1.4.1.4203.1.10.1",    // subentries
    "1.3.6.1.4.1.4203.1.10.2",    // no-op
    "1.3.6.1.4.1.4203.1.9.1.1",   // sync request (the search's filter is checked)
    "2.16.840.1.113730.3.4.3",    // persistent search
    "2.16.840.1.113730.3.4.9",    // virtual list view (its sort keys are checked)
    "1.3.6.1.1.21.2",             // transaction specification
    "1.3.6.1.4.1.4203.666.5.12",  // relax rules
    "1.3.6.1.4.1.4203.666.5.11",  // manageDIT
    "1.2.840.113556.1.4.1413",    // permissive modify
    "1.2.840.113556.1.4.805",     // tree delete
    "1.3.6.1.4.1.42.2.27.8.5.1",  // password policy
    "2.16.840.1.113730.3.4.16",   // authorization identity
    "1.3.6.1.4.1.21008.108.63.1", // session tracking
    "1.3.6.1.1.22",               // don't use copy
    crate::observe::otel::OID_TRACE_CONTEXT,
];

/// What one control asks of a rule that hides attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    /// Nothing: it goes as it is.
    Nothing,
    /// A filter or sort keys: the attributes it names (and whether it
    /// has an extensible match without a type).
    Tests(Names),
    /// An entry's attributes returned with the response: those named,
    /// or `None` for every attribute (an empty list, `*`, `+`, `@class`).
    Returns(Option<Vec<String>>),
    /// A value that cannot be read, or a control not known.
    Unknown,
}

/// What control `oid` with `value` names.
pub fn named(oid: &str, value: Option<&[u8]>) -> Named {
    let read = || -> Option<Named> {
        let v = value?;
        Some(match oid {
            OID_ASSERTION => {
                let mut n = Names::default();
                filter_value_names(v, &mut n)?;
                Named::Tests(n)
            }
            OID_MATCHED_VALUES => Named::Tests(seq(v, filter_value_names)?),
            OID_SORT => Named::Tests(seq(v, sort_key)?),
            _ => Named::Returns(selection(v)?),
        })
    };
    match oid {
        OID_ASSERTION | OID_MATCHED_VALUES | OID_SORT | OID_PRE_READ | OID_POST_READ => {
            read().unwrap_or(Named::Unknown)
        }
        _ if HARMLESS.contains(&oid) => Named::Nothing,
        _ => Named::Unknown,
    }
}

/// A `SEQUENCE OF` whose items each add to the names.
fn seq(v: &[u8], item: impl Fn(&[u8], &mut Names) -> Option<()>) -> Option<Names> {
    let outer = ber::tagged(v, 0x30)?;
    if outer.len != v.len() {
        return None;
    }
    let mut n = Names::default();
    let mut rest = outer.body;
    while !rest.is_empty() {
        let t = ber::tlv(rest).ok()?;
        item(rest.get(..t.len)?, &mut n)?;
        rest = rest.get(t.len..)?;
    }
    Some(n)
}

/// One `SortKey ::= SEQUENCE { attributeType, orderingRule [0]
/// OPTIONAL, reverseOrder [1] }`: its attribute type.
fn sort_key(key: &[u8], n: &mut Names) -> Option<()> {
    let k = ber::tagged(key, 0x30)?;
    let ty = ber::tagged(k.body, 0x04)?;
    n.attrs.push(String::from_utf8_lossy(ty.body).into_owned());
    Some(())
}

/// `AttributeSelection ::= SEQUENCE OF LDAPString`: the names, or
/// `None` inside for every attribute.
fn selection(v: &[u8]) -> Option<Option<Vec<String>>> {
    let outer = ber::tagged(v, 0x30)?;
    if outer.len != v.len() {
        return None;
    }
    let mut names = Vec::new();
    let mut rest = outer.body;
    let mut all = false;
    while !rest.is_empty() {
        let t = ber::tagged(rest, 0x04)?;
        let s = String::from_utf8_lossy(t.body).trim().to_string();
        all |= s == "*" || s == "+" || s.starts_with('@');
        if s != "1.1" {
            names.push(s);
        }
        rest = rest.get(t.len..)?;
    }
    all |= outer.body.is_empty();
    Some((!all).then_some(names))
}

#[cfg(test)]
#[path = "controls_tests.rs"]
mod tests;
