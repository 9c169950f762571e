//! Framing and the few byte-level edits the router makes to a PDU.
//!
//! An LDAPMessage is `SEQUENCE { messageID INTEGER, protocolOp, controls
//! [0] OPTIONAL }`. To forward a PDU the router needs only its end, its
//! message ID and its operation tag; these are read from the identifier and
//! length octets at the front (with [`super::ber`]). Everything after the
//! message ID is copied as it arrived, so unknown controls and extensions
//! survive byte for byte. What a request asks for is decoded separately, in
//! [`super::request`].

use super::ber::{self, len_of_len, put_len, BerError, Tlv};
use bytes::{BufMut, BytesMut};

/// Why a byte stream is not LDAP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The PDU does not start with a SEQUENCE tag.
    NotSequence(u8),
    /// Indefinite or over-long length encoding.
    BadLength,
    /// Larger than the configured limit.
    TooLarge(usize),
    /// The message ID or operation is malformed.
    Malformed(&'static str),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::NotSequence(t) => {
                write!(f, "PDU starts with tag 0x{t:02x}, not a SEQUENCE")
            }
            FrameError::BadLength => f.write_str("invalid BER length encoding"),
            FrameError::TooLarge(n) => write!(f, "PDU of {n} bytes exceeds the limit"),
            FrameError::Malformed(m) => f.write_str(m),
        }
    }
}

/// The total length of the PDU at the front of `buf`, `None` when more bytes
/// are needed. Rejects a PDU larger than `max` as soon as its header shows it.
pub fn frame_len(buf: &[u8], max: usize) -> Result<Option<usize>, FrameError> {
    let Some(&tag) = buf.first() else {
        return Ok(None);
    };
    if tag != 0x30 {
        return Err(FrameError::NotSequence(tag));
    }
    let (len, n) = match ber::read_len(&buf[1..]) {
        Ok(l) => l,
        Err(BerError::Truncated) => return Ok(None),
        Err(BerError::BadLength) => return Err(FrameError::BadLength),
    };
    let total = 1 + n + len;
    if total > max {
        return Err(FrameError::TooLarge(total));
    }
    Ok(if buf.len() >= total {
        Some(total)
    } else {
        None
    })
}

/// The whole length of the PDU whose header is at the front of `buf`
/// (however much of it has arrived), `None` when the header is incomplete
/// or not a SEQUENCE's. Unchecked against any limit: see [`frame_len`].
pub fn announced_len(buf: &[u8]) -> Option<usize> {
    if buf.first() != Some(&0x30) {
        return None;
    }
    let (len, n) = ber::read_len(buf.get(1..)?).ok()?;
    (1 + n).checked_add(len)
}

/// The parts of a complete PDU: where the message ID sits and what follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub msgid: i32,
    /// The protocolOp's identifier octet (e.g. 0x63 search request).
    pub op_tag: u8,
    /// Offset of the protocolOp element.
    pub op_start: usize,
    /// Offset just after the protocolOp element (controls follow, if any).
    pub op_end: usize,
}

/// A complete PDU with its header, as the two travel together (what is
/// sent to a DSA, what a client sent).
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    pub pdu: &'a [u8],
    pub h: &'a Header,
}

impl<'a> Frame<'a> {
    /// `pdu`, whose header is `h`.
    pub fn new(pdu: &'a [u8], h: &'a Header) -> Frame<'a> {
        Frame { pdu, h }
    }
}

/// A complete PDU held with its header: what a client sent, what goes to
/// a DSA. Cheap to clone (the bytes are shared), so an operation carries
/// it from phase to phase and to a task of its own without copying it.
#[derive(Debug, Clone)]
pub struct Pdu {
    pub bytes: bytes::Bytes,
    pub h: Header,
}

impl Pdu {
    /// `bytes`, whose header is `h`.
    pub fn new(bytes: bytes::Bytes, h: Header) -> Pdu {
        Pdu { bytes, h }
    }

