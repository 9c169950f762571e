//! Tail latency (architecture.md, "Tail latency"): hedged reads and outlier ejection, in one task.
//!
//! Every [`TICK`] the task takes each DSA's read latencies gathered since
//! the last tick ([`ReadStats`](crate::backend::dsa_state::ReadStats)), earns hedge
//! budget for them (`hedge_budget` percent of reads, kept up to
//! [`BUDGET_CAP`] hedges), and scans the shared DSA connections for reads
//! waiting longer than their DSA's hedge delay: each is hedged while the
//! budget lasts ([`crate::backend::upstream::hedge::scan`]), the rest are counted as refused.
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

mod binds;
mod budget;
mod eject;

pub(crate) use binds::{bind_timed_out, skipped_for_binds};

use crate::backend::dsa_state::LATENCY_BUCKETS;
use crate::backend::routing::{Backend, Routing};
use crate::backend::settings::TailConfig;
use crate::directory::knowledge::DsaName;
use std::collections::HashMap;
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

/// The tail-latency settings in force: knowledge `set dsa-router-...`
/// over the defaults, the settings file and command line over both.
pub(crate) fn settings(
    k: &crate::directory::knowledge::RouterSettings,
    live: &crate::backend::settings::Live,
) -> TailConfig {
    live.tail(k)
}

/// The load-share groups of a routing table, each once (DSA indexes).
fn groups(routing: &Routing) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    for p in routing.table.partitions() {
        for g in &p.groups {
            let mut m: Vec<usize> = g.members.iter().map(|d| d.index()).collect();
            m.sort_unstable();
            if !out.contains(&m) {
                out.push(m);
            }
        }
    }
    out
}

/// The load-share groups of a snapshot (DSA indexes), each once.
type Groups = Arc<Vec<Vec<usize>>>;

/// What the task carries from one tick to the next.
struct Task {
    dsas: HashMap<DsaName, Dsa>,
    budget: f64,
    /// When the current window began.
    window: Instant,
    /// The groups of the last snapshot seen (made again after a reload).
    cached: Option<(Arc<Routing>, Groups)>,
}

/// Run until shutdown.
pub(crate) async fn run(router: Arc<Backend>, mut shutdown: watch::Receiver<bool>) {
    let mut task = Task {
        dsas: HashMap::new(),
        budget: BUDGET_CAP,
        window: Instant::now(),
        cached: None,
    };
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => break,
        }
        task.tick(&router);
    }
}

impl Task {
    /// One tick: gather the latencies, earn budget, hedge the slow reads,
    /// eject outliers, and at a window's end fold the latencies.
    fn tick(&mut self, router: &Backend) {
        let routing = router.routing();
        let cfg = settings(&routing.snap.settings, &router.settings.live.load());
        let groups = self.groups(&routing);
        let now = Instant::now();
        let fold = now.duration_since(self.window) >= WINDOW;
        if fold {
            self.window = now;
        }
        let reads = gather(&mut self.dsas, &routing, now);
        if cfg.hedge_budget > 0 {
            let earned = reads as f64 * f64::from(cfg.hedge_budget) / 100.0;
            self.budget = (self.budget + earned).min(BUDGET_CAP);
        }
        let names: Vec<DsaName> = routing.states.0.iter().map(|s| s.name.clone()).collect();
        let delays = budget::delays(&self.dsas, &names, &groups, cfg.hedge_floor);
        let stuck = budget::hedge_slow_reads(router, &routing, &delays, &cfg, &mut self.budget);
        let view = eject::View {
            routing: &routing,
            names: &names,
            groups: &groups,
            stuck: &stuck,
        };
        eject::eject_outliers(router, &view, &mut self.dsas, &cfg, fold);
        if fold {
            fold_window(&mut self.dsas, &routing);
        }
    }

    /// The groups of this snapshot (made again after a reload).
    fn groups(&mut self, routing: &Arc<Routing>) -> Groups {
        match &self.cached {
            Some((r, g)) if Arc::ptr_eq(r, routing) => g.clone(),
            _ => {
                let g = Arc::new(groups(routing));
                self.cached = Some((routing.clone(), g.clone()));
                g
            }
        }
    }
}

