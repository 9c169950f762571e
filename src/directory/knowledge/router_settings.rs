//! The router-only settings a knowledge tree may carry, `set
//! dsa-router-KEY = VALUE;`: percentages, a count, and durations written
//! as the settings file and the flags write them (`10ms`, `15s`, `2m`),
//! each checked against its range; a value outside it is refused, naming
//! the range, never clamped.

use crate::base::units::Span;
use std::time::Duration;

/// The range of a read's hedge floor (`--hedge-floor`, `set
/// dsa-router-hedge-floor`): a bare number is seconds, `0` turns the
/// floor off.
pub const HEDGE_FLOOR: Span =
    Span::secs(Duration::from_millis(1), Duration::from_secs(60)).or_zero();
/// The range of an outlier's first ejection time (`--ejection-time`, `set
/// dsa-router-ejection-time`): a bare number is seconds.
pub const EJECTION_TIME: Span = Span::secs(Duration::from_millis(100), Duration::from_secs(86_400));

/// Router-only settings a knowledge tree may carry (they override the
/// command line and change on reload). CA Directory ignores them as unknown
/// `set` commands would be; keep them in the router's own files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouterSettings {
    /// `set dsa-router-cpu-threshold = PCT;`
    pub cpu_threshold: Option<u32>,
    /// `set dsa-router-memory-threshold = PCT;`
    pub memory_threshold: Option<u32>,
    /// `set dsa-router-concurrency-limit = N;` (per DSA; 0 = none)
    pub concurrency_limit: Option<u32>,
    /// `set dsa-router-hedge-budget = PCT;` (0 = no hedged reads)
    pub hedge_budget: Option<u32>,
    /// `set dsa-router-hedge-floor = DURATION;`, or `set
    /// dsa-router-hedge-floor-ms = DURATION;` (a bare number in
    /// milliseconds there).
    pub hedge_floor: Option<SetDuration>,
    /// `set dsa-router-max-ejection = PCT;` (0 = no outlier ejection)
    pub max_ejection: Option<u32>,
    /// `set dsa-router-ejection-time = DURATION;` (a bare number is
    /// seconds)
    pub ejection_time: Option<SetDuration>,
}

/// A duration a `set dsa-router-*` line gives, and the line's `key =
/// value` as written (for the notices).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetDuration {
    pub value: Duration,
    pub written: String,
}

/// What a router-only setting's value is.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// A whole number 0-100.
    Percent,
    /// A whole number.
    Count,
    /// A duration in this range.
    Time(Span),
}

/// The `set` keys of the router-only settings.
pub(super) const KEYS: &[&str] = &[
    "dsa-router-cpu-threshold",
    "dsa-router-memory-threshold",
    "dsa-router-concurrency-limit",
    "dsa-router-hedge-budget",
    "dsa-router-hedge-floor",
    "dsa-router-hedge-floor-ms",
    "dsa-router-max-ejection",
    "dsa-router-ejection-time",
];

fn kind(key: &str) -> Kind {
    match key {
        "dsa-router-concurrency-limit" => Kind::Count,
        "dsa-router-hedge-floor" => Kind::Time(HEDGE_FLOOR),
        // Its bare numbers have always been milliseconds.
        "dsa-router-hedge-floor-ms" => Kind::Time(HEDGE_FLOOR.bare_millis()),
        "dsa-router-ejection-time" => Kind::Time(EJECTION_TIME),
        _ => Kind::Percent,
    }
}

