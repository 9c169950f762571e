//! What policies read and rewrite in PDUs: the attributes a search filter
//! or a compare names, a search's size and time limits (clamped), and the
//! attributes of a search result entry (hidden ones removed). Anything
//! that cannot be read is left alone here: the DSA rejects what is
//! malformed.

use crate::proto::dn::Dn;
use crate::proto::wire::ber::{self, put_len, Tlv};
use crate::proto::wire::frame::Header;
use bytes::{BufMut, BytesMut};

const SEARCH_REQUEST: u8 = 0x63;
const COMPARE_REQUEST: u8 = 0x6e;
const SEARCH_ENTRY: u8 = 0x64;

/// The SearchRequest's fields after the base, scope and derefAliases:
/// (offset of sizeLimit in the PDU, size, time, offset after timeLimit).
fn limits_at(pdu: &[u8], h: &Header) -> Option<(usize, u32, u32, usize)> {
    let op = pdu.get(h.op_start..h.op_end)?;
    let body = ber::tlv(op).ok()?.body;
    let body_start = h.op_end - body.len();
    let mut at = body_start;
    for _ in 0..3 {
        at += ber::tlv(pdu.get(at..h.op_end)?).ok()?.len;
    }
    let size = ber::tlv(pdu.get(at..h.op_end)?).ok()?;
    let time_at = at + size.len;
    let time = ber::tlv(pdu.get(time_at..h.op_end)?).ok()?;
    if size.tag != 0x02 || time.tag != 0x02 {
        return None;
    }
    let v = |b: &[u8]| ber::uint(b).unwrap_or(0);
    Some((at, v(size.body), v(time.body), time_at + time.len))
}

/// A search's derefAliases (0 never, 1 in searching, 2 finding the
/// base, 3 always); `None`: not a search, or unreadable.
pub fn search_deref(pdu: &[u8], h: &Header) -> Option<u8> {
    if h.op_tag != SEARCH_REQUEST {
        return None;
    }
    let op = pdu.get(h.op_start..h.op_end)?;
    let mut body = ber::tlv(op).ok()?.body;
    for _ in 0..2 {
        body = body.get(ber::tlv(body).ok()?.len..)?;
    }
    let deref = ber::tagged(body, 0x0a)?;
    match deref.body {
        [v] => Some(*v),
        _ => None,
    }
}

/// A search's size and time limits (0 = none).
pub fn search_limits(pdu: &[u8], h: &Header) -> Option<(u32, u32)> {
    if h.op_tag != SEARCH_REQUEST {
        return None;
    }
    limits_at(pdu, h).map(|(_, s, t, _)| (s, t))
}

fn put_int(out: &mut Vec<u8>, v: u32) {
    let bytes = v.to_be_bytes();
    let skip = bytes.iter().take(3).take_while(|&&b| b == 0).count();
    let mut content = bytes[skip..].to_vec();
    if content[0] & 0x80 != 0 {
        content.insert(0, 0);
    }
    out.push(0x02);
    out.push(content.len() as u8);
    out.extend_from_slice(&content);
}

/// The search request `pdu` with sizeLimit and timeLimit set to `size`
/// and `time`; everything else copied.
pub fn with_limits(pdu: &[u8], h: &Header, size: u32, time: u32) -> Option<BytesMut> {
    let (size_at, _, _, after) = limits_at(pdu, h)?;
    let op = ber::tlv(pdu.get(h.op_start..h.op_end)?).ok()?;
    let body_start = h.op_end - op.body.len();
    let mut body = Vec::with_capacity(op.body.len() + 4);
    body.extend_from_slice(pdu.get(body_start..size_at)?);
    put_int(&mut body, size);
    put_int(&mut body, time);
    body.extend_from_slice(pdu.get(after..h.op_end)?);
    let id = pdu.get(header_len(pdu)?..h.op_start)?;
    let rest = pdu.get(h.op_end..)?;
    Some(wrap(id, SEARCH_REQUEST, &body, rest))
}

