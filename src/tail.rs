//! Tail latency (issue 19): hedged reads and outlier ejection, in one task.
//!
//! Every [`TICK`] the task takes each DSA's read latencies gathered since
//! the last tick ([`ReadStats`](crate::dsa_state::ReadStats)), earns hedge
//! budget for them (`hedge_budget` percent of reads, kept up to
//! [`BUDGET_CAP`] hedges), and scans the shared DSA connections for reads
//! waiting longer than their DSA's hedge delay: each is hedged while the
//! budget lasts ([`hedge::scan`]), the rest are counted as refused.
//!
//! Every [`WINDOW`] it folds the latencies into a decayed histogram per
//! DSA. The 95th percentile of a load-share group's histograms is the hedge
//! delay of its DSAs, never below the floor.
//!
//! Outliers are taken out of selection ([`DsaStatus::Ejected`]):
//! * **stalled**: it answered nothing for [`STALL`] while reads on it
//!   lost [`STREAK`] races in a row to their hedges, or [`STUCK`] reads have waited
//!   on it for a first answer for [`STALL`] while it answered none and
//!   another DSA of its group, with no read stuck itself, did;
//! * **slow**: for two windows in a row, its mean read latency was more
//!   than [`SLOW_FACTOR`] times, and [`SLOW_MARGIN`] above, that of the
//!   fastest DSA of its group.
//!
//! An ejection lasts `ejection_time` times the number of ejections in a row
//! (one ending more than five minutes before the next does not count), and
//! never leaves a group with more than `max_ejection` percent of its DSAs
//! ejected, nor without an eligible DSA.
//!
//! (Some 425 lines of code; the rest of the file is its tests.)
//!
//! [`DsaStatus::Ejected`]: crate::route::DsaStatus::Ejected

use crate::config::TailConfig;
use crate::context::{Context, Routing};
use crate::dsa_state::{bucket_upper_us, LATENCY_BUCKETS};
use crate::error::Error;
use crate::upstream::hedge;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How often reads are checked for hedging.
pub(crate) const TICK: Duration = Duration::from_millis(5);
/// How often latencies are folded and slow DSAs looked for.
pub(crate) const WINDOW: Duration = Duration::from_secs(1);
/// Hedges the budget may save up.
pub(crate) const BUDGET_CAP: f64 = 100.0;
/// Races lost in a row (none of its reads answered) that eject a DSA.
pub(crate) const STREAK: u32 = 5;
/// [`STUCK`] reads waiting this long for a first answer on a DSA that
/// answers nothing while its group answers: the DSA is stalled (one
/// expensive search alone is not).
pub(crate) const STALL: Duration = Duration::from_millis(100);
pub(crate) const STUCK: usize = 2;
/// A slow DSA: mean read latency above this many times the group's best...
pub(crate) const SLOW_FACTOR: f64 = 4.0;
/// ...and above it by this much.
pub(crate) const SLOW_MARGIN: Duration = Duration::from_millis(10);
/// Reads a window needs from a DSA to judge its mean.
const MIN_SAMPLES: u64 = 10;

/// What the task keeps about one DSA (by lower-case name).
#[derive(Default)]
struct Dsa {
    /// Decayed latency histogram (halved each window).
    hist: [f64; LATENCY_BUCKETS],
    /// This window's reads and their summed latency.
    count: u64,
    sum_us: u64,
    /// When it last answered a read.
    last_done: Option<Instant>,
    /// Races lost in a row with none of its reads answered.
    streak: u32,
    /// Slow windows in a row.
    slow: u32,
    /// Ejected until then.
    until: Option<Instant>,
    /// Ejections in a row, and when the last ended.
    times: u32,
    ended: Option<Instant>,
}

/// The tail-latency settings: knowledge `set dsa-router-...` over the
/// command line's.
pub(crate) fn settings(k: &crate::knowledge::RouterSettings, cli: TailConfig) -> TailConfig {
    TailConfig {
        hedge_budget: k.hedge_budget.unwrap_or(cli.hedge_budget),
        hedge_floor: k
            .hedge_floor_ms
            .map_or(cli.hedge_floor, |ms| Duration::from_millis(ms.into())),
        max_ejection: k.max_ejection.unwrap_or(cli.max_ejection),
        ejection_time: k
            .ejection_time_s
            .map_or(cli.ejection_time, |s| Duration::from_secs(s.max(1).into())),
    }
}

