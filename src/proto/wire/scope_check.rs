//! Whether an entry a DSA returned lies within the search it answers: under
//! the search's base at the depth its scope allows, or, for a search that
//! dereferences aliases (where an alias may lead anywhere the DSA holds),
//! under the DSA's partition.
//!
//! It runs once per entry, so the common case is a byte comparison: the
//! entry's DN, lowercased, ends with the base as the request gave it
//! (lowercased) after an unescaped comma, and the commas before it give its
//! depth. Anything else (other spacing, escapes, quoting, hex values) is
//! parsed and compared RDN by RDN, which is exact.

use super::ber;
use super::frame::{tag, Header};
use crate::proto::dn::Dn;
use std::sync::Arc;

/// `scope` of a SearchRequest (RFC 4511 and the subordinate-subtree
/// extension).
const BASE: u8 = 0;
const ONE: u8 = 1;
const SUB: u8 = 2;
const SUBORDINATE: u8 = 3;

/// What the entries of one search must satisfy: within its base and
/// scope, or, for a search that dereferences aliases, within the DSA's
/// partition.
///
/// Built once per search on the request path, so it costs one copy of the
/// base: the base is parsed only when an entry's DN defeats the byte
/// comparison (the slow path), and the partition's bound is shared.
#[derive(Debug, Clone)]
pub struct ScopeCheck {
    within: Bound,
    or_within: Option<PartitionScope>,
}

/// A DSA's partition (in the DSA's own naming) as a subtree bound, built
/// once per DSA: where a search that dereferences aliases may find
/// entries. `None` for the root (anywhere).
#[derive(Debug, Clone)]
pub struct PartitionScope(Arc<Bound>);

impl PartitionScope {
    pub fn new(partition: &Dn) -> Option<PartitionScope> {
        (!partition.is_root()).then(|| {
            PartitionScope(Arc::new(Bound {
                raw: partition.normalized().into_bytes().into_boxed_slice(),
                scope: SUB,
            }))
        })
    }
}

/// A base and a scope.
#[derive(Debug, Clone)]
struct Bound {
    /// The base as given when it is plain (the DSA most often echoes it
    /// so), else normalized: the fast path's suffix, compared ignoring
    /// ASCII case, and what the slow path parses.
    raw: Box<[u8]>,
    scope: u8,
}

/// The search request's base, scope and derefAliases.
fn request_parts<'a>(pdu: &'a [u8], h: &Header) -> Option<(&'a [u8], u8, u8)> {
    if h.op_tag != tag::SEARCH_REQUEST {
        return None;
    }
    let op = ber::tlv(pdu.get(h.op_start..h.op_end)?).ok()?;
    let mut body = op.body;
    let base = ber::split(&mut body).filter(|t| t.tag == 0x04)?;
    let scope = ber::split(&mut body).filter(|t| t.tag == 0x0a)?;
    let deref = ber::split(&mut body).filter(|t| t.tag == 0x0a)?;
    match (scope.body, deref.body) {
        ([s], [d]) => Some((base.body, *s, *d)),
        _ => None,
    }
}

impl ScopeCheck {
    /// The check for the search request `pdu` as it goes to a DSA holding
    /// `partition`. `None` when there is nothing to check: not a search, a
    /// subtree search from the root, a base the router cannot parse (the
    /// DSA answers that one), or a dereferencing search with no partition
    /// to hold it to.
    pub fn of_search(
        pdu: &[u8],
        h: &Header,
        partition: Option<&PartitionScope>,
    ) -> Option<ScopeCheck> {
        let (base, scope, deref) = request_parts(pdu, h)?;
        let within = Bound::new(base, scope)?;
        let or_within = match (deref, partition) {
            (0, _) => None,
            // An alias may lead anywhere the DSA holds.
            (_, Some(p)) => Some(p.clone()),
            _ => return None,
        };
        Some(ScopeCheck { within, or_within })
    }

