//! The ejection rules for reads: which DSAs are stalled or slow, whether
//! one may be taken out of its groups, and for how long.

use super::{Dsa, MIN_SAMPLES, SLOW_FACTOR, SLOW_MARGIN, STALL, STREAK, STUCK};
use crate::backend::dsa_state::DsaState;
use crate::backend::routing::{Backend, Routing};
use crate::backend::settings::TailConfig;
use crate::directory::knowledge::DsaName;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Whether a DSA whose mean read latency is `mean` is slow next to the
/// fastest of its group, `best`.
pub(super) fn is_slow(mean: Duration, best: Duration) -> bool {
    mean.as_secs_f64() > best.as_secs_f64() * SLOW_FACTOR && mean > best + SLOW_MARGIN
}

/// Whether DSA `d` may be ejected: in every group holding it, fewer than
/// `max_pct` percent of the members would be ejected with it, and another
/// member would stay eligible.
pub(super) fn may_eject(
    d: usize,
    groups: &[Vec<usize>],
    ejected: &[bool],
    eligible: &[bool],
    max_pct: u32,
) -> bool {
    groups.iter().filter(|g| g.contains(&d)).all(|g| {
        let out = g.iter().filter(|&&m| ejected.get(m) == Some(&true)).count() + 1;
        let others = g.iter().any(|&m| m != d && eligible.get(m) == Some(&true));
        others && out * 100 <= g.len() * max_pct as usize
    })
}

/// What one tick saw: the snapshot, its DSAs' names, the
/// load-share groups, and the reads stuck on each DSA.
pub(super) struct View<'a> {
    pub routing: &'a Routing,
    pub names: &'a [DsaName],
    pub groups: &'a [Vec<usize>],
    pub stuck: &'a [usize],
}

/// Whether a DSA whose last read was answered at `last_done` (if ever)
/// has been silent long enough, at `now`, to count as stalled.
fn silent_for_a_stall(last_done: Option<Instant>, now: Instant) -> bool {
    last_done.is_none_or(|t| now.duration_since(t) >= STALL)
}

/// Readmit DSAs whose ejection ended; eject stalled ones, and at a window's
/// end slow ones.
pub(super) fn eject_outliers(
    router: &Backend,
    v: &View<'_>,
    dsas: &mut HashMap<DsaName, Dsa>,
    cfg: &TailConfig,
    fold: bool,
) {
    let now = Instant::now();
    readmit_ended(v, dsas, now);
    if cfg.max_ejection == 0 {
        return;
    }
    let last_done: Vec<Option<Instant>> = v
        .names
        .iter()
        .map(|n| dsas.get(n).and_then(|d| d.last_done))
        .collect();
    // Each window's mean per DSA.
    let means: Vec<Option<Duration>> = v
        .names
        .iter()
        .map(|n| {
            dsas.get(n)
                .filter(|d| d.count >= MIN_SAMPLES)
                .map(|d| Duration::from_micros(d.sum_us / d.count))
        })
        .collect();
    let states = &v.routing.states.0;
    for (i, st) in states.iter().enumerate() {
        if !st.status().eligible() {
            continue;
        }
        let mates: Vec<usize> = v
            .groups
            .iter()
            .filter(|g| g.contains(&i))
            .flatten()
            .copied()
            .filter(|&m| m != i)
            .collect();
        let Some(d) = dsas.get_mut(&v.names[i]) else {
            continue;
        };
        let stalled = stalled(d, v.stuck, i, &mates, &last_done, now);
        let slow = if fold {
            slow(d, &means, i, &mates)
        } else {
            None
        };
        let Some(reason) = stalled.or(slow) else {
            continue;
        };
        let ejected: Vec<bool> = states.iter().map(|s| s.ejection().is_some()).collect();
        let eligible: Vec<bool> = states.iter().map(|s| s.status().eligible()).collect();
        if may_eject(i, v.groups, &ejected, &eligible, cfg.max_ejection) {
            eject(router, st, d, &reason, cfg, now);
        }
    }
}

/// Readmit the DSAs whose ejection ended.
fn readmit_ended(v: &View<'_>, dsas: &mut HashMap<DsaName, Dsa>, now: Instant) {
    for (i, st) in v.routing.states.0.iter().enumerate() {
        let Some(d) = dsas.get_mut(&v.names[i]) else {
            continue;
        };
        if d.until.is_some_and(|u| u <= now) {
            d.until = None;
            d.ended = Some(now);
            st.readmit();
        }
    }
}

