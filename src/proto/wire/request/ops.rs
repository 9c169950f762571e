//! One decoder per operation: what routing needs from its fields, and a
//! check of the fields that are forwarded untouched.
//!
//! The router reads little of most operations (the entry DN), but every
//! request is checked to be complete before it is forwarded: DSA
//! connections are shared by many clients, and a DSA closes the whole
//! connection on a protocol error. Each decoder returns the protocolError
//! diagnostic when a request is wrong.

use super::Op;
use crate::proto::wire::ber::{Elements, Tlv, CONTEXT};
use crate::proto::wire::frame::tag;

type Decoded = Result<Op, &'static str>;

/// Decode the protocolOp `op` (an application-class element).
pub(super) fn decode(op: Tlv) -> Decoded {
    let fields = op.cons().unwrap_or_default();
    match op.tag {
        tag::BIND_REQUEST => bind(fields),
        tag::UNBIND_REQUEST => Ok(Op::Unbind),
        tag::SEARCH_REQUEST => search(fields),
        tag::MODIFY_REQUEST => modify(fields),
        tag::ADD_REQUEST => add(fields),
        tag::DEL_REQUEST => delete(op.body),
        tag::MODDN_REQUEST => moddn(fields),
        tag::COMPARE_REQUEST => compare(fields),
        tag::ABANDON_REQUEST => abandon(op.body),
        tag::EXTENDED_REQUEST => extended(fields),
        _ => Err("unknown or malformed operation"),
    }
}

pub(super) fn string(t: Option<Tlv>) -> Option<String> {
    t.and_then(Tlv::prim)
        .and_then(|b| std::str::from_utf8(b).ok())
        .map(str::to_string)
}

pub(super) fn int(t: Option<Tlv>) -> Option<i64> {
    t.and_then(Tlv::prim).and_then(crate::proto::wire::ber::int)
}

/// The `entry` (first field) of an update or compare.
fn entry(fields: Elements) -> Result<String, &'static str> {
    string(fields.get(0)).ok_or("entry DN missing or not UTF-8")
}

fn bind(fields: Elements) -> Decoded {
    let version = int(fields.get(0)).ok_or("bind version missing")?;
    let dn = string(fields.get(1)).ok_or("bind name missing or not UTF-8")?;
    let auth = fields.get(2).ok_or("bind authentication missing")?;
    let simple = match (auth.class(), auth.num()) {
        (CONTEXT, 0) => Some(auth.prim().unwrap_or_default().to_vec()),
        _ => None,
    };
    // SaslCredentials ::= [3] SEQUENCE { mechanism, credentials OPTIONAL }
    let sasl = match (auth.class(), auth.num()) {
        (CONTEXT, 3) => Some(
            auth.cons()
                .and_then(|f| string(f.get(0)))
                .ok_or("SASL mechanism missing or not UTF-8")?,
        ),
        _ => None,
    };
    Ok(Op::Bind {
        version,
        dn,
        simple,
        sasl,
    })
}

fn search(fields: Elements) -> Decoded {
    let base = entry(fields)?;
    let scope = int(fields.get(1))
        .filter(|s| (0..=3).contains(s))
        .ok_or("bad search scope")? as u8;
    let filter = fields.get(6).ok_or("search filter missing")?;
    let attrs = fields.get(7).and_then(Tlv::cons);
    let shape_ok = fields.count() >= 8
        && fields.skip(2).take(4).all(|f| f.prim().is_some())
        && valid_filter(filter)
        && attrs.is_some_and(|mut a| a.all(|t| t.prim().is_some()));
    if !shape_ok {
        return Err("malformed search request");
    }
    let filter_is_present_oc = filter.is(CONTEXT, 7)
        && filter
            .prim()
            .is_some_and(|v| v.eq_ignore_ascii_case(b"objectclass"));
    // The requested attributes matter only to the root DSE, which the
    // router answers itself.
    let attrs = match (base.is_empty(), attrs) {
        (true, Some(a)) => a.filter_map(|t| string(Some(t))).collect(),
        _ => Vec::new(),
    };
    Ok(Op::Search {
        base,
        scope,
        attrs,
        filter_is_present_oc,
    })
}

fn modify(fields: Elements) -> Decoded {
    let ok = fields
        .get(1)
        .and_then(Tlv::cons)
        .is_some_and(|mut changes| {
            changes.all(|c| {
                let Some(c) = c.cons() else { return false };
                match (c.get(0), c.get(1), c.get(2)) {
                    (Some(op), Some(m), None) => {
                        op.prim().is_some() && m.cons().is_some_and(valid_attribute)
                    }
                    _ => false,
                }
            })
        });
    if !ok {
        return Err("malformed modify request");
    }
    Ok(Op::Modify { dn: entry(fields)? })
}

