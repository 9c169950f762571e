//! Durations and sizes as operators write them, one syntax for every
//! setting: durations `500ms`, `15s`, `15m`, `2h` (a bare number is in the
//! setting's own unit: [`Bare`]), sizes `4096`, `64KiB`, `4MiB`, `1GiB`
//! (a bare number is bytes). Each setting has a range ([`Span`],
//! [`Size`], [`Count`]); a value outside it is refused with the range in
//! the message, never clamped.

use std::fmt;
use std::time::Duration;

/// The unit of a bare number, as each setting has always read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bare {
    Millis,
    Secs,
}

/// Why a value was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitError {
    /// Not a number with a known unit; `expected` says what is.
    Syntax {
        value: String,
        expected: &'static str,
    },
    /// A well-formed value outside the setting's range.
    Range { value: String, range: String },
}

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnitError::Syntax { value, expected } => {
                write!(f, "{value:?} is not {expected}")
            }
            UnitError::Range { value, range } => write!(f, "{value} is out of range: {range}"),
        }
    }
}

impl std::error::Error for UnitError {}

/// A duration setting's rule: the unit of a bare number, the range, and
/// whether `0` (off, or never) is allowed besides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub bare: Bare,
    pub min: Duration,
    pub max: Duration,
    /// `0` is allowed (and means off), below `min`.
    pub zero: bool,
}

const DURATION_UNITS: &str =
    "a duration: a number with ms, s, m or h (500ms, 15s, 15m, 2h), or a bare number";

impl Span {
    /// A setting in seconds when bare, from `min` to `max`.
    pub const fn secs(min: Duration, max: Duration) -> Span {
        Span {
            bare: Bare::Secs,
            min,
            max,
            zero: false,
        }
    }

    /// The same rule with `0` allowed (off).
    pub const fn or_zero(self) -> Span {
        Span { zero: true, ..self }
    }

    /// The same rule with bare numbers in milliseconds.
    pub const fn bare_millis(self) -> Span {
        Span {
            bare: Bare::Millis,
            ..self
        }
    }

    /// `s` read and checked against the range.
    pub fn parse(&self, s: &str) -> Result<Duration, UnitError> {
        let d = duration(s, self.bare)?;
        if d.is_zero() && self.zero {
            return Ok(d);
        }
        if d < self.min || d > self.max {
            return Err(UnitError::Range {
                value: s.trim().to_string(),
                range: self.describe(),
            });
        }
        Ok(d)
    }

    /// The range in words: `from 10ms to 1h (bare numbers: seconds; 0: off)`.
    pub fn describe(&self) -> String {
        let bare = match self.bare {
            Bare::Millis => "milliseconds",
            Bare::Secs => "seconds",
        };
        let zero = if self.zero { "; 0: off" } else { "" };
        format!(
            "from {} to {} (bare numbers: {bare}{zero})",
            format_duration(self.min),
            format_duration(self.max)
        )
    }
}

/// A duration: a number (decimals allowed) with `ms`, `s`, `m` or `h`, or
/// a bare number in `bare` units.
pub fn duration(s: &str, bare: Bare) -> Result<Duration, UnitError> {
    let t = s.trim();
    let bad = || UnitError::Syntax {
        value: t.to_string(),
        expected: DURATION_UNITS,
    };
    let i = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = (&t[..i], t[i..].trim());
    if num.is_empty() {
        return Err(bad());
    }
    let v: f64 = num.parse().map_err(|_| bad())?;
    let millis = match unit {
        "" => match bare {
            Bare::Millis => 1.0,
            Bare::Secs => 1000.0,
        },
        "ms" => 1.0,
        "s" => 1000.0,
        "m" | "min" => 60_000.0,
        "h" => 3_600_000.0,
        _ => return Err(bad()),
    };
    let secs = v * millis / 1000.0;
    Duration::try_from_secs_f64(secs).map_err(|_| bad())
}