    /// `bytes` with its header read.
    pub fn read(bytes: bytes::Bytes) -> Result<Pdu, FrameError> {
        let h = header(&bytes)?;
        Ok(Pdu { bytes, h })
    }

    /// The PDU borrowed.
    pub fn frame(&self) -> Frame<'_> {
        Frame::new(&self.bytes, &self.h)
    }
}

/// The length at `pdu[at..]`; `truncated` says what is cut short when the
/// PDU ends first.
fn len_at(pdu: &[u8], at: usize, truncated: &'static str) -> Result<(usize, usize), FrameError> {
    match ber::read_len(pdu.get(at..).unwrap_or_default()) {
        Ok(l) => Ok(l),
        Err(BerError::BadLength) => Err(FrameError::BadLength),
        Err(BerError::Truncated) => Err(FrameError::Malformed(truncated)),
    }
}

/// Parse the header of a complete PDU (as delimited by [`frame_len`]).
pub fn header(pdu: &[u8]) -> Result<Header, FrameError> {
    let (len, n) = len_at(pdu, 1, "truncated PDU")?;
    let body = 1 + n;
    if body + len != pdu.len() {
        return Err(FrameError::Malformed("PDU length mismatch"));
    }
    if pdu.get(body) != Some(&0x02) {
        return Err(FrameError::Malformed("message ID is not an INTEGER"));
    }
    let (idlen, m) = len_at(pdu, body + 1, "truncated message ID")?;
    let id_start = body + 1 + m;
    let id_end = id_start + idlen;
    if idlen == 0 || idlen > 4 || id_end > pdu.len() {
        return Err(FrameError::Malformed("message ID out of range"));
    }
    let msgid = ber::int(&pdu[id_start..id_end])
        .filter(|v| (0..=i32::MAX as i64).contains(v))
        .ok_or(FrameError::Malformed("message ID out of range"))? as i32;
    let op_tag = *pdu
        .get(id_end)
        .ok_or(FrameError::Malformed("missing protocolOp"))?;
    if op_tag & 0x1f == 0x1f {
        return Err(FrameError::Malformed(
            "multi-byte tags are not LDAP operations",
        ));
    }
    let (oplen, k) = len_at(pdu, id_end + 1, "truncated protocolOp")?;
    let op_end = id_end + 1 + k + oplen;
    if op_end > pdu.len() {
        return Err(FrameError::Malformed("protocolOp overruns the PDU"));
    }
    Ok(Header {
        msgid,
        op_tag,
        op_start: id_end,
        op_end,
    })
}

/// Minimal two's-complement content octets of a non-negative message ID.
fn id_octets(id: i32) -> ([u8; 5], usize) {
    let be = (id as i64).to_be_bytes();
    // Skip leading zero octets while the next octet's high bit is clear.
    let mut start = 3; // an i32 needs at most 5 octets of an i64's 8
    while start < 7 && be[start] == 0 && be[start + 1] & 0x80 == 0 {
        start += 1;
    }
    let mut out = [0u8; 5];
    let n = 8 - start;
    out[..n].copy_from_slice(&be[start..]);
    (out, n)
}

/// Append `pdu` to `out` with its message ID replaced by `new_id` and, when
/// given, `extra_control` (one encoded `Control` SEQUENCE) added to its
/// controls. Every other byte is copied unchanged.
pub fn rewrite(
    pdu: &[u8],
    h: &Header,
    new_id: i32,
    extra_control: Option<&[u8]>,
    out: &mut BytesMut,
) {
    let (id, idn) = id_octets(new_id);
    let op = &pdu[h.op_start..h.op_end];
    let rest = &pdu[h.op_end..];
    let mut body_len = 2 + idn + op.len();
    match extra_control {
        None => {
            body_len += rest.len();
            out.reserve(1 + len_of_len(body_len) + body_len);
            out.put_u8(0x30);
            put_len(out, body_len);
            out.put_u8(0x02);
            out.put_u8(idn as u8);
            out.put_slice(&id[..idn]);
            out.put_slice(op);
            out.put_slice(rest);
        }
        Some(ctrl) => {
            // Existing controls' content, if the PDU has a [0] controls
            // element; anything after it is kept too.
            let (existing, after): (&[u8], &[u8]) = match ber::tlv(rest) {
                Ok(Tlv {
                    tag: 0xa0,
                    body,
                    len,
                }) => (body, &rest[len..]),
                _ => (&[], rest),
            };
            let ctrls_len = existing.len() + ctrl.len();
            body_len += 1 + len_of_len(ctrls_len) + ctrls_len + after.len();
            out.reserve(1 + len_of_len(body_len) + body_len);
            out.put_u8(0x30);
            put_len(out, body_len);
            out.put_u8(0x02);
            out.put_u8(idn as u8);
            out.put_slice(&id[..idn]);
            out.put_slice(op);
            out.put_u8(0xa0);
            put_len(out, ctrls_len);
            out.put_slice(existing);
            out.put_slice(ctrl);
            out.put_slice(after);
        }
    }
}

