//! Raw-PDU surgery for searches that span partitions: reading a search
//! request's limits, re-basing it onto one partition (base and scope
//! replaced, filter, attributes and other controls kept byte for byte), and
//! the simple paged results control (RFC 2696) on requests and responses.

use super::ber::{self, len_of_len, put_len, BerError, Tlv};
use super::frame::{tag, FrameError, Header};
use super::request::OID_PAGED_RESULTS;
use bytes::{BufMut, BytesMut};

const BAD: FrameError = FrameError::Malformed("malformed search request");

/// The element at the front of `b`, or why the search request is broken.
fn tlv(b: &[u8]) -> Result<Tlv<'_>, FrameError> {
    ber::tlv(b).map_err(|e| match e {
        BerError::BadLength => FrameError::BadLength,
        BerError::Truncated => BAD,
    })
}

/// A size or time limit, or a page size.
fn limit(content: &[u8]) -> u32 {
    ber::uint(content).unwrap_or(0) // negative or absurd: no limit
}

/// The parts of a SearchRequest the router needs to split it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchHead {
    pub scope: u8,
    /// sizeLimit and timeLimit (0 = none).
    pub size_limit: u32,
    pub time_limit: u32,
    /// Offset (in the PDU) of derefAliases, after base and scope.
    deref_start: usize,
}

/// Read a SearchRequest's scope and limits.
pub fn head(pdu: &[u8], h: &Header) -> Result<SearchHead, FrameError> {
    if h.op_tag != tag::SEARCH_REQUEST {
        return Err(BAD);
    }
    let op = pdu.get(h.op_start..h.op_end).ok_or(BAD)?;
    let body = tlv(op)?.body;
    let body_start = h.op_end - body.len();
    let base = tlv(body)?;
    let scope = tlv(body.get(base.len..).ok_or(BAD)?)?;
    let [scope_value] = scope.body else {
        return Err(BAD);
    };
    if base.tag != 0x04 || scope.tag != 0x0a {
        return Err(BAD);
    }
    let deref_start = body_start + base.len + scope.len;
    let rest = pdu.get(deref_start..h.op_end).ok_or(BAD)?;
    let deref = tlv(rest)?;
    let rest = rest.get(deref.len..).ok_or(BAD)?;
    let size = tlv(rest)?;
    let time = tlv(rest.get(size.len..).ok_or(BAD)?)?;
    if size.tag != 0x02 || time.tag != 0x02 {
        return Err(BAD);
    }
    Ok(SearchHead {
        scope: *scope_value,
        size_limit: limit(size.body),
        time_limit: limit(time.body),
        deref_start,
    })
}

/// The controls after the protocolOp: each control's full TLV and its OID.
fn controls<'a>(pdu: &'a [u8], h: &Header) -> Vec<(&'a [u8], &'a [u8])> {
    let mut v = Vec::new();
    let Some(rest) = pdu.get(h.op_end..) else {
        return v;
    };
    let Some(mut seq) = ber::tagged(rest, 0xa0).map(|t| t.body) else {
        return v;
    };
    while let Some(c) = ber::tagged(seq, 0x30) {
        if let Some(oid) = ber::tagged(c.body, 0x04) {
            v.push((&seq[..c.len], oid.body));
        }
        seq = &seq[c.len..];
    }
    v
}

/// Whether a PDU carries the control `oid`.
pub fn has_control(pdu: &[u8], h: &Header, oid: &str) -> bool {
    controls(pdu, h).iter().any(|(_, o)| *o == oid.as_bytes())
}

/// `pdu` (any message) under message ID `msgid`, without the controls
/// named in `drop`.
pub fn without_controls(pdu: &[u8], h: &Header, msgid: i32, drop: &[&str]) -> BytesMut {
    let mut out = BytesMut::with_capacity(pdu.len());
    let op = &pdu[h.op_start..h.op_end];
    assemble(pdu, h, msgid, op, drop, None, &mut out);
    out
}

