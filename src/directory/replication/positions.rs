//! Replication positions: per DSA and partition, per server ID the newest
//! CSN its `contextCSN` showed, and when it was read; and what follows from
//! them (lag against the group's newest, staleness against the
//! partition's newest). Storage is a concurrent map the poller writes and
//! routing, `/status` and `/metrics` read.

use super::csn::Csn;
use crate::directory::knowledge::DsaName;
use dashmap::DashMap;
use std::time::{Duration, Instant};

/// A DSA's position: per server ID the newest CSN, sorted by server ID.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Position(Vec<Csn>);

impl Position {
    /// From `contextCSN` values: the newest per server ID; values that do
    /// not parse are left out.
    pub fn from_values<'a>(values: impl IntoIterator<Item = &'a str>) -> Position {
        let mut p = Position::default();
        for c in values.into_iter().filter_map(Csn::parse) {
            p.note(c);
        }
        p
    }

    /// Take `c` if it is newer than what is known for its server ID.
    pub fn note(&mut self, c: Csn) {
        match self.0.binary_search_by_key(&c.sid, |x| x.sid) {
            Ok(i) if self.0[i] < c => self.0[i] = c,
            Ok(_) => {}
            Err(i) => self.0.insert(i, c),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn csns(&self) -> &[Csn] {
        &self.0
    }

    pub fn get(&self, sid: u16) -> Option<Csn> {
        self.0
            .binary_search_by_key(&sid, |x| x.sid)
            .ok()
            .map(|i| self.0[i])
    }

    /// Whether this position has every change of `target`: for each of its
    /// server IDs, a CSN at least as new.
    pub fn reached(&self, target: &Position) -> bool {
        target
            .0
            .iter()
            .all(|t| self.get(t.sid).is_some_and(|c| c >= *t))
    }

    /// Per server ID the newer of both.
    pub fn merge(&mut self, other: &Position) {
        for &c in &other.0 {
            self.note(c);
        }
    }

    /// How far this position is behind `newest`: per server ID of
    /// `newest`, its CSN's time minus ours (0 when ours is as new), the
    /// largest of them; `None` when we have nothing of one of its server
    /// IDs (unknown).
    pub fn behind(&self, newest: &Position) -> Option<Duration> {
        let mut worst = 0i64;
        for n in &newest.0 {
            let ours = self.get(n.sid)?;
            worst = worst.max(n.micros - ours.micros);
        }
        Some(Duration::from_micros(worst.max(0) as u64))
    }

    /// How old a read from this position may be against `newest`, at
    /// `now_micros` (UTC): 0 when it has every change of `newest`; else,
    /// per server ID it is behind on, the time since its own CSN of it
    /// (every change it lacks came after that CSN, so none of them is
    /// older), the largest of them; `None` when we have nothing of one of
    /// its server IDs. Unlike [`Position::behind`] this grows with time
    /// while the position stands still, whether or not later readings of
    /// the newest come in.
    pub fn unseen_for(&self, newest: &Position, now_micros: i64) -> Option<Duration> {
        let mut worst = 0i64;
        for n in &newest.0 {
            let ours = self.get(n.sid)?;
            if ours < *n {
                worst = worst.max(now_micros.max(n.micros) - ours.micros);
            }
        }
        Some(Duration::from_micros(worst.max(0) as u64))
    }
}

/// One reading of a DSA's `contextCSN`.
#[derive(Debug, Clone)]
pub struct Reading {
    pub position: Position,
    /// When the request was sent: every write acknowledged before this is
    /// in `position`.
    pub started: Instant,
    /// When the answer came.
    pub finished: Instant,
}

/// A DSA's lag as routing sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lag {
    /// It publishes no position: routed as if it had none of this.
    NoPosition,
    /// Its last reading is too old, or it lacks a server ID others have.
    Unknown,
    Known(Duration),
}

impl Lag {
    /// Beyond `bound` (unknown lag is beyond any bound).
    pub fn beyond(self, bound: Duration) -> bool {
        match self {
            Lag::NoPosition => false,
            Lag::Unknown => true,
            Lag::Known(d) => d > bound,
        }
    }