/// The RFC 4370 proxied-authorization control (critical) for `authz_id`
/// (`dn:...`, or empty for anonymous), encoded.
pub fn proxy_authz_control(authz_id: &str) -> Vec<u8> {
    control("2.16.840.1.113730.3.4.18", true, authz_id.as_bytes())
}

/// A control (RFC 4511 4.1.11) `oid` with `value`, encoded; criticality
/// is left out (FALSE, its default) unless `critical`.
pub fn control(oid: &str, critical: bool, value: &[u8]) -> Vec<u8> {
    let oid = oid.as_bytes();
    let crit = if critical { 3 } else { 0 };
    let inner =
        1 + len_of_len(oid.len()) + oid.len() + crit + 1 + len_of_len(value.len()) + value.len();
    let mut b = BytesMut::with_capacity(1 + len_of_len(inner) + inner);
    b.put_u8(0x30);
    put_len(&mut b, inner);
    b.put_u8(0x04);
    put_len(&mut b, oid.len());
    b.put_slice(oid);
    if critical {
        b.put_slice(&[0x01, 0x01, 0xff]);
    }
    b.put_u8(0x04);
    put_len(&mut b, value.len());
    b.put_slice(value);
    b.to_vec()
}

/// An AbandonRequest for `target`, as message `msgid`.
pub fn abandon(msgid: i32, target: i32, out: &mut BytesMut) {
    let (id, idn) = id_octets(msgid);
    let (t, tn) = id_octets(target);
    out.put_u8(0x30);
    out.put_u8((2 + idn + 2 + tn) as u8);
    out.put_u8(0x02);
    out.put_u8(idn as u8);
    out.put_slice(&id[..idn]);
    out.put_u8(0x50);
    out.put_u8(tn as u8);
    out.put_slice(&t[..tn]);
}

/// Whether a request leaves nothing on its DSA connection once answered,
/// so that the connection may serve a later client's bind: a simple bind,
/// a search, compare or update, with no control but the password policy
/// request. Anything else (SASL steps, extended operations, paging, sort
/// and VLV contexts, persistent searches, transactions, any other control)
/// may leave per-connection state behind.
pub fn leaves_no_state(pdu: &[u8], h: &Header) -> bool {
    let stateless_op = match h.op_tag {
        tag::BIND_REQUEST => pdu
            .get(h.op_start..h.op_end)
            .and_then(|op| ber::tlv(op).ok())
            .and_then(|t| t.cons())
            .and_then(|mut e| e.nth(2))
            .is_some_and(|auth| auth.tag == 0x80),
        tag::SEARCH_REQUEST
        | tag::COMPARE_REQUEST
        | tag::ADD_REQUEST
        | tag::MODIFY_REQUEST
        | tag::DEL_REQUEST
        | tag::MODDN_REQUEST => true,
        _ => false,
    };
    if !stateless_op {
        return false;
    }
    let rest = pdu.get(h.op_end..).unwrap_or_default();
    if rest.is_empty() {
        return true;
    }
    let Some(ctrls) = ber::tagged(rest, 0xa0).filter(|t| t.len == rest.len()) else {
        return false;
    };
    let ppolicy = super::oid::OID_PPOLICY.as_bytes();
    ber::Elements(ctrls.body).all(|c| {
        c.tag == 0x30
            && c.cons()
                .and_then(|mut e| e.next())
                .is_some_and(|oid| oid.tag == 0x04 && oid.body == ppolicy)
    }) && ber::well_formed(ctrls.body, 2)
}