/// The value of the control `oid` in a PDU, if present.
pub fn control_value<'a>(pdu: &'a [u8], h: &Header, oid: &str) -> Option<&'a [u8]> {
    let (c, _) = controls(pdu, h)
        .into_iter()
        .find(|(_, o)| *o == oid.as_bytes())?;
    let mut body = ber::tlv(c).ok()?.body;
    while let Ok(t) = ber::tlv(body) {
        if t.tag == 0x04 && t.body != oid.as_bytes() {
            return Some(t.body);
        }
        body = &body[t.len..];
    }
    None
}

/// A paged results control value: (size, cookie).
pub fn paged_value(v: &[u8]) -> Option<(u32, Vec<u8>)> {
    let seq = ber::tagged(v, 0x30)?;
    let size = ber::tagged(seq.body, 0x02)?;
    let cookie = ber::tagged(seq.body.get(size.len..)?, 0x04)?;
    Some((limit(size.body), cookie.body.to_vec()))
}

/// A paged results control (not critical) with `size` and `cookie`.
pub fn paged_control(size: u32, cookie: &[u8]) -> Vec<u8> {
    let mut v = BytesMut::new();
    let size_bytes = size.to_be_bytes();
    // Minimal INTEGER: strip leading zeros, keep a zero before a high bit.
    let mut s: &[u8] = &size_bytes;
    while s.len() > 1 && s[0] == 0 && s[1] & 0x80 == 0 {
        s = &s[1..];
    }
    let pad = usize::from(s[0] & 0x80 != 0);
    let int_len = 2 + pad + s.len();
    let seq = int_len + 1 + len_of_len(cookie.len()) + cookie.len();
    v.put_u8(0x30);
    put_len(&mut v, seq);
    v.put_u8(0x02);
    v.put_u8((pad + s.len()) as u8);
    if pad == 1 {
        v.put_u8(0);
    }
    v.put_slice(s);
    v.put_u8(0x04);
    put_len(&mut v, cookie.len());
    v.put_slice(cookie);
    let oid = OID_PAGED_RESULTS.as_bytes();
    let inner = 2 + oid.len() + 1 + len_of_len(v.len()) + v.len();
    let mut c = BytesMut::new();
    c.put_u8(0x30);
    put_len(&mut c, inner);
    c.put_u8(0x04);
    c.put_u8(oid.len() as u8);
    c.put_slice(oid);
    c.put_u8(0x04);
    put_len(&mut c, v.len());
    c.put_slice(&v);
    c.to_vec()
}

/// Rewrite `pdu` (any message) with message ID `msgid`, protocolOp `op`,
/// and its controls minus those named in `drop`, plus `extra`.
fn assemble(
    pdu: &[u8],
    h: &Header,
    msgid: i32,
    op: &[u8],
    drop: &[&str],
    extra: Option<&[u8]>,
    out: &mut BytesMut,
) {
    let kept: Vec<&[u8]> = controls(pdu, h)
        .into_iter()
        .filter(|(_, oid)| !drop.iter().any(|d| d.as_bytes() == *oid))
        .map(|(c, _)| c)
        .collect();
    let ctrl_len: usize =
        kept.iter().map(|c| c.len()).sum::<usize>() + extra.map_or(0, <[u8]>::len);
    let id = msgid.to_be_bytes();
    let mut idb: &[u8] = &id;
    while idb.len() > 1 && idb[0] == 0 && idb[1] & 0x80 == 0 {
        idb = &idb[1..];
    }
    let mut body = 2 + idb.len() + op.len();
    if ctrl_len > 0 {
        body += 1 + len_of_len(ctrl_len) + ctrl_len;
    }
    out.reserve(1 + len_of_len(body) + body);
    out.put_u8(0x30);
    put_len(out, body);
    out.put_u8(0x02);
    out.put_u8(idb.len() as u8);
    out.put_slice(idb);
    out.put_slice(op);
    if ctrl_len > 0 {
        out.put_u8(0xa0);
        put_len(out, ctrl_len);
        for c in kept {
            out.put_slice(c);
        }
        if let Some(e) = extra {
            out.put_slice(e);
        }
    }
}