/// Offset of the message ID (after the outer SEQUENCE's tag and length).
fn header_len(pdu: &[u8]) -> Option<usize> {
    let (_, n) = ber::read_len(pdu.get(1..)?).ok()?;
    Some(1 + n)
}

/// An LDAPMessage: `id` (the messageID TLV), an op of `tag` with `body`,
/// then `rest` (controls).
fn wrap(id: &[u8], tag: u8, body: &[u8], rest: &[u8]) -> BytesMut {
    let op_len = 1 + ber::len_of_len(body.len()) + body.len();
    let total = id.len() + op_len + rest.len();
    let mut out = BytesMut::with_capacity(total + 6);
    out.put_u8(0x30);
    put_len(&mut out, total);
    out.put_slice(id);
    out.put_u8(tag);
    put_len(&mut out, body.len());
    out.put_slice(body);
    out.put_slice(rest);
    out
}

/// The attributes a filter names, and whether it has an extensible
/// match without a type (which tests every attribute).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Names {
    pub attrs: Vec<String>,
    pub typeless: bool,
}

/// The attribute descriptions a search's filter names (`None`: not a
/// search, or a filter that cannot be read).
pub fn filter_attrs(pdu: &[u8], h: &Header) -> Option<Vec<String>> {
    filter_names(pdu, h).map(|n| n.attrs)
}

/// What a search's filter names (`None`: not a search, or a filter that
/// cannot be read).
pub fn filter_names(pdu: &[u8], h: &Header) -> Option<Names> {
    if h.op_tag != SEARCH_REQUEST {
        return None;
    }
    let (_, _, _, after) = limits_at(pdu, h)?;
    // typesOnly, then the filter.
    let types_only = ber::tlv(pdu.get(after..h.op_end)?).ok()?;
    let filter = ber::tlv(pdu.get(after + types_only.len..h.op_end)?).ok()?;
    let mut out = Names::default();
    walk(filter, &mut out, 0)?;
    Some(out)
}

/// What the encoded filter `f` names (an assertion control's value; a
/// matched-values control's items), added to `out`.
pub fn filter_value_names(f: &[u8], out: &mut Names) -> Option<()> {
    walk(ber::tlv(f).ok()?, out, 0)
}

/// Collect the attributes of one filter element (RFC 4511 4.5.1).
fn walk(f: Tlv<'_>, out: &mut Names, depth: usize) -> Option<()> {
    if depth > 64 {
        return None;
    }
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    match f.tag {
        // and, or: a set of filters; not: one.
        0xa0 | 0xa1 => {
            let mut body = f.body;
            while !body.is_empty() {
                let sub = ber::tlv(body).ok()?;
                walk(sub, out, depth + 1)?;
                body = body.get(sub.len..)?;
            }
        }
        0xa2 => walk(ber::tlv(f.body).ok()?, out, depth + 1)?,
        // equality, substrings, >=, <=, approx: attribute first.
        0xa3..=0xa6 | 0xa8 => out.attrs.push(text(ber::tlv(f.body).ok()?.body)),
        // present: the attribute itself.
        0x87 => out.attrs.push(text(f.body)),
        // extensible: [2] type when given; without, every attribute.
        0xa9 => {
            let mut body = f.body;
            let mut typed = false;
            while !body.is_empty() {
                let e = ber::tlv(body).ok()?;
                if e.tag == 0x82 {
                    out.attrs.push(text(e.body));
                    typed = true;
                }
                body = body.get(e.len..)?;
            }
            out.typeless |= !typed;
        }
        _ => return None,
    }
    Some(())
}

/// The attribute a compare asserts (`None`: not a compare, or unreadable).
pub fn compare_attr(pdu: &[u8], h: &Header) -> Option<String> {
    if h.op_tag != COMPARE_REQUEST {
        return None;
    }
    let body = ber::tlv(pdu.get(h.op_start..h.op_end)?).ok()?.body;
    let entry = ber::tlv(body).ok()?;
    let ava = ber::tlv(body.get(entry.len..)?).ok()?;
    let attr = ber::tlv(ava.body).ok()?;
    Some(String::from_utf8_lossy(attr.body).into_owned())
}

