//! The PROXY protocol, versions 1 and 2 (HAProxy's
//! `doc/proxy-protocol.txt`), on the client listeners: a TCP load balancer
//! in front of the router (HAProxy `send-proxy` / `send-proxy-v2`) sends a
//! header with the client's address before the client's bytes, and the
//! router takes that address as the client's: in the access log, for
//! `--max-clients-per-ip`, in its log lines.
//!
//! Only connections from `--proxy-protocol-from CIDR,...` are read for a
//! header, and from there the header is required (the specification: a
//! receiver must not guess whether one comes); a connection from a listed
//! address that sends none, or a malformed one, is closed. From any other
//! address the bytes are LDAP: a PROXY header there is not, and gets the
//! usual protocol-error Notice of Disconnection.
//!
//! A v2 `LOCAL` header (the balancer's own health check) and a v1
//! `UNKNOWN` one keep the connection's own address; TLVs are skipped.
//!
//! The router sends v2 headers in turn ([`send`]) to the DSAs listed in
//! `--send-proxy-to`: the client's address on a connection of the
//! client's own, `LOCAL` on the router's own connections.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The v2 signature (12 bytes).
const SIG_V2: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// A v1 header's longest form, CRLF included.
const MAX_V1: usize = 107;

/// What a header says about the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// Relayed for the client at `src` (to `dst`, the balancer's side).
    Proxied { src: SocketAddr, dst: SocketAddr },
    /// No client address (v2 LOCAL, v1 UNKNOWN, v2 UNSPEC or a UNIX
    /// socket family): the connection's own address stays.
    Local,
}

/// How far [`parse`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// The header needs at least this many bytes in all (more may be
    /// needed after them): read exactly up to it, no further, so that no
    /// byte of the client's own is taken.
    Need(usize),
    /// A whole header of this many bytes.
    Done(Header, usize),
}

/// A malformed header (a short reason, for the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed PROXY protocol header: {}", self.0)
    }
}

/// Parse the header at the start of `buf` (v1 or v2, told by its first
/// bytes). Never reads past the header's end.
pub fn parse(buf: &[u8]) -> Result<Parsed, Malformed> {
    let v1 = b"PROXY ";
    let n = buf.len().min(v1.len());
    if buf[..n] == v1[..n] {
        return if buf.len() < v1.len() {
            Ok(Parsed::Need(v1.len()))
        } else {
            parse_v1(buf)
        };
    }
    let n = buf.len().min(SIG_V2.len());
    if buf[..n] == SIG_V2[..n] {
        return parse_v2(buf);
    }
    Err(Malformed("no PROXY protocol signature"))
}

/// `PROXY TCP4|TCP6|UNKNOWN src dst sport dport\r\n`, at most 107 bytes.
fn parse_v1(buf: &[u8]) -> Result<Parsed, Malformed> {
    let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
        if buf.len() >= MAX_V1 || buf.contains(&b'\n') {
            return Err(Malformed("v1 header without CRLF within 107 bytes"));
        }
        return Ok(Parsed::Need(buf.len() + 1));
    };
    if end + 2 > MAX_V1 {
        return Err(Malformed("v1 header over 107 bytes"));
    }
    let line = std::str::from_utf8(&buf[6..end]).map_err(|_| Malformed("v1 header not ASCII"))?;
    let mut f = line.split(' ');
    let header = match f.next() {
        // The rest of an UNKNOWN line is to be ignored.
        Some("UNKNOWN") => Header::Local,
        Some(fam @ ("TCP4" | "TCP6")) => {
            let v6 = fam == "TCP6";
            let src = v1_ip(f.next(), v6)?;
            let dst = v1_ip(f.next(), v6)?;
            let sport = v1_port(f.next())?;
            let dport = v1_port(f.next())?;
            if f.next().is_some() {
                return Err(Malformed("v1 header with extra fields"));
            }
            Header::Proxied {
                src: SocketAddr::new(src, sport),
                dst: SocketAddr::new(dst, dport),
            }
        }
        _ => return Err(Malformed("v1 header with an unknown protocol")),
    };
    Ok(Parsed::Done(header, end + 2))
}

/// A v1 address of the family announced (dotted quad or IPv6 text).
fn v1_ip(s: Option<&str>, v6: bool) -> Result<IpAddr, Malformed> {
    let s = s.ok_or(Malformed("v1 header without an address"))?;
    let ip = if v6 {
        s.parse::<Ipv6Addr>().map(IpAddr::V6)
    } else {
        s.parse::<Ipv4Addr>().map(IpAddr::V4)
    };
    ip.map_err(|_| Malformed("v1 header with a bad address"))
}

/// A v1 port: decimal, no sign, no leading zero, at most 65535.
fn v1_port(s: Option<&str>) -> Result<u16, Malformed> {
    let s = s.ok_or(Malformed("v1 header without a port"))?;
    let digits = !s.is_empty() && s.len() <= 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits || (s.len() > 1 && s.starts_with('0')) {
        return Err(Malformed("v1 header with a bad port"));
    }
    s.parse()
        .map_err(|_| Malformed("v1 header with a bad port"))
}