/// The delay after which a read is hedged: the 95th percentile of `hist`
/// (an upper bucket bound), never below `floor`.
pub(crate) fn hedge_delay(hist: &[f64], floor: Duration) -> Duration {
    let total: f64 = hist.iter().sum();
    if total < 1.0 {
        return floor;
    }
    let mut seen = 0.0;
    for (i, c) in hist.iter().enumerate() {
        seen += c;
        if seen >= total * 0.95 {
            return floor.max(Duration::from_micros(bucket_upper_us(i)));
        }
    }
    floor
}

/// Whether a DSA whose mean read latency is `mean` is slow next to the
/// fastest of its group, `best`.
pub(crate) fn is_slow(mean: Duration, best: Duration) -> bool {
    mean.as_secs_f64() > best.as_secs_f64() * SLOW_FACTOR && mean > best + SLOW_MARGIN
}

/// Whether DSA `d` may be ejected: in every group holding it, fewer than
/// `max_pct` percent of the members would be ejected with it, and another
/// member would stay eligible.
pub(crate) fn may_eject(
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

/// The load-share groups of a routing table, each once (DSA indexes).
fn groups(routing: &Routing) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    for p in routing.table.partitions() {
        for g in &p.groups {
            let mut m = g.members.clone();
            m.sort_unstable();
            if !out.contains(&m) {
                out.push(m);
            }
        }
    }
    out
}

/// Run until shutdown.
pub(crate) async fn run(router: Arc<Context>, mut shutdown: watch::Receiver<bool>) {
    let mut dsas: HashMap<String, Dsa> = HashMap::new();
    let mut budget = BUDGET_CAP;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut window = Instant::now();
    let mut cached: Option<(Arc<Routing>, Vec<Vec<usize>>)> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => break,
        }
        let routing = router.routing();
        let cfg = settings(&routing.snap.settings, router.cfg.tail);
        // The groups of this snapshot (made again after a reload).
        if cached
            .as_ref()
            .is_none_or(|(r, _)| !Arc::ptr_eq(r, &routing))
        {
            cached = Some((routing.clone(), groups(&routing)));
        }
        let Some((_, groups)) = cached.as_ref() else {
            continue;
        };
        let now = Instant::now();
        let fold = now.duration_since(window) >= WINDOW;
        if fold {
            window = now;
        }
        let mut reads = 0u64;
        for st in &routing.states.0 {
            let d = dsas.entry(st.name.to_ascii_lowercase()).or_default();
            let (b, sum) = st.reads.take();
            let n: u64 = b.iter().map(|&c| u64::from(c)).sum();
            let lost = u64::from(st.reads.take_lost());
            if n > 0 {
                d.last_done = Some(now);
                d.streak = 0;
            } else {
                d.streak = d.streak.saturating_add(lost as u32);
            }
            reads += n;
            d.count += n;
            d.sum_us += sum;
            for (h, c) in d.hist.iter_mut().zip(b) {
                *h += f64::from(c);
            }
        }
        if cfg.hedge_budget > 0 {
            budget = (budget + reads as f64 * f64::from(cfg.hedge_budget) / 100.0).min(BUDGET_CAP);
        }
        let names: Vec<String> = routing
            .states
            .0
            .iter()
            .map(|s| s.name.to_ascii_lowercase())
            .collect();
        let delays = delays(&dsas, &names, groups, cfg.hedge_floor);
        // Hedge the slow reads; count the reads stuck on each DSA.
        let mut stuck = vec![0usize; names.len()];
        for (i, pool) in routing.pools.iter().enumerate() {
            let mut hedged = Vec::new();
            for conn in pool.shared_conns() {
                let mut spare = if cfg.hedge_budget > 0 { budget } else { 0.0 };
                let after = if cfg.hedge_budget > 0 {
                    delays[i]
                } else {
                    Duration::MAX
                };
                let (h, refused) = hedge::scan(&conn, after, &mut spare, STALL, &mut stuck[i]);
                if cfg.hedge_budget > 0 {
                    budget = spare;
                }
                router
                    .metrics
                    .hedge_refusals
                    .fetch_add(refused, Ordering::Relaxed);
                hedged.extend(h);
            }
            let name = &routing.snap.dsas[i].name;
            for h in hedged {
                if !h.race.announce() {
                    continue;
                }
                let why = Error::new(
                    crate::error::Kind::Timeout { write: false },
                    format!("DSA {name} is slow to answer"),
                );
                h.plan.resend(h.hedge, name, why);
            }
        }
        eject_outliers(
            &router, &routing, &names, &mut dsas, groups, &stuck, &cfg, fold,
        );
        if fold {
            for st in &routing.states.0 {
                if let Some(d) = dsas
                    .get(&st.name.to_ascii_lowercase())
                    .filter(|d| d.count > 0)
                {
                    st.reads.set_recent_mean(d.sum_us / d.count);
                }
            }
            for d in dsas.values_mut() {
                for h in d.hist.iter_mut() {
                    *h *= 0.5;
                }
                d.count = 0;
                d.sum_us = 0;
            }
        }
    }
}

