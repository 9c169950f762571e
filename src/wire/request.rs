//! Decoding a request just enough to route it: the operation, its target
//! DN, and the controls the router must act on. `ldap3_lber` parses the BER
//! (with a nesting limit); the router reads fields from the tag tree and
//! never re-encodes what it forwards.

use super::frame::tag;
use lber::common::TagClass;
use lber::structure::{StructureTag, PL};

pub const OID_PROXIED_AUTHZ: &str = "2.16.840.1.113730.3.4.18";
pub const OID_PAGED_RESULTS: &str = "1.2.840.113556.1.4.319";
pub const OID_WHOAMI: &str = "1.3.6.1.4.1.4203.1.11.3";
pub const OID_PASSWD_MODIFY: &str = "1.3.6.1.4.1.4203.1.11.1";
pub const OID_START_TLS: &str = "1.3.6.1.4.1.1466.20037";
pub const OID_NOTICE_OF_DISCONNECTION: &str = "1.3.6.1.4.1.1466.20036";

/// One request control.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Control {
    pub oid: String,
    pub critical: bool,
    pub value: Option<Vec<u8>>,
}

/// What the router needs to know about a request.
#[derive(Clone, PartialEq, Eq)]
pub enum Op {
    Bind {
        version: i64,
        dn: String,
        simple: Option<Vec<u8>>,
    },
    Unbind,
    Search {
        base: String,
        scope: u8,
        attrs: Vec<String>,
        filter_is_present_oc: bool,
    },
    Modify {
        dn: String,
    },
    Add {
        dn: String,
    },
    Delete {
        dn: String,
    },
    ModDn {
        dn: String,
    },
    Compare {
        dn: String,
    },
    Abandon {
        target: i32,
    },
    Extended {
        oid: String,
        value: Option<Vec<u8>>,
    },
}

