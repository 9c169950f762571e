//! The messages of the handover between the old and the new process, one
//! per `SOCK_SEQPACKET` message ([`super::fds`]):
//!
//! ```text
//! new -> old  READY                 knowledge loaded, ready to take over
//! new -> old  REFUSED reason        cannot (knowledge, flags...): the old
//!                                   one keeps serving
//! old -> new  LISTENERS flags + fds LDAP, LDAPS, admin listening sockets
//! new -> old  SERVING               accepting: the old one stops
//! old -> new  SESSION state + fd    a client session between operations
//! old -> new  END                   (or the socket closing) no more
//! ```
//!
//! Each message is `DSAH`, the protocol version, a kind byte, then its
//! payload. Bytes from the other process are checked like any input.

use std::os::fd::OwnedFd;

/// Protocol version: both processes must speak the same.
pub const VERSION: u8 = 1;
const MAGIC: &[u8; 4] = b"DSAH";

/// One handover message.
#[derive(Debug)]
pub enum Msg {
    Ready,
    Refused(String),
    /// The listening sockets, in the order LDAP, LDAPS, admin (those
    /// present).
    Listeners {
        ldap: Option<OwnedFd>,
        ldaps: Option<OwnedFd>,
        admin: Option<OwnedFd>,
    },
    Serving,
    /// A session's state ([`super::state`]) and its socket.
    Session(Vec<u8>, OwnedFd),
    End,
}

/// A message that is not one.
#[derive(Debug, PartialEq, Eq)]
pub struct Bad(pub &'static str);

impl std::fmt::Display for Bad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "bad handover message: {}", self.0)
    }
}

/// The bytes of a message without descriptors, and the kind byte.
fn head(kind: u8) -> Vec<u8> {
    let mut b = MAGIC.to_vec();
    b.extend([VERSION, kind]);
    b
}

/// A message's bytes (its descriptors go beside them).
pub fn encode(m: &Msg) -> Vec<u8> {
    match m {
        Msg::Ready => head(b'R'),
        Msg::Refused(why) => {
            let mut b = head(b'N');
            b.extend_from_slice(why.as_bytes());
            b
        }
        Msg::Listeners { ldap, ldaps, admin } => {
            let mut b = head(b'L');
            b.push(
                u8::from(ldap.is_some())
                    | u8::from(ldaps.is_some()) << 1
                    | u8::from(admin.is_some()) << 2,
            );
            b
        }
        Msg::Serving => head(b'S'),
        Msg::Session(state, _) => session(state),
        Msg::End => head(b'E'),
    }
}

/// A SESSION message's bytes for a state's (its socket goes beside).
pub fn session(state: &[u8]) -> Vec<u8> {
    let mut b = head(b'C');
    b.extend_from_slice(state);
    b
}

/// The message in `bytes` with the descriptors that came with it (a
/// message with more or fewer than its kind carries is bad; the
/// descriptors are closed then).
pub fn decode(bytes: &[u8], fds: Vec<OwnedFd>) -> Result<Msg, Bad> {
    let Some(rest) = bytes.strip_prefix(MAGIC) else {
        return Err(Bad("not a handover message"));
    };
    let (&version, rest) = rest.split_first().ok_or(Bad("cut short"))?;
    if version != VERSION {
        return Err(Bad("other protocol version"));
    }
    let (&kind, body) = rest.split_first().ok_or(Bad("cut short"))?;
    let mut fds = fds.into_iter();
    let m = match kind {
        b'R' if body.is_empty() => Msg::Ready,
        b'N' => Msg::Refused(String::from_utf8_lossy(body).into_owned()),
        b'L' => {
            let [flags] = body else {
                return Err(Bad("listener flags"));
            };
            if flags & !7 != 0 {
                return Err(Bad("listener flags"));
            }
            let mut next = |bit: u8| -> Result<Option<OwnedFd>, Bad> {
                if flags & bit == 0 {
                    return Ok(None);
                }
                fds.next().map(Some).ok_or(Bad("a listener is missing"))
            };
            let (ldap, ldaps, admin) = (next(1)?, next(2)?, next(4)?);
            Msg::Listeners { ldap, ldaps, admin }
        }
        b'S' if body.is_empty() => Msg::Serving,
        b'C' => {
            let fd = fds.next().ok_or(Bad("a session without its socket"))?;
            Msg::Session(body.to_vec(), fd)
        }
        b'E' if body.is_empty() => Msg::End,
        _ => return Err(Bad("unknown kind")),
    };
    if fds.next().is_some() {
        return Err(Bad("descriptors the message does not carry"));
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    fn fd() -> OwnedFd {
        OwnedFd::from(std::fs::File::open("/dev/null").unwrap())
    }

    #[test]
    fn messages_come_back_as_they_went() {
        assert!(matches!(
            decode(&encode(&Msg::Ready), vec![]),
            Ok(Msg::Ready)
        ));
        assert!(
            matches!(decode(&encode(&Msg::Refused("no".into())), vec![]), Ok(Msg::Refused(w)) if w == "no")
        );
        let l = Msg::Listeners {
            ldap: Some(fd()),
            ldaps: None,
            admin: Some(fd()),
        };
        match decode(&encode(&l), vec![fd(), fd()]) {
            Ok(Msg::Listeners {
                ldap: Some(_),
                ldaps: None,
                admin: Some(_),
            }) => {}
            other => panic!("{other:?}"),
        }
        let s = Msg::Session(vec![1, 2], fd());
        assert!(matches!(decode(&encode(&s), vec![fd()]), Ok(Msg::Session(b, _)) if b == [1, 2]));
    }

    #[test]
    fn bad_messages_are_errors() {
        assert_eq!(
            decode(b"HTTP", vec![]).err(),
            Some(Bad("not a handover message"))
        );
        assert_eq!(
            decode(b"DSAH\x02R", vec![]).err(),
            Some(Bad("other protocol version"))
        );
        assert_eq!(decode(b"DSAH\x01", vec![]).err(), Some(Bad("cut short")));
        assert_eq!(
            decode(b"DSAH\x01C", vec![]).err(),
            Some(Bad("a session without its socket"))
        );
        assert_eq!(
            decode(b"DSAH\x01L\x03", vec![fd()]).err(),
            Some(Bad("a listener is missing"))
        );
        assert_eq!(
            decode(b"DSAH\x01L\x08", vec![]).err(),
            Some(Bad("listener flags"))
        );
        assert_eq!(
            decode(b"DSAH\x01R", vec![fd()]).err(),
            Some(Bad("descriptors the message does not carry"))
        );
        assert_eq!(
            decode(b"DSAH\x01Rx", vec![]).err(),
            Some(Bad("unknown kind"))
        );
    }
}