/// The search request `pdu` re-based onto `base` with `scope`, keeping
/// everything else; its paged control is replaced by `paged` (or dropped).
pub fn rebase(
    pdu: &[u8],
    h: &Header,
    sh: &SearchHead,
    base: &str,
    scope: u8,
    paged: Option<&[u8]>,
) -> BytesMut {
    let tail = &pdu[sh.deref_start..h.op_end];
    let base = base.as_bytes();
    let content = 1 + len_of_len(base.len()) + base.len() + 3 + tail.len();
    let mut op = BytesMut::with_capacity(content + 6);
    op.put_u8(tag::SEARCH_REQUEST);
    put_len(&mut op, content);
    op.put_u8(0x04);
    put_len(&mut op, base.len());
    op.put_slice(base);
    op.put_slice(&[0x0a, 0x01, scope]);
    op.put_slice(tail);
    let mut out = BytesMut::with_capacity(op.len() + 64);
    assemble(pdu, h, h.msgid, &op, &[OID_PAGED_RESULTS], paged, &mut out);
    out
}

/// A response `pdu` under message ID `msgid`, its paged control replaced by
/// `paged` (or dropped).
pub fn with_paged(pdu: &[u8], h: &Header, msgid: i32, paged: Option<&[u8]>) -> BytesMut {
    let mut out = BytesMut::with_capacity(pdu.len() + 32);
    let op = &pdu[h.op_start..h.op_end];
    assemble(pdu, h, msgid, op, &[OID_PAGED_RESULTS], paged, &mut out);
    out
}

