//! The PROXY protocol parser: a table of headers, good and malformed, and
//! properties over any bytes.
#![allow(clippy::panic)]

use super::*;
use proptest::prelude::*;

fn v2(cmd: u8, fam: u8, body: &[u8]) -> Vec<u8> {
    let mut b = SIG_V2.to_vec();
    b.push(0x20 | cmd);
    b.push(fam);
    b.extend_from_slice(&u16::try_from(body.len()).unwrap_or(0).to_be_bytes());
    b.extend_from_slice(body);
    b
}

fn addr(s: &str) -> SocketAddr {
    s.parse()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
}

fn proxied(src: &str, dst: &str) -> Header {
    Header::Proxied {
        src: addr(src),
        dst: addr(dst),
    }
}

#[test]
fn headers_of_both_versions_parse_to_the_client_address_and_their_length() {
    let v4 = [192, 0, 2, 7, 10, 0, 0, 1, 0xc3, 0x50, 0x01, 0x85];
    let mut v6 = Vec::new();
    v6.extend_from_slice(
        &"2001:db8::7"
            .parse::<Ipv6Addr>()
            .map(|a| a.octets())
            .unwrap_or_default(),
    );
    v6.extend_from_slice(
        &"2001:db8::1"
            .parse::<Ipv6Addr>()
            .map(|a| a.octets())
            .unwrap_or_default(),
    );
    v6.extend_from_slice(&[0xc3, 0x50, 0x01, 0x85]);
    let mut tlv = v4.to_vec();
    tlv.extend_from_slice(&[0x04, 0x00, 0x03, b'a', b'b', b'c']);
    let rows: Vec<(Vec<u8>, Header)> = vec![
        (
            b"PROXY TCP4 192.0.2.7 10.0.0.1 50000 389\r\n".to_vec(),
            proxied("192.0.2.7:50000", "10.0.0.1:389"),
        ),
        (
            b"PROXY TCP6 2001:db8::7 2001:db8::1 50000 389\r\n".to_vec(),
            proxied("[2001:db8::7]:50000", "[2001:db8::1]:389"),
        ),
        (b"PROXY UNKNOWN\r\n".to_vec(), Header::Local),
        (
            b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n".to_vec(),
            Header::Local,
        ),
        (v2(1, 0x11, &v4), proxied("192.0.2.7:50000", "10.0.0.1:389")),
        (
            v2(1, 0x21, &v6),
            proxied("[2001:db8::7]:50000", "[2001:db8::1]:389"),
        ),
        (
            v2(1, 0x11, &tlv),
            proxied("192.0.2.7:50000", "10.0.0.1:389"),
        ),
        (v2(0, 0x00, &[]), Header::Local),
        (v2(0, 0x11, &v4), Header::Local),
        (v2(1, 0x00, &[]), Header::Local),
        (v2(1, 0x31, &[0; 216]), Header::Local),
    ];
    for (bytes, want) in rows {
        let mut with_ldap = bytes.clone();
        with_ldap.extend_from_slice(&[0x30, 0x05, 0x02, 0x01, 0x01, 0x42, 0x00]);
        for b in [&bytes, &with_ldap] {
            assert_eq!(parse(b), Ok(Parsed::Done(want, bytes.len())), "{bytes:?}");
        }
        // Every prefix asks for more, never past the header's end.
        for cut in 0..bytes.len() {
            match parse(&bytes[..cut]) {
                Ok(Parsed::Need(n)) => {
                    assert!(n > cut && n <= bytes.len(), "{bytes:?} at {cut}: {n}")
                }
                other => panic!("{bytes:?} cut at {cut}: {other:?}"),
            }
        }
    }
}

