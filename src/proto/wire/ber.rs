//! BER elements read in place, and BER lengths written: the one TLV reader
//! every wire module uses (framing, request decoding, search surgery, the
//! password policy control).
//!
//! LDAP uses a narrow profile of BER (RFC 4511 5.1): definite lengths only,
//! and every tag it defines fits in one identifier octet. Within that
//! profile an element is an identifier octet, a length and a slice of
//! contents, so reading one borrows from the PDU and allocates nothing.
//! `ldap3_lber`'s parser builds a tag tree instead, an allocation per
//! element; that suits the PDUs the router writes itself (see `response`),
//! not the hot path, where each forwarded PDU is read for a few fields only.
//!
//! Lengths are accepted up to four octets (4 GiB), far beyond any PDU limit;
//! a longer length form is treated like the indefinite one, as an encoding
//! the router does not take.

use bytes::{BufMut, BytesMut};

/// Why the bytes at hand are not a whole BER element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BerError {
    /// The indefinite form (forbidden in LDAP) or more than four length
    /// octets.
    BadLength,
    /// The element runs past the end of the bytes (more may be on the way).
    Truncated,
}

/// The identifier octet's class bits (the two high bits), shifted down.
pub const UNIVERSAL: u8 = 0;
pub const APPLICATION: u8 = 1;
pub const CONTEXT: u8 = 2;

/// The definite length at the front of `buf`: `(length, octets used)`.
pub fn read_len(buf: &[u8]) -> Result<(usize, usize), BerError> {
    let Some(&first) = buf.first() else {
        return Err(BerError::Truncated);
    };
    if first < 0x80 {
        return Ok((first as usize, 1));
    }
    let n = (first & 0x7f) as usize;
    if n == 0 || n > 4 {
        // 0x80 is the indefinite form, which LDAP forbids (RFC 4511 5.1).
        return Err(BerError::BadLength);
    }
    let octets = buf.get(1..=n).ok_or(BerError::Truncated)?;
    let len = octets.iter().fold(0usize, |l, &b| (l << 8) | b as usize);
    Ok((len, 1 + n))
}

/// One element, borrowed from the bytes it was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tlv<'a> {
    /// The identifier octet: class, constructed bit, tag number.
    pub tag: u8,
    /// The contents octets.
    pub body: &'a [u8],
    /// The whole element's length: identifier, length and contents.
    pub len: usize,
}

/// The element at the front of `buf`; bytes after it are not looked at.
pub fn tlv(buf: &[u8]) -> Result<Tlv<'_>, BerError> {
    let tag = *buf.first().ok_or(BerError::Truncated)?;
    let (len, n) = read_len(&buf[1..])?;
    let end = (1 + n).checked_add(len).ok_or(BerError::Truncated)?;
    let body = buf.get(1 + n..end).ok_or(BerError::Truncated)?;
    Ok(Tlv {
        tag,
        body,
        len: end,
    })
}

/// The element at the front of `buf` when it is whole and its identifier
/// octet is `tag`.
pub fn tagged(buf: &[u8], tag: u8) -> Option<Tlv<'_>> {
    tlv(buf).ok().filter(|t| t.tag == tag)
}

/// Take the element at the front of `buf`, leaving `buf` just after it;
/// `None` (and `buf` untouched) when there is no whole element.
pub fn split<'a>(buf: &mut &'a [u8]) -> Option<Tlv<'a>> {
    let t = tlv(buf).ok()?;
    *buf = &buf[t.len..];
    Some(t)
}

impl<'a> Tlv<'a> {
    pub fn class(self) -> u8 {
        self.tag >> 6
    }

    pub fn num(self) -> u8 {
        self.tag & 0x1f
    }

    pub fn is(self, class: u8, num: u8) -> bool {
        self.class() == class && self.num() == num
    }

    /// The contents of a primitive element.
    pub fn prim(self) -> Option<&'a [u8]> {
        (self.tag & 0x20 == 0).then_some(self.body)
    }

    /// The elements inside a constructed element.
    pub fn cons(self) -> Option<Elements<'a>> {
        (self.tag & 0x20 != 0).then_some(Elements(self.body))
    }
}

/// A run of elements (the contents of a constructed element), in order.
/// Iteration ends at the first element that is not whole, so over bytes
/// that [`well_formed`] did not accept it may end early.
#[derive(Debug, Clone, Copy, Default)]
pub struct Elements<'a>(pub &'a [u8]);

impl<'a> Iterator for Elements<'a> {
    type Item = Tlv<'a>;

    fn next(&mut self) -> Option<Tlv<'a>> {
        split(&mut self.0)
    }
}

impl<'a> Elements<'a> {
    /// The `i`th element (from 0).
    pub fn get(self, i: usize) -> Option<Tlv<'a>> {
        { self }.nth(i)
    }
}

