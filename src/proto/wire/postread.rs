//! The post-read control (RFC 4527) as read-your-writes uses it: the
//! router asks the DSA that takes a client's add, modify or modify DN for
//! the written entry's `entryCSN`, which is the write's own replication
//! position, and takes the control out of the response again unless the
//! client asked for one itself.
//!
//! Request value: `AttributeSelection ::= SEQUENCE OF LDAPString`
//! (`entryCSN`). Response value: the entry as a `SearchResultEntry`
//! (`[APPLICATION 4] SEQUENCE { objectName, attributes }`).

use super::ber::{self, Elements};
use super::frame::{tag, Header};
use super::search;
use super::state::OID_TXN_SPEC;
use bytes::BytesMut;

/// The post-read control's OID.
pub const OID_POST_READ: &str = "1.3.6.1.1.13.2";

/// The control the router adds: not critical (a DSA that cannot read the
/// entry back, say for lack of access, still makes the write), asking
/// for `entryCSN` alone.
pub const REQUEST: &[u8] = &[
    0x30, 0x1e, // Control
    0x04, 0x0e, b'1', b'.', b'3', b'.', b'6', b'.', b'1', b'.', b'1', b'.', b'1', b'3', b'.',
    b'2', // controlType
    0x04, 0x0c, // controlValue
    0x30, 0x0a, 0x04, 0x08, b'e', b'n', b't', b'r', b'y', b'C', b'S', b'N',
];

/// What the router does about post-read on one write request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Nothing: not an add, modify or modify DN, or one inside a
    /// transaction (the DSA answers it at commit, where a control added
    /// to one update has no place).
    None,
    /// The client asked for a post-read itself: its control goes as it
    /// is, and its response too (the router reads an `entryCSN` in it if
    /// the client asked for that attribute).
    Client,
    /// The router asks for `entryCSN` (where the DSA supports the
    /// control) and removes the response control.
    Router,
}

/// The plan for the request `pdu`.
pub fn plan(pdu: &[u8], h: &Header) -> Plan {
    if !matches!(
        h.op_tag,
        tag::ADD_REQUEST | tag::MODIFY_REQUEST | tag::MODDN_REQUEST
    ) || search::has_control(pdu, h, OID_TXN_SPEC)
    {
        return Plan::None;
    }
    if search::has_control(pdu, h, OID_POST_READ) {
        Plan::Client
    } else {
        Plan::Router
    }
}

/// The `entryCSN` of the entry in a post-read response control's value,
/// if it names one.
pub fn entry_csn(value: &[u8]) -> Option<&str> {
    let entry = ber::tagged(value, 0x64)?;
    let mut parts = Elements(entry.body);
    parts.next().filter(|dn| dn.tag == 0x04)?;
    let attrs = parts.next().filter(|a| a.tag == 0x30)?;
    for attr in Elements(attrs.body).filter(|a| a.tag == 0x30) {
        let mut el = Elements(attr.body);
        let Some(name) = el.next().filter(|n| n.tag == 0x04) else {
            continue;
        };
        if !name.body.eq_ignore_ascii_case(b"entryCSN") {
            continue;
        }
        let vals = el.next().filter(|v| v.tag == 0x31)?;
        let first = Elements(vals.body).next().filter(|v| v.tag == 0x04)?;
        return std::str::from_utf8(first.body).ok();
    }
    None
}

/// The `entryCSN` a write response carries in its post-read control.
pub fn response_csn<'a>(pdu: &'a [u8], h: &Header) -> Option<&'a str> {
    entry_csn(search::control_value(pdu, h, OID_POST_READ)?)
}