fn add(fields: Elements) -> Decoded {
    let ok = fields
        .get(1)
        .and_then(Tlv::cons)
        .is_some_and(|mut attrs| attrs.all(|a| a.cons().is_some_and(valid_attribute)));
    if !ok {
        return Err("malformed add request");
    }
    Ok(Op::Add { dn: entry(fields)? })
}

/// `DelRequest ::= [APPLICATION 10] LDAPDN`: the DN is the contents.
fn delete(body: &[u8]) -> Decoded {
    let dn = std::str::from_utf8(body).map_err(|_| "delete DN not UTF-8")?;
    Ok(Op::Delete { dn: dn.to_string() })
}

fn moddn(fields: Elements) -> Decoded {
    let ok = fields.count() >= 3 && fields.skip(1).all(|f| f.prim().is_some());
    if !ok {
        return Err("malformed modify DN request");
    }
    Ok(Op::ModDn { dn: entry(fields)? })
}

fn compare(fields: Elements) -> Decoded {
    let ok = fields.get(1).and_then(Tlv::cons).is_some_and(|ava| {
        matches!(
            (ava.get(0), ava.get(1), ava.get(2)),
            (Some(a), Some(v), None) if a.prim().is_some() && v.prim().is_some()
        )
    });
    if !ok {
        return Err("malformed compare request");
    }
    Ok(Op::Compare { dn: entry(fields)? })
}

/// `AbandonRequest ::= [APPLICATION 16] MessageID`: the ID is the contents.
fn abandon(body: &[u8]) -> Decoded {
    if body.len() > 4 {
        return Err("bad abandon target");
    }
    let target = crate::proto::wire::ber::int(body).ok_or("bad abandon target")?;
    Ok(Op::Abandon {
        target: target as i32,
    })
}

fn extended(fields: Elements) -> Decoded {
    let oid = { fields }
        .find(|t| t.is(CONTEXT, 0))
        .and_then(|t| string(Some(t)))
        .ok_or("extended request name missing")?;
    // LDAPOID, as for controls: `...4203.1.11.1\0` would be Password
    // Modify to slapd (a C string compare) and unknown to the router.
    if !super::is_numeric_oid(&oid) {
        return Err("extended request name is not a numeric OID");
    }
    let value = { fields }
        .find(|t| t.is(CONTEXT, 1))
        .and_then(Tlv::prim)
        .map(|v| v.to_vec());
    Ok(Op::Extended { oid, value })
}

/// `PartialAttribute ::= SEQUENCE { type, vals SET OF value }`.
fn valid_attribute(a: Elements) -> bool {
    match (a.get(0), a.get(1), a.get(2)) {
        (Some(t), Some(vals), None) => {
            t.prim().is_some()
                && vals
                    .cons()
                    .is_some_and(|mut v| v.all(|x| x.prim().is_some()))
        }
        _ => false,
    }
}

/// Whether a Filter (RFC 4511 4.5.1) is complete. Depth is bounded by the
/// whole-PDU check in [`super::decode`].
fn valid_filter(f: Tlv) -> bool {
    if f.class() != CONTEXT {
        return false;
    }
    fn exactly(f: Tlv, n: usize) -> Option<Elements> {
        f.cons().filter(|c| c.count() == n)
    }
    let pair = |f: Tlv| exactly(f, 2).is_some_and(|mut c| c.all(|x| x.prim().is_some()));
    match f.num() {
        0 | 1 => f
            .cons()
            .is_some_and(|mut c| c.get(0).is_some() && c.all(valid_filter)),
        2 => exactly(f, 1)
            .and_then(|c| c.get(0))
            .is_some_and(valid_filter),
        3 | 5 | 6 | 8 => pair(f),
        4 => exactly(f, 2).is_some_and(|c| {
            c.get(0).and_then(Tlv::prim).is_some()
                && c.get(1).and_then(Tlv::cons).is_some_and(|mut s| {
                    s.get(0).is_some()
                        && s.all(|x| x.class() == CONTEXT && x.num() <= 2 && x.prim().is_some())
                })
        }),
        7 => f.prim().is_some(),
        9 => f.cons().is_some_and(|mut c| {
            { c }.all(|x| x.class() == CONTEXT && (1..=4).contains(&x.num()) && x.prim().is_some())
                && c.any(|x| x.num() == 3)
        }),
        _ => false,
    }
}
