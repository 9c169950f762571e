//! The worker threads: started beside the caller's runtime (worker 0),
//! each with a single-threaded runtime of its own, and stopped.

use super::balance::this_task;
use super::{Seat, Shared, Slot, ID};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// Workers 1..N (worker 0 is the caller's runtime).
pub struct Workers {
    shared: Arc<Shared>,
    stops: Vec<oneshot::Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// One started worker thread: its runtime, its thread's CPU-time file,
/// the way to stop it, and the thread.
struct Started {
    handle: Handle,
    task: Option<String>,
    stop: oneshot::Sender<()>,
    thread: JoinHandle<()>,
}

impl Workers {
    /// Start `n - 1` worker threads beside the caller's runtime (`own`,
    /// worker 0, running on the calling thread). `spread_above`: the
    /// share of a CPU (0.0-1.0) over which one more worker is taken into
    /// use; 0: all of them from the start.
    pub fn start(n: usize, own: Handle, spread_above: f64) -> std::io::Result<Workers> {
        own.spawn(crate::base::memory::give_back());
        let mut slots = vec![Slot::new(own)];
        let mut stops = Vec::new();
        let mut threads = Vec::new();
        let mut tasks = vec![this_task()];
        for i in 1..n.max(1) {
            let w = spawn(i)?;
            slots.push(Slot::new(w.handle));
            tasks.push(w.task);
            stops.push(w.stop);
            threads.push(w.thread);
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
        Seat::take(&self.shared)
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

/// Worker `i`'s thread, once its runtime runs (or why it could not start).
fn spawn(i: usize) -> std::io::Result<Started> {
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let (handle_tx, handle_rx) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
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
            rt.spawn(crate::base::memory::give_back());
            let _ = handle_tx.send(Ok((rt.handle().clone(), this_task())));
            rt.block_on(async {
                let _ = stop_rx.await;
            });
            rt.shutdown_timeout(Duration::from_secs(1));
        })?;
    let (handle, task) = handle_rx
        .recv()
        .map_err(|_| std::io::Error::other(format!("worker {i} ended before it started")))??;
    Ok(Started {
        handle,
        task,
        stop: stop_tx,
        thread,
    })
}
