//! SASL mechanisms through a router that reads every PDU.
//!
//! A SASL security layer (RFC 4422 3.7) wraps every PDU after the bind in
//! the mechanism's integrity or confidentiality protection, between the
//! client and the DSA that authenticated it. The router reads and rewrites
//! PDUs, so it cannot carry one: it keeps layers from being negotiated
//! through it, whatever the DSA's configuration allows.
//!
//! * Mechanisms without a layer pass as they are: PLAIN, LOGIN, ANONYMOUS,
//!   CRAM-MD5, SCRAM-* (not the `-PLUS` variants: their channel binding
//!   names the client's TLS session with the router, which the DSA never
//!   sees).
//! * DIGEST-MD5 offers its layers in the server's first challenge (`qop`,
//!   `cipher`), which the response's digest does not cover: the router
//!   rewrites the offer to `qop="auth"` only ([`digest_auth_only`]), so a
//!   client picks no layer, and refuses a client response that asks for
//!   one anyway ([`digest_qop`]).
//! * Every other mechanism is left out of the root DSE's
//!   `supportedSASLMechanisms` and refused at bind (`authMethodNotSupported`):
//!   GSSAPI, GSS-SPNEGO and GS2-* protect their layer negotiation, so it
//!   cannot be rewritten; EXTERNAL would authenticate the router's own
//!   connection to the DSA (its TLS client certificate), not the client.

use super::ber::{self, put_len};
use super::frame::Header;
use bytes::{BufMut, BytesMut};

/// What the router does with a SASL mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mech {
    /// Forwarded as it is: it has no security layer.
    Carried,
    /// DIGEST-MD5: forwarded with its layers taken out of the offer.
    Digest,
    /// Refused: it may negotiate a layer the router cannot take out, or it
    /// would authenticate the router instead of the client.
    Refused,
}

/// How the router treats `mech` (case-insensitive, as SASL names are).
pub fn classify(mech: &str) -> Mech {
    let m = mech.to_ascii_uppercase();
    match m.as_str() {
        "PLAIN" | "LOGIN" | "ANONYMOUS" | "CRAM-MD5" => Mech::Carried,
        "DIGEST-MD5" => Mech::Digest,
        _ if m.starts_with("SCRAM-") && !m.ends_with("-PLUS") => Mech::Carried,
        _ => Mech::Refused,
    }
}

/// Whether `mech` sends the password itself (as a simple bind does), so
/// that `--require-tls-for-bind` covers it. The challenge-response
/// mechanisms (SCRAM, DIGEST-MD5, CRAM-MD5) never send it.
pub fn sends_password(mech: &str) -> bool {
    mech.eq_ignore_ascii_case("PLAIN") || mech.eq_ignore_ascii_case("LOGIN")
}

/// One `name=value` directive of a DIGEST-MD5 challenge or response (RFC
/// 2831 2.1.1): the name, the value unquoted, and the directive as written.
struct Directive<'a> {
    name: &'a [u8],
    value: Vec<u8>,
    raw: &'a [u8],
}

/// The directives of a DIGEST-MD5 challenge or response; `None` when it
/// is not one (a name without `=`, an unterminated quoted string).
fn directives(text: &[u8]) -> Option<Vec<Directive<'_>>> {
    let mut out = Vec::new();
    let mut i = 0;
    let n = text.len();
    loop {
        while i < n && (text[i] == b',' || text[i].is_ascii_whitespace()) {
            i += 1;
        }
        if i >= n {
            return Some(out);
        }
        let start = i;
        while i < n && text[i] != b'=' && text[i] != b',' {
            i += 1;
        }
        if text.get(i) != Some(&b'=') {
            return None;
        }
        let name = trim(&text[start..i]);
        i += 1;
        while i < n && text[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut value = Vec::new();
        if text.get(i) == Some(&b'"') {
            i += 1;
            loop {
                match text.get(i)? {
                    b'"' => break,
                    b'\\' => {
                        value.push(*text.get(i + 1)?);
                        i += 2;
                    }
                    &c => {
                        value.push(c);
                        i += 1;
                    }
                }
            }
            i += 1;
            while i < n && text[i] != b',' {
                i += 1;
            }
        } else {
            let v = i;
            while i < n && text[i] != b',' {
                i += 1;
            }
            value.extend_from_slice(trim(&text[v..i]));
        }
        out.push(Directive {
            name,
            value,
            raw: trim(&text[start..i]),
        });
    }
}