    /// Milliseconds, for the read gate (unknown: `u32::MAX`).
    pub fn millis(self) -> u32 {
        match self {
            Lag::NoPosition => 0,
            Lag::Unknown => u32::MAX,
            Lag::Known(d) => u32::try_from(d.as_millis()).unwrap_or(u32::MAX - 1),
        }
    }

    pub fn seconds(self) -> Option<f64> {
        match self {
            Lag::Known(d) => Some(d.as_secs_f64()),
            _ => None,
        }
    }
}

/// What the poller concluded for one DSA of one partition.
#[derive(Debug, Clone)]
pub struct Assessed {
    pub reading: Option<Reading>,
    /// Against the newest of its load-share group.
    pub lag: Lag,
    /// Against the newest of its partition.
    pub staleness: Lag,
    /// Why it serves no reads, when it does not.
    pub out: Option<String>,
}

/// Positions of every DSA of every partition, keyed by partition key and
/// DSA name.
#[derive(Debug, Default)]
pub struct Positions {
    map: DashMap<(String, DsaName), Assessed>,
}

fn key(partition: &str, dsa: &str) -> (String, DsaName) {
    (partition.to_string(), DsaName::from(dsa))
}

impl Positions {
    pub fn get(&self, partition: &str, dsa: &str) -> Option<Assessed> {
        self.map.get(&key(partition, dsa)).map(|e| e.clone())
    }

    /// The latest reading's position, if it started after `after`.
    pub fn read_after(&self, partition: &str, dsa: &str, after: Instant) -> Option<Position> {
        let e = self.map.get(&key(partition, dsa))?;
        let r = e.reading.as_ref()?;
        (r.started > after).then(|| r.position.clone())
    }

    /// The known position (whatever its age: positions only grow).
    pub fn position(&self, partition: &str, dsa: &str) -> Option<Position> {
        let e = self.map.get(&key(partition, dsa))?;
        e.reading.as_ref().map(|r| r.position.clone())
    }

    pub fn set(&self, partition: &str, dsa: &str, a: Assessed) {
        self.map.insert(key(partition, dsa), a);
    }

    /// Keep only the keys `keep` says to (after a reload).
    pub fn retain(&self, keep: impl Fn(&str, &str) -> bool) {
        self.map.retain(|(p, d), _| keep(p, d));
    }
}

/// The lag of each of `members` (their readings, `None` when never read)
/// against the newest position among them; a reading finished before
/// `fresh_after` counts as unknown.
pub fn lags(members: &[Option<&Reading>], fresh_after: Instant) -> Vec<Lag> {
    against_newest(members, fresh_after, |ours, newest| ours.behind(newest))
}

/// The staleness of each of `members` for `--max-staleness`: how old a
/// read from it may be at `now_micros` (UTC) against the newest position
/// among them ([`Position::unseen_for`]); a reading finished before
/// `fresh_after` counts as unknown.
pub fn staleness(members: &[Option<&Reading>], fresh_after: Instant, now_micros: i64) -> Vec<Lag> {
    against_newest(members, fresh_after, |ours, newest| {
        ours.unseen_for(newest, now_micros)
    })
}