/// Why a `set dsa-router-*` value was refused: what it must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl RouterSettings {
    /// `set KEY = TEXT;` (KEY one of [`KEYS`]) applied; the error says
    /// what the value must be.
    pub(super) fn set(&mut self, key: &str, text: &str) -> Result<(), Refused> {
        let whole = || {
            text.parse::<u32>()
                .map_err(|_| Refused(format!("set {key} takes a whole number, found '{text}'")))
        };
        match kind(key) {
            Kind::Time(span) => {
                let value = span
                    .parse(text)
                    .map_err(|e| Refused(format!("set {key} = {text}: {e}")))?;
                let d = Some(SetDuration {
                    value,
                    written: format!("{key} = {text}"),
                });
                if key == "dsa-router-ejection-time" {
                    self.ejection_time = d;
                } else {
                    self.hedge_floor = d;
                }
            }
            Kind::Count => self.concurrency_limit = Some(whole()?),
            Kind::Percent => {
                let n = whole()?;
                if n > 100 {
                    return Err(Refused(format!(
                        "set {key} = {n}: a percentage 0-100 (0 = off)"
                    )));
                }
                match key {
                    "dsa-router-cpu-threshold" => self.cpu_threshold = Some(n),
                    "dsa-router-memory-threshold" => self.memory_threshold = Some(n),
                    "dsa-router-hedge-budget" => self.hedge_budget = Some(n),
                    _ => self.max_ejection = Some(n),
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    fn ms(n: u64) -> Option<Duration> {
        Some(Duration::from_millis(n))
    }

    #[test]
    fn durations_take_units_and_bare_numbers_keep_their_meaning() {
        // (key, value, hedge floor, ejection time)
        let cases: &[(&str, &str, Option<Duration>, Option<Duration>)] = &[
            ("dsa-router-hedge-floor", "10ms", ms(10), None),
            ("dsa-router-hedge-floor", "1.5s", ms(1500), None),
            ("dsa-router-hedge-floor", "2", ms(2000), None),
            ("dsa-router-hedge-floor", "0", ms(0), None),
            ("dsa-router-hedge-floor-ms", "25", ms(25), None),
            ("dsa-router-hedge-floor-ms", "1s", ms(1000), None),
            ("dsa-router-ejection-time", "60", None, ms(60_000)),
            ("dsa-router-ejection-time", "500ms", None, ms(500)),
            ("dsa-router-ejection-time", "2m", None, ms(120_000)),
            ("dsa-router-ejection-time", "1h", None, ms(3_600_000)),
        ];
        for (key, text, floor, ejection) in cases {
            let mut s = RouterSettings::default();
            s.set(key, text)
                .unwrap_or_else(|e| panic!("{key} = {text}: {e}"));
            assert_eq!(
                s.hedge_floor.as_ref().map(|d| d.value),
                *floor,
                "{key} = {text}"
            );
            assert_eq!(
                s.ejection_time.as_ref().map(|d| d.value),
                *ejection,
                "{key} = {text}"
            );
            let written = s.hedge_floor.or(s.ejection_time).unwrap().written;
            assert_eq!(written, format!("{key} = {text}"));
        }
    }

    #[test]
    fn out_of_range_values_are_refused_with_the_range() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "dsa-router-ejection-time",
                "0",
                "0 is out of range: from 100ms to 24h (bare numbers: seconds)",
            ),
            (
                "dsa-router-ejection-time",
                "50ms",
                "50ms is out of range: from 100ms to 24h",
            ),
            (
                "dsa-router-ejection-time",
                "25h",
                "25h is out of range: from 100ms to 24h",
            ),
            (
                "dsa-router-hedge-floor",
                "61s",
                "61s is out of range: from 1ms to 1m (bare numbers: seconds; 0: off)",
            ),
            (
                "dsa-router-hedge-floor-ms",
                "60001",
                "60001 is out of range: from 1ms to 1m (bare numbers: milliseconds; 0: off)",
            ),
            ("dsa-router-hedge-floor", "10 parsecs", "is not a duration"),
            ("dsa-router-hedge-floor", "fast", "is not a duration"),
            ("dsa-router-hedge-budget", "101", "a percentage 0-100"),
            (
                "dsa-router-max-ejection",
                "5s",
                "takes a whole number, found '5s'",
            ),
            ("dsa-router-concurrency-limit", "-1", "takes a whole number"),
        ];
        for (key, text, want) in cases {
            let e = RouterSettings::default().set(key, text).expect_err(text).0;
            assert!(e.starts_with(&format!("set {key}")), "{e}");
            assert!(e.contains(want), "{key} = {text}: {e}");
        }
    }
}
