//! Decoding a request just enough to route it: the operation, its target
//! DN, and the controls the router must act on. The BER is checked whole
//! (definite lengths, a nesting limit) and read in place, with no tag tree
//! built; the router never re-encodes what it forwards.

use super::frame::tag;

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

/// A BER element of a request, borrowed from the PDU.
#[derive(Clone, Copy)]
struct Tlv<'a> {
    /// The identifier octet (class, constructed bit, tag number).
    tag: u8,
    body: &'a [u8],
}

const UNIVERSAL: u8 = 0;
const APPLICATION: u8 = 1;
const CONTEXT: u8 = 2;

impl<'a> Tlv<'a> {
    fn class(self) -> u8 {
        self.tag >> 6
    }

    fn num(self) -> u8 {
        self.tag & 0x1f
    }

    fn is(self, class: u8, num: u8) -> bool {
        self.class() == class && self.num() == num
    }

    fn prim(self) -> Option<&'a [u8]> {
        (self.tag & 0x20 == 0).then_some(self.body)
    }

    fn cons(self) -> Option<Seq<'a>> {
        (self.tag & 0x20 != 0).then_some(Seq(self.body))
    }
}

/// The elements of a constructed element, in order. Only made over bytes
/// [`well_formed`] accepted, so iteration never meets a broken element.
#[derive(Clone, Copy)]
struct Seq<'a>(&'a [u8]);

impl<'a> Iterator for Seq<'a> {
    type Item = Tlv<'a>;

    fn next(&mut self) -> Option<Tlv<'a>> {
        split(&mut self.0)
    }
}

impl<'a> Seq<'a> {
    fn get(self, i: usize) -> Option<Tlv<'a>> {
        { self }.nth(i)
    }
}

/// Take the element at the front of `buf` (definite lengths only, RFC 4511
/// 5.1); `None` if it is not whole.
fn split<'a>(buf: &mut &'a [u8]) -> Option<Tlv<'a>> {
    let tag = *buf.first()?;
    let (len, n) = super::frame::read_len(buf.get(1..)?).ok()??;
    let end = (1 + n).checked_add(len)?;
    let body = buf.get(1 + n..end)?;
    *buf = buf.get(end..)?;
    Some(Tlv { tag, body })
}

/// Whether `buf` is a run of whole elements, constructed ones recursively,
/// nested at most `levels` deep. Nothing is allocated.
fn well_formed(mut buf: &[u8], levels: usize) -> bool {
    while !buf.is_empty() {
        if levels == 0 {
            return false;
        }
        let Some(t) = split(&mut buf) else {
            return false;
        };
        if let Some(inner) = t.cons() {
            if !well_formed(inner.0, levels - 1) {
                return false;
            }
        }
    }
    true
}

fn string(t: Option<Tlv>) -> Option<String> {
    t.and_then(Tlv::prim)
        .and_then(|b| std::str::from_utf8(b).ok())
        .map(str::to_string)
}