/// Why DSA `i` is stalled, if it is.
fn stalled(
    d: &Dsa,
    stuck: &[usize],
    i: usize,
    mates: &[usize],
    last_done: &[Option<Instant>],
    now: Instant,
) -> Option<String> {
    // Silent for a moment is not stalled: under CPU contention a
    // healthy DSA can lose a handful of races in one 5 ms tick (seen
    // in bench/compare.sh: 8 in a row ejected a slapd for 10 s, half
    // the group's capacity). Like the stuck rule below, it must also
    // have answered nothing for STALL.
    let silent = silent_for_a_stall(d.last_done, now);
    if d.streak >= STREAK && silent {
        return Some(format!(
            "{} reads in a row were answered first by another DSA, none by it",
            d.streak
        ));
    }
    // A mate answers reads and has none stuck itself: the DSA is
    // stalled, not the whole group slow (every DSA of a slow group
    // has reads waiting).
    let mate_answers = || {
        mates.iter().any(|&m| {
            stuck.get(m) == Some(&0)
                && last_done
                    .get(m)
                    .copied()
                    .flatten()
                    .is_some_and(|t| now.duration_since(t) < STALL)
        })
    };
    (stuck[i] >= STUCK && silent && mate_answers()).then(|| {
        format!(
            "{} reads waited over {} ms for a first answer while it answered none and its group answered",
            stuck[i],
            STALL.as_millis()
        )
    })
}

/// At a window's end: why DSA `i` is slow, if it has been for two windows
/// in a row (counted in `d.slow`).
fn slow(d: &mut Dsa, means: &[Option<Duration>], i: usize, mates: &[usize]) -> Option<String> {
    let best = mates
        .iter()
        .filter_map(|&m| means.get(m).copied().flatten())
        .min();
    match (means[i], best) {
        (Some(mean), Some(best)) if is_slow(mean, best) => {
            d.slow += 1;
            (d.slow >= 2).then(|| {
                format!(
                    "reads took {:.1} ms on average over {} s, against {:.1} ms on the fastest DSA of its group",
                    mean.as_secs_f64() * 1e3,
                    d.slow,
                    best.as_secs_f64() * 1e3
                )
            })
        }
        _ => {
            d.slow = 0;
            None
        }
    }
}

/// Eject a DSA for the ejection time times its ejections in a row (one
/// ending more than five minutes ago does not count).
fn eject(
    router: &Backend,
    st: &DsaState,
    d: &mut Dsa,
    reason: &str,
    cfg: &TailConfig,
    now: Instant,
) {
    if d.ended
        .is_some_and(|e| now.duration_since(e) > Duration::from_secs(300))
    {
        d.times = 0;
    }
    d.times += 1;
    let time = cfg.ejection_time * d.times.min(30);
    d.until = Some(now + time);
    d.streak = 0;
    d.slow = 0;
    router.metrics.ejections.fetch_add(1, Ordering::Relaxed);
    st.eject(format!("{reason}; ejected for {} s", time.as_secs()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_means_far_slower_than_the_group_and_by_a_margin() {
        let ms = Duration::from_millis;
        let us = Duration::from_micros;
        let rows = [
            (ms(20), us(500), true),
            (ms(5), us(500), false),
            (ms(12), ms(4), false),
            (ms(50), ms(10), true),
            (us(900), us(200), false),
        ];
        for (mean, best, slow) in rows {
            assert_eq!(is_slow(mean, best), slow, "{mean:?} against {best:?}");
        }
    }

    #[test]
    fn a_dsa_silent_for_milliseconds_is_not_stalled() {
        let now = Instant::now();
        let ago = |ms| now.checked_sub(Duration::from_millis(ms));
        for (last_done, stalled) in [
            (None, true),
            (ago(0), false),
            (ago(5), false),
            (ago(99), false),
            (ago(100), true),
            (ago(2000), true),
        ] {
            assert_eq!(silent_for_a_stall(last_done, now), stalled, "{last_done:?}");
        }
    }

    #[test]
    fn ejection_keeps_a_share_of_each_group_and_an_eligible_dsa() {
        let groups = vec![vec![0, 1], vec![2], vec![3, 4, 5, 6]];
        let up = [true; 7];
        let none = [false; 7];
        // (dsa, ejected, eligible, max %, may eject)
        type Row = (usize, [bool; 7], [bool; 7], u32, bool);
        let rows: Vec<Row> = vec![
            (0, none, up, 50, true),
            (0, none, up, 49, false),
            (2, none, up, 100, false),
            (
                0,
                none,
                [true, false, true, true, true, true, true],
                100,
                false,
            ),
            (3, none, up, 50, true),
            (
                3,
                [false, false, false, false, true, false, false],
                up,
                50,
                true,
            ),
            (
                3,
                [false, false, false, false, true, true, false],
                up,
                50,
                false,
            ),
            (
                3,
                [false, false, false, false, true, true, false],
                up,
                100,
                true,
            ),
        ];
        for (d, ej, el, pct, want) in rows {
            assert_eq!(
                may_eject(d, &groups, &ej, &el, pct),
                want,
                "dsa {d} {ej:?} {el:?} {pct}%"
            );
        }
    }
}