/// Each DSA's hedge delay: the 95th percentile of the reads of the
/// group(s) it belongs to (the quickest of them), at least `floor`;
/// `Duration::MAX` (never) for a DSA with no other in its groups.
fn delays(
    dsas: &HashMap<String, Dsa>,
    names: &[String],
    groups: &[Vec<usize>],
    floor: Duration,
) -> Vec<Duration> {
    let mut out = vec![Duration::MAX; names.len()];
    for g in groups {
        // A DSA alone in its group has nowhere to hedge to.
        if g.len() < 2 {
            continue;
        }
        let mut hist = [0.0; LATENCY_BUCKETS];
        for &m in g {
            if let Some(d) = names.get(m).and_then(|n| dsas.get(n)) {
                for (h, c) in hist.iter_mut().zip(d.hist) {
                    *h += c;
                }
            }
        }
        let delay = hedge_delay(&hist, floor);
        for &m in g {
            if let Some(o) = out.get_mut(m) {
                *o = (*o).min(delay);
            }
        }
    }
    out
}

/// Whether a DSA whose last read was answered at `last_done` (if ever)
/// has been silent long enough, at `now`, to count as stalled.
fn silent_for_a_stall(last_done: Option<Instant>, now: Instant) -> bool {
    last_done.is_none_or(|t| now.duration_since(t) >= STALL)
}