/// A duration the way operators write it: the largest unit that gives a
/// whole number (`15m`, `500ms`, `1.5s` when none does).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if d.is_zero() {
        return "0".to_string();
    }
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        return format!("{}s", d.as_secs_f64());
    }
    for (unit, n) in [("h", 3_600_000), ("m", 60_000), ("s", 1000)] {
        if ms.is_multiple_of(n) {
            return format!("{}{unit}", ms / n);
        }
    }
    format!("{ms}ms")
}

/// A size setting's rule (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    pub min: u64,
    pub max: u64,
}

const SIZE_UNITS: &str = "a size: bytes, or a number with KiB, MiB, GiB or TiB (64KiB, 4MiB)";

/// 1 KiB.
pub const KIB: u64 = 1 << 10;
/// 1 MiB.
pub const MIB: u64 = 1 << 20;
/// 1 GiB.
pub const GIB: u64 = 1 << 30;
/// 1 TiB.
pub const TIB: u64 = 1 << 40;

impl Size {
    /// `s` read and checked against the range.
    pub fn parse(&self, s: &str) -> Result<u64, UnitError> {
        let n = size(s)?;
        if n < self.min || n > self.max {
            return Err(UnitError::Range {
                value: s.trim().to_string(),
                range: self.describe(),
            });
        }
        Ok(n)
    }

    /// `from 64 bytes to 1GiB`.
    pub fn describe(&self) -> String {
        format!(
            "from {} to {}",
            format_size(self.min),
            format_size(self.max)
        )
    }
}

/// Bytes: a whole number, alone or with `B`, `KiB`, `MiB`, `GiB`, `TiB`.
pub fn size(s: &str) -> Result<u64, UnitError> {
    let t = s.trim();
    let bad = || UnitError::Syntax {
        value: t.to_string(),
        expected: SIZE_UNITS,
    };
    let i = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = (&t[..i], t[i..].trim());
    let n: u64 = num.parse().map_err(|_| bad())?;
    let mult = match unit {
        "" | "B" => 1,
        "KiB" => KIB,
        "MiB" => MIB,
        "GiB" => GIB,
        "TiB" => TIB,
        _ => return Err(bad()),
    };
    n.checked_mul(mult).ok_or_else(bad)
}

/// Bytes the way operators write them: the largest binary unit that gives
/// a whole number (`4MiB`), else bytes.
pub fn format_size(n: u64) -> String {
    for (unit, m) in [("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)] {
        if n >= m && n.is_multiple_of(m) {
            return format!("{}{unit}", n / m);
        }
    }
    match n {
        1 => "1 byte".to_string(),
        n => format!("{n} bytes"),
    }
}

/// A count setting's rule (connections, operations, PDUs, probes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Count {
    pub min: u64,
    pub max: u64,
}

