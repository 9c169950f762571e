//! Worker threads, each running a single-threaded runtime of its own, and
//! how many of them the sessions use.
//!
//! The router scales across cores the way HAProxy and nginx do, not with a
//! work-stealing scheduler: the accept loop (on worker 0, the main thread)
//! hands each client connection to a worker, and everything the session
//! does afterwards stays on that thread: its reads and writes, its DSA
//! connections (each worker has its own shared connections to each DSA, see
//! `upstream::pool`), and the buffers it allocates and frees. No task hops
//! threads, so there are no cross-thread wake-ups and no memory freed on
//! another thread than the one that allocated it.
//!
//! **Workers in use.** A worker that serves few operations sleeps and wakes
//! for nearly each one, and each sleep and wake-up costs more than the
//! operation's own work: two workers serving a load that one could carry
//! cost 10-20% more CPU per operation than one (bench/compare.sh). So the
//! sessions are packed onto as few workers as their CPU use needs (CPU time
//! of each worker thread, read every [`PERIOD`]):
//! * a worker in use that was busier than `--spread-above` percent of a CPU
//!   for [`GROW_AFTER`] periods in a row takes one more worker into use;
//! * the last worker in use is left when the others could carry its load
//!   at half that share, for [`SHRINK_AFTER`] periods in a row;
//! * new clients go to the worker in use with the fewest sessions;
//! * sessions **move**: a worker out of use asks all its sessions to leave,
//!   and a worker in use that is busier than the least busy one by more
//!   than [`MARGIN`] asks enough of its talking sessions to leave to even
//!   them out. A session leaves at its next request, when nothing of its
//!   own is in flight (no operation outstanding, no response queued, no
//!   connection of its own, no SASL exchange): its socket is taken off one
//!   worker's reactor and put on the other's, its state (TLS included)
//!   goes with it, and its next operations use the new worker's DSA
//!   connections.
//!
//! A connection pool opened while the router was idle thus spreads when its
//! load comes, and a busy hour's clients come back together when it ends.
//! `--spread-above 0` turns this off: every worker takes clients from the
//! start (the least loaded first) and sessions never move.
//!
//! The router's own tasks (health probes, the tail-latency task, the
//! utilization sampler, this balancer, the admin API, signals) run on
//! worker 0, which is always in use.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;
use tokio::sync::{oneshot, watch};

thread_local! {
    static ID: Cell<usize> = const { Cell::new(0) };
}

/// This thread's worker number (0: the main thread, or any thread that is
/// not a worker).
pub fn id() -> usize {
    ID.with(Cell::get)
}

/// The worker count `--threads N` asks for: N, or for 0 the CPUs this
/// process may use (cgroup CPU quota and affinity taken into account).
pub fn resolve(n: usize) -> usize {
    match n {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}

/// How often the workers' CPU use is read and the plan made again.
pub const PERIOD: Duration = Duration::from_millis(250);
/// Periods in a row over `--spread-above` before one more worker is used.
pub const GROW_AFTER: u32 = 2;
/// Periods in a row of little load before the last worker is left.
pub const SHRINK_AFTER: u32 = 8;
/// Workers in use whose busy shares differ by more than this (share of a
/// CPU) are evened out.
pub const MARGIN: f64 = 0.15;

/// One worker, as the accept loop, the sessions and the balancer see it.
struct Slot {
    handle: Handle,
    /// Sessions on it.
    sessions: AtomicUsize,
    /// Sessions asked to leave it, and where to.
    leave: AtomicUsize,
    dest: AtomicUsize,
    /// Sessions that read a request on it this period.
    talkers: AtomicUsize,
    /// Its thread's CPU time in /proc (`task/TID`), once known.
    task: OnceLock<String>,
}

/// The workers, shared by the accept loop, the sessions and the balancer.
pub struct Shared {
    slots: Box<[Slot]>,
    /// Workers 0..in_use take new clients.
    in_use: AtomicUsize,
    /// Changes every period (sessions count themselves as talkers once).
    epoch: AtomicU32,
    /// Sessions moved between workers.
    moves: AtomicU64,
    /// `--spread-above`, as a share of a CPU; 0: every worker in use.
    above: f64,
}

impl Shared {
    /// Workers taking new clients.
    pub fn in_use(&self) -> usize {
        self.in_use.load(Relaxed)
    }

    /// Sessions on each worker.
    pub fn sessions(&self) -> Vec<usize> {
        self.slots
            .iter()
            .map(|s| s.sessions.load(Relaxed))
            .collect()
    }

    /// Sessions moved between workers so far.
    pub fn moves(&self) -> u64 {
        self.moves.load(Relaxed)
    }

    /// Ask `n` sessions of worker `from` to move to worker `to` at their
    /// next request (what the balancer does; tests call it directly).
    pub fn ask(&self, from: usize, n: usize, to: usize) {
        if let (Some(f), true) = (self.slots.get(from), to < self.slots.len()) {
            f.dest.store(to, Relaxed);
            f.leave.store(n, Relaxed);
        }
    }

    /// Prometheus series: workers in use, sessions per worker, moves.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(
            out,
            "# HELP dsa_router_workers_in_use Worker threads taking new clients (--spread-above)."
        );
        let _ = writeln!(out, "# TYPE dsa_router_workers_in_use gauge");
        let _ = writeln!(out, "dsa_router_workers_in_use {}", self.in_use());
        let _ = writeln!(
            out,
            "# HELP dsa_router_worker_sessions Client sessions on each worker thread."
        );
        let _ = writeln!(out, "# TYPE dsa_router_worker_sessions gauge");
        for (i, n) in self.sessions().iter().enumerate() {
            let _ = writeln!(out, "dsa_router_worker_sessions{{worker=\"{i}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP dsa_router_session_moves_total Client sessions moved to another worker thread."
        );
        let _ = writeln!(out, "# TYPE dsa_router_session_moves_total counter");
        let _ = writeln!(out, "dsa_router_session_moves_total {}", self.moves());
    }
}

