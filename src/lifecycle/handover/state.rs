//! A client session's state as the old process hands it to the new one:
//! a small versioned binary format. The new process reads these bytes, so
//! decoding checks every length and value and never panics: anything
//! malformed is an error, and that session is closed instead of resumed.
//!
//! Format, version 1 (integers big-endian; a string or byte string is a
//! u32 length then its bytes; a flag a byte 0 or 1):
//!
//! ```text
//! u8 version (1)
//! address: u8 family (4 or 6), 4 or 16 bytes, u16 port  -- the client's
//!          (the PROXY protocol header's source, when it came through one)
//! u8 identity: 0 anonymous, 1 bound, then
//!     dn, authz (strings), conveyed, own_conn, policy (flags),
//!     u8 bind kept (0/1), then bind dn (string), bind PDU (bytes)
//! u16 count, then per partition: key, DSA (strings)  -- per-connection
//!     state kept on a DSA (paged searches)
//! u16 count, then per partition: key, DSA (strings), u64 age in ms,
//!     u64 window in ms  -- read-your-writes after the client's writes
//! bytes: what was read of the next request, not yet a whole PDU
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The format's version, first byte of every state.
pub const VERSION: u8 = 1;

/// Bytes read of a request not yet whole: at most this many are handed
/// over (a larger one makes the session drain instead).
pub const MAX_PARTIAL: usize = 64 * 1024;

/// What a session is, apart from its socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionState {
    /// The client's address (from the PROXY header when there was one).
    pub peer: SocketAddr,
    /// `None`: anonymous.
    pub bound: Option<BoundState>,
    /// Partition key and the DSA holding the client's state there.
    pub state_dsa: Vec<(String, String)>,
    /// Read-your-writes affinity by partition key.
    pub affinity: Vec<AffinityState>,
    /// Bytes read and not yet a whole request.
    pub partial: Vec<u8>,
}

/// A bound client's identity and how it is conveyed to DSAs.
#[derive(Clone, PartialEq, Eq)]
pub struct BoundState {
    pub dn: String,
    pub authz: String,
    pub conveyed: bool,
    pub own_conn: bool,
    pub policy: bool,
    /// A simple bind kept to replay: its DN and PDU (with the password:
    /// never logged, see the Debug below).
    pub bind: Option<(String, Vec<u8>)>,
}

impl std::fmt::Debug for BoundState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundState")
            .field("dn", &self.dn)
            .field("authz", &self.authz)
            .field("conveyed", &self.conveyed)
            .field("own_conn", &self.own_conn)
            .field("policy", &self.policy)
            .field("bind", &self.bind.as_ref().map(|(dn, _)| (dn, "***")))
            .finish()
    }
}

/// One read-your-writes affinity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AffinityState {
    pub key: String,
    pub dsa: String,
    pub age_ms: u64,
    pub window_ms: u64,
}

/// Why a state could not be read.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed session state: {}", self.0)
    }
}

impl SessionState {
    /// The state's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Vec::with_capacity(64 + self.partial.len());
        w.push(VERSION);
        match self.peer.ip() {
            IpAddr::V4(a) => {
                w.push(4);
                w.extend_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                w.push(6);
                w.extend_from_slice(&a.octets());
            }
        }
        w.extend_from_slice(&self.peer.port().to_be_bytes());
        match &self.bound {
            None => w.push(0),
            Some(b) => {
                w.push(1);
                put(&mut w, b.dn.as_bytes());
                put(&mut w, b.authz.as_bytes());
                w.extend([
                    u8::from(b.conveyed),
                    u8::from(b.own_conn),
                    u8::from(b.policy),
                ]);
                match &b.bind {
                    None => w.push(0),
                    Some((dn, pdu)) => {
                        w.push(1);
                        put(&mut w, dn.as_bytes());
                        put(&mut w, pdu);
                    }
                }
            }
        }
        let n = self.state_dsa.len().min(usize::from(u16::MAX));
        w.extend_from_slice(&(n as u16).to_be_bytes());
        for (k, d) in self.state_dsa.iter().take(n) {
            put(&mut w, k.as_bytes());
            put(&mut w, d.as_bytes());
        }
        let n = self.affinity.len().min(usize::from(u16::MAX));
        w.extend_from_slice(&(n as u16).to_be_bytes());
        for a in self.affinity.iter().take(n) {
            put(&mut w, a.key.as_bytes());
            put(&mut w, a.dsa.as_bytes());
            w.extend_from_slice(&a.age_ms.to_be_bytes());
            w.extend_from_slice(&a.window_ms.to_be_bytes());
        }
        put(&mut w, &self.partial);
        w
    }

    /// The state in `bytes`, all of them.
    pub fn decode(bytes: &[u8]) -> Result<SessionState, Malformed> {
        let mut r = Reader(bytes);
        if r.u8()? != VERSION {
            return Err(Malformed("unknown version"));
        }
        let ip = match r.u8()? {
            4 => IpAddr::V4(Ipv4Addr::from(r.array::<4>()?)),
            6 => IpAddr::V6(Ipv6Addr::from(r.array::<16>()?)),
            _ => return Err(Malformed("address family")),
        };
        let peer = SocketAddr::new(ip, u16::from_be_bytes(r.array()?));
        let bound = match r.u8()? {
            0 => None,
            1 => Some(BoundState {
                dn: r.string()?,
                authz: r.string()?,
                conveyed: r.flag()?,
                own_conn: r.flag()?,
                policy: r.flag()?,
                bind: match r.u8()? {
                    0 => None,
                    1 => Some((r.string()?, r.bytes()?.to_vec())),
                    _ => return Err(Malformed("bind flag")),
                },
            }),
            _ => return Err(Malformed("identity")),
        };
        let n = u16::from_be_bytes(r.array()?);
        let mut state_dsa = Vec::new();
        for _ in 0..n {
            state_dsa.push((r.string()?, r.string()?));
        }
        let n = u16::from_be_bytes(r.array()?);
        let mut affinity = Vec::new();
        for _ in 0..n {
            affinity.push(AffinityState {
                key: r.string()?,
                dsa: r.string()?,
                age_ms: u64::from_be_bytes(r.array()?),
                window_ms: u64::from_be_bytes(r.array()?),
            });
        }
        let partial = r.bytes()?;
        if partial.len() > MAX_PARTIAL {
            return Err(Malformed("partial request too large"));
        }
        let partial = partial.to_vec();
        if !r.0.is_empty() {
            return Err(Malformed("trailing bytes"));
        }
        Ok(SessionState {
            peer,
            bound,
            state_dsa,
            affinity,
            partial,
        })
    }
}

