//! Prefix mapping (CA Directory's `native-prefix`): a DSA that holds a
//! partition's entries under another DN. Requests going to it have their
//! DNs moved from the knowledge prefix to the DSA's native prefix, and its
//! responses have theirs moved back, so clients only ever see the
//! knowledge prefix.
//!
//! Mapped: in requests, the bind name, the search base, the entry of add,
//! delete, modify, modify DN and compare, and modify DN's new superior; in
//! responses, entry DNs and results' matchedDN. Not mapped: DNs inside
//! attribute values and filters, and referral URLs (documented in
//! `docs/knowledge.md`). Everything else passes byte for byte; only the
//! lengths that enclose a changed DN are rewritten.

use super::ber::{self, put_len};
use super::frame::Header;
use crate::proto::dn::Dn;
use bytes::{BufMut, BytesMut};

/// A partition's knowledge prefix and the DSA's native prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixMap {
    pub prefix: Dn,
    pub native: Dn,
}

impl PrefixMap {
    /// `dn` (an LDAP string) under the knowledge prefix, moved under the
    /// native prefix; `None` when it is not under the knowledge prefix.
    pub fn to_native(&self, dn: &str) -> Option<String> {
        rebase(dn, &self.prefix, &self.native)
    }

    /// The reverse: a DN the DSA returned, moved under the knowledge prefix.
    pub fn to_client(&self, dn: &str) -> Option<String> {
        rebase(dn, &self.native, &self.prefix)
    }

    /// `pdu`, a request, with its DNs moved to the native prefix; `None`
    /// when nothing changes.
    pub fn request(&self, pdu: &[u8], h: &Header) -> Option<BytesMut> {
        let slots: &[usize] = match h.op_tag {
            0x60 => &[1],               // bind: version, name, auth
            0x63 => &[0],               // search: base
            0x66 | 0x68 | 0x6e => &[0], // modify, add, compare: entry
            0x6c => &[0, 3],            // modify DN: entry, newrdn, deleteoldrdn, [0] newSuperior
            0x4a => return self.delete(pdu, h),
            _ => return None,
        };
        rewrite_op(pdu, h, slots, |s| self.to_native(s))
    }

    /// `pdu`, a response, with its DNs moved back to the knowledge prefix;
    /// `None` when nothing changes.
    pub fn response(&self, pdu: &[u8], h: &Header) -> Option<BytesMut> {
        let slots: &[usize] = match h.op_tag {
            0x64 => &[0], // entry: objectName
            // LDAPResult: resultCode, matchedDN, diagnosticMessage, ...
            0x61 | 0x65 | 0x67 | 0x69 | 0x6b | 0x6d | 0x6f | 0x78 => &[1],
            _ => return None,
        };
        rewrite_op(pdu, h, slots, |s| self.to_client(s))
    }

    /// A DelRequest is `[APPLICATION 10] LDAPDN`: its contents are the DN.
    fn delete(&self, pdu: &[u8], h: &Header) -> Option<BytesMut> {
        let op = ber::tlv(pdu.get(h.op_start..h.op_end)?).ok()?;
        let dn = std::str::from_utf8(op.body).ok()?;
        let new = self.to_native(dn)?;
        let mut o = BytesMut::new();
        o.put_u8(op.tag);
        put_len(&mut o, new.len());
        o.put_slice(new.as_bytes());
        Some(message(pdu, h, &o))
    }
}

/// `dn` moved from under `from` to under `to`.
fn rebase(dn: &str, from: &Dn, to: &Dn) -> Option<String> {
    let d = Dn::parse_ldap(dn).ok()?;
    if !from.is_ancestor_or_self_of(&d) {
        return None;
    }
    let keep = d.depth() - from.depth();
    let mut rdns = d.rdns()[..keep].to_vec();
    rdns.extend_from_slice(to.rdns());
    Some(Dn::from_rdns(rdns).to_string())
}

/// The operation of `pdu` with the string elements at `slots` replaced by
/// what `map` makes of them.
fn rewrite_op(
    pdu: &[u8],
    h: &Header,
    slots: &[usize],
    map: impl Fn(&str) -> Option<String>,
) -> Option<BytesMut> {
    let op = ber::tlv(pdu.get(h.op_start..h.op_end)?).ok()?;
    let mut body = BytesMut::with_capacity(op.body.len() + 64);
    let mut rest = op.body;
    let mut changed = false;
    let mut i = 0;
    while !rest.is_empty() {
        let t = ber::split(&mut rest)?;
        let raw = &op.body[op.body.len() - rest.len() - t.len..op.body.len() - rest.len()];
        let new = slots
            .contains(&i)
            .then(|| t.prim())
            .flatten()
            .and_then(|v| std::str::from_utf8(v).ok())
            .filter(|s| !s.is_empty())
            .and_then(&map);
        match new {
            Some(s) => {
                changed = true;
                body.put_u8(t.tag);
                put_len(&mut body, s.len());
                body.put_slice(s.as_bytes());
            }
            None => body.put_slice(raw),
        }
        i += 1;
    }
    if !changed {
        return None;
    }
    let mut o = BytesMut::with_capacity(body.len() + 6);
    o.put_u8(op.tag);
    put_len(&mut o, body.len());
    o.put_slice(&body);
    Some(message(pdu, h, &o))
}

