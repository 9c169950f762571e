//! The user a SASL bind step authenticates, read from its credentials, so
//! that the failed-bind defence counts SASL guesses as it counts simple
//! binds (`crate::admission::guard`). Never the password: only the name is taken.
//!
//! * PLAIN (RFC 4616): `authzid NUL authcid NUL passwd`, the authcid;
//! * LOGIN: the first step's credentials, when sent with the bind, are
//!   the user name;
//! * CRAM-MD5 (RFC 2195): the response `user SP digest`, the user;
//! * SCRAM-* (RFC 5802): the client-first message's `n=user` (`=2C` and
//!   `=3D` decoded);
//! * DIGEST-MD5 (RFC 2831): the response's `username="..."`.
//!
//! A name written `dn:<DN>` (the form SASL authorization identities take)
//! is that DN. Anything else is a user name, `@realm` left out (a guesser
//! naming the realm or not is one user), prepared as DN values are
//! ([`crate::proto::dn::prep`]).

/// Who a SASL bind authenticates, as the failed-bind defence counts it:
/// a DN hashes as the [`crate::proto::dn::Dn`] itself does, so a DN named by a
/// simple bind and by SASL is one key.
#[derive(Debug, Clone)]
pub enum Who {
    Dn(crate::proto::dn::Dn),
    Name(String),
}

impl std::hash::Hash for Who {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match self {
            Who::Dn(d) => d.hash(state),
            Who::Name(n) => {
                0xfdu8.hash(state);
                n.hash(state);
            }
        }
    }
}

/// The user `mech`'s step with credentials `creds` authenticates, when
/// this step carries one (`None`: another step of the exchange, or
/// credentials the router cannot read).
pub fn authenticates(mech: &str, creds: &[u8]) -> Option<Who> {
    let m = mech.to_ascii_uppercase();
    let name: &[u8] = match m.as_str() {
        "PLAIN" => {
            let mut parts = creds.split(|&b| b == 0);
            let (_authz, authc, _pw) = (parts.next()?, parts.next()?, parts.next()?);
            authc
        }
        "LOGIN" => creds,
        "CRAM-MD5" => &creds[..creds.iter().rposition(|&b| b == b' ')?],
        "DIGEST-MD5" => return digest_username(creds).and_then(|n| who(&n)),
        _ if m.starts_with("SCRAM-") => return scram_user(creds).and_then(|n| who(&n)),
        _ => return None,
    };
    who(name)
}

/// The key of user name `name` (see the module's doc).
fn who(name: &[u8]) -> Option<Who> {
    let name = std::str::from_utf8(name).ok()?.trim_matches(' ');
    if name.is_empty() {
        return None;
    }
    if let Some(dn) = name.get(..3).filter(|p| p.eq_ignore_ascii_case("dn:")) {
        let rest = &name[dn.len()..];
        return crate::proto::dn::Dn::parse_ldap(rest).ok().map(Who::Dn);
    }
    let user = name.rsplit_once('@').map_or(name, |(u, _)| u);
    Some(Who::Name(crate::proto::dn::prep::prepare(user)))
}

/// SCRAM's client-first message: `gs2-header n=user,r=nonce[,...]`.
fn scram_user(creds: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(creds).ok()?;
    // The GS2 header: channel binding flag, then an optional authzid.
    let mut fields = text.splitn(3, ',');
    let (_cb, _authz, bare) = (fields.next()?, fields.next()?, fields.next()?);
    let user = bare.split(',').find_map(|f| f.strip_prefix("n="))?;
    Some(user.replace("=2C", ",").replace("=3D", "=").into_bytes())
}

/// DIGEST-MD5's response: its `username` directive.
fn digest_username(creds: &[u8]) -> Option<Vec<u8>> {
    super::sasl::directive(creds, "username")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn name(w: Option<Who>) -> String {
        match w {
            Some(Who::Name(n)) => n,
            Some(Who::Dn(d)) => format!("DN {}", d.normalized()),
            None => "none".into(),
        }
    }

    #[test]
    fn each_mechanism_names_its_user_and_never_its_password() {
        for (mech, creds, want) in [
            ("PLAIN", &b"\0alice\0secret"[..], "alice"),
            ("plain", b"admin\0Alice@DSA-ROUTER-TEST\0secret", "alice"),
            ("PLAIN", b"\0\xef\xbd\x81lice\0secret", "alice"),
            ("PLAIN", b"\0dn:uid=Alice,o=X\0pw", "DN uid=alice,o=x"),
            ("PLAIN", b"\0alice", "none"),
            ("CRAM-MD5", b"alice 0123456789abcdef", "alice"),
            ("CRAM-MD5", b"", "none"),
            ("SCRAM-SHA-256", b"n,,n=alice,r=abc", "alice"),
            ("SCRAM-SHA-1", b"y,a=x,n=a=2Cb=3Dc,r=abc", "a,b=c"),
            ("SCRAM-SHA-1", b"c=tls-unique,r=x,p=zz", "none"),
            (
                "DIGEST-MD5",
                b"username=\"ALICE\",realm=\"R\",nonce=\"n\",response=0123",
                "alice",
            ),
            ("DIGEST-MD5", b"nonce=\"n\"", "none"),
            ("LOGIN", b"alice", "alice"),
            ("GSSAPI", b"alice", "none"),
        ] {
            let got = name(authenticates(mech, creds));
            assert_eq!(got, want, "{mech} {:?}", String::from_utf8_lossy(creds));
            assert!(!got.contains("secret"));
        }
    }
}
