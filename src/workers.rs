//! Worker threads, each running a single-threaded runtime of its own.
//!
//! The router scales across cores the way HAProxy and nginx do, not with a
//! work-stealing scheduler: the accept loop (on worker 0, the main thread)
//! hands each client connection to the worker with the fewest sessions,
//! and everything the session does afterwards stays on that thread: its
//! reads and writes, its DSA connections (each worker has its own shared
//! connections to each DSA, see `upstream::pool`), and the buffers it
//! allocates and frees. No task hops threads, so there are no cross-thread
//! wake-ups and no memory freed on another thread than the one that
//! allocated it; one worker costs what one thread did.
//!
//! The router's own tasks (health probes, the tail-latency task, the
//! utilization sampler, the admin API, signals) run on worker 0.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

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

struct Worker {
    handle: Handle,
    sessions: Arc<AtomicUsize>,
}

/// Workers 1..N (worker 0 is the caller's runtime).
pub struct Workers {
    workers: Vec<Worker>,
    own: Arc<AtomicUsize>,
    stops: Vec<oneshot::Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// Where a session runs, and its place in that worker's count.
pub struct Placement {
    /// `None`: on the accepting runtime (worker 0).
    pub handle: Option<Handle>,
    pub ticket: Ticket,
}

/// A session counted on its worker; dropped when it ends.
pub struct Ticket(Arc<AtomicUsize>);

impl Drop for Ticket {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Workers {
    /// Start `n - 1` worker threads beside the caller's runtime.
    pub fn start(n: usize) -> std::io::Result<Workers> {
        let mut w = Workers {
            workers: Vec::new(),
            own: Arc::default(),
            stops: Vec::new(),
            threads: Vec::new(),
        };
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
                    let _ = handle_tx.send(Ok(rt.handle().clone()));
                    rt.block_on(async {
                        let _ = stop_rx.await;
                    });
                    rt.shutdown_timeout(Duration::from_secs(1));
                })?;
            let handle = handle_rx.recv().map_err(|_| {
                std::io::Error::other(format!("worker {i} ended before it started"))
            })??;
            w.workers.push(Worker {
                handle,
                sessions: Arc::default(),
            });
            w.stops.push(stop_tx);
            w.threads.push(t);
        }
        Ok(w)
    }

    /// The worker with the fewest sessions (worker 0 on a tie).
    pub fn place(&self) -> Placement {
        let mut best: (usize, Option<&Worker>) = (self.own.load(Ordering::Relaxed), None);
        for w in &self.workers {
            let n = w.sessions.load(Ordering::Relaxed);
            if n < best.0 {
                best = (n, Some(w));
            }
        }
        let (count, handle) = match best.1 {
            Some(w) => (&w.sessions, Some(w.handle.clone())),
            None => (&self.own, None),
        };
        count.fetch_add(1, Ordering::Relaxed);
        Placement {
            handle,
            ticket: Ticket(count.clone()),
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
