//! What the fuzz targets run (`fuzz/`, `scripts/fuzz.sh`), one function
//! per reader of untrusted bytes; `tests/logic` runs them on every seed and
//! every committed crash input (`fuzz/regressions/`), so that a crash once
//! found stays fixed without a nightly toolchain. Never called by the
//! router; the checks here panic on purpose (that is how a fuzzer sees a
//! broken invariant).
#![allow(clippy::panic, clippy::unwrap_used)]

use crate::proto::dn::Dn;
use crate::proto::wire::dnmap::PrefixMap;
use crate::proto::wire::{frame, ppolicy, request, response, sasl, search, state};
use std::path::Path;
use std::sync::OnceLock;

/// A client's bytes: framing, the header, the request decoder, and the
/// search and state readers the session applies to what decodes.
pub fn request(data: &[u8]) {
    let mut rest = data;
    while let Ok(Some(len)) = frame::frame_len(rest, 4 << 20) {
        let pdu = &rest[..len];
        rest = &rest[len..];
        let Ok(h) = frame::header(pdu) else { break };
        if let Ok(req) = request::decode(pdu) {
            assert!(
                req.controls.iter().all(|c| request::is_numeric_oid(&c.oid)),
                "a control whose type is not a numeric OID decoded"
            );
            let _ = state::needs(&req);
            let _ = search::head(pdu, &h);
            let _ = request::moddn_target(pdu, &h);
            policed(pdu, &h, &req);
        }
        if let Some(c) = sasl::bind_credentials(pdu, &h) {
            let _ = sasl::digest_qop(c);
            // The user each mechanism's step names (the failed-bind
            // defence's key), never panicking whatever the bytes.
            for mech in ["PLAIN", "LOGIN", "CRAM-MD5", "DIGEST-MD5", "SCRAM-SHA-256"] {
                let _ = crate::proto::wire::sasl_name::authenticates(mech, c);
            }
        }
        let _ = search::has_control(pdu, &h, "1.2.840.113556.1.4.319");
        let _ = search::without_controls(pdu, &h, 2, &["1.2.840.113556.1.4.319"]);
        if let Some(b) = map().request(pdu, &h) {
            assert!(frame::header(&b).is_ok(), "a mapped request does not frame");
        }
    }
}

/// What a rule hiding attributes reads of a request: its filter, its
/// controls' values, a modify DN's new DN.
fn policed(pdu: &[u8], h: &frame::Header, req: &request::Request) {
    use crate::admission::policy::{controls, wire};
    let _ = wire::filter_names(pdu, h);
    let _ = wire::compare_attr(pdu, h);
    let _ = wire::modify_tests(pdu, h);
    let _ = wire::moddn_new_dn(&map().prefix, pdu, h);
    for c in &req.controls {
        let _ = controls::named(&c.oid, c.value.as_deref());
        for oid in [
            controls::OID_ASSERTION,
            controls::OID_SORT,
            controls::OID_PRE_READ,
        ] {
            let _ = controls::named(oid, c.value.as_deref());
        }
    }
}

/// A DSA's schema: `attributeTypes` values, one a line, parsed, merged
/// and resolved for a `hide` list of the first names read.
pub fn schema(data: &[u8]) {
    use crate::admission::policy::schema::{parse, Schema};
    let text = String::from_utf8_lossy(data);
    let types: Vec<_> = text.lines().filter_map(|l| parse(l).ok()).collect();
    for t in &types {
        assert!(
            t.names
                .iter()
                .chain([&t.oid])
                .all(|n| *n == n.to_ascii_lowercase()),
            "a name not in lower case"
        );
    }
    let hide: Vec<String> = types.iter().take(3).map(|t| t.oid.clone()).collect();
    let s = std::sync::Arc::new(Schema::new(types, true));
    let h = s.hidden(&hide);
    for n in text.split_whitespace().take(64) {
        let _ = h.refuses(n);
        let _ = h.strips(n.as_bytes());
    }
}

fn map() -> &'static PrefixMap {
    static MAP: OnceLock<PrefixMap> = OnceLock::new();
    MAP.get_or_init(|| PrefixMap {
        prefix: Dn::parse_ldap("o=DEMOCORP,c=AU").unwrap(),
        native: Dn::parse_ldap("dc=democorp,dc=example").unwrap(),
    })
}