/// `pdu` with its operation replaced by `op` (message ID and controls kept).
fn message(pdu: &[u8], h: &Header, op: &[u8]) -> BytesMut {
    // The message ID's TLV ends where the operation starts.
    let outer = ber::tlv(pdu).map(|t| pdu.len() - t.body.len()).unwrap_or(2);
    let id = &pdu[outer..h.op_start];
    let after = &pdu[h.op_end..];
    let len = id.len() + op.len() + after.len();
    let mut out = BytesMut::with_capacity(len + 6);
    out.put_u8(0x30);
    put_len(&mut out, len);
    out.put_slice(id);
    out.put_slice(op);
    out.put_slice(after);
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::proto::wire::frame::header;
    use ldap3_proto::control::LdapControl;
    use ldap3_proto::proto::{
        LdapDerefAliases, LdapFilter, LdapMsg, LdapOp, LdapResult, LdapResultCode,
        LdapSearchRequest, LdapSearchResultEntry, LdapSearchScope,
    };

    fn map() -> PrefixMap {
        PrefixMap {
            prefix: Dn::parse_ldap("o=DEMOCORP,c=AU").unwrap(),
            native: Dn::parse_ldap("o=Native Corp,c=AU").unwrap(),
        }
    }

    fn encode(m: LdapMsg) -> Vec<u8> {
        let tag: lber::structure::StructureTag = m.into();
        let mut b = BytesMut::new();
        lber::write::encode_into(&mut b, tag).unwrap();
        b.to_vec()
    }

    fn decode(b: &[u8]) -> LdapMsg {
        let tag = lber::parse::Parser::new(32).parse(b).unwrap().1;
        LdapMsg::try_from(tag).unwrap()
    }

    #[test]
    fn dns_move_between_prefixes_and_others_stay() {
        let m = map();
        for (dn, native) in [
            (
                "uid=a,ou=People,o=DEMOCORP,c=AU",
                Some("uid=a,ou=People,o=Native Corp,c=AU"),
            ),
            ("o=democorp, c=au", Some("o=Native Corp,c=AU")),
            ("o=CUSTOMER,c=AU", None),
            ("c=AU", None),
            ("", None),
            ("not a dn", None),
        ] {
            assert_eq!(m.to_native(dn).as_deref(), native, "{dn}");
            if let Some(n) = native {
                assert!(m
                    .to_client(n)
                    .unwrap()
                    .eq_ignore_ascii_case(&dn.replace(", ", ",")));
            }
        }
    }

    /// RFC 4514 hexstring values (`cn=#04024142`: the BER encoding of
    /// the value) stay hexstrings both ways; a string value that starts
    /// with `#` stays escaped.
    #[test]
    fn hex_values_survive_the_mapping_unchanged() {
        let m = map();
        for (dn, native, back) in [
            (
                "cn=#04024142,o=DEMOCORP,c=AU",
                "cn=#04024142,o=Native Corp,c=AU",
                "cn=#04024142,o=DEMOCORP,c=AU",
            ),
            (
                "uid=#0C0141,ou=#0403616263,o=DEMOCORP,c=AU",
                "uid=#0C0141,ou=#0403616263,o=Native Corp,c=AU",
                "uid=#0C0141,ou=#0403616263,o=DEMOCORP,c=AU",
            ),
            (
                "cn=#04024142+uid=a,o=DEMOCORP,c=AU",
                "cn=#04024142+uid=a,o=Native Corp,c=AU",
                "cn=#04024142+uid=a,o=DEMOCORP,c=AU",
            ),
            (
                "2.5.4.3=#04024142 , o=DEMOCORP,c=AU",
                "2.5.4.3=#04024142,o=Native Corp,c=AU",
                "2.5.4.3=#04024142,o=DEMOCORP,c=AU",
            ),
            (
                "cn=\\#04024142,o=DEMOCORP,c=AU",
                "cn=\\#04024142,o=Native Corp,c=AU",
                "cn=\\#04024142,o=DEMOCORP,c=AU",
            ),
            (
                "cn=\\23x,o=DEMOCORP,c=AU",
                "cn=\\#x,o=Native Corp,c=AU",
                "cn=\\#x,o=DEMOCORP,c=AU",
            ),
        ] {
            assert_eq!(m.to_native(dn).as_deref(), Some(native), "{dn}");
            assert_eq!(m.to_client(native).as_deref(), Some(back), "{dn}");
        }
        // In a PDU: a search base, and an entry's DN coming back.
        let req = encode(LdapMsg {
            msgid: 2,
            op: LdapOp::SearchRequest(LdapSearchRequest {
                base: "cn=#04024142,o=DEMOCORP,c=AU".into(),
                scope: LdapSearchScope::Base,
                aliases: LdapDerefAliases::Never,
                sizelimit: 0,
                timelimit: 0,
                typesonly: false,
                filter: LdapFilter::Present("objectClass".into()),
                attrs: vec![],
            }),
            ctrl: vec![],
        });
        let out = map().request(&req, &header(&req).unwrap()).unwrap();
        let LdapOp::SearchRequest(s) = decode(&out).op else {
            panic!()
        };
        assert_eq!(s.base, "cn=#04024142,o=Native Corp,c=AU");
        let entry = encode(LdapMsg {
            msgid: 2,
            op: LdapOp::SearchResultEntry(LdapSearchResultEntry {
                dn: "cn=#04024142,o=Native Corp,c=AU".into(),
                attributes: vec![],
            }),
            ctrl: vec![],
        });
        let out = map().response(&entry, &header(&entry).unwrap()).unwrap();
        let LdapOp::SearchResultEntry(e) = decode(&out).op else {
            panic!()
        };
        assert_eq!(e.dn, "cn=#04024142,o=DEMOCORP,c=AU");
    }

    proptest::proptest! {
        /// Any DN under the prefix whose RDNs mix hexstring and plain
        /// values maps to the native prefix and back with each RDN as
        /// written.
        #[test]
        fn hexstring_rdns_map_both_ways_as_written(
            rdns in proptest::collection::vec(
                "(cn|uid|ou|2\\.5\\.4\\.3)=(#([0-9a-fA-F]{2}){1,8}|[a-z][a-z0-9]{0,6})",
                1..4,
            )
        ) {
            let below = rdns.join(",");
            let dn = format!("{below},o=DEMOCORP,c=AU");
            let native = format!("{below},o=Native Corp,c=AU");
            proptest::prop_assert_eq!(map().to_native(&dn), Some(native.clone()));
            proptest::prop_assert_eq!(map().to_client(&native), Some(dn));
        }
    }

    #[test]
    fn a_search_is_re_based_with_its_controls_kept() {
        let req = encode(LdapMsg {
            msgid: 300,
            op: LdapOp::SearchRequest(LdapSearchRequest {
                base: "ou=People,o=DEMOCORP,c=AU".into(),
                scope: LdapSearchScope::Subtree,
                aliases: LdapDerefAliases::Never,
                sizelimit: 5,
                timelimit: 0,
                typesonly: false,
                filter: LdapFilter::Equality("uid".into(), "alice".into()),
                attrs: vec!["cn".into()],
            }),
            ctrl: vec![LdapControl::ManageDsaIT { criticality: true }],
        });
        let h = header(&req).unwrap();
        let out = map().request(&req, &h).unwrap();
        let m = decode(&out);
        assert_eq!(m.msgid, 300);
        let LdapOp::SearchRequest(s) = m.op else {
            panic!("{m:?}")
        };
        assert_eq!(s.base, "ou=People,o=Native Corp,c=AU");
        assert_eq!(s.sizelimit, 5);
        assert_eq!(s.attrs, ["cn"]);
        assert_eq!(m.ctrl.len(), 1);
        // Outside the prefix: untouched.
        let other = encode(LdapMsg {
            msgid: 1,
            op: LdapOp::DelRequest("o=CUSTOMER,c=AU".into()),
            ctrl: vec![],
        });
        assert!(map().request(&other, &header(&other).unwrap()).is_none());
        let del = encode(LdapMsg {
            msgid: 1,
            op: LdapOp::DelRequest("cn=x,o=DEMOCORP,c=AU".into()),
            ctrl: vec![],
        });
        let out = map().request(&del, &header(&del).unwrap()).unwrap();
        assert_eq!(
            decode(&out).op,
            LdapOp::DelRequest("cn=x,o=Native Corp,c=AU".into())
        );
    }

    #[test]
    fn entries_and_matched_dns_come_back_under_the_knowledge_prefix() {
        let entry = encode(LdapMsg {
            msgid: 7,
            op: LdapOp::SearchResultEntry(LdapSearchResultEntry {
                dn: "uid=a,o=Native Corp,c=AU".into(),
                attributes: vec![],
            }),
            ctrl: vec![],
        });
        let out = map().response(&entry, &header(&entry).unwrap()).unwrap();
        let LdapOp::SearchResultEntry(e) = decode(&out).op else {
            panic!()
        };
        assert_eq!(e.dn, "uid=a,o=DEMOCORP,c=AU");
        let done = encode(LdapMsg {
            msgid: 7,
            op: LdapOp::SearchResultDone(LdapResult {
                code: LdapResultCode::NoSuchObject,
                matcheddn: "o=Native Corp,c=AU".into(),
                message: "no such entry".into(),
                referral: vec![],
            }),
            ctrl: vec![],
        });
        let out = map().response(&done, &header(&done).unwrap()).unwrap();
        let LdapOp::SearchResultDone(r) = decode(&out).op else {
            panic!()
        };
        assert_eq!(r.matcheddn, "o=DEMOCORP,c=AU");
        assert_eq!(r.message, "no such entry");
    }
}