fn trim(b: &[u8]) -> &[u8] {
    let s = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let e = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(s, |e| e + 1);
    &b[s..e]
}

/// Why a DIGEST-MD5 exchange cannot go through the router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestError {
    /// The challenge or response is not DIGEST-MD5's syntax.
    Malformed,
    /// The DSA offers only security layers (its `minssf` is above 0).
    LayerRequired,
}

/// The DSA's first DIGEST-MD5 challenge with its security layers taken
/// out of the offer: `qop="auth"`, no `cipher`. `Ok(None)` when it offers
/// none already (no `qop`: RFC 2831 makes `auth` the default).
pub fn digest_auth_only(challenge: &[u8]) -> Result<Option<Vec<u8>>, DigestError> {
    let ds = directives(challenge).ok_or(DigestError::Malformed)?;
    let is = |d: &Directive<'_>, n: &str| d.name.eq_ignore_ascii_case(n.as_bytes());
    let Some(qop) = ds.iter().find(|d| is(d, "qop")) else {
        return Ok(None);
    };
    let offered = qop.value.split(|&c| c == b',').map(trim);
    if !offered.clone().any(|q| q.eq_ignore_ascii_case(b"auth")) {
        return Err(DigestError::LayerRequired);
    }
    if offered.clone().all(|q| q.eq_ignore_ascii_case(b"auth"))
        && !ds.iter().any(|d| is(d, "cipher"))
    {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(challenge.len());
    for d in ds.iter().filter(|d| !is(d, "cipher")) {
        if !out.is_empty() {
            out.push(b',');
        }
        if is(d, "qop") {
            out.extend_from_slice(b"qop=\"auth\"");
        } else {
            out.extend_from_slice(d.raw);
        }
    }
    Ok(Some(out))
}

/// The quality of protection a client's DIGEST-MD5 response chose
/// (`auth` when it names none, as RFC 2831 says).
pub fn digest_qop(response: &[u8]) -> Result<String, DigestError> {
    let ds = directives(response).ok_or(DigestError::Malformed)?;
    Ok(ds
        .iter()
        .find(|d| d.name.eq_ignore_ascii_case(b"qop"))
        .map_or_else(
            || "auth".to_string(),
            |d| String::from_utf8_lossy(&d.value).to_ascii_lowercase(),
        ))
}

/// The value of directive `name` in a DIGEST-MD5 challenge or response.
pub fn directive(text: &[u8], name: &str) -> Option<Vec<u8>> {
    directives(text)?
        .into_iter()
        .find(|d| d.name.eq_ignore_ascii_case(name.as_bytes()))
        .map(|d| d.value)
}

/// The SASL credentials of a BindRequest PDU (`None`: none, or not a SASL
/// bind).
pub fn bind_credentials<'a>(pdu: &'a [u8], h: &Header) -> Option<&'a [u8]> {
    let op = ber::tagged(pdu.get(h.op_start..h.op_end)?, 0x60)?;
    let auth = op.cons()?.get(2).filter(|a| a.tag == 0xa3)?;
    auth.cons()?.get(1).filter(|c| c.tag == 0x04)?.prim()
}

/// The serverSaslCreds of a BindResponse PDU.
pub fn server_creds<'a>(pdu: &'a [u8], h: &Header) -> Option<&'a [u8]> {
    let op = ber::tagged(pdu.get(h.op_start..h.op_end)?, 0x61)?;
    op.cons()?.find(|e| e.tag == 0x87)?.prim()
}

