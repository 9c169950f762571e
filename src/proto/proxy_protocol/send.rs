//! PROXY protocol v2 headers the router sends to the DSAs listed in
//! `--send-proxy-to` (OpenLDAP's `pldap://` listener, HAProxy's
//! `accept-proxy`), first on each connection it opens to them:
//!
//! * on a connection of a client's own (bound by replaying the client's
//!   bind, or the one a client's bind goes on), a `PROXY` header with the
//!   client's address (the PROXY header's source, when the client came
//!   through a balancer) as the source, the DSA's address as the
//!   destination;
//! * on the router's own connections (shared by many clients, health
//!   probes, replication polls), a `LOCAL` header: they carry no one
//!   client's address, and the DSA sees the router's.
//!
//! The two addresses of a v2 header are of one family: an IPv4 client of
//! a DSA reached over IPv6 goes with the destination left unspecified
//! (`0.0.0.0:0`); an IPv6 client of an IPv4 DSA, with the destination
//! IPv4-mapped.

use super::SIG_V2;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// The header for a connection to a DSA at `dsa`: `PROXY` for `client`,
/// `LOCAL` for `None`.
pub fn v2(client: Option<SocketAddr>, dsa: SocketAddr) -> Vec<u8> {
    let mut b = SIG_V2.to_vec();
    let Some(src) = client else {
        // Version 2, LOCAL; family UNSPEC; no addresses.
        b.extend([0x20, 0x00, 0x00, 0x00]);
        return b;
    };
    let dst = match (src.ip(), dsa.ip()) {
        (IpAddr::V4(_), IpAddr::V6(_)) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        (IpAddr::V6(_), IpAddr::V4(d)) => SocketAddr::from((d.to_ipv6_mapped(), dsa.port())),
        _ => dsa,
    };
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            // Version 2, PROXY; TCP over IPv4; 12 bytes of addresses.
            b.extend([0x21, 0x11, 0x00, 0x0c]);
            b.extend(s.octets());
            b.extend(d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            // Version 2, PROXY; TCP over IPv6; 36 bytes of addresses.
            b.extend([0x21, 0x21, 0x00, 0x24]);
            b.extend(s.octets());
            b.extend(d.octets());
        }
        // Made one family above.
        _ => {
            b.truncate(SIG_V2.len());
            b.extend([0x20, 0x00, 0x00, 0x00]);
            return b;
        }
    }
    b.extend(src.port().to_be_bytes());
    b.extend(dst.port().to_be_bytes());
    b
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::super::{parse, Header, Parsed};
    use super::*;

    fn back(b: &[u8]) -> Header {
        match parse(b).unwrap() {
            Parsed::Done(h, n) => {
                assert_eq!(n, b.len());
                h
            }
            other => panic!("{other:?}"),
        }
    }

    /// What the router sends reads back, by the router's own parser, as
    /// the client's address (or as LOCAL).
    #[test]
    fn headers_sent_read_back_as_the_clients_address() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        let rows = [
            ("127.0.0.2:40000", "127.0.0.1:389", "127.0.0.1:389"),
            ("[2001:db8::7]:40000", "[::1]:389", "[::1]:389"),
            ("192.0.2.7:40000", "[::1]:389", "0.0.0.0:0"),
            (
                "[2001:db8::7]:40000",
                "127.0.0.1:389",
                "[::ffff:127.0.0.1]:389",
            ),
        ];
        for (src, dsa, dst) in rows {
            let h = back(&v2(Some(a(src)), a(dsa)));
            assert_eq!(
                h,
                Header::Proxied {
                    src: a(src),
                    dst: a(dst)
                },
                "{src} to {dsa}"
            );
        }
        assert_eq!(back(&v2(None, a("127.0.0.1:389"))), Header::Local);
    }
}