/// Workers 1..N (worker 0 is the caller's runtime).
pub struct Workers {
    shared: Arc<Shared>,
    stops: Vec<oneshot::Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// A session's place on a worker: counted there while it lives, and the
/// way it learns that it is asked to move.
pub struct Seat {
    shared: Arc<Shared>,
    at: usize,
    epoch: u32,
}

impl Seat {
    /// The worker it is on.
    pub fn worker(&self) -> usize {
        self.at
    }

    /// That worker's runtime.
    pub fn handle(&self) -> Handle {
        self.shared.slots[self.at].handle.clone()
    }

    /// Called as a request comes in: counts the session as talking this
    /// period, and says whether its worker asks sessions to leave.
    pub fn asked(&mut self) -> bool {
        let slot = &self.shared.slots[self.at];
        let e = self.shared.epoch.load(Relaxed);
        if e != self.epoch {
            self.epoch = e;
            slot.talkers.fetch_add(1, Relaxed);
        }
        slot.leave.load(Relaxed) > 0
    }

    /// Take one of the worker's leave requests: the worker to move to,
    /// counted there from now on; `None` when another session took the
    /// last one.
    pub fn leave(&mut self) -> Option<usize> {
        let slot = &self.shared.slots[self.at];
        let dest = slot.dest.load(Relaxed);
        if dest == self.at || dest >= self.shared.slots.len() {
            return None;
        }
        slot.leave
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
            .ok()?;
        self.shared.slots[dest].sessions.fetch_add(1, Relaxed);
        slot.sessions.fetch_sub(1, Relaxed);
        self.shared.moves.fetch_add(1, Relaxed);
        self.at = dest;
        Some(dest)
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.shared.slots[self.at].sessions.fetch_sub(1, Relaxed);
    }
}

/// `/proc/self/task/TID` of the calling thread.
fn this_task() -> Option<String> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    let tid = link.file_name()?.to_str()?;
    Some(format!("/proc/self/task/{tid}"))
}

