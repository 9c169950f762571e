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
//!   a worker just taken into use gets half the busiest one's talking
//!   sessions, and a worker in use that is busier than the least busy one
//!   by more than a quarter of `--spread-above` (at most [`MARGIN`]) asks
//!   enough of its talking sessions to leave to even them out. A session leaves at its next request, when nothing of its
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
//!
//! The files: `pool` starts and stops the threads; `seat` is a session's
//! place on a worker and its move; `plan` decides, from one period's
//! readings, how many workers are in use and who moves; `balance` reads
//! the threads' CPU time and applies the plan.

mod balance;
mod plan;
mod pool;
mod seat;

pub use balance::balance;
pub use plan::{plan, Plan, Reading, Trend};
pub use pool::Workers;
pub use seat::Seat;

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::Duration;
use tokio::runtime::Handle;

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
/// CPU), or by a quarter of `--spread-above` where that is less, are
/// evened out.
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