#[test]
fn malformed_headers_are_refused() {
    let long = format!("PROXY TCP4 {} 1 2\r\n", "1".repeat(100));
    let rows: Vec<Vec<u8>> = vec![
        b"PROXY TCP5 1.2.3.4 1.2.3.4 1 2\r\n".to_vec(),
        b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2 3\r\n".to_vec(),
        b"PROXY TCP4 1.2.3.4 1.2.3.4 1\r\n".to_vec(),
        b"PROXY TCP4 1.2.3 1.2.3.4 1 2\r\n".to_vec(),
        b"PROXY TCP4 ::1 ::1 1 2\r\n".to_vec(),
        b"PROXY TCP6 1.2.3.4 1.2.3.4 1 2\r\n".to_vec(),
        b"PROXY TCP4 1.2.3.4 1.2.3.4 65536 2\r\n".to_vec(),
        b"PROXY TCP4 1.2.3.4 1.2.3.4 01 2\r\n".to_vec(),
        b"PROXY TCP4 1.2.3.4 1.2.3.4 +1 2\r\n".to_vec(),
        b"PROXY TCP4  1.2.3.4 1.2.3.4 1 2\r\n".to_vec(),
        b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2\n".to_vec(),
        long.into_bytes(),
        [b"PROXY ".to_vec(), vec![b'x'; 120]].concat(),
        b"GET / HTTP/1.0\r\n".to_vec(),
        vec![0x30, 0x05, 0x02, 0x01, 0x01, 0x42, 0x00],
        v2(2, 0x11, &[0; 12]),
        v2(1, 0x11, &[0; 11]),
        v2(1, 0x21, &[0; 35]),
        v2(1, 0x41, &[0; 12]),
        {
            let mut b = v2(1, 0x11, &[0; 12]);
            b[12] = 0x11;
            b
        },
    ];
    for bytes in rows {
        assert!(
            parse(&bytes).is_err(),
            "{:?}: {:?}",
            String::from_utf8_lossy(&bytes),
            parse(&bytes)
        );
    }
}

#[test]
fn cidr_blocks_match_their_addresses_only() {
    let rows = [
        ("10.0.0.0/8", "10.255.1.2", true),
        ("10.0.0.0/8", "11.0.0.1", false),
        ("192.0.2.7", "192.0.2.7", true),
        ("192.0.2.7", "192.0.2.8", false),
        ("192.0.2.0/25", "192.0.2.127", true),
        ("192.0.2.0/25", "192.0.2.128", false),
        ("0.0.0.0/0", "203.0.113.9", true),
        ("127.0.0.1", "::ffff:127.0.0.1", true),
        ("2001:db8::/32", "2001:db8:1::1", true),
        ("2001:db8::/32", "2001:db9::1", false),
        ("::1", "127.0.0.1", false),
    ];
    for (block, ip, want) in rows {
        let c: Cidr = block.parse().unwrap_or_else(|e| panic!("{e}"));
        let ip: IpAddr = ip.parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        assert_eq!(c.contains(ip), want, "{block} {ip}");
    }
    for bad in ["10.0.0.0/33", "::/129", "host", "10.0.0.0/x", "1.2.3.4/-1"] {
        assert!(bad.parse::<Cidr>().is_err(), "{bad}");
    }
    assert_eq!(parse_list("127.0.0.1, 10.0.0.0/8,").map(|l| l.len()), Ok(2));
}

proptest! {
    /// Any bytes: no panic; a header found is no longer than the input,
    /// and a request for more asks for more than there is.
    #[test]
    fn any_bytes_parse_without_panic_and_within_bounds(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        match parse(&data) {
            Ok(Parsed::Done(_, n)) => prop_assert!(n <= data.len() && n >= 15),
            Ok(Parsed::Need(n)) => prop_assert!(n > data.len()),
            Err(_) => {}
        }
    }

    /// Any v1 TCP4 header written as HAProxy writes it parses back.
    #[test]
    fn v1_headers_round_trip(a in any::<[u8; 4]>(), b in any::<[u8; 4]>(), sp in any::<u16>(), dp in any::<u16>()) {
        let (s, d) = (Ipv4Addr::from(a), Ipv4Addr::from(b));
        let text = format!("PROXY TCP4 {s} {d} {sp} {dp}\r\n");
        let want = Header::Proxied { src: SocketAddr::new(s.into(), sp), dst: SocketAddr::new(d.into(), dp) };
        prop_assert_eq!(parse(text.as_bytes()), Ok(Parsed::Done(want, text.len())));
    }
}