/// Operation tags (identifier octets) the router acts on.
pub mod tag {
    pub const BIND_REQUEST: u8 = 0x60;
    pub const BIND_RESPONSE: u8 = 0x61;
    pub const UNBIND_REQUEST: u8 = 0x42;
    pub const SEARCH_REQUEST: u8 = 0x63;
    pub const SEARCH_ENTRY: u8 = 0x64;
    pub const SEARCH_DONE: u8 = 0x65;
    pub const MODIFY_REQUEST: u8 = 0x66;
    pub const ADD_REQUEST: u8 = 0x68;
    pub const DEL_REQUEST: u8 = 0x4a;
    pub const MODDN_REQUEST: u8 = 0x6c;
    pub const COMPARE_REQUEST: u8 = 0x6e;
    pub const ABANDON_REQUEST: u8 = 0x50;
    pub const SEARCH_REFERENCE: u8 = 0x73;
    pub const EXTENDED_REQUEST: u8 = 0x77;
    pub const EXTENDED_RESPONSE: u8 = 0x78;
    pub const INTERMEDIATE: u8 = 0x79;

    /// Whether a response with this tag ends its operation.
    pub fn is_final_response(t: u8) -> bool {
        !matches!(t, SEARCH_ENTRY | SEARCH_REFERENCE | INTERMEDIATE)
    }
}