/// The binary header: signature, version and command, family, length,
/// addresses, TLVs (skipped).
fn parse_v2(buf: &[u8]) -> Result<Parsed, Malformed> {
    if buf.len() < 16 {
        return Ok(Parsed::Need(16));
    }
    let (ver_cmd, fam) = (buf[12], buf[13]);
    let len = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if ver_cmd >> 4 != 2 {
        return Err(Malformed("v2 header of another version"));
    }
    let total = 16 + len;
    if buf.len() < total {
        return Ok(Parsed::Need(total));
    }
    let body = &buf[16..total];
    let header = match ver_cmd & 0x0f {
        0 => Header::Local,
        1 => match fam {
            // TCP or UDP over IPv4.
            0x11 | 0x12 => {
                let a = body
                    .get(..12)
                    .ok_or(Malformed("v2 IPv4 addresses cut short"))?;
                let ip = |i: usize| IpAddr::V4(Ipv4Addr::new(a[i], a[i + 1], a[i + 2], a[i + 3]));
                Header::Proxied {
                    src: SocketAddr::new(ip(0), u16::from_be_bytes([a[8], a[9]])),
                    dst: SocketAddr::new(ip(4), u16::from_be_bytes([a[10], a[11]])),
                }
            }
            // TCP or UDP over IPv6.
            0x21 | 0x22 => {
                let a = body
                    .get(..36)
                    .ok_or(Malformed("v2 IPv6 addresses cut short"))?;
                let ip = |i: usize| {
                    let mut o = [0u8; 16];
                    o.copy_from_slice(&a[i..i + 16]);
                    IpAddr::V6(Ipv6Addr::from(o))
                };
                Header::Proxied {
                    src: SocketAddr::new(ip(0), u16::from_be_bytes([a[32], a[33]])),
                    dst: SocketAddr::new(ip(16), u16::from_be_bytes([a[34], a[35]])),
                }
            }
            // UNSPEC, UNIX sockets: no address to take.
            0x00 | 0x31 | 0x32 => Header::Local,
            _ => return Err(Malformed("v2 header with an unknown family")),
        },
        _ => return Err(Malformed("v2 header with an unknown command")),
    };
    Ok(Parsed::Done(header, total))
}

/// Why no header was read from a connection.
#[derive(Debug)]
pub enum ReadError {
    /// The bytes are not a header.
    Malformed(Malformed),
    /// The connection failed or ended before the header did.
    Io(std::io::Error),
    /// The header did not come within the wait.
    Timeout,
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Malformed(m) => write!(f, "{m}"),
            ReadError::Io(e) => write!(f, "no PROXY protocol header: {e}"),
            ReadError::Timeout => f.write_str("no PROXY protocol header in time"),
        }
    }
}

impl std::error::Error for ReadError {}

/// Read a header from `stream`, byte-exact (nothing of the client's own
/// is taken), within `wait`.
pub async fn read(
    stream: &mut tokio::net::TcpStream,
    wait: std::time::Duration,
) -> Result<Header, ReadError> {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::with_capacity(16);
    let go = async {
        loop {
            match parse(&buf).map_err(ReadError::Malformed)? {
                Parsed::Done(h, _) => return Ok(h),
                Parsed::Need(n) => {
                    let have = buf.len();
                    buf.resize(n, 0);
                    stream
                        .read_exact(&mut buf[have..])
                        .await
                        .map_err(ReadError::Io)?;
                }
            }
        }
    };
    tokio::time::timeout(wait, go)
        .await
        .map_err(|_| ReadError::Timeout)?
}

/// An address block, `ADDR/BITS` or a single address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    bits: u8,
}

impl Cidr {
    /// Whether `ip` is in the block (an IPv4-mapped IPv6 address counts as
    /// its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.net, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => prefix_eq(&n.octets(), &a.octets(), self.bits),
            (IpAddr::V6(n), IpAddr::V6(a)) => prefix_eq(&n.octets(), &a.octets(), self.bits),
            _ => false,
        }
    }
}

/// Whether the first `bits` bits of `a` and `b` are equal.
fn prefix_eq(a: &[u8], b: &[u8], bits: u8) -> bool {
    let full = usize::from(bits / 8);
    let rest = bits % 8;
    if a[..full] != b[..full] {
        return false;
    }
    if rest == 0 {
        return true;
    }
    let mask = 0xffu8 << (8 - rest);
    (a[full] & mask) == (b[full] & mask)
}

/// Why an address block does not parse (the text as given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CidrError {
    /// The address part is not an IP address.
    NotAnAddress(String),
    /// The prefix length is not a number up to `max` (32 or 128).
    PrefixLength { block: String, max: u8 },
}

impl std::fmt::Display for CidrError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CidrError::NotAnAddress(s) => write!(f, "{s:?}: not an IP address or CIDR block"),
            CidrError::PrefixLength { block, max } => {
                write!(f, "{block:?}: prefix length must be 0 to {max}")
            }
        }
    }
}

impl std::error::Error for CidrError {}

impl std::str::FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        let (addr, bits) = match s.split_once('/') {
            Some((a, b)) => (a, Some(b)),
            None => (s, None),
        };
        let net: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| CidrError::NotAnAddress(s.to_string()))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            Some(b) => b
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&b| b <= max)
                .ok_or_else(|| CidrError::PrefixLength {
                    block: s.to_string(),
                    max,
                })?,
            None => max,
        };
        Ok(Cidr { net, bits })
    }
}

/// `--proxy-protocol-from`'s list: comma-separated blocks.
pub fn parse_list(s: &str) -> Result<Vec<Cidr>, CidrError> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::parse)
        .collect()
}

pub mod send;

#[cfg(test)]
mod tests;
