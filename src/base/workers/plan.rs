//! The balancer's decision for one period: how many workers are in use
//! and which sessions move where (pure, tested by table).

use super::{GROW_AFTER, MARGIN, SHRINK_AFTER};

/// One worker over the last period, as the plan sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Reading {
    /// Share of a CPU its thread used.
    pub busy: f64,
    pub sessions: usize,
    /// Sessions that read a request on it.
    pub talkers: usize,
}

/// What the balancer remembers between periods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Trend {
    /// Periods in a row with a worker in use over the threshold.
    pub hot: u32,
    /// Periods in a row with little enough load to leave a worker.
    pub calm: u32,
    /// Sessions were asked to move last period: their load is not yet
    /// where it is going, so workers in use are not evened out this one.
    pub settling: bool,
}

/// The balancer's decision for one period.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub in_use: usize,
    /// Per worker: sessions asked to leave, and where to.
    pub leave: Vec<(usize, usize)>,
}

/// Decide how many workers are in use and which sessions move, from the
/// last period's readings (see the module documentation).
pub fn plan(r: &[Reading], in_use: usize, above: f64, trend: &mut Trend) -> Plan {
    let n = r.len();
    let mut leave = vec![(0, 0); n];
    if n <= 1 || above <= 0.0 {
        *trend = Trend::default();
        return Plan { in_use: n, leave };
    }
    let mut in_use = in_use.clamp(1, n);
    let total: f64 = r.iter().map(|w| w.busy).sum();
    let hottest = r[..in_use].iter().map(|w| w.busy).fold(0.0, f64::max);
    trend.hot = if hottest > above { trend.hot + 1 } else { 0 };
    trend.calm = if in_use > 1 && total <= (in_use - 1) as f64 * above / 2.0 {
        trend.calm + 1
    } else {
        0
    };
    // A worker just taken into use gets sessions whatever the margin: it
    // was taken for the load, and a machine whose other jobs hold the CPUs
    // can keep the busiest worker's share under the margin for good.
    let grew = trend.hot >= GROW_AFTER && in_use < n;
    if grew {
        in_use += 1;
        *trend = Trend::default();
    } else if trend.calm >= SHRINK_AFTER {
        in_use -= 1;
        *trend = Trend::default();
    }
    let least = |r: &[Reading]| {
        (0..in_use)
            .min_by(|&a, &b| r[a].busy.total_cmp(&r[b].busy))
            .unwrap_or(0)
    };
    let to = least(r);
    let mut asked = false;
    // Workers out of use: every session leaves.
    for i in in_use..n {
        if r[i].sessions > 0 {
            leave[i] = (r[i].sessions, to);
            asked = true;
        }
    }
    // Workers in use: the busiest sheds to the least busy (once sessions
    // leaving workers out of use have arrived).
    if in_use >= 2 && !trend.settling && !asked {
        let busiest = (0..in_use)
            .max_by(|&a, &b| r[a].busy.total_cmp(&r[b].busy))
            .unwrap_or(0);
        let (hi, lo) = (r[busiest].busy, r[to].busy);
        // The margin scales with the threshold (a quarter of it, at most
        // MARGIN: the default 60% gives 0.15 of a CPU).
        let margin = if grew { 0.0 } else { MARGIN.min(above / 4.0) };
        if busiest != to && hi - lo > margin && hi > 0.0 {
            let share = (hi - lo) / 2.0 / hi;
            let k = (r[busiest].talkers as f64 * share).floor() as usize;
            if k > 0 {
                leave[busiest] = (k, to);
                asked = true;
            }
        }
    }
    trend.settling = asked;
    Plan { in_use, leave }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(busy: f64, sessions: usize, talkers: usize) -> Reading {
        Reading {
            busy,
            sessions,
            talkers,
        }
    }

    #[test]
    fn the_plan_packs_spreads_and_evens_out_workers() {
        let calm = Trend::default();
        let hot_once = Trend {
            hot: GROW_AFTER - 1,
            ..Trend::default()
        };
        let nearly_calm = Trend {
            calm: SHRINK_AFTER - 1,
            ..Trend::default()
        };
        let settling = Trend {
            settling: true,
            ..Trend::default()
        };
        // (case, readings, in use before, trend before, above,
        //  in use after, leave after)
        #[allow(clippy::type_complexity)]
        let cases: Vec<(
            &str,
            Vec<Reading>,
            usize,
            Trend,
            f64,
            usize,
            Vec<(usize, usize)>,
        )> = vec![
            (
                "one worker",
                vec![r(0.9, 8, 8)],
                1,
                calm,
                0.6,
                1,
                vec![(0, 0)],
            ),
            (
                "--spread-above 0: all in use, nothing moves",
                vec![r(0.9, 8, 8), r(0.0, 0, 0)],
                1,
                calm,
                0.0,
                2,
                vec![(0, 0), (0, 0)],
            ),
            (
                "idle: one worker",
                vec![r(0.01, 8, 0), r(0.0, 0, 0)],
                1,
                calm,
                0.6,
                1,
                vec![(0, 0), (0, 0)],
            ),
            (
                "busy under the threshold: one worker",
                vec![r(0.55, 8, 8), r(0.0, 0, 0)],
                1,
                hot_once,
                0.6,
                1,
                vec![(0, 0), (0, 0)],
            ),
            (
                "hot once: not yet",
                vec![r(0.7, 8, 8), r(0.0, 0, 0)],
                1,
                calm,
                0.6,
                1,
                vec![(0, 0), (0, 0)],
            ),
            (
                "hot twice: a second worker, half the talkers move to it",
                vec![r(0.7, 8, 8), r(0.0, 0, 0)],
                1,
                hot_once,
                0.6,
                2,
                vec![(4, 1), (0, 0)],
            ),
            (
                "hot twice at a low threshold, the CPUs held by other jobs: the new worker still gets half the talkers",
                vec![r(0.05, 4, 4), r(0.0, 0, 0)],
                1,
                hot_once,
                0.01,
                2,
                vec![(2, 1), (0, 0)],
            ),
            (
                "a low threshold scales the margin: uneven by 0.05 of a CPU evens out",
                vec![r(0.02, 4, 4), r(0.07, 4, 4)],
                2,
                calm,
                0.1,
                2,
                vec![(0, 0), (1, 0)],
            ),
            (
                "all in use already: nothing more to take",
                vec![r(0.9, 4, 4), r(0.9, 4, 4)],
                2,
                hot_once,
                0.6,
                2,
                vec![(0, 0), (0, 0)],
            ),
            (
                "uneven: the busiest sheds to the least busy",
                vec![r(0.2, 5, 5), r(0.6, 5, 5)],
                2,
                calm,
                0.6,
                2,
                vec![(0, 0), (1, 0)],
            ),
            (
                "uneven within the margin: nothing moves",
                vec![r(0.3, 5, 5), r(0.4, 5, 5)],
                2,
                calm,
                0.6,
                2,
                vec![(0, 0), (0, 0)],
            ),
            (
                "uneven while settling: nothing moves",
                vec![r(0.1, 5, 5), r(0.6, 5, 5)],
                2,
                settling,
                0.6,
                2,
                vec![(0, 0), (0, 0)],
            ),
            (
                "a lone busy session is not moved about",
                vec![r(0.0, 1, 0), r(0.5, 1, 1)],
                2,
                calm,
                0.6,
                2,
                vec![(0, 0), (0, 0)],
            ),
            (
                "little load, not for long enough: both stay",
                vec![r(0.1, 4, 4), r(0.1, 4, 4)],
                2,
                calm,
                0.6,
                2,
                vec![(0, 0), (0, 0)],
            ),
            (
                "little load for long enough: the last is left, its sessions leave",
                vec![r(0.1, 4, 4), r(0.1, 4, 4)],
                2,
                nearly_calm,
                0.6,
                1,
                vec![(0, 0), (4, 0)],
            ),
            (
                "load one fewer could not carry at half the threshold: both stay",
                vec![r(0.2, 4, 4), r(0.2, 4, 4)],
                2,
                nearly_calm,
                0.6,
                2,
                vec![(0, 0), (0, 0)],
            ),
            (
                "sessions left on a worker out of use go to the least busy in use",
                vec![r(0.3, 4, 4), r(0.1, 4, 4), r(0.05, 2, 1)],
                2,
                calm,
                0.6,
                2,
                vec![(0, 0), (0, 0), (2, 1)],
            ),
        ];
        for (case, readings, before, trend, above, want_in_use, want_leave) in cases {
            let mut t = trend;
            let p = plan(&readings, before, above, &mut t);
            assert_eq!(p.in_use, want_in_use, "{case}: workers in use");
            assert_eq!(p.leave, want_leave, "{case}: sessions asked to leave");
        }
    }

    #[test]
    fn a_load_that_comes_and_goes_grows_then_shrinks_without_flapping() {
        let mut t = Trend::default();
        let mut in_use = 1;
        let mut history = Vec::new();
        // 1 s busy on worker 0 alone, then evened out over two, then 3 s
        // of little load: one worker, two, back to one, never in between.
        let phases = [
            (4, vec![r(0.8, 8, 8), r(0.0, 0, 0)]),
            (8, vec![r(0.4, 4, 4), r(0.4, 4, 4)]),
            (12, vec![r(0.05, 4, 1), r(0.05, 4, 1)]),
        ];
        for (periods, readings) in phases {
            for _ in 0..periods {
                in_use = plan(&readings, in_use, 0.6, &mut t).in_use;
                history.push(in_use);
            }
        }
        let changes: Vec<usize> = history
            .windows(2)
            .filter(|w| w[0] != w[1])
            .map(|w| w[1])
            .collect();
        assert_eq!(changes, vec![2, 1], "{history:?}");
        assert_eq!(history[GROW_AFTER as usize - 1], 2, "{history:?}");
    }
}