fn put(w: &mut Vec<u8>, b: &[u8]) {
    let n = u32::try_from(b.len()).unwrap_or(u32::MAX);
    w.extend_from_slice(&n.to_be_bytes());
    w.extend_from_slice(&b[..n as usize]);
}

/// Bytes being decoded: every read checks what is left.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if n > self.0.len() {
            return Err(Malformed("cut short"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Malformed> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.array::<1>()?[0])
    }

    fn flag(&mut self) -> Result<bool, Malformed> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Malformed("flag")),
        }
    }

    fn bytes(&mut self) -> Result<&'a [u8], Malformed> {
        let n = u32::from_be_bytes(self.array()?) as usize;
        self.take(n)
    }

    fn string(&mut self) -> Result<String, Malformed> {
        std::str::from_utf8(self.bytes()?)
            .map(str::to_string)
            .map_err(|_| Malformed("not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn full() -> SessionState {
        SessionState {
            peer: "[2001:db8::7]:40001".parse().unwrap(),
            bound: Some(BoundState {
                dn: "cn=A,o=X".into(),
                authz: "dn:cn=A,o=X".into(),
                conveyed: true,
                own_conn: false,
                policy: true,
                bind: Some(("cn=A,o=X".into(), vec![0x30, 1, 2])),
            }),
            state_dsa: vec![("o=x".into(), "D1".into())],
            affinity: vec![AffinityState {
                key: "o=x".into(),
                dsa: "D2".into(),
                age_ms: 12,
                window_ms: 5000,
            }],
            partial: vec![0x30, 0x84],
        }
    }

    #[test]
    fn states_come_back_as_they_went() {
        let anon = SessionState {
            peer: "10.0.0.1:389".parse().unwrap(),
            bound: None,
            state_dsa: vec![],
            affinity: vec![],
            partial: vec![],
        };
        for s in [full(), anon] {
            assert_eq!(SessionState::decode(&s.encode()), Ok(s));
        }
    }

    #[test]
    fn every_cut_and_every_changed_byte_is_an_error_or_a_state_never_a_panic() {
        let bytes = full().encode();
        for n in 0..bytes.len() {
            assert!(SessionState::decode(&bytes[..n]).is_err(), "cut at {n}");
        }
        for i in 0..bytes.len() {
            for v in [0u8, 1, 2, 0x7f, 0xff] {
                let mut b = bytes.clone();
                b[i] = v;
                let _ = SessionState::decode(&b);
            }
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            SessionState::decode(&longer),
            Err(Malformed("trailing bytes"))
        );
        let mut v2 = bytes;
        v2[0] = 2;
        assert_eq!(SessionState::decode(&v2), Err(Malformed("unknown version")));
    }

    #[test]
    fn malformed_values_are_named() {
        let rows: [(&[u8], &str); 4] = [
            (&[1, 5], "address family"),
            (&[1, 4, 1, 2, 3, 4, 0, 1, 9], "identity"),
            (
                &[1, 4, 1, 2, 3, 4, 0, 1, 1, 0, 0, 0, 2, 0xff, 0xfe],
                "not UTF-8",
            ),
            (
                &[1, 4, 1, 2, 3, 4, 0, 1, 1, 0xff, 0xff, 0xff, 0xff],
                "cut short",
            ),
        ];
        for (b, why) in rows {
            assert_eq!(SessionState::decode(b), Err(Malformed(why)), "{b:?}");
        }
        let mut big = SessionState {
            partial: vec![0; MAX_PARTIAL + 1],
            ..full()
        };
        assert_eq!(
            SessionState::decode(&big.encode()),
            Err(Malformed("partial request too large"))
        );
        big.partial.truncate(MAX_PARTIAL);
        assert!(SessionState::decode(&big.encode()).is_ok());
    }

    #[test]
    fn the_password_is_not_in_debug_output() {
        let s = format!("{:?}", full());
        assert!(s.contains("***") && !s.contains("[48, 1, 2]"), "{s}");
    }
}
