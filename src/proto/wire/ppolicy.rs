//! The password policy controls (draft-behera-ldap-password-policy-10,
//! OID 1.3.6.1.4.1.42.2.27.8.5.1) on binds.
//!
//! The router adds the request control (not critical) to every bind it
//! forwards, so it learns when a DSA restricts or warns a user, whether or
//! not the client asked; the response control is passed to the client
//! unchanged when the client asked for it, and dropped otherwise (the
//! client then sees what it would see directly).

use super::ber;
use super::frame::Header;
use super::search;
use bytes::BytesMut;

pub use super::oid::OID_PPOLICY;

/// The request control: the OID, not critical, no value.
pub fn request_control() -> Vec<u8> {
    let oid = OID_PPOLICY.as_bytes();
    let mut c = Vec::with_capacity(4 + oid.len());
    c.extend_from_slice(&[0x30, (2 + oid.len()) as u8, 0x04, oid.len() as u8]);
    c.extend_from_slice(oid);
    c
}

/// What a password policy response control says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Policy {
    /// `timeBeforeExpiration` (seconds).
    pub expires_in: Option<u32>,
    /// `graceAuthNsRemaining`.
    pub grace_left: Option<u32>,
    /// The `error` enumeration (0 passwordExpired, 1 accountLocked,
    /// 2 changeAfterReset, ...).
    pub error: Option<u32>,
}

impl Policy {
    /// A warning or an error: the DSA may restrict or track this
    /// connection, so the client needs one of its own.
    pub fn is_notable(&self) -> bool {
        self.expires_in.is_some() || self.grace_left.is_some() || self.error.is_some()
    }

    /// Parse a response control value (`PasswordPolicyResponseValue`).
    /// A value that does not parse counts as an error (unknown), so the
    /// client is kept on its own connection rather than trusted.
    pub fn parse(v: &[u8]) -> Policy {
        Policy::read(v).unwrap_or(Policy {
            error: Some(u32::MAX),
            ..Policy::default()
        })
    }

    fn read(v: &[u8]) -> Option<Policy> {
        let mut body = ber::tagged(v, 0x30)?.body;
        let mut p = Policy::default();
        while !body.is_empty() {
            let t = ber::split(&mut body)?;
            match t.tag {
                // warning [0] CHOICE { [0] timeBeforeExpiration, [1] grace }
                0xa0 => {
                    let w = ber::tlv(t.body).ok()?;
                    let n = Some(ber::uint(w.body)?);
                    match w.tag {
                        0x80 => p.expires_in = n,
                        0x81 => p.grace_left = n,
                        _ => return None,
                    }
                }
                0x81 => p.error = Some(ber::uint(t.body)?),
                _ => return None,
            }
        }
        Some(p)
    }

    /// The response control of a bind response PDU, if it carries one.
    pub fn of_response(pdu: &[u8], h: &Header) -> Option<Policy> {
        if !search::has_control(pdu, h, OID_PPOLICY) {
            return None;
        }
        Some(match search::control_value(pdu, h, OID_PPOLICY) {
            Some(v) => Policy::parse(v),
            None => Policy::default(),
        })
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(s) = self.expires_in {
            parts.push(format!("password expires in {s} s"));
        }
        if let Some(g) = self.grace_left {
            parts.push(format!("{g} grace logins left"));
        }
        if let Some(e) = self.error {
            parts.push(
                match e {
                    0 => "passwordExpired",
                    1 => "accountLocked",
                    2 => "changeAfterReset",
                    3 => "passwordModNotAllowed",
                    4 => "mustSupplyOldPassword",
                    5 => "insufficientPasswordQuality",
                    6 => "passwordTooShort",
                    7 => "passwordTooYoung",
                    8 => "passwordInHistory",
                    _ => "unknown error",
                }
                .to_string(),
            );
        }
        if parts.is_empty() {
            f.write_str("no warning")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// A response `pdu` under message ID `msgid`, without its password policy
/// control.
pub fn strip(pdu: &[u8], h: &Header, msgid: i32) -> BytesMut {
    search::without_controls(pdu, h, msgid, &[OID_PPOLICY])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_values() {
        let cases: &[(&[u8], Policy, bool)] = &[
            (&[0x30, 0x00], Policy::default(), false),
            (
                &[0x30, 0x03, 0x81, 0x01, 0x02],
                Policy {
                    error: Some(2),
                    ..Policy::default()
                },
                true,
            ),
            (
                &[0x30, 0x06, 0xa0, 0x04, 0x80, 0x02, 0x0e, 0x10],
                Policy {
                    expires_in: Some(3600),
                    ..Policy::default()
                },
                true,
            ),
            (
                &[0x30, 0x05, 0xa0, 0x03, 0x81, 0x01, 0x03],
                Policy {
                    grace_left: Some(3),
                    ..Policy::default()
                },
                true,
            ),
            (
                &[0x30, 0x08, 0xa0, 0x03, 0x81, 0x01, 0x01, 0x81, 0x01, 0x00],
                Policy {
                    grace_left: Some(1),
                    error: Some(0),
                    ..Policy::default()
                },
                true,
            ),
            // Garbage is not trusted: it counts as notable. A negative or
            // over-long INTEGER is garbage too.
            (
                &[0x30, 0x03, 0x81, 0x01, 0xff],
                Policy {
                    error: Some(u32::MAX),
                    ..Policy::default()
                },
                true,
            ),
            (
                &[0x04, 0x00],
                Policy {
                    error: Some(u32::MAX),
                    ..Policy::default()
                },
                true,
            ),
            (
                &[0x30, 0x02, 0x99, 0x00],
                Policy {
                    error: Some(u32::MAX),
                    ..Policy::default()
                },
                true,
            ),
            (
                &[0x30, 0x05, 0x81],
                Policy {
                    error: Some(u32::MAX),
                    ..Policy::default()
                },
                true,
            ),
        ];
        for (v, want, notable) in cases {
            let p = Policy::parse(v);
            assert_eq!(&p, want, "{v:02x?}");
            assert_eq!(p.is_notable(), *notable, "{v:02x?}");
        }
    }

    #[test]
    fn request_control_decodes() {
        let c = request_control();
        let ctl = ber::tlv(&c).expect("a control");
        assert_eq!((ctl.tag, ctl.len), (0x30, c.len()));
        let oid = ber::tlv(ctl.body).expect("an OID");
        assert_eq!(
            (oid.tag, oid.body, oid.len),
            (0x04, OID_PPOLICY.as_bytes(), ctl.body.len())
        );
    }
}
