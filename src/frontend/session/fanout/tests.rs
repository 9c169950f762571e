//! The table-driven tests of the cookie, the fingerprint and the merge.

use super::*;

#[test]
fn cookies_round_trip_and_reject_foreign_ones() {
    let c = encode_cookie(7, 2, b"slapd-cookie");
    assert_eq!(decode_cookie(&c), Some((7, 2, &b"slapd-cookie"[..])));
    assert_eq!(
        decode_cookie(&encode_cookie(1, 0, b"")),
        Some((1, 0, &b""[..]))
    );
    assert_eq!(decode_cookie(b"slapd-cookie"), None);
    assert_eq!(decode_cookie(b""), None);
}

#[test]
fn next_cookie_walks_partitions() {
    let pg = |index| Paging {
        fingerprint: 9,
        index,
        partitions: 3,
    };
    assert_eq!(
        decode_cookie(&next_cookie(&pg(0), b"x")),
        Some((9, 0, &b"x"[..]))
    );
    assert_eq!(
        decode_cookie(&next_cookie(&pg(0), b"")),
        Some((9, 1, &b""[..]))
    );
    assert_eq!(
        decode_cookie(&next_cookie(&pg(1), b"")),
        Some((9, 2, &b""[..]))
    );
    assert!(next_cookie(&pg(2), b"").is_empty());
}

#[test]
fn fingerprint_depends_on_base_scope_and_partitions() {
    let p = vec!["o=A,c=AU".to_string(), "o=B,c=AU".to_string()];
    let f = fingerprint("c=AU", 2, &p);
    assert_eq!(f, fingerprint("c=AU", 2, &p));
    assert_ne!(f, fingerprint("c=AU", 1, &p));
    assert_ne!(f, fingerprint("c=NZ", 2, &p));
    assert_ne!(f, fingerprint("c=AU", 2, &p[..1]));
}