/// `pdu`, a BindResponse, with its serverSaslCreds replaced by `creds`;
/// its message ID, other fields and controls as they were.
pub fn with_server_creds(pdu: &[u8], h: &Header, creds: &[u8]) -> Option<BytesMut> {
    let op = ber::tagged(pdu.get(h.op_start..h.op_end)?, 0x61)?;
    let mut fields = BytesMut::new();
    let mut rest = op.body;
    while let Some(e) = ber::split(&mut rest) {
        if e.tag != 0x87 {
            let at = op.body.len() - rest.len() - e.len;
            fields.put_slice(&op.body[at..at + e.len]);
        }
    }
    if !rest.is_empty() {
        return None;
    }
    fields.put_u8(0x87);
    put_len(&mut fields, creds.len());
    fields.put_slice(creds);
    let head = pdu.get(first_after_len(pdu)?..h.op_start)?;
    let after = &pdu[h.op_end..];
    let mut op_enc = BytesMut::new();
    op_enc.put_u8(0x61);
    put_len(&mut op_enc, fields.len());
    op_enc.put_slice(&fields);
    let body_len = head.len() + op_enc.len() + after.len();
    let mut out = BytesMut::with_capacity(body_len + 6);
    out.put_u8(0x30);
    put_len(&mut out, body_len);
    out.put_slice(head);
    out.put_slice(&op_enc);
    out.put_slice(after);
    Some(out)
}

