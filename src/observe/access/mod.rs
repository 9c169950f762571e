//! The access log: one line per operation, written off the operation's path.
//!
//! An operation formats its line into a buffer of its own thread (the
//! fields it knows when it starts are formatted once, into a [`Head`], when
//! it is placed; the rest when it ends): no allocation per line once the
//! buffer has grown, and no lock that another thread holds (the buffer's
//! mutex is taken only by its thread, and by the writer thread when it
//! collects). The writer thread collects every buffer every [`INTERVAL`]
//! (or as soon as a line arrives after an idle spell, or a buffer is half
//! full) and writes each in one call, to stderr or to a file that SIGUSR1
//! reopens (logrotate).
//!
//! A buffer holds at most [`MAX_BUFFER`] bytes: when the destination does
//! not keep up, further lines are dropped and counted
//! (`dsa_router_access_log_dropped_total`, and a warning at most every 10
//! s), so a slow disk or a full pipe never stalls a client.
//!
//! Formats ([`Format`]): the text line (`2026-12-01T10:00:00.123456Z  INFO
//! access: client=... op="search" dn=... result=0 latency_us=...`, the
//! form the `tracing` lines of earlier versions had) and JSON lines.
//!
//! # Layout
//! * `mod.rs`: the log's state, [`start`], [`line()`] (the line's frame: time,
//!   level), the counters.
//! * `writer`: the writer thread: collecting the threads' buffers and
//!   writing them to the destination.
//! * `fields`: a line's fields ([`Fields`], [`Head`]) in text and JSON.

mod fields;
mod writer;

pub use fields::{Fields, Head};

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use writer::{collect, open, writer};

/// How often the writer collects the buffers under load (sooner when a
/// buffer reaches half of [`MAX_BUFFER`]). Each collection costs a wake-up
/// and a write per thread: at 7,000 lines a second the writer took 4.9 ms
/// of CPU a second collecting every 20 ms, 1.5 ms every 100 ms.
pub const INTERVAL: Duration = Duration::from_millis(100);
/// Bytes one thread's buffer may hold before lines are dropped.
pub const MAX_BUFFER: usize = 4 << 20;

/// The line format (`--access-log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// `TIME  INFO access: key=value ...`
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Where lines go.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Target {
    #[default]
    Stderr,
    /// Appended to; reopened on [`reopen`] (SIGUSR1).
    File(PathBuf),
}

pub(super) struct Log {
    format: Format,
    target: Target,
    slots: Mutex<Vec<Arc<Slot>>>,
    /// The writer is parked with nothing to collect: the next line wakes it.
    idle: AtomicBool,
    reopen: AtomicBool,
    writer: OnceLock<std::thread::Thread>,
    dropped: AtomicU64,
    written: AtomicU64,
}

pub(super) static LOG: OnceLock<Log> = OnceLock::new();

/// One thread's buffer.
#[derive(Default)]
struct Slot(Mutex<Local>);

#[derive(Default)]
struct Local {
    buf: Vec<u8>,
    lines: u64,
    /// The second `date` is formatted for (`YYYY-MM-DDTHH:MM:SS`).
    sec: u64,
    date: [u8; 19],
}

thread_local! {
    static SLOT: Arc<Slot> = register();
}

fn register() -> Arc<Slot> {
    let slot = Arc::new(Slot::default());
    if let Some(log) = LOG.get() {
        if let Ok(mut slots) = log.slots.lock() {
            slots.push(slot.clone());
        }
    }
    slot
}

/// Start the access log (once per process; later calls are ignored) and
/// its writer thread. A file target is opened here, so a bad path is an
/// error at start-up.
pub fn start(format: Format, target: Target) -> std::io::Result<()> {
    let mut out = open(&target)?;
    if LOG
        .set(Log {
            format,
            target,
            slots: Mutex::new(Vec::new()),
            idle: AtomicBool::new(false),
            reopen: AtomicBool::new(false),
            writer: OnceLock::new(),
            dropped: AtomicU64::new(0),
            written: AtomicU64::new(0),
        })
        .is_err()
    {
        return Ok(());
    }
    let handle = std::thread::Builder::new()
        .name("access-log".into())
        .spawn(move || writer(&mut out))?;
    if let Some(log) = LOG.get() {
        let _ = log.writer.set(handle.thread().clone());
    }
    Ok(())
}

/// Whether [`start`] ran: lines are recorded.
pub fn enabled() -> bool {
    LOG.get().is_some()
}