impl Count {
    /// `s`, a whole number, checked against the range.
    pub fn parse(&self, s: &str) -> Result<u64, UnitError> {
        let t = s.trim();
        let n: u64 = t.parse().map_err(|_| UnitError::Syntax {
            value: t.to_string(),
            expected: "a whole number",
        })?;
        if n < self.min || n > self.max {
            return Err(UnitError::Range {
                value: t.to_string(),
                range: format!("from {} to {}", self.min, self.max),
            });
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn durations() {
        let cases: &[(&str, Bare, Option<Duration>)] = &[
            ("500ms", Bare::Secs, Some(MS(500))),
            ("15s", Bare::Secs, Some(MS(15_000))),
            ("15m", Bare::Secs, Some(MS(900_000))),
            ("2h", Bare::Secs, Some(MS(7_200_000))),
            ("1.5s", Bare::Secs, Some(MS(1500))),
            ("0.2", Bare::Secs, Some(MS(200))),
            ("10", Bare::Secs, Some(MS(10_000))),
            ("10", Bare::Millis, Some(MS(10))),
            (" 5m ", Bare::Secs, Some(MS(300_000))),
            ("0", Bare::Secs, Some(Duration::ZERO)),
            ("15x", Bare::Secs, None),
            ("m", Bare::Secs, None),
            ("", Bare::Secs, None),
            ("-1s", Bare::Secs, None),
            ("1e400", Bare::Secs, None),
            ("1..2s", Bare::Secs, None),
        ];
        for (s, bare, want) in cases {
            assert_eq!(duration(s, *bare).ok(), *want, "{s:?} bare {bare:?}");
        }
    }

    #[test]
    fn duration_ranges() {
        let span = Span::secs(MS(10), MS(3_600_000));
        let cases: &[(Span, &str, Result<Duration, &str>)] = &[
            (span, "10ms", Ok(MS(10))),
            (span, "1h", Ok(MS(3_600_000))),
            (span, "5ms", Err("from 10ms to 1h (bare numbers: seconds)")),
            (span, "2h", Err("from 10ms to 1h")),
            (span, "0", Err("out of range")),
            (span.or_zero(), "0", Ok(Duration::ZERO)),
            (span.or_zero(), "0s", Ok(Duration::ZERO)),
            (span.or_zero(), "5ms", Err("; 0: off")),
            (span.bare_millis(), "20", Ok(MS(20))),
            (span, "soon", Err("is not a duration")),
        ];
        for (span, s, want) in cases {
            match (span.parse(s), want) {
                (Ok(d), Ok(w)) => assert_eq!(d, *w, "{s}"),
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "{s}: {e}"),
                (got, _) => panic!("{s}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn sizes() {
        let cases: &[(&str, Option<u64>)] = &[
            ("4096", Some(4096)),
            ("4096B", Some(4096)),
            ("64KiB", Some(64 << 10)),
            ("4MiB", Some(4 << 20)),
            ("1GiB", Some(1 << 30)),
            ("2TiB", Some(2 << 40)),
            ("4 MiB", Some(4 << 20)),
            ("4MB", None),
            ("4mib", None),
            ("1.5MiB", None),
            ("", None),
            ("-1", None),
            ("99999999999TiB", None),
        ];
        for (s, want) in cases {
            assert_eq!(size(s).ok(), *want, "{s:?}");
        }
        let rule = Size { min: 64, max: GIB };
        assert_eq!(rule.parse("4MiB"), Ok(4 << 20));
        let e = rule.parse("2GiB").map(|_| ()).unwrap_err().to_string();
        assert_eq!(e, "2GiB is out of range: from 64 bytes to 1GiB");
        assert!(rule.parse("12").is_err());
    }

    #[test]
    fn counts() {
        let rule = Count { min: 1, max: 100 };
        let cases: &[(&str, Option<u64>)] = &[
            ("1", Some(1)),
            ("100", Some(100)),
            ("0", None),
            ("101", None),
            ("ten", None),
        ];
        for (s, want) in cases {
            assert_eq!(rule.parse(s).ok(), *want, "{s:?}");
        }
        let e = rule.parse("0").map(|_| ()).unwrap_err().to_string();
        assert_eq!(e, "0 is out of range: from 1 to 100");
    }

    #[test]
    fn formats() {
        let cases: &[(Duration, &str)] = &[
            (Duration::ZERO, "0"),
            (MS(10), "10ms"),
            (MS(1500), "1500ms"),
            (MS(15_000), "15s"),
            (MS(900_000), "15m"),
            (MS(7_200_000), "2h"),
        ];
        for (d, want) in cases {
            assert_eq!(format_duration(*d), *want);
            assert_eq!(duration(want, Bare::Secs).ok(), Some(*d), "{want}");
        }
        assert_eq!(format_duration(Duration::from_micros(1500)), "0.0015s");
        let sizes: &[(u64, &str)] = &[
            (64, "64 bytes"),
            (4096, "4KiB"),
            (4 << 20, "4MiB"),
            (3 << 30, "3GiB"),
            (1000, "1000 bytes"),
        ];
        for (n, want) in sizes {
            assert_eq!(format_size(*n), *want);
        }
    }
}