/// Where the message ID starts: after the outer SEQUENCE's tag and length.
fn first_after_len(pdu: &[u8]) -> Option<usize> {
    let (_, n) = ber::read_len(pdu.get(1..)?).ok()?;
    Some(1 + n)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::proto::wire::frame;

    #[test]
    fn mechanisms_are_carried_rewritten_or_refused() {
        for (mech, want) in [
            ("PLAIN", Mech::Carried),
            ("login", Mech::Carried),
            ("ANONYMOUS", Mech::Carried),
            ("CRAM-MD5", Mech::Carried),
            ("SCRAM-SHA-1", Mech::Carried),
            ("scram-sha-256", Mech::Carried),
            ("SCRAM-SHA-512", Mech::Carried),
            ("SCRAM-SHA-256-PLUS", Mech::Refused),
            ("DIGEST-MD5", Mech::Digest),
            ("GSSAPI", Mech::Refused),
            ("GSS-SPNEGO", Mech::Refused),
            ("GS2-KRB5", Mech::Refused),
            ("EXTERNAL", Mech::Refused),
            ("SRP", Mech::Refused),
            ("", Mech::Refused),
        ] {
            assert_eq!(classify(mech), want, "{mech}");
        }
        assert!(sends_password("plain") && sends_password("LOGIN"));
        assert!(!sends_password("SCRAM-SHA-256") && !sends_password("DIGEST-MD5"));
    }

    #[test]
    fn a_digest_challenge_offers_authentication_only() {
        // What slapd (Cyrus SASL) sends with its default maxssf.
        let cyrus = br#"realm="EXAMPLE",nonce="abc,def=",qop="auth,auth-int,auth-conf",cipher="rc4-40,rc4-56,rc4,des,3des",maxbuf=65536,charset=utf-8,algorithm=md5-sess"#;
        let got = digest_auth_only(cyrus).unwrap().unwrap();
        assert_eq!(
            String::from_utf8(got).unwrap(),
            r#"realm="EXAMPLE",nonce="abc,def=",qop="auth",maxbuf=65536,charset=utf-8,algorithm=md5-sess"#
        );
        for (challenge, want) in [
            (&br#"nonce="x",algorithm=md5-sess"#[..], Ok(None)),
            (br#"nonce="x",qop="auth""#, Ok(None)),
            (
                br#"nonce="x" , qop = "auth-int, auth" "#,
                Ok(Some(&br#"nonce="x",qop="auth""#[..])),
            ),
            (
                br#"nonce="x",qop="auth-conf""#,
                Err(DigestError::LayerRequired),
            ),
            (
                br#"nonce="x",qop="auth-int,auth-conf""#,
                Err(DigestError::LayerRequired),
            ),
            (br#"nonce="unterminated"#, Err(DigestError::Malformed)),
            (br#"nonce"#, Err(DigestError::Malformed)),
            (
                br#"realm="a\"b",qop="auth,auth-int""#,
                Ok(Some(&br#"realm="a\"b",qop="auth""#[..])),
            ),
        ] {
            let got = digest_auth_only(challenge);
            assert_eq!(
                got.as_ref().map(|o| o.as_deref()).map_err(|e| *e),
                want,
                "{}",
                String::from_utf8_lossy(challenge)
            );
        }
    }

    #[test]
    fn the_quality_of_protection_a_client_chose_is_read_from_its_response() {
        for (response, want) in [
            (
                &br#"username="alice",nonce="n",qop=auth,response=0123"#[..],
                Ok("auth"),
            ),
            (
                br#"username="alice",qop=auth-conf,cipher=rc4"#,
                Ok("auth-conf"),
            ),
            (br#"username="alice",qop="AUTH-INT""#, Ok("auth-int")),
            (br#"username="alice",response=0123"#, Ok("auth")),
            (br#"username="alice"#, Err(DigestError::Malformed)),
        ] {
            assert_eq!(
                digest_qop(response).as_deref().map_err(|e| *e),
                want,
                "{}",
                String::from_utf8_lossy(response)
            );
        }
    }

    fn bind_response(msgid: u8, creds: Option<&[u8]>, controls: &[u8]) -> Vec<u8> {
        let mut op = vec![0x0a, 1, 14, 0x04, 0, 0x04, 2, b'h', b'i'];
        if let Some(c) = creds {
            op.extend([0x87, c.len() as u8]);
            op.extend_from_slice(c);
        }
        let mut body = vec![0x02, 1, msgid, 0x61, op.len() as u8];
        body.extend(op);
        body.extend_from_slice(controls);
        let mut pdu = vec![0x30, body.len() as u8];
        pdu.extend(body);
        pdu
    }

    #[test]
    fn server_credentials_are_replaced_and_everything_else_kept() {
        let controls = [0xa0, 5, 0x30, 3, 0x04, 1, b'1'];
        let old = bind_response(7, Some(b"challenge"), &controls);
        let h = frame::header(&old).unwrap();
        assert_eq!(server_creds(&old, &h), Some(&b"challenge"[..]));
        let long = vec![b'x'; 300];
        for new in [&b"c"[..], &long] {
            let got = with_server_creds(&old, &h, new).unwrap();
            let gh = frame::header(&got).unwrap();
            assert_eq!(gh.msgid, 7);
            assert_eq!(server_creds(&got, &gh), Some(new));
            assert_eq!(&got[gh.op_end..], &controls);
            assert!(ber::well_formed(&got, 8));
        }
        // A response without credentials gets them.
        let none = bind_response(9, None, &[]);
        let h = frame::header(&none).unwrap();
        let got = with_server_creds(&none, &h, b"abc").unwrap();
        assert_eq!(got.as_ref(), bind_response(9, Some(b"abc"), &[]).as_slice());
    }

    #[test]
    fn the_credentials_of_a_sasl_bind_request_are_found() {
        // BindRequest v3, name "", sasl { "DIGEST-MD5", "resp" }.
        let mech = b"DIGEST-MD5";
        let mut sasl = vec![0x04, mech.len() as u8];
        sasl.extend_from_slice(mech);
        sasl.extend([0x04, 4]);
        sasl.extend_from_slice(b"resp");
        let mut op = vec![0x02, 1, 3, 0x04, 0, 0xa3, sasl.len() as u8];
        op.extend(sasl);
        let mut body = vec![0x02, 1, 2, 0x60, op.len() as u8];
        body.extend(op);
        let mut pdu = vec![0x30, body.len() as u8];
        pdu.extend(body);
        let h = frame::header(&pdu).unwrap();
        assert_eq!(bind_credentials(&pdu, &h), Some(&b"resp"[..]));
        let simple = [0x30, 12, 0x02, 1, 2, 0x60, 7, 0x02, 1, 3, 0x04, 0, 0x80, 0];
        let h = frame::header(&simple).unwrap();
        assert_eq!(bind_credentials(&simple, &h), None);
    }
}