/// A search request of the router's own (probes, root DSE and naming
/// context reads, `contextCSN` readings), message ID 1, aliases never
/// dereferenced, encoded.
pub fn own_search(
    base: &str,
    scope: ldap3_proto::proto::LdapSearchScope,
    limits: (i32, i32),
    filter: ldap3_proto::proto::LdapFilter,
    attrs: &[&str],
) -> bytes::Bytes {
    use ldap3_proto::proto::{LdapDerefAliases, LdapMsg, LdapOp, LdapSearchRequest};
    let msg = LdapMsg {
        msgid: 1,
        op: LdapOp::SearchRequest(LdapSearchRequest {
            base: base.to_string(),
            scope,
            aliases: LdapDerefAliases::Never,
            sizelimit: limits.0,
            timelimit: limits.1,
            typesonly: false,
            filter,
            attrs: attrs.iter().map(|a| a.to_string()).collect(),
        }),
        ctrl: Vec::new(),
    };
    let tag: lber::structure::StructureTag = msg.into();
    let mut b = BytesMut::new();
    // Encoding into memory cannot fail.
    let _ = lber::write::encode_into(&mut b, tag);
    b.freeze()
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use super::*;
    use crate::proto::wire::frame::header;
    use ldap3_proto::proto::{LdapMsg, LdapOp};

    fn decode(b: &[u8]) -> LdapMsg {
        let tag = lber::parse::Parser::new(32).parse(b).expect("parses").1;
        LdapMsg::try_from(tag).expect("an LDAP message")
    }

    fn search_pdu(ctrl: bool) -> Vec<u8> {
        // ldapsearch -b c=AU -s sub -z 7 -l 3 (objectClass=*) cn, with a
        // paged control (size 5, cookie "ab") and a ManageDsaIT control.
        let mut b = BytesMut::new();
        let mut op = vec![0x63];
        let mut body = vec![0x04, 4];
        body.extend_from_slice(b"c=AU");
        body.extend_from_slice(&[0x0a, 1, 2, 0x0a, 1, 0, 0x02, 1, 7, 0x02, 1, 3, 0x01, 1, 0]);
        body.extend_from_slice(&[0x87, 11]);
        body.extend_from_slice(b"objectClass");
        body.extend_from_slice(&[0x30, 4, 0x04, 2, b'c', b'n']);
        op.push(body.len() as u8);
        op.extend_from_slice(&body);
        let mut ctrls = paged_control(5, b"ab");
        let mdsa = b"2.16.840.1.113730.3.4.2";
        ctrls.extend_from_slice(&[0x30, 2 + mdsa.len() as u8, 0x04, mdsa.len() as u8]);
        ctrls.extend_from_slice(mdsa);
        let fake = header_of(&op);
        assemble(&[], &fake, 9, &op, &[], ctrl.then_some(&ctrls[..]), &mut b);
        b.to_vec()
    }

    fn header_of(op: &[u8]) -> Header {
        Header {
            msgid: 0,
            op_tag: op[0],
            op_start: 0,
            op_end: 0,
        }
    }

    #[test]
    fn head_reads_scope_and_limits() {
        let p = search_pdu(true);
        let h = header(&p).expect("header");
        let sh = head(&p, &h).expect("head");
        assert_eq!((sh.scope, sh.size_limit, sh.time_limit), (2, 7, 3));
        let v = control_value(&p, &h, OID_PAGED_RESULTS).expect("paged control");
        assert_eq!(paged_value(v), Some((5, b"ab".to_vec())));
    }

    #[test]
    fn rebase_keeps_filter_attrs_and_other_controls() {
        let p = search_pdu(true);
        let h = header(&p).expect("header");
        let sh = head(&p, &h).expect("head");
        let ctl = paged_control(300, b"");
        let r = rebase(&p, &h, &sh, "o=DEMOCORP,c=AU", 0, Some(&ctl));
        let m = decode(&r);
        assert_eq!(m.msgid, 9);
        let LdapOp::SearchRequest(s) = m.op else {
            panic!("not a search: {:?}", m.op)
        };
        assert_eq!(s.base, "o=DEMOCORP,c=AU");
        assert_eq!(s.sizelimit, 7);
        assert_eq!(s.timelimit, 3);
        assert_eq!(s.attrs, vec!["cn".to_string()]);
        assert_eq!(m.ctrl.len(), 2, "{:?}", m.ctrl);
        let h2 = header(&r).expect("header");
        let v = control_value(&r, &h2, OID_PAGED_RESULTS).expect("paged");
        assert_eq!(paged_value(v), Some((300, Vec::new())));
        // Without a paged control: only ManageDsaIT is left.
        let r = rebase(&p, &h, &sh, "o=X", 1, None);
        let h3 = header(&r).expect("header");
        assert!(control_value(&r, &h3, OID_PAGED_RESULTS).is_none());
        assert_eq!(decode(&r).ctrl.len(), 1);
        // No controls at all.
        let p = search_pdu(false);
        let h = header(&p).expect("header");
        let sh = head(&p, &h).expect("head");
        let r = rebase(&p, &h, &sh, "", 2, None);
        assert!(decode(&r).ctrl.is_empty());
    }

    #[test]
    fn paged_control_sizes_encode_minimally() {
        for size in [0u32, 1, 127, 128, 255, 256, 65_535, u32::MAX] {
            let c = paged_control(size, b"x");
            let p = {
                let mut b = BytesMut::new();
                let op = [0x42, 0];
                assemble(&[], &header_of(&op), 1, &op, &[], Some(&c), &mut b);
                b
            };
            let h = header(&p).expect("header");
            let v = control_value(&p, &h, OID_PAGED_RESULTS).expect("value");
            assert_eq!(paged_value(v), Some((size, b"x".to_vec())), "{size}");
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for n in 0..40 {
            let mut p = search_pdu(true);
            p.truncate(n);
            if let Ok(h) = header(&p) {
                let _ = head(&p, &h);
            }
        }
    }
}
