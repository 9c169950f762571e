//! Decoding a request just enough to route it: the operation, its target
//! DN, and the controls the router must act on.
//!
//! The BER is checked whole first (definite lengths, a nesting limit) and
//! then read in place with [`crate::wire::ber`], with no tag tree built;
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

impl From<DecodeError> for crate::error::Error {
    fn from(e: DecodeError) -> crate::error::Error {
        crate::error::Error::new(crate::error::Kind::Protocol, e.message)
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
    h: &crate::wire::frame::Header,
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
mod tests {
    use super::*;
    use ldap3_proto::proto::{
        LdapAddRequest, LdapAttribute, LdapCompareRequest, LdapDerefAliases, LdapFilter, LdapMsg,
        LdapOp, LdapSearchRequest, LdapSearchScope,
    };
    use proptest::prelude::*;

    fn encode(msg: LdapMsg) -> Vec<u8> {
        let tag: lber::structure::StructureTag = msg.into();
        let mut b = bytes::BytesMut::new();
        lber::write::encode_into(&mut b, tag).expect("encodes");
        b.to_vec()
    }

    fn filter() -> impl Strategy<Value = LdapFilter> {
        let leaf = prop_oneof![
            ("[a-z]{1,6}", "[a-z0-9]{0,6}").prop_map(|(a, v)| LdapFilter::Equality(a, v)),
            "[a-z]{1,6}".prop_map(LdapFilter::Present),
            ("[a-z]{1,6}", "[a-z0-9]{0,6}").prop_map(|(a, v)| LdapFilter::GreaterOrEqual(a, v)),
        ];
        leaf.prop_recursive(4, 16, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 1..3).prop_map(LdapFilter::And),
                prop::collection::vec(inner.clone(), 1..3).prop_map(LdapFilter::Or),
                inner.prop_map(|f| LdapFilter::Not(Box::new(f))),
            ]
        })
    }

    /// A request as a real client library encodes it, and what the router
    /// must read from it.
    fn request() -> impl Strategy<Value = (Vec<u8>, i32, &'static str, String, u8)> {
        let dn = "(cn=[a-z]{1,8},)?(o=[A-Z]{1,6},)?c=[A-Z]{2}|";
        (1i32..i32::MAX, dn, 0u8..3, filter(), 0u8..3).prop_map(|(msgid, dn, scope, f, kind)| {
            let (op, name) = match kind {
                0 => (
                    LdapOp::SearchRequest(LdapSearchRequest {
                        base: dn.clone(),
                        scope: match scope {
                            0 => LdapSearchScope::Base,
                            1 => LdapSearchScope::OneLevel,
                            _ => LdapSearchScope::Subtree,
                        },
                        aliases: LdapDerefAliases::Never,
                        sizelimit: 0,
                        timelimit: 0,
                        typesonly: false,
                        filter: f,
                        attrs: vec!["cn".into(), "+".into()],
                    }),
                    "search",
                ),
                1 => (
                    LdapOp::CompareRequest(LdapCompareRequest {
                        dn: dn.clone(),
                        atype: "cn".into(),
                        val: b"x".to_vec(),
                    }),
                    "compare",
                ),
                _ => (
                    LdapOp::AddRequest(LdapAddRequest {
                        dn: dn.clone(),
                        attributes: vec![LdapAttribute {
                            atype: "objectClass".into(),
                            vals: vec![b"top".to_vec()],
                        }],
                    }),
                    "add",
                ),
            };
            let pdu = encode(LdapMsg {
                msgid,
                op,
                ctrl: vec![],
            });
            (pdu, msgid, name, dn, scope)
        })
    }

    proptest! {
        /// Requests encoded by another implementation decode to what they
        /// say.
        #[test]
        fn decodes_what_a_client_library_encodes((pdu, msgid, name, dn, scope) in request()) {
            let r = decode(&pdu).expect("a valid request decodes");
            prop_assert_eq!(r.msgid, msgid);
            prop_assert_eq!(r.op.name(), name);
            match &r.op {
                Op::Search { base, scope: s, .. } => {
                    prop_assert_eq!(base, &dn);
                    prop_assert_eq!(*s, scope);
                }
                Op::Compare { dn: d } | Op::Add { dn: d } => prop_assert_eq!(d, &dn),
                other => prop_assert!(false, "unexpected {:?}", other),
            }
        }

        /// Any byte changed or cut: no panic, and whatever is accepted is
        /// well-formed BER by another parser too.
        #[test]
        fn damaged_requests_never_panic_and_accepted_ones_parse(
            (pdu, ..) in request(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut bad = pdu.clone();
            let i = at.index(bad.len());
            bad[i] = byte;
            bad.truncate(cut.index(bad.len()) + 1);
            if decode(&bad).is_ok() {
                let parsed = lber::parse::Parser::new(MAX_DEPTH).parse(&bad);
                prop_assert!(parsed.is_ok_and(|(rest, _)| rest.is_empty()));
            }
        }
    }

    #[test]
    fn decode_errors_are_protocol_errors() {
        let e = decode(&[0x30, 0x03, 0x02, 0x01, 0x01]).expect_err("no protocolOp");
        assert_eq!(e.msgid, Some(1));
        let e = crate::error::Error::from(e);
        assert_eq!(e.kind, crate::error::Kind::Protocol);
        assert_eq!(e.message(), "dsa-router: missing protocolOp");
    }

    #[test]
    fn nesting_limit_and_lengths() {
        // A NOT nested past the limit inside a search filter.
        let mut f = LdapFilter::Present("cn".into());
        for _ in 0..MAX_DEPTH {
            f = LdapFilter::Not(Box::new(f));
        }
        let pdu = encode(LdapMsg {
            msgid: 1,
            op: LdapOp::SearchRequest(LdapSearchRequest {
                base: "c=AU".into(),
                scope: LdapSearchScope::Subtree,
                aliases: LdapDerefAliases::Never,
                sizelimit: 0,
                timelimit: 0,
                typesonly: false,
                filter: f,
                attrs: vec![],
            }),
            ctrl: vec![],
        });
        let e = decode(&pdu).expect_err("too deep");
        assert_eq!(e.message, "malformed BER or nesting too deep");
        // Indefinite length (forbidden in LDAP) and a length past the end.
        assert!(decode(&[0x30, 0x80, 0x02, 0x01, 0x01, 0x42, 0x00, 0x00, 0x00]).is_err());
        assert!(decode(&[0x30, 0x05, 0x02, 0x01, 0x01, 0x42, 0x05]).is_err());
        // A whole unbind request.
        let ok = decode(&[0x30, 0x05, 0x02, 0x01, 0x07, 0x42, 0x00]).expect("unbind");
        assert_eq!((ok.msgid, ok.op.name()), (7, "unbind"));
        // Root DSE attributes are kept; other searches' are not needed.
        let root = encode(LdapMsg {
            msgid: 2,
            op: LdapOp::SearchRequest(LdapSearchRequest {
                base: String::new(),
                scope: LdapSearchScope::Base,
                aliases: LdapDerefAliases::Never,
                sizelimit: 0,
                timelimit: 0,
                typesonly: false,
                filter: LdapFilter::Present("objectClass".into()),
                attrs: vec!["supportedControl".into()],
            }),
            ctrl: vec![],
        });
        let op = decode(&root).expect("root DSE search").op;
        let want = vec!["supportedControl".to_string()];
        assert!(
            matches!(&op, Op::Search { attrs, filter_is_present_oc: true, .. } if *attrs == want),
            "{op:?}"
        );
    }
}