/// Take each DSA's read latencies and lost races since the last tick;
/// the reads answered.
fn gather(dsas: &mut HashMap<DsaName, Dsa>, routing: &Routing, now: Instant) -> u64 {
    let mut reads = 0u64;
    for st in &routing.states.0 {
        let d = dsas.entry(st.name.clone()).or_default();
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
    reads
}

/// A window's end: publish each DSA's mean, halve the histograms, and
/// start the counts again.
fn fold_window(dsas: &mut HashMap<DsaName, Dsa>, routing: &Routing) {
    for st in &routing.states.0 {
        if let Some(d) = dsas.get(&st.name).filter(|d| d.count > 0) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knowledge_settings_apply_unless_the_file_or_a_flag_gives_them() {
        use crate::directory::knowledge::{load_from, Memory};
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
        let mut live = crate::backend::settings::Live {
            tail: cli,
            dsa_concurrency_limit: 500,
            cpu_threshold: 0,
            memory_threshold: 0,
            pinned: Default::default(),
        };
        let snap = load("").expect("loads");
        assert_eq!(settings(&snap.settings, &live), cli);
        let snap = load(
            "set dsa-router-hedge-budget = 0;\nset dsa-router-hedge-floor-ms = 25;\nset dsa-router-max-ejection = 34;\nset dsa-router-ejection-time = 60;\n",
        )
        .expect("loads");
        let t = settings(&snap.settings, &live);
        assert_eq!(
            (
                t.hedge_budget,
                t.hedge_floor,
                t.max_ejection,
                t.ejection_time
            ),
            (0, Duration::from_millis(25), 34, Duration::from_secs(60))
        );
        // Given in the settings file or on the command line, a setting
        // overrides knowledge's; the others still come from knowledge.
        live.pinned.0 = vec![
            ("hedge-budget".into(), "the command line".into()),
            ("ejection-time".into(), "router.toml".into()),
        ];
        let t = settings(&snap.settings, &live);
        assert_eq!(
            (
                t.hedge_budget,
                t.hedge_floor,
                t.max_ejection,
                t.ejection_time
            ),
            (
                cli.hedge_budget,
                Duration::from_millis(25),
                34,
                cli.ejection_time
            )
        );
        let notices = crate::backend::settings::knowledge_notices(&snap.settings, &live.pinned);
        assert_eq!(notices.len(), 4, "{notices:?}");
        assert!(notices[0].contains("set dsa-router-hedge-budget = 0 is overridden by hedge-budget from the command line"), "{notices:?}");
        assert!(
            notices[1].contains("set dsa-router-hedge-floor-ms = 25 is in force"),
            "{notices:?}"
        );
        for bad in [
            "set dsa-router-hedge-budget = 101;\n",
            "set dsa-router-max-ejection = 200;\n",
        ] {
            let e = load(bad).expect_err(bad);
            assert!(e.to_string().contains("percentage"), "{bad}: {e}");
        }
        // Units, as the flags and the settings file take them; a value
        // out of range is refused with its place and the range.
        let snap = load("set dsa-router-hedge-floor = 30ms;\nset dsa-router-ejection-time = 2m;\n")
            .expect("loads");
        let t = settings(&snap.settings, &live);
        assert_eq!(t.hedge_floor, Duration::from_millis(30));
        assert_eq!(t.ejection_time, cli.ejection_time, "pinned by router.toml");
        live.pinned.0.clear();
        assert_eq!(
            settings(&snap.settings, &live).ejection_time,
            Duration::from_secs(120)
        );
        for (bad, want) in [
            (
                "set dsa-router-ejection-time = 0;\n",
                "set dsa-router-ejection-time = 0: 0 is out of range: from 100ms to 24h",
            ),
            (
                "set dsa-router-hedge-floor = 2m;\n",
                "set dsa-router-hedge-floor = 2m: 2m is out of range: from 1ms to 1m",
            ),
        ] {
            let e = load(bad).expect_err(bad).to_string();
            assert!(e.contains(want), "{bad}: {e}");
            assert!(e.contains("--> /k/r.dxg:2:"), "{bad}: {e}");
        }
        let e = load("set dsa-router-hedge-budgt = 5;\n").map(|s| s.warnings.len());
        assert!(matches!(e, Ok(1)), "a misspelt setting warns: {e:?}");
    }
}