fn against_newest(
    members: &[Option<&Reading>],
    fresh_after: Instant,
    measure: impl Fn(&Position, &Position) -> Option<Duration>,
) -> Vec<Lag> {
    let mut newest = Position::default();
    for r in members.iter().flatten() {
        newest.merge(&r.position);
    }
    members
        .iter()
        .map(|r| match r {
            None => Lag::NoPosition,
            Some(r) if r.position.is_empty() => Lag::NoPosition,
            Some(r) if r.finished < fresh_after => Lag::Unknown,
            Some(r) => measure(&r.position, &newest).map_or(Lag::Unknown, Lag::Known),
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn csn(micros: i64, sid: u16) -> Csn {
        Csn {
            micros,
            count: 0,
            sid,
            modn: 0,
        }
    }

    fn pos(v: &[(i64, u16)]) -> Position {
        let mut p = Position::default();
        for &(m, s) in v {
            p.note(csn(m, s));
        }
        p
    }

    #[test]
    fn keeps_the_newest_per_server_id() {
        let p = Position::from_values([
            "20240102030405.000001Z#000000#001#000000",
            "20240102030405.000009Z#000000#002#000000",
            "20240102030405.000005Z#000000#001#000000",
            "garbage",
        ]);
        assert_eq!(p.csns().len(), 2);
        assert_eq!(p.get(1).unwrap().micros % 1_000_000, 5);
    }

    #[test]
    fn reached_and_behind_per_server_id() {
        type Row = (
            &'static [(i64, u16)],
            &'static [(i64, u16)],
            bool,
            Option<u64>,
        );
        let table: &[Row] = &[
            (&[(10, 1)], &[(10, 1)], true, Some(0)),
            (&[(9, 1)], &[(10, 1)], false, Some(1)),
            (&[(20, 1), (5, 2)], &[(10, 1), (8, 2)], false, Some(3)),
            (&[(20, 1)], &[(10, 1), (8, 2)], false, None),
            (&[(20, 1), (9, 2)], &[(10, 1)], true, Some(0)),
            (&[], &[], true, Some(0)),
        ];
        for (ours, target, reached, behind) in table {
            let (o, t) = (pos(ours), pos(target));
            assert_eq!(o.reached(&t), *reached, "{ours:?} {target:?}");
            assert_eq!(
                o.behind(&t).map(|d| d.as_micros() as u64),
                *behind,
                "{ours:?} {target:?}"
            );
        }
    }

    #[test]
    fn unseen_for_grows_with_time_while_behind() {
        // (ours, newest, now, expected micros)
        type Row = (
            &'static [(i64, u16)],
            &'static [(i64, u16)],
            i64,
            Option<u64>,
        );
        let table: &[Row] = &[
            // Has everything: 0, however old its position.
            (&[(10, 1)], &[(10, 1)], 1_000_000, Some(0)),
            // Behind by 1 µs of CSN, but its own position is 1 s old: a
            // change it lacks may be that old (a stopped consumer).
            (&[(10, 1)], &[(11, 1)], 1_000_010, Some(1_000_000)),
            // Newest ahead of the clock (skew): at least the CSN distance.
            (&[(10, 1)], &[(50, 1)], 20, Some(40)),
            // Behind on one server ID only; the other does not count.
            (&[(10, 1), (5, 2)], &[(10, 1), (8, 2)], 100, Some(95)),
            // Nothing of server ID 2: unknown.
            (&[(10, 1)], &[(10, 1), (8, 2)], 100, None),
        ];
        for (ours, newest, now, want) in table {
            let got = pos(ours)
                .unseen_for(&pos(newest), *now)
                .map(|d| d.as_micros() as u64);
            assert_eq!(got, *want, "{ours:?} {newest:?} at {now}");
        }
    }

    #[test]
    fn lag_of_old_readings_is_unknown_and_no_position_is_none() {
        let now = Instant::now();
        let r = |m: i64, at: Instant| Reading {
            position: pos(&[(m, 0)]),
            started: at,
            finished: at,
        };
        let fresh = r(2_000_000, now);
        let behind = r(500_000, now);
        let old = r(2_000_000, now - Duration::from_secs(5));
        let none = Reading {
            position: Position::default(),
            started: now,
            finished: now,
        };
        let got = lags(
            &[Some(&fresh), Some(&behind), Some(&old), Some(&none), None],
            now - Duration::from_secs(1),
        );
        assert_eq!(
            got,
            [
                Lag::Known(Duration::ZERO),
                Lag::Known(Duration::from_millis(1500)),
                Lag::Unknown,
                Lag::NoPosition,
                Lag::NoPosition
            ]
        );
        assert!(Lag::Unknown.beyond(Duration::from_secs(100)));
        assert!(!Lag::NoPosition.beyond(Duration::ZERO));
    }

    proptest! {
        #[test]
        fn merged_reaches_both_and_lags_nothing(
            a in proptest::collection::vec((0i64..1_000_000, 0u16..4), 0..6),
            b in proptest::collection::vec((0i64..1_000_000, 0u16..4), 0..6),
        ) {
            let (pa, pb) = (pos(&a), pos(&b));
            let mut m = pa.clone();
            m.merge(&pb);
            prop_assert!(m.reached(&pa) && m.reached(&pb));
            prop_assert_eq!(m.behind(&pa), Some(Duration::ZERO));
            // Reaching implies being behind by nothing.
            if pa.reached(&pb) {
                prop_assert_eq!(pa.behind(&pb), Some(Duration::ZERO));
            }
        }
    }
}