/// Readmit DSAs whose ejection ended; eject stalled ones, and at a window's
/// end slow ones.
#[allow(clippy::too_many_arguments)]
fn eject_outliers(
    router: &Context,
    routing: &Routing,
    names: &[String],
    dsas: &mut HashMap<String, Dsa>,
    groups: &[Vec<usize>],
    stuck: &[usize],
    cfg: &TailConfig,
    fold: bool,
) {
    let now = Instant::now();
    let states = &routing.states.0;
    for (i, st) in states.iter().enumerate() {
        let Some(d) = dsas.get_mut(&names[i]) else {
            continue;
        };
        if d.until.is_some_and(|u| u <= now) {
            d.until = None;
            d.ended = Some(now);
            st.readmit();
        }
    }
    if cfg.max_ejection == 0 {
        return;
    }
    let last_done: Vec<Option<Instant>> = names
        .iter()
        .map(|n| dsas.get(n).and_then(|d| d.last_done))
        .collect();
    // Each window's mean per DSA, and the best of each DSA's groups.
    let means: Vec<Option<Duration>> = names
        .iter()
        .map(|n| {
            dsas.get(n)
                .filter(|d| d.count >= MIN_SAMPLES)
                .map(|d| Duration::from_micros(d.sum_us / d.count))
        })
        .collect();
    for i in 0..states.len() {
        let st = &states[i];
        if !st.status().eligible() {
            continue;
        }
        let mates = || {
            groups
                .iter()
                .filter(|g| g.contains(&i))
                .flatten()
                .copied()
                .filter(|&m| m != i)
        };
        let Some(d) = dsas.get_mut(&names[i]) else {
            continue;
        };
        let mut reason = None;
        // Silent for a moment is not stalled: under CPU contention a
        // healthy DSA can lose a handful of races in one 5 ms tick (seen
        // in bench/compare.sh: 8 in a row ejected a slapd for 10 s, half
        // the group's capacity). Like the stuck rule below, it must also
        // have answered nothing for STALL.
        let silent = silent_for_a_stall(d.last_done, now);
        if d.streak >= STREAK && silent {
            reason = Some(format!(
                "{} reads in a row were answered first by another DSA, none by it",
                d.streak
            ));
        } else if stuck[i] >= STUCK
            && silent
            // A mate answers reads and has none stuck itself: the DSA is
            // stalled, not the whole group slow (every DSA of a slow group
            // has reads waiting).
            && mates().any(|m| {
                stuck.get(m) == Some(&0)
                    && last_done
                        .get(m)
                        .copied()
                        .flatten()
                        .is_some_and(|t| now.duration_since(t) < STALL)
            })
        {
            reason = Some(format!(
                "{} reads waited over {} ms for a first answer while it answered none and its group answered",
                stuck[i],
                STALL.as_millis()
            ));
        }
        if fold {
            let best = mates()
                .filter_map(|m| means.get(m).copied().flatten())
                .min();
            match (means[i], best) {
                (Some(mean), Some(best)) if is_slow(mean, best) => {
                    d.slow += 1;
                    if d.slow >= 2 && reason.is_none() {
                        reason = Some(format!(
                            "reads took {:.1} ms on average over {} s, against {:.1} ms on the fastest DSA of its group",
                            mean.as_secs_f64() * 1e3,
                            d.slow,
                            best.as_secs_f64() * 1e3
                        ));
                    }
                }
                _ => d.slow = 0,
            }
        }
        let Some(reason) = reason else {
            continue;
        };
        let ejected: Vec<bool> = states.iter().map(|s| s.ejection().is_some()).collect();
        let eligible: Vec<bool> = states.iter().map(|s| s.status().eligible()).collect();
        if !may_eject(i, groups, &ejected, &eligible, cfg.max_ejection) {
            continue;
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dsa_state::latency_bucket;

    #[test]
    fn knowledge_settings_override_the_flags_and_are_checked() {
        use crate::knowledge::{load_from, Memory};
        use std::path::PathBuf;
        let dsa = "set dsa \"D1\" = { prefix = <c AU> address = tcp \"127.0.0.1\" port 1 };\n";
        let load = |extra: &str| {
            let files = [(PathBuf::from("/k/r.dxg"), format!("{dsa}{extra}"))];
            load_from(
                &PathBuf::from("/k/r.dxg"),
                &Memory(files.into_iter().collect()),
            )
        };
        let cli = TailConfig::default();
        let snap = load("").expect("loads");
        assert_eq!(settings(&snap.settings, cli), cli);
        let snap = load(
            "set dsa-router-hedge-budget = 0;\nset dsa-router-hedge-floor-ms = 25;\nset dsa-router-max-ejection = 34;\nset dsa-router-ejection-time = 60;\n",
        )
        .expect("loads");
        let t = settings(&snap.settings, cli);
        assert_eq!(
            (
                t.hedge_budget,
                t.hedge_floor,
                t.max_ejection,
                t.ejection_time
            ),
            (0, Duration::from_millis(25), 34, Duration::from_secs(60))
        );
        for bad in [
            "set dsa-router-hedge-budget = 101;\n",
            "set dsa-router-max-ejection = 200;\n",
        ] {
            let e = load(bad).expect_err(bad);
            assert!(e.to_string().contains("percentage"), "{bad}: {e}");
        }
        let e = load("set dsa-router-hedge-budgt = 5;\n").map(|s| s.warnings.len());
        assert!(matches!(e, Ok(1)), "a misspelt setting warns: {e:?}");
    }

    #[test]
    fn the_hedge_delay_is_the_95th_percentile_never_below_the_floor() {
        let floor = Duration::from_millis(10);
        let mut h = [0.0; LATENCY_BUCKETS];
        assert_eq!(hedge_delay(&h, floor), floor, "no reads: the floor");
        h[latency_bucket(300)] = 96.0;
        h[latency_bucket(50_000)] = 4.0;
        assert_eq!(hedge_delay(&h, floor), floor, "fast p95: the floor");
        h[latency_bucket(300)] = 90.0;
        h[latency_bucket(50_000)] = 10.0;
        let d = hedge_delay(&h, floor);
        assert!(
            d >= Duration::from_millis(50) && d < Duration::from_millis(80),
            "{d:?}"
        );
    }

    #[test]
    fn latency_buckets_are_half_octaves() {
        for us in [
            1,
            49,
            50,
            70,
            71,
            100,
            1_000,
            20_000,
            1_000_000,
            u64::MAX / 2,
        ] {
            let b = latency_bucket(us);
            assert!(b < LATENCY_BUCKETS);
            if b < LATENCY_BUCKETS - 1 {
                assert!(us < bucket_upper_us(b), "{us} in bucket {b}");
            }
            if b > 0 {
                assert!(us >= bucket_upper_us(b - 1), "{us} in bucket {b}");
            }
        }
    }

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
