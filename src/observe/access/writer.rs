//! The access log's writer thread: it collects every thread's buffer
//! every [`INTERVAL`](super::INTERVAL) (sooner when woken) and writes each
//! in one call, to stderr or to a file that SIGUSR1 reopens.

use super::{Log, Slot, Target, INTERVAL, LOG, MAX_BUFFER};
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) fn open(target: &Target) -> std::io::Result<Out> {
    Ok(match target {
        Target::Stderr => Out::Stderr,
        Target::File(p) => Out::File(OpenOptions::new().create(true).append(true).open(p)?),
    })
}

pub(super) enum Out {
    Stderr,
    File(File),
}

impl Out {
    fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        match self {
            Out::Stderr => std::io::stderr().lock().write_all(b),
            Out::File(f) => f.write_all(b),
        }
    }
}

pub(super) fn writer(out: &mut Out) {
    let Some(log) = LOG.get() else { return };
    let mut spare = Vec::new();
    let mut warned: Option<(Instant, u64)> = None;
    loop {
        if log.reopen.swap(false, Ordering::Relaxed) {
            match open(&log.target) {
                Ok(o) => *out = o,
                Err(e) => tracing::warn!("access log: cannot reopen {:?}: {e}", log.target),
            }
        }
        if collect(log, out, &mut spare) == 0 {
            // Nothing came in a whole interval: sleep until a line does
            // (the line that finds `idle` set wakes us), checking once
            // more after saying so, so that no line waits unseen.
            log.idle.store(true, Ordering::SeqCst);
            if collect(log, out, &mut spare) == 0 {
                std::thread::park_timeout(Duration::from_secs(1));
            }
            log.idle.store(false, Ordering::SeqCst);
        } else {
            // A buffer half full wakes us early (`line`).
            std::thread::park_timeout(INTERVAL);
        }
        let dropped = log.dropped.load(Ordering::Relaxed);
        let since = warned.map_or(0, |(_, n)| n);
        if dropped > since && warned.is_none_or(|(t, _)| t.elapsed() >= Duration::from_secs(10)) {
            tracing::warn!(
                "access log: {} lines dropped (the destination does not keep up; {dropped} in all)",
                dropped - since
            );
            warned = Some((Instant::now(), dropped));
        }
    }
}

/// Take every thread's lines and write them; the bytes written.
pub(super) fn collect(log: &Log, out: &mut Out, spare: &mut Vec<u8>) -> usize {
    let slots: Vec<Arc<Slot>> = match log.slots.lock() {
        Ok(mut s) => {
            // A thread that ended left its slot here alone, empty.
            s.retain(|slot| {
                Arc::strong_count(slot) > 1 || slot.0.lock().is_ok_and(|l| !l.buf.is_empty())
            });
            s.clone()
        }
        Err(_) => return 0,
    };
    let mut total = 0;
    for slot in slots {
        let lines = match slot.0.lock() {
            Ok(mut l) if !l.buf.is_empty() => {
                std::mem::swap(&mut l.buf, spare);
                std::mem::take(&mut l.lines)
            }
            _ => continue,
        };
        total += spare.len();
        // A failed write loses these lines, as a full buffer would; the
        // router goes on.
        if out.write_all(spare).is_ok() {
            log.written.fetch_add(lines, Ordering::Relaxed);
        } else {
            log.dropped.fetch_add(lines, Ordering::Relaxed);
        }
        spare.clear();
        if spare.capacity() > MAX_BUFFER {
            *spare = Vec::new();
        }
    }
    total
}
