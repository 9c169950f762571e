//! Decoding a request just enough to route it: the operation, its target
//! DN, and the controls the router must act on.
//!
//! The BER is checked whole first (definite lengths, a nesting limit) and
//! then read in place with [`crate::proto::wire::ber`], with no tag tree built;
//! only the fields the router keeps are copied out, and the router never
//! re-encodes what it forwards. The envelope (message ID, protocolOp,
//! controls) is read here; each operation has its decoder in `ops`.

mod ops;

use super::ber::{self, Tlv, APPLICATION, CONTEXT, UNIVERSAL};
use ops::{int, string};

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
        /// A SASL bind's mechanism (its credentials stay in the PDU).
        sasl: Option<String>,
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
                sasl,
            } => f
                .debug_struct("Bind")
                .field("version", version)
                .field("dn", dn)
                .field("simple", &simple.as_ref().map(|_| "***"))
                .field("sasl", sasl)
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

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DecodeError {}

impl From<DecodeError> for crate::base::error::Error {
    fn from(e: DecodeError) -> crate::base::error::Error {
        crate::base::error::Error::new(crate::base::error::Kind::Protocol, e.message)
    }
}

fn err(msgid: Option<i32>, m: &str) -> DecodeError {
    DecodeError {
        msgid,
        message: m.to_string(),
    }
}

/// Nesting limit for request PDUs (filters nest); deeper is an attack.
pub const MAX_DEPTH: usize = 48;

/// Decode a complete request PDU.
pub fn decode(pdu: &[u8]) -> Result<Request, DecodeError> {
    let mut all = pdu;
    let msg = ber::split(&mut all)
        .filter(|_| ber::well_formed(pdu, MAX_DEPTH - 1))
        .ok_or_else(|| err(None, "malformed BER or nesting too deep"))?;
    if !all.is_empty() {
        return Err(err(None, "trailing bytes after the PDU"));
    }
    let parts = msg
        .cons()
        .ok_or_else(|| err(None, "LDAPMessage is not constructed"))?;
    let msgid = int(parts.get(0))
        .filter(|v| (0..=i32::MAX as i64).contains(v))
        .ok_or_else(|| err(None, "bad message ID"))? as i32;
    let id = Some(msgid);
    let op = parts.get(1).ok_or_else(|| err(id, "missing protocolOp"))?;
    if op.class() != APPLICATION {
        return Err(err(id, "protocolOp is not an application tag"));
    }
    let op = ops::decode(op).map_err(|m| err(id, m))?;
    let controls = match parts.get(2) {
        Some(c) if c.is(CONTEXT, 0) => controls(c).map_err(|m| err(id, m))?,
        Some(_) => return Err(err(id, "unexpected element after protocolOp")),
        None => Vec::new(),
    };
    // `controls [0] Controls OPTIONAL` ends the LDAPMessage: a DSA may
    // read a second controls element the router never looked at.
    if parts.get(3).is_some() {
        return Err(err(id, "unexpected element after the controls"));
    }
    Ok(Request {
        msgid,
        op,
        controls,
    })
}

/// `controls [0] Controls`.
fn controls(c: Tlv) -> Result<Vec<Control>, &'static str> {
    let mut controls = Vec::new();
    for ctl in c.cons().ok_or("controls not constructed")? {
        let f = ctl.cons().ok_or("control not a SEQUENCE")?;
        let oid = string(f.get(0)).ok_or("control OID missing")?;
        // LDAPOID (RFC 4511 4.1.2): a numeric OID. slapd compares control
        // OIDs as C strings, so `2.16.840.1.113730.3.4.18\0` is proxied
        // authorization to it and an unknown control to a byte compare.
        if !is_numeric_oid(&oid) {
            return Err("control type is not a numeric OID");
        }
        let mut critical = false;
        let mut value = None;
        for t in f.skip(1) {
            match (t.class(), t.num(), t.prim()) {
                (UNIVERSAL, 1, v) => {
                    critical = v.is_some_and(|v| v.first().is_some_and(|&b| b != 0))
                }
                (UNIVERSAL, 4, v) => value = v.map(<[u8]>::to_vec),
                _ => return Err("malformed control"),
            }
        }
        controls.push(Control {
            oid,
            critical,
            value,
        });
    }
    Ok(controls)
}

/// Whether `s` is an RFC 4512 `numericoid`: two or more numbers
/// separated by single dots, each `0` or without leading zeros.
pub fn is_numeric_oid(s: &str) -> bool {
    let mut parts = 0;
    for n in s.split('.') {
        let ok = match n.as_bytes() {
            [b'0'] => true,
            [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
            _ => false,
        };
        if !ok {
            return false;
        }
        parts += 1;
    }
    parts >= 2
}

/// `[0] userIdentity` of a Password Modify request value, if present.
pub fn passwd_modify_user(value: &[u8]) -> Option<String> {
    let mut all = value;
    let t = ber::split(&mut all).filter(|_| ber::well_formed(value, 3))?;
    t.cons()?
        .find(|f| f.is(CONTEXT, 0))
        .and_then(|f| string(Some(f)))
}

/// A ModifyDNRequest's newrdn and newSuperior (if any).
pub fn moddn_target(
    pdu: &[u8],
    h: &crate::proto::wire::frame::Header,
) -> Option<(String, Option<String>)> {
    let op = ber::tlv(pdu.get(h.op_start..h.op_end)?).ok()?;
    let mut f = op.cons()?;
    let _entry = f.next()?;
    let newrdn = string(f.next())?;
    let _delete = f.next()?;
    let sup = f.next().filter(|t| t.is(CONTEXT, 0)).and_then(|t| {
        t.prim()
            .and_then(|v| std::str::from_utf8(v).ok())
            .map(str::to_string)
    });
    Some((newrdn, sup))
}

/// The newPasswd of a Password Modify request value (RFC 3062), if given.
pub fn passwd_modify_new(value: &[u8]) -> Option<Vec<u8>> {
    passwd_modify_field(value, 2)
}

/// The genPasswd of a Password Modify response value, if given.
pub fn passwd_modify_generated(value: &[u8]) -> Option<Vec<u8>> {
    passwd_modify_field(value, 0)
}

fn passwd_modify_field(value: &[u8], num: u8) -> Option<Vec<u8>> {
    let mut all = value;
    let t = ber::split(&mut all).filter(|_| ber::well_formed(value, 3))?;
    t.cons()?
        .find(|f| f.is(CONTEXT, num))
        .and_then(Tlv::prim)
        .map(<[u8]>::to_vec)
}

#[cfg(test)]
mod tests;