impl From<FrameError> for crate::base::error::Error {
    fn from(e: FrameError) -> crate::base::error::Error {
        crate::base::error::Error::new(crate::base::error::Kind::Protocol, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_octets_are_minimal() {
        for (id, want) in [
            (0, vec![0u8]),
            (1, vec![1]),
            (127, vec![127]),
            (128, vec![0, 128]),
            (255, vec![0, 255]),
            (256, vec![1, 0]),
            (i32::MAX, vec![0x7f, 0xff, 0xff, 0xff]),
        ] {
            let (o, n) = id_octets(id);
            assert_eq!(&o[..n], &want[..], "{id}");
        }
    }

    #[test]
    fn rewrite_round_trips_through_header() {
        // search request, msgid 5, with one control
        let pdu: &[u8] = &[
            0x30, 0x1d, 0x02, 0x01, 0x05, 0x63, 0x0b, 0x04, 0x00, 0x0a, 0x01, 0x00, 0x0a, 0x01,
            0x00, 0x02, 0x01, 0x00, 0xa0, 0x0b, 0x30, 0x09, 0x04, 0x04, b'1', b'.', b'2', b'3',
            0x01, 0x01, 0xff,
        ];
        let mut p = pdu.to_vec();
        p[1] = (p.len() - 2) as u8;
        // fix op length: op content is 9 bytes (04 00 0a 01 00 0a 01 00 02 01 00 = 11)
        let h = header(&p).expect("header");
        assert_eq!(h.msgid, 5);
        assert_eq!(h.op_tag, 0x63);
        for new in [1, 200, 70000, i32::MAX] {
            for extra in [None, Some(proxy_authz_control("dn:cn=x"))] {
                let mut out = BytesMut::new();
                rewrite(&p, &h, new, extra.as_deref(), &mut out);
                assert_eq!(frame_len(&out, 1 << 20), Ok(Some(out.len())));
                let h2 = header(&out).expect("rewritten header");
                assert_eq!(h2.msgid, new);
                assert_eq!(&out[h2.op_start..h2.op_end], &p[h.op_start..h.op_end]);
                let parsed = lber::parse::Parser::new(32)
                    .parse(&out)
                    .expect("lber parses it");
                assert!(parsed.0.is_empty());
                if extra.is_some() {
                    assert!(out.windows(7).any(|w| w == b"dn:cn=x"));
                    assert!(out.windows(3).any(|w| w == b"1.2"));
                }
            }
        }
    }

    #[test]
    fn bad_frames() {
        assert_eq!(
            frame_len(&[0x31, 0], 100),
            Err(FrameError::NotSequence(0x31))
        );
        assert_eq!(frame_len(&[0x30, 0x80], 100), Err(FrameError::BadLength));
        assert_eq!(
            frame_len(&[0x30, 0x85, 1, 1, 1, 1, 1], 100),
            Err(FrameError::BadLength)
        );
        assert_eq!(
            frame_len(&[0x30, 0x84, 0x10, 0, 0, 0], 100),
            Err(FrameError::TooLarge(0x1000_0006))
        );
        assert_eq!(frame_len(&[0x30, 0x03, 2, 1], 100), Ok(None));
        assert!(header(&[0x30, 0x03, 0x04, 0x01, 0x00]).is_err());
        assert!(header(&[0x30, 0x05, 0x02, 0x01, 0x01, 0x63, 0x09]).is_err());
        assert!(header(&[0x30, 0x06, 0x02, 0x01, 0xff, 0x42, 0x00, 0x00]).is_err());
    }

    /// An LDAPMessage with message ID 1 around `op` (short forms only).
    fn msg(op: &[u8]) -> Vec<u8> {
        let mut v = vec![0x30, (op.len() + 3) as u8, 0x02, 0x01, 0x01];
        v.extend_from_slice(op);
        v
    }

    /// `tag` with short-form length around `body`.
    fn el(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![tag, body.len() as u8];
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn only_requests_that_leave_no_connection_state_keep_it_reusable() {
        let simple = el(
            0x60,
            &[
                &[0x02, 0x01, 0x03][..],
                &el(0x04, b"cn=a"),
                &el(0x80, b"pw"),
            ]
            .concat(),
        );
        let sasl = el(
            0x60,
            &[
                &[0x02, 0x01, 0x03][..],
                &el(0x04, b""),
                &el(0xa3, &el(0x04, b"EXTERNAL")),
            ]
            .concat(),
        );
        let search = [
            0x63, 0x0b, 0x04, 0x00, 0x0a, 0x01, 0x00, 0x0a, 0x01, 0x00, 0x02, 0x01, 0x00,
        ]
        .to_vec();
        let whoami = el(0x77, &el(0x80, b"1.3.6.1.4.1.4203.1.11.3"));
        let delete = el(0x4a, b"o=x");
        let abandon = el(0x50, &[0x05]);
        let ppolicy = crate::proto::wire::ppolicy::request_control();
        let paged = crate::proto::wire::search::paged_control(10, b"");
        let proxy = proxy_authz_control("dn:cn=x");
        let with = |op: &[u8], ctrls: &[&[u8]]| -> Vec<u8> {
            let mut p = msg(op);
            for c in ctrls {
                let h = header(&p).expect("header");
                let mut out = BytesMut::new();
                rewrite(&p, &h, 1, Some(c), &mut out);
                p = out.to_vec();
            }
            p
        };
        for (what, pdu, want) in [
            ("simple bind", with(&simple, &[]), true),
            ("simple bind, ppolicy", with(&simple, &[&ppolicy]), true),
            ("SASL bind", with(&sasl, &[]), false),
            ("search", with(&search, &[]), true),
            ("search, paged", with(&search, &[&paged]), false),
            (
                "search, ppolicy and paged",
                with(&search, &[&ppolicy, &paged]),
                false,
            ),
            (
                "search, proxied authorization",
                with(&search, &[&proxy]),
                false,
            ),
            ("WhoAmI", with(&whoami, &[]), false),
            ("delete", with(&delete, &[]), true),
            ("abandon", with(&abandon, &[]), false),
        ] {
            let h = header(&pdu).expect(what);
            assert_eq!(leaves_no_state(&pdu, &h), want, "{what}");
        }
    }
}