/// Lines dropped because the destination did not keep up.
pub fn dropped() -> u64 {
    LOG.get().map_or(0, |l| l.dropped.load(Ordering::Relaxed))
}

/// Lines written so far.
pub fn written() -> u64 {
    LOG.get().map_or(0, |l| l.written.load(Ordering::Relaxed))
}

/// Reopen the file at the next collection (SIGUSR1, after logrotate moved
/// it).
pub fn reopen() {
    if let Some(log) = LOG.get() {
        log.reopen.store(true, Ordering::Relaxed);
        if let Some(t) = log.writer.get() {
            t.unpark();
        }
    }
}

/// The file the access log goes to, when it goes to one.
pub fn file() -> Option<PathBuf> {
    match LOG.get().map(|l| &l.target) {
        Some(Target::File(p)) => Some(p.clone()),
        _ => None,
    }
}

/// Write what every thread holds, now (shutdown).
pub fn flush() {
    if let Some(log) = LOG.get() {
        if let Ok(mut out) = open(&log.target) {
            let mut spare = Vec::new();
            collect(log, &mut out, &mut spare);
        }
    }
}

/// Record one line (nothing when the log is off).
pub fn line(fields: impl FnOnce(&mut Fields<'_>)) {
    let Some(log) = LOG.get() else { return };
    let json = log.format == Format::Json;
    let _ = SLOT.try_with(|slot| {
        let Ok(mut l) = slot.0.lock() else { return };
        if l.buf.len() >= MAX_BUFFER {
            log.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let was_empty = l.buf.is_empty();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let l = &mut *l;
        if l.sec != now.as_secs() || l.date[0] == 0 {
            l.sec = now.as_secs();
            l.date = civil(now.as_secs());
        }
        let start = l.buf.len();
        let buf = &mut l.buf;
        if json {
            buf.extend_from_slice(b"{\"time\":\"");
        }
        buf.extend_from_slice(&l.date);
        let micros = now.subsec_micros();
        let mut frac = *b".000000Z";
        let mut n = micros;
        for i in (1..7).rev() {
            frac[i] = b'0' + (n % 10) as u8;
            n /= 10;
        }
        buf.extend_from_slice(&frac);
        if json {
            buf.extend_from_slice(b"\",");
        } else {
            buf.extend_from_slice(b"  INFO access: ");
        }
        let mut f = Fields::new(buf, json);
        fields(&mut f);
        buf.extend_from_slice(if json { b"}\n" } else { b"\n" });
        if buf.len() > MAX_BUFFER + 64 * 1024 {
            // One line far past the cap (a huge DN): not kept.
            buf.truncate(start);
            log.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        l.lines += 1;
        if (was_empty && log.idle.load(Ordering::SeqCst)) || reached_half(start, buf.len()) {
            if let Some(t) = log.writer.get() {
                t.unpark();
            }
        }
    });
}

/// Whether a line that took a buffer from `before` to `after` bytes made
/// it half full: the writer is woken before its interval ends, so that a
/// burst does not fill the buffer (and lose lines) while it sleeps.
fn reached_half(before: usize, after: usize) -> bool {
    let half = MAX_BUFFER / 2;
    before < half && after >= half
}

/// `YYYY-MM-DDTHH:MM:SS` (UTC) of seconds since the epoch.
fn civil(secs: u64) -> [u8; 19] {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = crate::directory::replication::csn::civil_from_days(days);
    let mut s = String::with_capacity(19);
    let _ = write!(
        s,
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    );
    let mut out = [b'0'; 19];
    let n = s.len().min(19);
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_reaching_half_wakes_the_writer_once() {
        let half = MAX_BUFFER / 2;
        for (before, after, wakes) in [
            (0, 120, false),
            (half - 200, half - 80, false),
            (half - 100, half, true),
            (half - 1, half + 150, true),
            (half, half + 150, false),
            (half + 10, MAX_BUFFER, false),
        ] {
            assert_eq!(reached_half(before, after), wakes, "{before} -> {after}");
        }
    }

    #[test]
    fn civil_dates() {
        for (secs, want) in [
            (0, "1970-01-01T00:00:00"),
            (951_782_400, "2000-02-29T00:00:00"),
            (1_796_086_923, "2026-12-01T01:02:03"),
            (4_102_444_799, "2099-12-31T23:59:59"),
        ] {
            assert_eq!(std::str::from_utf8(&civil(secs)).unwrap(), want, "{secs}");
        }
    }
}