    /// Whether the response `pdu` may go to the client: anything but an
    /// entry does; an entry does when its DN is within the scope. An entry
    /// whose DN cannot be read is not within anything.
    pub fn admits(&self, pdu: &[u8], h: &Header) -> bool {
        if h.op_tag != tag::SEARCH_ENTRY {
            return true;
        }
        let Some(dn) = entry_dn(pdu, h) else {
            return false;
        };
        self.within.admits(dn) || self.or_within.as_ref().is_some_and(|b| b.0.admits(dn))
    }
}

impl Bound {
    /// `None`: nothing to check (a subtree from the root) or a base that
    /// cannot be parsed.
    fn new(base: &[u8], scope: u8) -> Option<Bound> {
        if scope > SUBORDINATE {
            return None;
        }
        let plain = base.iter().all(|&b| plain_byte(b));
        let raw = if plain {
            // Empty is the root; otherwise each RDN has its '='.
            if base.is_empty() {
                if scope == SUB {
                    return None;
                }
            } else if base.split(|&b| b == b',').any(|r| !r.contains(&b'=')) {
                return None;
            }
            Box::from(base)
        } else {
            let dn = Dn::parse_ldap(std::str::from_utf8(base).ok()?).ok()?;
            if dn.is_root() && scope == SUB {
                return None;
            }
            dn.normalized().into_bytes().into_boxed_slice()
        };
        Some(Bound { raw, scope })
    }

    fn admits(&self, dn: &[u8]) -> bool {
        match self.fast(dn) {
            Some(ok) => ok,
            None => self.slow(dn),
        }
    }

    /// The byte comparison: `None` when it cannot tell.
    fn fast(&self, dn: &[u8]) -> Option<bool> {
        let n = self.raw.len();
        if dn.len() < n || !dn[dn.len() - n..].eq_ignore_ascii_case(&self.raw) {
            return None;
        }
        let prefix = &dn[..dn.len() - n];
        // RDNs above the base: 0 for the base itself.
        let depth = if prefix.is_empty() {
            0
        } else if n == 0 {
            commas(prefix)? + 1
        } else {
            // The base must start after an unescaped comma.
            let rest = prefix.strip_suffix(b",")?;
            if rest.is_empty() || rest.ends_with(b"\\") {
                return None;
            }
            commas(rest)? + 1
        };
        Some(self.depth_ok(depth))
    }

    /// Parse and compare RDN by RDN.
    fn slow(&self, dn: &[u8]) -> bool {
        let parse = |b: &[u8]| {
            std::str::from_utf8(b)
                .ok()
                .and_then(|s| Dn::parse_ldap(s).ok())
        };
        let (Some(base), Some(entry)) = (parse(&self.raw), parse(dn)) else {
            return false;
        };
        base.is_ancestor_or_self_of(&entry) && self.depth_ok(entry.depth() - base.depth())
    }

    fn depth_ok(&self, depth: usize) -> bool {
        match self.scope {
            BASE => depth == 0,
            ONE => depth == 1,
            SUB => true,
            _ => depth >= 1,
        }
    }
}

/// A byte of a base the fast path takes as given: printable ASCII but
/// space, escapes, quotes and the other separators.
fn plain_byte(b: u8) -> bool {
    b.is_ascii_graphic() && !matches!(b, b'\\' | b'"' | b';' | b'+' | b'#' | b'<' | b'>')
}

/// Unescaped commas in `s`; `None` where a backslash or a quote makes
/// counting unsafe.
fn commas(s: &[u8]) -> Option<usize> {
    if s.iter().any(|&b| b == b'\\' || b == b'"' || b == b';') {
        return None;
    }
    Some(s.iter().filter(|&&b| b == b',').count())
}