/// The attributes whose values a modify request tests: those it adds
/// values to or deletes (values or all) or increments, whose answer
/// (attributeOrValueExists, noSuchAttribute, success) tells what the entry
/// holds; a replace tells nothing. `None`: not a modify, or unreadable.
pub fn modify_tests(pdu: &[u8], h: &Header) -> Option<Vec<String>> {
    if h.op_tag != crate::proto::wire::frame::tag::MODIFY_REQUEST {
        return None;
    }
    let body = ber::tlv(pdu.get(h.op_start..h.op_end)?).ok()?.body;
    let object = ber::tlv(body).ok()?;
    let changes = ber::tagged(body.get(object.len..)?, 0x30)?;
    let mut out = Vec::new();
    for change in ber::Elements(changes.body) {
        let op = ber::tagged(change.body, 0x0a)?;
        let modification = ber::tagged(change.body.get(op.len..)?, 0x30)?;
        let ty = ber::tagged(modification.body, 0x04)?;
        // 2: replace.
        if op.body != [2] {
            out.push(String::from_utf8_lossy(ty.body).into_owned());
        }
    }
    Some(out)
}

/// The DN a modify DN request moves entry `dn` to: its newrdn under its
/// newSuperior, or under its parent without one (`None`: unreadable).
pub fn moddn_new_dn(dn: &Dn, pdu: &[u8], h: &Header) -> Option<Dn> {
    let (newrdn, sup) = crate::proto::wire::request::moddn_target(pdu, h)?;
    let parent = match sup {
        Some(s) => Dn::parse_ldap(&s).ok()?,
        None => dn.ancestor(dn.depth().saturating_sub(1)),
    };
    let rdn = Dn::parse_ldap(&newrdn).ok()?;
    if rdn.depth() != 1 {
        return None;
    }
    let mut rdns = rdn.rdns().to_vec();
    rdns.extend_from_slice(parent.rdns());
    Some(Dn::from_rdns(rdns))
}

/// The DN of a search result entry, as sent (`None`: not an entry, or
/// unreadable).
pub fn entry_name<'a>(pdu: &'a [u8], h: &Header) -> Option<&'a [u8]> {
    if h.op_tag != SEARCH_ENTRY {
        return None;
    }
    let op = ber::tlv(pdu.get(h.op_start..h.op_end)?).ok()?;
    Some(ber::tagged(op.body, 0x04)?.body)
}

/// A search result entry without the attributes `hide` says; `None` when
/// it is not an entry or nothing is hidden in it.
pub fn strip_entry(pdu: &[u8], h: &Header, hide: impl Fn(&[u8]) -> bool) -> Option<BytesMut> {
    if h.op_tag != SEARCH_ENTRY {
        return None;
    }
    let op = ber::tlv(pdu.get(h.op_start..h.op_end)?).ok()?;
    let name = ber::tlv(op.body).ok()?;
    let attrs = ber::tlv(op.body.get(name.len..)?).ok()?;
    let mut kept = Vec::with_capacity(attrs.body.len());
    let mut dropped = false;
    let mut rest = attrs.body;
    while !rest.is_empty() {
        let a = ber::tlv(rest).ok()?;
        let ty = ber::tlv(a.body).ok()?;
        if hide(ty.body) {
            dropped = true;
        } else {
            kept.extend_from_slice(&rest[..a.len]);
        }
        rest = rest.get(a.len..)?;
    }
    if !dropped {
        return None;
    }
    let mut body = Vec::with_capacity(name.len + kept.len() + 6);
    body.extend_from_slice(&op.body[..name.len]);
    body.push(0x30);
    let mut len = BytesMut::new();
    put_len(&mut len, kept.len());
    body.extend_from_slice(&len);
    body.extend_from_slice(&kept);
    let id = pdu.get(header_len(pdu)?..h.op_start)?;
    Some(wrap(id, SEARCH_ENTRY, &body, pdu.get(h.op_end..)?))
}