fn int(t: Option<Tlv>) -> Option<i64> {
    let b = t.and_then(Tlv::prim)?;
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

/// Decode a complete request PDU. The BER is walked in place: only the
/// fields the router keeps are copied out.
pub fn decode(pdu: &[u8]) -> Result<Request, DecodeError> {
    let mut all = pdu;
    let msg = split(&mut all)
        .filter(|_| well_formed(pdu, MAX_DEPTH - 1))
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
    let fields = op.cons().unwrap_or(Seq(&[]));
    let dn_field = || string(fields.get(0)).ok_or_else(|| err(id, "entry DN missing or not UTF-8"));
    let op = match op.tag {
        tag::BIND_REQUEST => {
            let version = int(fields.get(0)).ok_or_else(|| err(id, "bind version missing"))?;
            let dn =
                string(fields.get(1)).ok_or_else(|| err(id, "bind name missing or not UTF-8"))?;
            let auth = fields
                .get(2)
                .ok_or_else(|| err(id, "bind authentication missing"))?;
            let simple = match (auth.class(), auth.num()) {
                (CONTEXT, 0) => Some(auth.prim().unwrap_or_default().to_vec()),
                _ => None,
            };
            Op::Bind {
                version,
                dn,
                simple,
            }
        }
        tag::UNBIND_REQUEST => Op::Unbind,
        tag::SEARCH_REQUEST => {
            let base = dn_field()?;
            let scope = int(fields.get(1))
                .filter(|s| (0..=3).contains(s))
                .ok_or_else(|| err(id, "bad search scope"))? as u8;
            let filter = fields
                .get(6)
                .ok_or_else(|| err(id, "search filter missing"))?;
            let attrs = fields.get(7).and_then(Tlv::cons);
            let shape_ok = fields.count() >= 8
                && fields.skip(2).take(4).all(|f| f.prim().is_some())
                && valid_filter(filter)
                && attrs.is_some_and(|mut a| a.all(|t| t.prim().is_some()));
            if !shape_ok {
                return Err(err(id, "malformed search request"));
            }
            let filter_is_present_oc = filter.is(CONTEXT, 7)
                && filter
                    .prim()
                    .is_some_and(|v| v.eq_ignore_ascii_case(b"objectclass"));
            // The requested attributes matter only to the root DSE, which
            // the router answers itself.
            let attrs = match (base.is_empty(), attrs) {
                (true, Some(a)) => a.filter_map(|t| string(Some(t))).collect(),
                _ => Vec::new(),
            };
            Op::Search {
                base,
                scope,
                attrs,
                filter_is_present_oc,
            }
        }
        tag::MODIFY_REQUEST => {
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
                return Err(err(id, "malformed modify request"));
            }
            Op::Modify { dn: dn_field()? }
        }
        tag::ADD_REQUEST => {
            let ok = fields
                .get(1)
                .and_then(Tlv::cons)
                .is_some_and(|mut attrs| attrs.all(|a| a.cons().is_some_and(valid_attribute)));
            if !ok {
                return Err(err(id, "malformed add request"));
            }
            Op::Add { dn: dn_field()? }
        }
        tag::DEL_REQUEST => Op::Delete {
            dn: std::str::from_utf8(op.body)
                .map(str::to_string)
                .map_err(|_| err(id, "delete DN not UTF-8"))?,
        },
        tag::MODDN_REQUEST => {
            let ok = fields.count() >= 3 && fields.skip(1).all(|f| f.prim().is_some());
            if !ok {
                return Err(err(id, "malformed modify DN request"));
            }
            Op::ModDn { dn: dn_field()? }
        }
        tag::COMPARE_REQUEST => {
            let ok = fields.get(1).and_then(Tlv::cons).is_some_and(|ava| {
                matches!((ava.get(0), ava.get(1), ava.get(2)), (Some(a), Some(v), None) if a.prim().is_some() && v.prim().is_some())
            });
            if !ok {
                return Err(err(id, "malformed compare request"));
            }
            Op::Compare { dn: dn_field()? }
        }
        tag::ABANDON_REQUEST => {
            let b = op.body;
            if b.is_empty() || b.len() > 4 {
                return Err(err(id, "bad abandon target"));
            }
            let mut v: i64 = if b[0] & 0x80 != 0 { -1 } else { 0 };
            for &x in b {
                v = (v << 8) | x as i64;
            }
            Op::Abandon { target: v as i32 }
        }
        tag::EXTENDED_REQUEST => {
            let name = { fields }
                .find(|t| t.is(CONTEXT, 0))
                .and_then(|t| string(Some(t)))
                .ok_or_else(|| err(id, "extended request name missing"))?;
            let value = { fields }
                .find(|t| t.is(CONTEXT, 1))
                .and_then(Tlv::prim)
                .map(|v| v.to_vec());
            Op::Extended { oid: name, value }
        }
        _ => return Err(err(id, "unknown or malformed operation")),
    };
    let mut controls = Vec::new();
    if let Some(c) = parts.get(2) {
        if !c.is(CONTEXT, 0) {
            return Err(err(id, "unexpected element after protocolOp"));
        }
        for ctl in c
            .cons()
            .ok_or_else(|| err(id, "controls not constructed"))?
        {
            let f = ctl
                .cons()
                .ok_or_else(|| err(id, "control not a SEQUENCE"))?;
            let oid = string(f.get(0)).ok_or_else(|| err(id, "control OID missing"))?;
            let mut critical = false;
            let mut value = None;
            for t in f.skip(1) {
                match (t.class(), t.num(), t.prim()) {
                    (UNIVERSAL, 1, v) => {
                        critical = v.is_some_and(|v| v.first().is_some_and(|&b| b != 0))
                    }
                    (UNIVERSAL, 4, v) => value = v.map(<[u8]>::to_vec),
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
    let mut all = value;
    let t = split(&mut all).filter(|_| well_formed(value, 3))?;
    t.cons()?
        .find(|f| f.is(CONTEXT, 0))
        .and_then(|f| string(Some(f)))
}

/// `PartialAttribute ::= SEQUENCE { type, vals SET OF value }`.
fn valid_attribute(a: Seq) -> bool {
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

/// Whether a Filter (RFC 4511 4.5.1) is complete, so that no malformed
/// request reaches a DSA over a connection other clients share (a DSA
/// closes the connection on a protocol error). Depth is bounded by
/// [`well_formed`].
fn valid_filter(f: Tlv) -> bool {
    if f.class() != CONTEXT {
        return false;
    }
    fn exactly(f: Tlv, n: usize) -> Option<Seq> {
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
