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

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often the writer collects the buffers under load (sooner when a
/// buffer reaches half of [`MAX_BUFFER`]). Each collection costs a wake-up
/// and a write per thread: at 7,000 lines a second the writer took 4.9 ms
/// of CPU a second collecting every 20 ms, 1.5 ms every 100 ms.
pub const INTERVAL: Duration = Duration::from_millis(100);
/// Bytes one thread's buffer may hold before lines are dropped.
pub const MAX_BUFFER: usize = 4 << 20;

/// The line format (`--access-log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
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

struct Log {
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

static LOG: OnceLock<Log> = OnceLock::new();

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

/// Write what every thread holds, now (shutdown).
pub fn flush() {
    if let Some(log) = LOG.get() {
        if let Ok(mut out) = open(&log.target) {
            let mut spare = Vec::new();
            collect(log, &mut out, &mut spare);
        }
    }
}

fn open(target: &Target) -> std::io::Result<Out> {
    Ok(match target {
        Target::Stderr => Out::Stderr,
        Target::File(p) => Out::File(OpenOptions::new().create(true).append(true).open(p)?),
    })
}

enum Out {
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

fn writer(out: &mut Out) {
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
fn collect(log: &Log, out: &mut Out, spare: &mut Vec<u8>) -> usize {
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

/// Fields formatted once when an operation is placed, written into its line
/// when it ends.
// A vector, not a boxed slice: making one would shrink it, a second
// allocator call per operation.
#[derive(Clone)]
pub struct Head(Vec<u8>);

impl std::fmt::Debug for Head {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

impl Head {
    /// `fields` formatted in the log's format (empty when the log is off).
    pub fn new(fields: impl FnOnce(&mut Fields<'_>)) -> Head {
        let json = LOG.get().is_some_and(|l| l.format == Format::Json);
        let mut buf = Vec::with_capacity(96);
        let mut f = Fields {
            buf: &mut buf,
            json,
            first: true,
        };
        fields(&mut f);
        Head(buf)
    }

    /// `client=ADDRESS`, formatted once for every line of a client's
    /// session (empty when the log is off).
    pub fn client(peer: SocketAddr) -> Head {
        if !enabled() {
            return Head(Vec::new());
        }
        let mut h = Head::new(|f| {
            f.addr("client", peer);
        });
        h.0.shrink_to_fit();
        h
    }
}

/// A line's fields, written as `key=value` (text) or `"key":value` (JSON).
pub struct Fields<'a> {
    buf: &'a mut Vec<u8>,
    json: bool,
    first: bool,
}

impl Fields<'_> {
    // Inlined, with the field writers that call it: their keys are
    // constants, so copying one becomes a store or two, not a call.
    #[inline(always)]
    fn key(&mut self, key: &str) {
        if self.json {
            self.buf
                .extend_from_slice(if self.first { b"\"" } else { b",\"" });
            self.buf.extend_from_slice(key.as_bytes());
            self.buf.extend_from_slice(b"\":");
        } else {
            if !self.first {
                self.buf.push(b' ');
            }
            self.buf.extend_from_slice(key.as_bytes());
            self.buf.push(b'=');
        }
        self.first = false;
    }

    /// A value written as it is in text (a DN, a name), quoted in JSON;
    /// in text, one with a control character (or a leading quote) is
    /// quoted and escaped as [`Fields::quoted`] writes
    /// ([`crate::logsafe`]): a client's line break never starts a line.
    #[inline]
    pub fn plain(&mut self, key: &str, v: &str) -> &mut Self {
        self.key(key);
        if self.json {
            json_string(self.buf, v);
        } else if crate::logsafe::needs_quoting(v) {
            let _ = write!(Adapter(self.buf), "{v:?}");
        } else {
            self.buf.extend_from_slice(v.as_bytes());
        }
        self
    }

    /// A value quoted in both formats (an operation name, a message).
    #[inline]
    pub fn quoted(&mut self, key: &str, v: &str) -> &mut Self {
        self.key(key);
        if self.json {
            json_string(self.buf, v);
        } else if v
            .bytes()
            .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
        {
            // What `{v:?}` writes for printable ASCII without quotes or
            // backslashes (operation names), without the formatter.
            self.buf.push(b'"');
            self.buf.extend_from_slice(v.as_bytes());
            self.buf.push(b'"');
        } else {
            let _ = write!(Adapter(self.buf), "{v:?}");
        }
        self
    }

    /// A value's `Display`, written as [`Fields::plain`] writes.
    pub fn display(&mut self, key: &str, v: &dyn std::fmt::Display) -> &mut Self {
        self.key(key);
        if self.json {
            let mut s = String::new();
            let _ = write!(s, "{v}");
            json_string(self.buf, &s);
        } else {
            let _ = write!(Adapter(self.buf), "{}", crate::logsafe::esc(v));
        }
        self
    }

    /// [`Fields::plain`] when present.
    #[inline]
    pub fn plain_opt(&mut self, key: &str, v: Option<&str>) -> &mut Self {
        if let Some(v) = v {
            self.plain(key, v);
        }
        self
    }

    /// [`Fields::quoted`] when present.
    #[inline]
    pub fn quoted_opt(&mut self, key: &str, v: Option<&str>) -> &mut Self {
        if let Some(v) = v {
            self.quoted(key, v);
        }
        self
    }

    #[inline]
    pub fn num(&mut self, key: &str, v: u64) -> &mut Self {
        self.key(key);
        decimal(self.buf, v);
        self
    }

    pub fn addr(&mut self, key: &str, v: SocketAddr) -> &mut Self {
        self.key(key);
        if self.json {
            self.buf.push(b'"');
        }
        match v {
            // `a.b.c.d:port`, as `Display` writes it, without the
            // formatter (a client's address is in every line).
            SocketAddr::V4(a) => {
                for (i, o) in a.ip().octets().into_iter().enumerate() {
                    if i > 0 {
                        self.buf.push(b'.');
                    }
                    decimal(self.buf, u64::from(o));
                }
                self.buf.push(b':');
                decimal(self.buf, u64::from(a.port()));
            }
            SocketAddr::V6(_) => {
                let _ = write!(Adapter(self.buf), "{v}");
            }
        }
        if self.json {
            self.buf.push(b'"');
        }
        self
    }

    /// Fields formatted earlier.
    pub fn head(&mut self, h: &Head) -> &mut Self {
        if h.0.is_empty() {
            return self;
        }
        if !self.first {
            self.buf.push(if self.json { b',' } else { b' ' });
        }
        self.buf.extend_from_slice(&h.0);
        self.first = false;
        self
    }
}

/// `n` in decimal.
fn decimal(buf: &mut Vec<u8>, n: u64) {
    let mut b = [0u8; 20];
    let mut i = b.len();
    let mut n = n;
    loop {
        i -= 1;
        b[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&b[i..]);
}

/// `fmt::Write` into a byte buffer.
struct Adapter<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Adapter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

fn json_string(buf: &mut Vec<u8>, s: &str) {
    buf.push(b'"');
    for c in s.chars() {
        match c {
            '"' => buf.extend_from_slice(b"\\\""),
            '\\' => buf.extend_from_slice(b"\\\\"),
            '\n' => buf.extend_from_slice(b"\\n"),
            '\r' => buf.extend_from_slice(b"\\r"),
            '\t' => buf.extend_from_slice(b"\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(Adapter(buf), "\\u{:04x}", c as u32);
            }
            c => {
                let mut b = [0u8; 4];
                buf.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
            }
        }
    }
    buf.push(b'"');
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
        let mut f = Fields {
            buf,
            json,
            first: true,
        };
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
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
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

    fn fields(json: bool, f: impl FnOnce(&mut Fields<'_>)) -> String {
        let mut buf = Vec::new();
        let mut fl = Fields {
            buf: &mut buf,
            json,
            first: true,
        };
        f(&mut fl);
        String::from_utf8(buf).unwrap()
    }

    /// The formatter-free paths write what the formatter would.
    #[test]
    fn fast_paths_write_what_the_formatter_writes() {
        for v in [
            "search",
            "",
            "a b~!",
            "with \"quotes\"",
            "back\\slash",
            "tab\there",
            "new\nline",
            "\u{7f}",
            "é",
            "answered by the router: no such partition",
        ] {
            let got = fields(false, |f| {
                f.quoted("k", v);
            });
            assert_eq!(got, format!("k={v:?}"), "{v:?}");
        }
        for a in [
            "0.0.0.0:0",
            "127.0.0.1:4000",
            "10.20.30.40:65535",
            "255.255.255.255:389",
            "192.168.1.9:1",
            "[::1]:389",
            "[fe80::1%2]:636",
        ] {
            let addr: SocketAddr = a.parse().unwrap();
            for json in [false, true] {
                let got = fields(json, |f| {
                    f.addr("client", addr);
                });
                let want = if json {
                    format!("\"client\":\"{addr}\"")
                } else {
                    format!("client={addr}")
                };
                assert_eq!(got, want);
            }
        }
    }

    /// A client's line break (or other control character) in an unquoted
    /// field never reaches a text line raw: the value is quoted and
    /// escaped as quoted fields are.
    #[test]
    fn unquoted_fields_with_control_characters_are_escaped_in_text() {
        let forged = "cn=x\n2026-01-01T00:00:00Z  INFO access: forged\r,o=x";
        let text = fields(false, |f| {
            f.plain("dn", forged)
                .display("dn", &forged)
                .plain("mech", "\"PLAIN\"")
                .plain("dsa", "D1");
        });
        let escaped = format!("{forged:?}");
        assert_eq!(
            text,
            format!("dn={escaped} dn={escaped} mech=\"\\\"PLAIN\\\"\" dsa=D1")
        );
        assert!(!text.contains(['\n', '\r']), "{text}");
        let json = fields(true, |f| {
            f.plain("dn", forged).display("dn2", &forged);
        });
        let v: serde_json::Value = serde_json::from_str(&format!("{{{json}}}")).unwrap();
        assert_eq!(
            (v["dn"].as_str(), v["dn2"].as_str()),
            (Some(forged), Some(forged))
        );
    }

    #[test]
    fn text_and_json_fields() {
        let addr: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let head = |json| {
            let mut buf = Vec::new();
            Fields {
                buf: &mut buf,
                json,
                first: true,
            }
            .addr("client", addr)
            .quoted("op", "search")
            .plain("dn", "cn=a \"b\",o=x");
            Head(buf)
        };
        let whole = |json| {
            let h = head(json);
            fields(json, |f| {
                f.head(&h)
                    .plain("dsa", "D1")
                    .quoted_opt("affinity", None)
                    .num("result", 0)
                    .num("latency_us", 1234567);
            })
        };
        assert_eq!(
            whole(false),
            "client=127.0.0.1:4000 op=\"search\" dn=cn=a \"b\",o=x dsa=D1 result=0 latency_us=1234567"
        );
        let j = format!("{{{}}}", whole(true));
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["client"], "127.0.0.1:4000");
        assert_eq!(v["dn"], "cn=a \"b\",o=x");
        assert_eq!(v["result"], 0);
        assert_eq!(v["latency_us"], 1234567);
        assert!(v.get("affinity").is_none());
        let ctl = fields(true, |f| {
            f.plain("dn", "a\u{1}\n\\é");
        });
        let v: serde_json::Value = serde_json::from_str(&format!("{{{ctl}}}")).unwrap();
        assert_eq!(v["dn"], "a\u{1}\n\\é");
    }
}
