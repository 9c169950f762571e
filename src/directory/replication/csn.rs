//! OpenLDAP change sequence numbers (CSNs): `YYYYmmddHHMMSS.ffffffZ#cnt#sid#mod`,
//! the UTC time of a change to the microsecond, a counter within that
//! microsecond, the server ID of the provider that made it and a
//! modification number (all three in hex). CSNs of one server ID order
//! by time, then counter, then modification number; that is also the order
//! of their text. Pure: parsing and comparing only.

use std::fmt;

/// One parsed CSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Csn {
    /// UTC microseconds since the Unix epoch.
    pub micros: i64,
    pub count: u32,
    pub sid: u16,
    pub modn: u32,
}

impl PartialOrd for Csn {
    fn partial_cmp(&self, other: &Csn) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Csn {
    fn cmp(&self, o: &Csn) -> std::cmp::Ordering {
        (self.micros, self.count, self.sid, self.modn).cmp(&(o.micros, o.count, o.sid, o.modn))
    }
}

/// Days from 1970-01-01 to the civil date `y-m-d` (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date (year, month, day) of `days` after 1970-01-01 (Howard
/// Hinnant's days-to-civil algorithm; the access log's timestamps use it
/// too).
pub(crate) fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn digits(s: &str) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn hex(s: &str, max_len: usize) -> Option<u32> {
    if s.is_empty() || s.len() > max_len || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(s, 16).ok()
}

impl Csn {
    /// Parse `YYYYmmddHHMMSS.ffffffZ#cnt#sid#mod`; `None` for anything
    /// else (a wrong field count, a date that does not exist, a non-hex
    /// number).
    pub fn parse(text: &str) -> Option<Csn> {
        let mut parts = text.split('#');
        let (time, cnt, sid, modn) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let time = time.strip_suffix('Z')?;
        let (whole, frac) = time.split_once('.')?;
        if whole.len() != 14 || frac.is_empty() || frac.len() > 6 {
            return None;
        }
        let (y, mo, d) = (
            digits(&whole[..4])?,
            digits(&whole[4..6])?,
            digits(&whole[6..8])?,
        );
        let (h, mi, s) = (
            digits(&whole[8..10])?,
            digits(&whole[10..12])?,
            digits(&whole[12..14])?,
        );
        if !(1..=12).contains(&mo) || d < 1 || h > 23 || mi > 59 || s > 60 {
            return None;
        }
        let days = days_from_civil(y, mo, d);
        if civil_from_days(days) != (y, mo, d) {
            return None; // 31 April and the like
        }
        let mut us = digits(frac)?;
        for _ in frac.len()..6 {
            us *= 10;
        }
        let secs = days * 86_400 + h * 3600 + mi * 60 + s;
        Some(Csn {
            micros: secs * 1_000_000 + us,
            count: hex(cnt, 8)?,
            sid: u16::try_from(hex(sid, 3)?).ok()?,
            modn: hex(modn, 8)?,
        })
    }
}

impl fmt::Display for Csn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.micros.div_euclid(1_000_000);
        let us = self.micros.rem_euclid(1_000_000);
        let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
        let t = secs.rem_euclid(86_400);
        write!(
            f,
            "{y:04}{m:02}{d:02}{:02}{:02}{:02}.{us:06}Z#{:06x}#{:03x}#{:06x}",
            t / 3600,
            t % 3600 / 60,
            t % 60,
            self.count,
            self.sid,
            self.modn
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_what_openldap_writes() {
        type Row = (&'static str, Option<(i64, u32, u16, u32)>);
        let table: &[Row] = &[
            (
                "20240102030405.123456Z#000000#000#000000",
                Some((1_704_164_645_123_456, 0, 0, 0)),
            ),
            (
                "19700101000000.000000Z#00000a#001#000002",
                Some((0, 10, 1, 2)),
            ),
            (
                "20240229235959.999999Z#000001#fff#000000",
                Some((1_709_251_199_999_999, 1, 0xfff, 0)),
            ),
            ("20230229000000.000000Z#000000#000#000000", None), // no 29 Feb
            ("20240102030405.123456#000000#000#000000", None),  // no Z
            ("20240102030405.123456Z#000000#000", None),        // 3 fields
            ("20240102030405.123456Z#000000#000#000000#0", None),
            ("20240102030405.123456Z#00000g#000#000000", None),
            ("20240102030405.123456Z#000000#1000#000000", None), // SID > 3 digits
            ("2024010203040.123456Z#000000#000#000000", None),
            ("20241302030405.123456Z#000000#000#000000", None),
            ("", None),
        ];
        for (text, want) in table {
            let got = Csn::parse(text).map(|c| (c.micros, c.count, c.sid, c.modn));
            assert_eq!(got, *want, "{text}");
        }
    }

    #[test]
    fn orders_by_time_then_counter() {
        let a = Csn::parse("20240102030405.123456Z#000000#001#000000").unwrap();
        let b = Csn::parse("20240102030405.123456Z#000001#001#000000").unwrap();
        let c = Csn::parse("20240102030405.123457Z#000000#001#000000").unwrap();
        assert!(a < b && b < c);
    }

    proptest! {
        #[test]
        fn display_round_trips_and_order_is_text_order(
            a in 0i64..4_102_444_800_000_000, b in 0i64..4_102_444_800_000_000,
            ca in 0u32..0xffffff, cb in 0u32..0xffffff, sid in 0u16..0xfff,
        ) {
            let x = Csn { micros: a, count: ca, sid, modn: 0 };
            let y = Csn { micros: b, count: cb, sid, modn: 0 };
            let (tx, ty) = (x.to_string(), y.to_string());
            prop_assert_eq!(Csn::parse(&tx), Some(x));
            prop_assert_eq!(Csn::parse(&ty), Some(y));
            prop_assert_eq!(x.cmp(&y), tx.cmp(&ty));
        }

        #[test]
        fn never_panics_on_any_text(s in ".{0,60}") {
            let _ = Csn::parse(&s);
        }
    }
}