/// The objectName of a SearchResultEntry.
pub fn entry_dn<'a>(pdu: &'a [u8], h: &Header) -> Option<&'a [u8]> {
    let op = ber::tlv(pdu.get(h.op_start..h.op_end)?).ok()?;
    ber::tagged(op.body, 0x04).map(|t| t.body)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::proto::wire::frame;
    use ldap3_proto::proto::{
        LdapDerefAliases, LdapFilter, LdapMsg, LdapOp, LdapSearchRequest, LdapSearchResultEntry,
        LdapSearchScope,
    };

    fn encode(op: LdapOp) -> Vec<u8> {
        let msg = LdapMsg {
            msgid: 3,
            op,
            ctrl: Vec::new(),
        };
        let tag: lber::structure::StructureTag = msg.into();
        let mut b = bytes::BytesMut::new();
        lber::write::encode_into(&mut b, tag).unwrap();
        b.to_vec()
    }

    fn search(base: &str, scope: LdapSearchScope, deref: LdapDerefAliases) -> Vec<u8> {
        encode(LdapOp::SearchRequest(LdapSearchRequest {
            base: base.into(),
            scope,
            aliases: deref,
            sizelimit: 0,
            timelimit: 0,
            typesonly: false,
            filter: LdapFilter::Present("objectClass".into()),
            attrs: Vec::new(),
        }))
    }

    fn entry(dn: &str) -> Vec<u8> {
        encode(LdapOp::SearchResultEntry(LdapSearchResultEntry {
            dn: dn.into(),
            attributes: Vec::new(),
        }))
    }

    fn check(base: &str, scope: LdapSearchScope, deref: LdapDerefAliases) -> Option<ScopeCheck> {
        let pdu = search(base, scope, deref);
        let part = PartitionScope::new(&Dn::parse_ldap("o=Corp,c=AU").unwrap());
        ScopeCheck::of_search(&pdu, &frame::header(&pdu).unwrap(), part.as_ref())
    }

    fn admits(c: &ScopeCheck, dn: &str) -> bool {
        let pdu = entry(dn);
        c.admits(&pdu, &frame::header(&pdu).unwrap())
    }

    /// Each row: base, scope, deref, entry DN, admitted.
    #[test]
    fn entries_are_held_to_the_base_and_scope() {
        use LdapDerefAliases::{Always, InSearching, Never};
        use LdapSearchScope::{Base, Children, OneLevel, Subtree};
        let rows: &[(&str, LdapSearchScope, LdapDerefAliases, &str, bool)] = &[
            ("cn=a,o=Corp,c=AU", Base, Never, "cn=a,o=Corp,c=AU", true),
            ("cn=a,o=Corp,c=AU", Base, Never, "CN=A, O=corp, C=au", true),
            ("cn=a,o=Corp,c=AU", Base, Never, "cn=b,o=Corp,c=AU", false),
            (
                "cn=a,o=Corp,c=AU",
                Base,
                Never,
                "cn=x,cn=a,o=Corp,c=AU",
                false,
            ),
            ("o=Corp,c=AU", OneLevel, Never, "cn=a,o=Corp,c=AU", true),
            ("o=Corp,c=AU", OneLevel, Never, "o=Corp,c=AU", false),
            (
                "o=Corp,c=AU",
                OneLevel,
                Never,
                "cn=x,cn=a,o=Corp,c=AU",
                false,
            ),
            ("o=Corp,c=AU", OneLevel, Never, "cn=a\\,b,o=Corp,c=AU", true),
            ("o=Corp,c=AU", Subtree, Never, "cn=x,cn=a,o=Corp,c=AU", true),
            ("o=Corp,c=AU", Subtree, Never, "o=Corp,c=AU", true),
            ("o=Corp,c=AU", Subtree, Never, "cn=a,o=Other,c=AU", false),
            // A suffix of the text that is not a suffix of RDNs.
            ("o=Corp,c=AU", Subtree, Never, "cn=a,xo=Corp,c=AU", false),
            ("o=Corp,c=AU", Subtree, Never, "cn=a\\,o=Corp,c=AU", false),
            ("o=Corp,c=AU", Children, Never, "o=Corp,c=AU", false),
            ("o=Corp,c=AU", Children, Never, "cn=a,o=Corp,c=AU", true),
            ("", OneLevel, Never, "c=AU", true),
            ("", OneLevel, Never, "o=Corp,c=AU", false),
            ("", Base, Never, "", true),
            ("", Base, Never, "c=AU", false),
            // Dereferencing: anywhere in the DSA's partition.
            (
                "cn=a,o=Corp,c=AU",
                Base,
                Always,
                "cn=b,ou=x,o=Corp,c=AU",
                true,
            ),
            (
                "ou=x,o=Corp,c=AU",
                OneLevel,
                InSearching,
                "cn=t,ou=y,o=Corp,c=AU",
                true,
            ),
            (
                "ou=x,o=Corp,c=AU",
                Subtree,
                InSearching,
                "cn=t,o=Other,c=AU",
                false,
            ),
            ("cn=a,o=Corp,c=AU", Base, Never, "not a DN", false),
            // Bases that are not plain are normalized (and parsed on the
            // slow path): spacing, escapes, quotes, multi-valued RDNs.
            ("cn=a, o=Corp, c=AU", Base, Never, "cn=a,o=Corp,c=AU", true),
            (
                "cn=a, o=Corp, c=AU",
                Base,
                Never,
                "cn=a, o=corp, c=AU",
                true,
            ),
            ("cn=a, o=Corp, c=AU", Base, Never, "cn=b,o=Corp,c=AU", false),
            (
                "cn=a\\2cb,o=Corp,c=AU",
                Base,
                Never,
                "cn=a\\,b,o=Corp,c=AU",
                true,
            ),
            (
                "cn=a+sn=b,o=Corp,c=AU",
                Base,
                Never,
                "sn=b+cn=a,o=Corp,c=AU",
                true,
            ),
            (
                "cn=a+sn=b,o=Corp,c=AU",
                OneLevel,
                Never,
                "cn=x,cn=a+sn=b,o=Corp,c=AU",
                true,
            ),
            (
                "cn=a+sn=b,o=Corp,c=AU",
                Base,
                Never,
                "cn=a,o=Corp,c=AU",
                false,
            ),
        ];
        for (base, scope, deref, dn, want) in rows {
            let c = check(base, scope.clone(), deref.clone()).unwrap();
            assert_eq!(admits(&c, dn), *want, "{base} {scope:?} {deref:?}: {dn}");
        }
    }

    #[test]
    fn nothing_to_check_for_a_subtree_from_the_root_or_other_responses() {
        use LdapDerefAliases::Never;
        assert!(check("", LdapSearchScope::Subtree, Never).is_none());
        // Bases the router cannot parse: the DSA answers those.
        for base in ["o=Corp,,c=AU", "o=Corp,", "Corp", "o=Corp,\\"] {
            assert!(
                check(base, LdapSearchScope::Base, Never).is_none(),
                "{base}"
            );
        }
        let c = check("cn=a,o=Corp,c=AU", LdapSearchScope::Base, Never).unwrap();
        let done = encode(LdapOp::SearchResultDone(ldap3_proto::proto::LdapResult {
            code: ldap3_proto::LdapResultCode::Success,
            matcheddn: String::new(),
            message: String::new(),
            referral: Vec::new(),
        }));
        assert!(c.admits(&done, &frame::header(&done).unwrap()));
        let pdu = entry("x");
        let not_search = frame::header(&pdu).unwrap();
        assert!(ScopeCheck::of_search(&pdu, &not_search, None).is_none());
    }

    /// The cost per entry: printed (run with --nocapture); the fast path
    /// compares bytes, the slow one parses.
    #[test]
    fn cost_per_entry() {
        let c = check(
            "o=Corp,c=AU",
            LdapSearchScope::Subtree,
            LdapDerefAliases::Never,
        )
        .unwrap();
        let fast = entry("cn=user 1234,ou=people,o=Corp,c=AU");
        let slow = entry("cn=user 1234, ou=people, o=Corp, c=AU");
        for pdu in [fast, slow] {
            let h = frame::header(&pdu).unwrap();
            let n = 200_000u32;
            let t = std::time::Instant::now();
            for _ in 0..n {
                assert!(c.admits(std::hint::black_box(&pdu), &h));
            }
            println!("{:?} per entry", t.elapsed() / n);
        }
    }
}