/// A DSA's bytes: framing, the header, and every reader the router applies
/// to responses (result codes, entries, referrals, password policy, the
/// native-prefix mapping, the post-read control, the message-ID
/// rewrite).
pub fn response(data: &[u8]) {
    let mut rest = data;
    while let Ok(Some(len)) = frame::frame_len(rest, 16 << 20) {
        let pdu = &rest[..len];
        rest = &rest[len..];
        let Ok(h) = frame::header(pdu) else { break };
        let _ = frame::tag::is_final_response(h.op_tag);
        let _ = response::result_code(pdu, &h);
        let _ = response::diagnostic(pdu, &h);
        let _ = response::referral_urls(pdu, &h);
        let _ = response::entry_dn(pdu);
        let _ = crate::admission::policy::wire::entry_name(pdu, &h);
        let _ = response::entry_attrs(pdu);
        let _ = response::extended_value(pdu);
        let _ = ppolicy::Policy::of_response(pdu, &h);
        let _ = ppolicy::strip(pdu, &h, 3);
        let _ = crate::proto::wire::postread::response_csn(pdu, &h);
        let _ = crate::proto::wire::postread::entry_csn(pdu);
        if let Some(b) = crate::proto::wire::postread::strip(pdu, &h) {
            assert!(
                frame::header(&b).is_ok(),
                "a response without its post-read control does not frame"
            );
        }
        sasl_response(pdu, &h);
        if let Some(b) = map().response(pdu, &h) {
            assert!(
                frame::header(&b).is_ok(),
                "a mapped response does not frame"
            );
        }
        let mut out = bytes::BytesMut::new();
        frame::rewrite(pdu, &h, 5, None, &mut out);
        assert!(
            frame::header(&out).is_ok(),
            "a rewritten response does not frame"
        );
    }
}

/// A DSA's SASL challenge with its security layers taken out: the
/// response still frames and carries the rewritten challenge.
fn sasl_response(pdu: &[u8], h: &frame::Header) {
    let Some(c) = sasl::server_creds(pdu, h) else {
        return;
    };
    if let Ok(Some(auth)) = sasl::digest_auth_only(c) {
        assert!(
            matches!(sasl::digest_auth_only(&auth), Ok(None)),
            "a rewritten challenge still offers a layer"
        );
        if let Some(b) = sasl::with_server_creds(pdu, h, &auth) {
            let nh = frame::header(&b).expect("a rewritten bind response does not frame");
            assert_eq!(sasl::server_creds(&b, &nh), Some(&auth[..]));
        }
    }
}

/// Knowledge text: the loader and the table never panic.
pub fn knowledge(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let files = crate::directory::knowledge::Memory::default().with("r.dxg", &text);
    if let Ok(snap) = crate::directory::knowledge::load_from(Path::new("r.dxg"), &files) {
        let _ = crate::directory::route::Table::build(&snap, None);
    }
}

/// A PROXY protocol header: parsing never panics, a header found lies
/// within the input, a request for more bytes asks for more than there
/// are, and a header found parses the same with whatever follows it.
pub fn proxy_header(data: &[u8]) {
    use crate::proto::proxy_protocol::{parse, Parsed};
    match parse(data) {
        Ok(Parsed::Done(h, n)) => {
            assert!(n <= data.len(), "{data:?}: header of {n} bytes");
            assert_eq!(parse(&data[..n]), Ok(Parsed::Done(h, n)), "{data:?}");
        }
        Ok(Parsed::Need(n)) => assert!(n > data.len(), "{data:?}: needs {n}"),
        Err(_) => {}
    }
}

/// DN text in both forms: parsing never panics, and a DN's normal form (and
/// its display) parses again to the same normal form.
pub fn dn(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = Dn::parse_knowledge(s);
    if let Ok(dn) = Dn::parse_any(s) {
        let n = dn.normalized();
        let again = Dn::parse_ldap(&n)
            .unwrap_or_else(|e| panic!("{s:?} normalises to {n:?}, which does not parse: {e}"));
        assert_eq!(again.normalized(), n, "{s:?}");
        let shown = dn.to_string();
        let back = Dn::parse_ldap(&shown)
            .unwrap_or_else(|e| panic!("{s:?} shows as {shown:?}, which does not parse: {e}"));
        assert_eq!(back.normalized(), n, "{s:?}");
    }
}