impl std::fmt::Debug for Op {
    /// Hand-written: a bind's password never prints.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Bind {
                version,
                dn,
                simple,
            } => f
                .debug_struct("Bind")
                .field("version", version)
                .field("dn", dn)
                .field("simple", &simple.as_ref().map(|_| "***"))
                .finish(),
            Op::Unbind => f.write_str("Unbind"),
            Op::Search { base, scope, .. } => f
                .debug_struct("Search")
                .field("base", base)
                .field("scope", scope)
                .finish(),
            Op::Modify { dn } => f.debug_struct("Modify").field("dn", dn).finish(),
            Op::Add { dn } => f.debug_struct("Add").field("dn", dn).finish(),
            Op::Delete { dn } => f.debug_struct("Delete").field("dn", dn).finish(),
            Op::ModDn { dn } => f.debug_struct("ModDn").field("dn", dn).finish(),
            Op::Compare { dn } => f.debug_struct("Compare").field("dn", dn).finish(),
            Op::Abandon { target } => f.debug_struct("Abandon").field("target", target).finish(),
            Op::Extended { oid, .. } => f.debug_struct("Extended").field("oid", oid).finish(),
        }
    }
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Bind { .. } => "bind",
            Op::Unbind => "unbind",
            Op::Search { .. } => "search",
            Op::Modify { .. } => "modify",
            Op::Add { .. } => "add",
            Op::Delete { .. } => "delete",
            Op::ModDn { .. } => "moddn",
            Op::Compare { .. } => "compare",
            Op::Abandon { .. } => "abandon",
            Op::Extended { .. } => "extended",
        }
    }

    /// The response tag for errors the router answers itself.
    pub fn response_tag(&self) -> Option<u8> {
        Some(match self {
            Op::Bind { .. } => 0x61,
            Op::Search { .. } => 0x65,
            Op::Modify { .. } => 0x67,
            Op::Add { .. } => 0x69,
            Op::Delete { .. } => 0x6b,
            Op::ModDn { .. } => 0x6d,
            Op::Compare { .. } => 0x6f,
            Op::Extended { .. } => 0x78,
            Op::Unbind | Op::Abandon { .. } => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub msgid: i32,
    pub op: Op,
    pub controls: Vec<Control>,
}

impl Request {
    pub fn control(&self, oid: &str) -> Option<&Control> {
        self.controls.iter().find(|c| c.oid == oid)
    }
}

/// Why a request could not be decoded: the message ID (when known) and a
/// description for the protocolError diagnostic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    pub msgid: Option<i32>,
    pub message: String,
}

fn err(msgid: Option<i32>, m: &str) -> DecodeError {
    DecodeError {
        msgid,
        message: m.to_string(),
    }
}

fn prim(t: &StructureTag) -> Option<&[u8]> {
    match &t.payload {
        PL::P(v) => Some(v),
        PL::C(_) => None,
    }
}

fn cons(t: &StructureTag) -> Option<&[StructureTag]> {
    match &t.payload {
        PL::C(v) => Some(v),
        PL::P(_) => None,
    }
}

fn string(t: Option<&StructureTag>) -> Option<String> {
    t.and_then(prim)
        .and_then(|b| String::from_utf8(b.to_vec()).ok())
}

fn int(t: Option<&StructureTag>) -> Option<i64> {
    let b = t.and_then(prim)?;
    if b.is_empty() || b.len() > 8 {
        return None;
    }
    let mut v: i64 = if b[0] & 0x80 != 0 { -1 } else { 0 };
    for &x in b {
        v = (v << 8) | x as i64;
    }
    Some(v)
}

/// Nesting limit for request PDUs (filters nest); deeper is an attack.
pub const MAX_DEPTH: usize = 48;

/// Decode a complete request PDU.
pub fn decode(pdu: &[u8]) -> Result<Request, DecodeError> {
    let (rest, msg) = lber::parse::Parser::new(MAX_DEPTH)
        .parse(pdu)
        .map_err(|_| err(None, "malformed BER or nesting too deep"))?;
    if !rest.is_empty() {
        return Err(err(None, "trailing bytes after the PDU"));
    }
    let parts = cons(&msg).ok_or_else(|| err(None, "LDAPMessage is not constructed"))?;
    let msgid = int(parts.first())
        .filter(|v| (0..=i32::MAX as i64).contains(v))
        .ok_or_else(|| err(None, "bad message ID"))? as i32;
    let id = Some(msgid);
    let op = parts.get(1).ok_or_else(|| err(id, "missing protocolOp"))?;
    if op.class != TagClass::Application {
        return Err(err(id, "protocolOp is not an application tag"));
    }
    let fields = cons(op).unwrap_or_default();
    let dn_field =
        || string(fields.first()).ok_or_else(|| err(id, "entry DN missing or not UTF-8"));
    let constructed = matches!(op.payload, PL::C(_));
    let op_tag =
        ((op.class as u8) << 6) | if constructed { 0x20 } else { 0 } | (op.id as u8 & 0x1f);
    let op = match (op.id, op_tag) {
        (0, tag::BIND_REQUEST) => {
            let version = int(fields.first()).ok_or_else(|| err(id, "bind version missing"))?;
            let dn =
                string(fields.get(1)).ok_or_else(|| err(id, "bind name missing or not UTF-8"))?;
            let auth = fields
                .get(2)
                .ok_or_else(|| err(id, "bind authentication missing"))?;
            let simple = match (auth.class, auth.id) {
                (TagClass::Context, 0) => Some(prim(auth).unwrap_or_default().to_vec()),
                _ => None,
            };
            Op::Bind {
                version,
                dn,
                simple,
            }
        }
        (2, tag::UNBIND_REQUEST) => Op::Unbind,
        (3, tag::SEARCH_REQUEST) => {
            let base = dn_field()?;
            let scope = int(fields.get(1))
                .filter(|s| (0..=3).contains(s))
                .ok_or_else(|| err(id, "bad search scope"))? as u8;
            let filter = fields
                .get(6)
                .ok_or_else(|| err(id, "search filter missing"))?;
            let shape_ok = fields.len() >= 8
                && fields[2..6].iter().all(|f| prim(f).is_some())
                && valid_filter(filter)
                && cons(&fields[7]).is_some_and(|a| a.iter().all(|t| prim(t).is_some()));
            if !shape_ok {
                return Err(err(id, "malformed search request"));
            }
            let filter_is_present_oc = filter.class == TagClass::Context
                && filter.id == 7
                && prim(filter).is_some_and(|v| v.eq_ignore_ascii_case(b"objectclass"));
            let attrs = fields
                .get(7)
                .and_then(cons)
                .map(|a| a.iter().filter_map(|t| string(Some(t))).collect())
                .unwrap_or_default();
            Op::Search {
                base,
                scope,
                attrs,
                filter_is_present_oc,
            }
        }
        (6, tag::MODIFY_REQUEST) => {
            let ok = fields.get(1).and_then(cons).is_some_and(|changes| {
                changes.iter().all(|c| match cons(c) {
                    Some([op, m]) => prim(op).is_some() && cons(m).is_some_and(valid_attribute),
                    _ => false,
                })
            });
            if !ok {
                return Err(err(id, "malformed modify request"));
            }
            Op::Modify { dn: dn_field()? }
        }
        (8, tag::ADD_REQUEST) => {
            let ok = fields
                .get(1)
                .and_then(cons)
                .is_some_and(|attrs| attrs.iter().all(|a| cons(a).is_some_and(valid_attribute)));
            if !ok {
                return Err(err(id, "malformed add request"));
            }
            Op::Add { dn: dn_field()? }
        }
        (10, tag::DEL_REQUEST) => Op::Delete {
            dn: prim(op)
                .and_then(|b| String::from_utf8(b.to_vec()).ok())
                .ok_or_else(|| err(id, "delete DN not UTF-8"))?,
        },
        (12, tag::MODDN_REQUEST) => {
            let ok = fields.len() >= 3 && fields[1..].iter().all(|f| prim(f).is_some());
            if !ok {
                return Err(err(id, "malformed modify DN request"));
            }
            Op::ModDn { dn: dn_field()? }
        }
        (14, tag::COMPARE_REQUEST) => {
            let ok = matches!(fields.get(1).and_then(cons), Some([a, v]) if prim(a).is_some() && prim(v).is_some());
            if !ok {
                return Err(err(id, "malformed compare request"));
            }
            Op::Compare { dn: dn_field()? }
        }
        (16, tag::ABANDON_REQUEST) => {
            let b = prim(op).unwrap_or_default();
            if b.is_empty() || b.len() > 4 {
                return Err(err(id, "bad abandon target"));
            }
            let mut v: i64 = if b[0] & 0x80 != 0 { -1 } else { 0 };
            for &x in b {
                v = (v << 8) | x as i64;
            }
            Op::Abandon { target: v as i32 }
        }
        (23, tag::EXTENDED_REQUEST) => {
            let name = fields
                .iter()
                .find(|t| t.class == TagClass::Context && t.id == 0)
                .and_then(|t| string(Some(t)))
                .ok_or_else(|| err(id, "extended request name missing"))?;
            let value = fields
                .iter()
                .find(|t| t.class == TagClass::Context && t.id == 1)
                .and_then(prim)
                .map(|v| v.to_vec());
            Op::Extended { oid: name, value }
        }
        _ => return Err(err(id, "unknown or malformed operation")),
    };
    let mut controls = Vec::new();
    if let Some(c) = parts.get(2) {
        if c.class != TagClass::Context || c.id != 0 {
            return Err(err(id, "unexpected element after protocolOp"));
        }
        for ctl in cons(c).ok_or_else(|| err(id, "controls not constructed"))? {
            let f = cons(ctl).ok_or_else(|| err(id, "control not a SEQUENCE"))?;
            let oid = string(f.first()).ok_or_else(|| err(id, "control OID missing"))?;
            let mut critical = false;
            let mut value = None;
            for t in &f[1..] {
                match (t.class, t.id) {
                    (TagClass::Universal, 1) => {
                        critical = prim(t).is_some_and(|v| v.first().is_some_and(|&b| b != 0))
                    }
                    (TagClass::Universal, 4) => value = prim(t).map(|v| v.to_vec()),
                    _ => return Err(err(id, "malformed control")),
                }
            }
            controls.push(Control {
                oid,
                critical,
                value,
            });
        }
    }
    Ok(Request {
        msgid,
        op,
        controls,
    })
}

/// `[0] userIdentity` of a Password Modify request value, if present.
pub fn passwd_modify_user(value: &[u8]) -> Option<String> {
    let (_, t) = lber::parse::Parser::new(4).parse(value).ok()?;
    cons(&t)?
        .iter()
        .find(|f| f.class == TagClass::Context && f.id == 0)
        .and_then(|f| string(Some(f)))
}

/// `PartialAttribute ::= SEQUENCE { type, vals SET OF value }`.
fn valid_attribute(a: &[StructureTag]) -> bool {
    matches!(a, [t, vals] if prim(t).is_some() && cons(vals).is_some_and(|v| v.iter().all(|x| prim(x).is_some())))
}

/// Whether a Filter (RFC 4511 4.5.1) is complete, so that no malformed
/// request reaches a DSA over a connection other clients share (a DSA
/// closes the connection on a protocol error). Depth is bounded by the
/// BER parser's limit.
pub fn valid_filter(f: &StructureTag) -> bool {
    if f.class != TagClass::Context {
        return false;
    }
    let pair = |f: &StructureTag| matches!(cons(f), Some([a, v]) if prim(a).is_some() && prim(v).is_some());
    match f.id {
        0 | 1 => cons(f).is_some_and(|c| !c.is_empty() && c.iter().all(valid_filter)),
        2 => matches!(cons(f), Some([inner]) if valid_filter(inner)),
        3 | 5 | 6 | 8 => pair(f),
        4 => matches!(cons(f), Some([t, subs]) if prim(t).is_some()
            && cons(subs).is_some_and(|s| !s.is_empty() && s.iter().all(|x| x.class == TagClass::Context && x.id <= 2 && prim(x).is_some()))),
        7 => prim(f).is_some(),
        9 => cons(f).is_some_and(|c| {
            c.iter().all(|x| {
                x.class == TagClass::Context && (1..=4).contains(&x.id) && prim(x).is_some()
            }) && c.iter().any(|x| x.id == 3)
        }),
        _ => false,
    }
}