/// Whether `buf` is a run of whole elements, constructed ones recursively,
/// nested at most `levels` deep. Nothing is allocated.
pub fn well_formed(mut buf: &[u8], levels: usize) -> bool {
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

/// The value of an INTEGER's contents, when it has one to eight octets.
pub fn int(content: &[u8]) -> Option<i64> {
    let first = *content.first()?;
    if content.len() > 8 {
        return None;
    }
    let sign: i64 = if first & 0x80 != 0 { -1 } else { 0 };
    Some(content.iter().fold(sign, |v, &b| (v << 8) | b as i64))
}

/// The value of a non-negative INTEGER's contents (a limit, a count, an
/// enumeration), saturating at `u32::MAX`; `None` when it is negative or
/// longer than the five octets a `u32` can need. Empty contents read as 0.
pub fn uint(content: &[u8]) -> Option<u32> {
    if content.len() > 5 || content.first().is_some_and(|b| b & 0x80 != 0) {
        return None;
    }
    let v = content.iter().fold(0u64, |v, &b| (v << 8) | b as u64);
    Some(v.min(u32::MAX as u64) as u32)
}

/// Append the definite length `len` in its shortest form.
pub fn put_len(out: &mut BytesMut, len: usize) {
    if len < 0x80 {
        out.put_u8(len as u8);
    } else if len <= 0xff {
        out.put_u8(0x81);
        out.put_u8(len as u8);
    } else if len <= 0xffff {
        out.put_u8(0x82);
        out.put_u16(len as u16);
    } else if len <= 0xff_ffff {
        out.put_u8(0x83);
        out.put_u8((len >> 16) as u8);
        out.put_u16(len as u16);
    } else {
        out.put_u8(0x84);
        out.put_u32(len as u32);
    }
}

/// How many octets [`put_len`] writes for `len`.
pub fn len_of_len(len: usize) -> usize {
    match len {
        0..=0x7f => 1,
        0x80..=0xff => 2,
        0x100..=0xffff => 3,
        0x1_0000..=0xff_ffff => 4,
        _ => 5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use BerError::{BadLength, Truncated};

    #[test]
    fn lengths() {
        type Len = Result<(usize, usize), BerError>;
        let rows: &[(&[u8], Len)] = &[
            (&[], Err(Truncated)),
            (&[0x00], Ok((0, 1))),
            (&[0x05, 0xff], Ok((5, 1))),
            (&[0x7f], Ok((127, 1))),
            (&[0x81, 0x80], Ok((128, 2))),
            (&[0x81, 0x05], Ok((5, 2))), // not minimal, still definite
            (&[0x82, 0x01, 0x00], Ok((256, 3))),
            (&[0x83, 0x01, 0x00, 0x00], Ok((0x1_0000, 4))),
            (&[0x84, 0x10, 0x00, 0x00, 0x00], Ok((0x1000_0000, 5))),
            (&[0x84, 0xff, 0xff, 0xff, 0xff], Ok((0xffff_ffff, 5))),
            (&[0x81], Err(Truncated)),
            (&[0x83, 0x01, 0x02], Err(Truncated)),
            // Indefinite, and longer than four octets: rejected even before
            // the octets are there.
            (&[0x80], Err(BadLength)),
            (&[0x80, 0x00, 0x00], Err(BadLength)),
            (&[0x85], Err(BadLength)),
            (&[0x85, 1, 1, 1, 1, 1], Err(BadLength)),
            (&[0xff], Err(BadLength)),
        ];
        for (buf, want) in rows {
            assert_eq!(read_len(buf), *want, "{buf:02x?}");
        }
    }

    #[test]
    fn elements() {
        let ok = |tag, body: &'static [u8], len| Ok(Tlv { tag, body, len });
        let rows: &[(&[u8], Result<Tlv, BerError>)] = &[
            (&[0x04, 0x02, b'a', b'b'], ok(0x04, b"ab", 4)),
            // Bytes after the element are left alone.
            (&[0x04, 0x01, b'a', 0x99, 0x99], ok(0x04, b"a", 3)),
            (&[0x30, 0x00], ok(0x30, b"", 2)),
            (&[0x04, 0x81, 0x01, b'x'], ok(0x04, b"x", 4)),
            (&[], Err(Truncated)),
            (&[0x04], Err(Truncated)),
            (&[0x04, 0x03, b'a'], Err(Truncated)),
            (&[0x04, 0x82, 0x01], Err(Truncated)),
            // A length near the top of the range overruns, without overflow.
            (&[0x04, 0x84, 0xff, 0xff, 0xff, 0xff, 0x00], Err(Truncated)),
            (&[0x30, 0x80, 0x04, 0x00, 0x00, 0x00], Err(BadLength)),
            (&[0x30, 0x85, 0, 0, 0, 0, 1, 0], Err(BadLength)),
        ];
        for (buf, want) in rows {
            assert_eq!(tlv(buf), *want, "{buf:02x?}");
        }
        assert_eq!(tagged(&[0x04, 0x00], 0x04).map(|t| t.len), Some(2));
        assert_eq!(tagged(&[0x04, 0x00], 0x30), None);
        assert_eq!(tagged(&[0x04, 0x01], 0x04), None);
    }

    #[test]
    fn split_advances_only_over_whole_elements() {
        let mut buf: &[u8] = &[0x02, 0x01, 0x07, 0x04, 0x05, b'a'];
        let t = split(&mut buf).expect("an INTEGER");
        assert_eq!((t.tag, t.body), (0x02, &[0x07][..]));
        assert_eq!(buf, &[0x04, 0x05, b'a']);
        assert_eq!(split(&mut buf), None);
        assert_eq!(buf, &[0x04, 0x05, b'a'], "untouched");
    }

    #[test]
    fn classes_and_forms() {
        let t = |tag| Tlv {
            tag,
            body: b"",
            len: 2,
        };
        // (identifier, class, number, constructed)
        for (tag, class, num, cons) in [
            (0x02, UNIVERSAL, 2, false),
            (0x30, UNIVERSAL, 16, true),
            (0x63, APPLICATION, 3, true),
            (0x42, APPLICATION, 2, false),
            (0x87, CONTEXT, 7, false),
            (0xa0, CONTEXT, 0, true),
        ] {
            let e = t(tag);
            assert_eq!((e.class(), e.num()), (class, num), "{tag:02x}");
            assert!(e.is(class, num));
            assert_eq!(e.cons().is_some(), cons, "{tag:02x}");
            assert_eq!(e.prim().is_some(), !cons, "{tag:02x}");
        }
    }

    #[test]
    fn runs_of_elements() {
        // SEQUENCE { INTEGER 1, SEQUENCE { OCTET STRING "x" } }
        let seq: &[u8] = &[0x30, 0x08, 0x02, 0x01, 0x01, 0x30, 0x03, 0x04, 0x01, b'x'];
        let rows: &[(&[u8], usize, bool)] = &[
            (&[], 0, true),
            (seq, 3, true),
            (seq, 2, false), // nested one level too deep
            (&seq[..seq.len() - 1], 3, false),
            (&[0x02, 0x01, 0x01, 0x02, 0x01, 0x02], 1, true),
            (&[0x02, 0x01, 0x01, 0x02], 1, false),
            // The inner element claims more than its parent holds.
            (&[0x30, 0x03, 0x04, 0x05, b'x'], 3, false),
            (&[0x30, 0x80, 0x00, 0x00], 3, false),
        ];
        for (buf, levels, want) in rows {
            assert_eq!(well_formed(buf, *levels), *want, "{buf:02x?} {levels}");
        }
        let fields: Vec<u8> = Tlv {
            tag: 0x30,
            body: &seq[2..],
            len: seq.len(),
        }
        .cons()
        .expect("constructed")
        .map(|t| t.tag)
        .collect();
        assert_eq!(fields, [0x02, 0x30]);
        let inner = Elements(&seq[2..]).get(1).and_then(Tlv::cons);
        assert_eq!(
            inner.and_then(|e| e.get(0)).map(|t| t.body),
            Some(&b"x"[..])
        );
        // Iteration stops at a broken element.
        assert_eq!(Elements(&[0x02, 0x01, 0x01, 0x04, 0x09]).count(), 1);
    }

    #[test]
    fn integers() {
        let rows: &[(&[u8], Option<i64>, Option<u32>)] = &[
            (&[], None, Some(0)),
            (&[0x00], Some(0), Some(0)),
            (&[0x05], Some(5), Some(5)),
            (&[0x7f], Some(127), Some(127)),
            (&[0x00, 0x80], Some(128), Some(128)),
            (&[0x80], Some(-128), None),
            (&[0xff], Some(-1), None),
            (&[0x0e, 0x10], Some(3600), Some(3600)),
            (
                &[0x7f, 0xff, 0xff, 0xff],
                Some(i32::MAX as i64),
                Some(i32::MAX as u32),
            ),
            (
                &[0x00, 0xff, 0xff, 0xff, 0xff],
                Some(u32::MAX as i64),
                Some(u32::MAX),
            ),
            // Past u32: saturates.
            (
                &[0x01, 0x00, 0x00, 0x00, 0x00],
                Some(1 << 32),
                Some(u32::MAX),
            ),
            (&[0x00, 0x00, 0x00, 0x00, 0x00, 0x01], Some(1), None),
            (
                &[0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
                Some(i64::MAX),
                None,
            ),
            (
                &[0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01],
                None,
                None,
            ),
        ];
        for (content, signed, unsigned) in rows {
            assert_eq!(int(content), *signed, "int {content:02x?}");
            assert_eq!(uint(content), *unsigned, "uint {content:02x?}");
        }
    }

    #[test]
    fn written_lengths_read_back() {
        for len in [
            0, 1, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x1_0000, 0xff_ffff, 0x100_0000,
        ] {
            let mut b = BytesMut::new();
            put_len(&mut b, len);
            assert_eq!(b.len(), len_of_len(len), "{len:#x}");
            assert_eq!(read_len(&b), Ok((len, b.len())), "{len:#x}");
        }
    }
}