/// The response `pdu` without its post-read control, when it has one.
pub fn strip(pdu: &[u8], h: &Header) -> Option<BytesMut> {
    search::has_control(pdu, h, OID_POST_READ)
        .then(|| search::without_controls(pdu, h, h.msgid, &[OID_POST_READ]))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::proto::wire::frame::{self, header};

    /// An LDAPMessage `id` with protocolOp `op` and `controls` (each a
    /// whole Control).
    fn message(id: u8, op: &[u8], controls: &[&[u8]]) -> Vec<u8> {
        let mut body = vec![0x02, 0x01, id];
        body.extend_from_slice(op);
        let ctl: Vec<u8> = controls.concat();
        if !ctl.is_empty() {
            body.push(0xa0);
            body.push(ctl.len() as u8);
            body.extend_from_slice(&ctl);
        }
        let mut m = vec![0x30, body.len() as u8];
        m.extend_from_slice(&body);
        m
    }

    fn tlv(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![tag, body.len() as u8];
        v.extend_from_slice(body);
        v
    }

    /// A post-read response value: entry `dn` with `attrs`.
    fn entry(dn: &str, attrs: &[(&str, &[&str])]) -> Vec<u8> {
        let mut list = Vec::new();
        for (name, vals) in attrs {
            let vs: Vec<u8> = vals.iter().flat_map(|v| tlv(0x04, v.as_bytes())).collect();
            let a = [tlv(0x04, name.as_bytes()), tlv(0x31, &vs)].concat();
            list.extend(tlv(0x30, &a));
        }
        tlv(0x64, &[tlv(0x04, dn.as_bytes()), tlv(0x30, &list)].concat())
    }

    #[test]
    fn the_request_control_is_the_encoding_of_its_parts() {
        let value = tlv(0x30, &tlv(0x04, b"entryCSN"));
        assert_eq!(REQUEST, &frame::control(OID_POST_READ, false, &value)[..]);
    }

    #[test]
    fn plans_by_operation_and_controls() {
        let add = tlv(0x68, &[tlv(0x04, b"cn=x"), tlv(0x30, &[])].concat());
        let del = tlv(0x4a, b"cn=x");
        let txn = frame::control(OID_TXN_SPEC, true, b"1");
        let own = frame::control(OID_POST_READ, false, &tlv(0x30, &[]));
        let other = frame::control("1.2.3", false, b"");
        let cases: [(Vec<u8>, Plan); 5] = [
            (message(1, &add, &[]), Plan::Router),
            (message(1, &add, &[&other]), Plan::Router),
            (message(1, &add, &[&txn]), Plan::None),
            (message(1, &add, &[&other, &own]), Plan::Client),
            (message(1, &del, &[]), Plan::None),
        ];
        for (pdu, want) in cases {
            let h = header(&pdu).unwrap();
            assert_eq!(plan(&pdu, &h), want, "{pdu:02x?}");
        }
    }

    #[test]
    fn entry_csn_is_found_whatever_its_case_and_place() {
        let csn = "20261206031500.123456Z#000000#001#000000";
        let cases: [(Vec<u8>, Option<&str>); 5] = [
            (entry("cn=x", &[("entryCSN", &[csn])]), Some(csn)),
            (
                entry("cn=x", &[("cn", &["x"]), ("ENTRYcsn", &[csn])]),
                Some(csn),
            ),
            (entry("cn=x", &[("cn", &["x"])]), None),
            (entry("cn=x", &[]), None),
            (tlv(0x04, b"not an entry"), None),
        ];
        for (value, want) in cases {
            assert_eq!(entry_csn(&value), want);
        }
        // Truncated anywhere: no answer, no panic.
        let whole = entry("cn=x", &[("entryCSN", &[csn])]);
        for n in 0..whole.len() {
            assert_eq!(entry_csn(&whole[..n]), None);
        }
    }

    #[test]
    fn a_response_loses_its_post_read_control_and_keeps_the_others() {
        let csn = "20261206031500.123456Z#000000#001#000000";
        let done = tlv(0x67, &[0x0a, 0x01, 0x00, 0x04, 0x00, 0x04, 0x00]);
        let pr = frame::control(
            OID_POST_READ,
            false,
            &entry("cn=x", &[("entryCSN", &[csn])]),
        );
        let other = frame::control("1.2.3", false, b"v");
        let pdu = message(7, &done, &[&other, &pr]);
        let h = header(&pdu).unwrap();
        assert_eq!(response_csn(&pdu, &h), Some(csn));
        let out = strip(&pdu, &h).unwrap();
        assert_eq!(&out[..], &message(7, &done, &[&other])[..]);
        let plain = message(7, &done, &[]);
        assert!(strip(&plain, &header(&plain).unwrap()).is_none());
    }
}