/// CPU time a thread has used, from its `schedstat` (nanoseconds), else its
/// `stat` (utime + stime in clock ticks, 100 per second on Linux).
fn cpu_time(task: &str) -> Option<Duration> {
    if let Ok(s) = std::fs::read_to_string(format!("{task}/schedstat")) {
        if let Some(ns) = s.split_whitespace().next().and_then(|v| v.parse().ok()) {
            return Some(Duration::from_nanos(ns));
        }
    }
    let s = std::fs::read_to_string(format!("{task}/stat")).ok()?;
    let rest = s.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

impl Workers {
    /// Start `n - 1` worker threads beside the caller's runtime (`own`,
    /// worker 0, running on the calling thread). `spread_above`: the
    /// share of a CPU (0.0-1.0) over which one more worker is taken into
    /// use; 0: all of them from the start.
    pub fn start(n: usize, own: Handle, spread_above: f64) -> std::io::Result<Workers> {
        let mut slots = vec![Slot::new(own)];
        let mut stops = Vec::new();
        let mut threads = Vec::new();
        let mut tasks = vec![this_task()];
        for i in 1..n.max(1) {
            let (stop_tx, stop_rx) = oneshot::channel::<()>();
            let (handle_tx, handle_rx) = std::sync::mpsc::channel();
            let t = std::thread::Builder::new()
                .name(format!("dsa-router-w{i}"))
                .spawn(move || {
                    ID.with(|c| c.set(i));
                    let rt = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => rt,
                        Err(e) => {
                            let _ = handle_tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = handle_tx.send(Ok((rt.handle().clone(), this_task())));
                    rt.block_on(async {
                        let _ = stop_rx.await;
                    });
                    rt.shutdown_timeout(Duration::from_secs(1));
                })?;
            let (handle, task) = handle_rx.recv().map_err(|_| {
                std::io::Error::other(format!("worker {i} ended before it started"))
            })??;
            slots.push(Slot::new(handle));
            tasks.push(task);
            stops.push(stop_tx);
            threads.push(t);
        }
        for (s, t) in slots.iter().zip(tasks) {
            if let Some(t) = t {
                let _ = s.task.set(t);
            }
        }
        let above = spread_above.clamp(0.0, 1.0);
        let n = slots.len();
        Ok(Workers {
            shared: Arc::new(Shared {
                slots: slots.into_boxed_slice(),
                in_use: AtomicUsize::new(if above > 0.0 { 1 } else { n }),
                epoch: AtomicU32::new(0),
                moves: AtomicU64::new(0),
                above,
            }),
            stops,
            threads,
        })
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The worker in use with the fewest sessions (the lowest on a tie).
    pub fn place(&self) -> Seat {
        let sh = &self.shared;
        let in_use = sh.in_use().clamp(1, sh.slots.len());
        let at = (0..in_use)
            .min_by_key(|&i| sh.slots[i].sessions.load(Relaxed))
            .unwrap_or(0);
        sh.slots[at].sessions.fetch_add(1, Relaxed);
        Seat {
            shared: sh.clone(),
            at,
            epoch: sh.epoch.load(Relaxed),
        }
    }

    /// Stop the worker threads (their runtimes get a second to end their
    /// tasks).
    pub fn stop(self) {
        for s in self.stops {
            let _ = s.send(());
        }
        for t in self.threads {
            let _ = t.join();
        }
    }
}

impl Slot {
    fn new(handle: Handle) -> Slot {
        Slot {
            handle,
            sessions: AtomicUsize::new(0),
            leave: AtomicUsize::new(0),
            dest: AtomicUsize::new(0),
            talkers: AtomicUsize::new(0),
            task: OnceLock::new(),
        }
    }
}

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
    if trend.hot >= GROW_AFTER && in_use < n {
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
        if busiest != to && hi - lo > MARGIN && hi > 0.0 {
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

/// Read the workers' CPU use every [`PERIOD`] and apply [`plan`], until
/// `shutdown`. Does nothing with one worker or `--spread-above 0`; when a
/// worker's CPU time cannot be read, every worker is put in use.
pub async fn balance(shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let n = shared.slots.len();
    if n <= 1 || shared.above <= 0.0 {
        return;
    }
    let read = |sh: &Shared| -> Option<Vec<Duration>> {
        sh.slots
            .iter()
            .map(|s| s.task.get().and_then(|t| cpu_time(t)))
            .collect()
    };
    let Some(mut last) = read(&shared) else {
        tracing::warn!("cannot read the worker threads' CPU time: every worker takes clients (as --spread-above 0)");
        shared.in_use.store(n, Relaxed);
        return;
    };
    let mut at = Instant::now();
    let mut trend = Trend::default();
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => break,
        }
        let Some(now_cpu) = read(&shared) else {
            tracing::warn!(
                "cannot read the worker threads' CPU time any more: every worker takes clients"
            );
            shared.in_use.store(n, Relaxed);
            return;
        };
        let now = Instant::now();
        let wall = now.duration_since(at).as_secs_f64().max(1e-3);
        at = now;
        let readings: Vec<Reading> = shared
            .slots
            .iter()
            .zip(now_cpu.iter().zip(&last))
            .map(|(s, (c, l))| Reading {
                busy: c.saturating_sub(*l).as_secs_f64() / wall,
                sessions: s.sessions.load(Relaxed),
                talkers: s.talkers.swap(0, Relaxed),
            })
            .collect();
        last = now_cpu;
        shared.epoch.fetch_add(1, Relaxed);
        let before = shared.in_use();
        let p = plan(&readings, before, shared.above, &mut trend);
        if p.in_use != before {
            tracing::info!(
                workers = p.in_use,
                busy = ?readings.iter().map(|r| (r.busy * 100.0).round() as u32).collect::<Vec<_>>(),
                "workers in use: {before} -> {}",
                p.in_use
            );
        }
        shared.in_use.store(p.in_use, Relaxed);
        for (i, &(k, to)) in p.leave.iter().enumerate() {
            shared.ask(i, k, to);
        }
    }
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

    #[test]
    fn cpu_time_is_read_for_this_thread() {
        let task = this_task().expect("/proc/thread-self");
        let a = cpu_time(&task).expect("schedstat or stat");
        // 50 ms on the CPU (several scheduler ticks).
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
        }
        let b = cpu_time(&task).expect("schedstat or stat");
        assert!(b > a, "CPU time went from {a:?} to {b:?}");
    }
}
