//! Telling the service manager how the router is doing, over the
//! `sd_notify` protocol: one datagram of `KEY=value` lines to the Unix
//! socket named by `$NOTIFY_SOCKET` (a path, or `@name` for an abstract
//! socket). systemd reads it (`Type=notify`), and so does the router's own
//! supervisor when it runs as a container's first process
//! ([`crate::lifecycle::supervisor`]).
//!
//! * `READY=1` once the router listens, and again after each reload;
//! * `RELOADING=1` with `MONOTONIC_USEC=` when a reload begins (SIGHUP,
//!   `ctl reload`, `--watch`);
//! * `STOPPING=1` when the drain begins;
//! * on a hot upgrade, once the new process serves, the old one (still the
//!   service's main process) sends `MAINPID=<new>` and `READY=1`, then
//!   says nothing more: the new process is the main one from then on. The
//!   unit needs only `NotifyAccess=main` for that; a new process sends
//!   nothing before it is the main one (it would be dropped).
//!
//! Without `$NOTIFY_SOCKET` nothing is sent. A message that cannot be sent
//! is logged at debug level and otherwise ignored: the router never stops
//! because its service manager does not listen.
#![allow(unsafe_code)] // one call: clock_gettime, for MONOTONIC_USEC=

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicBool, Ordering};

/// The environment variable naming the socket.
pub const SOCKET_ENV: &str = "NOTIFY_SOCKET";

/// Where notifications go, and whether this process still speaks for the
/// service.
pub struct Notify {
    to: Option<SocketAddr>,
    /// False once a hot upgrade gave the main process's part away.
    main: AtomicBool,
}

impl Default for Notify {
    /// The socket `$NOTIFY_SOCKET` names, if any.
    fn default() -> Notify {
        Notify::from_env()
    }
}

impl Notify {
    /// The socket `$NOTIFY_SOCKET` names; none when it is unset, empty or
    /// unusable (logged).
    pub fn from_env() -> Notify {
        let to = std::env::var_os(SOCKET_ENV).and_then(|v| {
            let v = v.to_string_lossy().into_owned();
            if v.is_empty() {
                return None;
            }
            address(&v)
                .map_err(|e| tracing::warn!(socket = %v, error = %e, "NOTIFY_SOCKET: not a usable socket address; the service manager is not told"))
                .ok()
        });
        Notify {
            to,
            main: AtomicBool::new(true),
        }
    }

    /// Whether a service manager listens (`$NOTIFY_SOCKET` is set).
    pub fn is_on(&self) -> bool {
        self.to.is_some()
    }

    /// Listening, or a reload done: `READY=1` with a status line.
    pub fn ready(&self, status: &str) {
        self.send(&message(&[("READY", "1"), ("STATUS", status)]));
    }

    /// A reload begins.
    pub fn reloading(&self) {
        let now = monotonic_usec().to_string();
        self.send(&message(&[
            ("RELOADING", "1"),
            ("MONOTONIC_USEC", &now),
            ("STATUS", "reloading"),
        ]));
    }

    /// The drain begins.
    pub fn stopping(&self) {
        self.send(&message(&[
            ("STOPPING", "1"),
            (
                "STATUS",
                "draining: operations in flight finish, then the router exits",
            ),
        ]));
    }

    /// A hot upgrade's new process `pid` serves: it is the main process
    /// from now on, and this one says nothing more.
    pub fn hand_main_to(&self, pid: u32) {
        let pid = pid.to_string();
        let status = format!("serving (process {pid}, after a hot upgrade)");
        self.send(&message(&[
            ("MAINPID", &pid),
            ("READY", "1"),
            ("STATUS", &status),
        ]));
        self.main.store(false, Ordering::SeqCst);
    }

    /// Send `msg`, unless this process gave its part away.
    fn send(&self, msg: &str) {
        let Some(to) = &self.to else { return };
        if !self.main.load(Ordering::SeqCst) {
            return;
        }
        let sent = UnixDatagram::unbound().and_then(|s| s.send_to_addr(msg.as_bytes(), to));
        if let Err(e) = sent {
            tracing::debug!(error = %e, "cannot notify the service manager");
        }
    }
}

/// A notification: one `KEY=value` line per field. Newlines in a value
/// would start a field of their own: they become spaces.
pub fn message(fields: &[(&str, &str)]) -> String {
    let mut m = String::new();
    for (k, v) in fields {
        m.push_str(k);
        m.push('=');
        m.extend(v.chars().map(|c| if c == '\n' { ' ' } else { c }));
        m.push('\n');
    }
    m
}

/// A notification's fields (lines without `=` are skipped).
pub fn fields(msg: &str) -> impl Iterator<Item = (&str, &str)> {
    msg.lines().filter_map(|l| l.split_once('='))
}

/// The socket address `$NOTIFY_SOCKET` gives: `@name` for an abstract
/// socket (Linux), else a path.
pub fn address(v: &str) -> std::io::Result<SocketAddr> {
    match v.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name.as_bytes())
        }
        None => SocketAddr::from_pathname(v),
    }
}

/// CLOCK_MONOTONIC in microseconds, as `MONOTONIC_USEC=` wants it.
pub fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000
        + u64::try_from(ts.tv_nsec).unwrap_or(0) / 1000
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn messages_are_lines_of_fields() {
        assert_eq!(
            message(&[("READY", "1"), ("STATUS", "two\nlines")]),
            "READY=1\nSTATUS=two lines\n"
        );
        let f: Vec<_> = fields("MAINPID=42\nREADY=1\nnoise\nSTATUS=a=b\n").collect();
        assert_eq!(f, [("MAINPID", "42"), ("READY", "1"), ("STATUS", "a=b")]);
    }

    #[test]
    fn addresses_are_paths_or_abstract_names() {
        use std::os::linux::net::SocketAddrExt;
        let a = address("@dsa-router-test").unwrap();
        assert_eq!(a.as_abstract_name(), Some(&b"dsa-router-test"[..]));
        let p = address("/run/systemd/notify").unwrap();
        assert_eq!(
            p.as_pathname(),
            Some(std::path::Path::new("/run/systemd/notify"))
        );
    }

    #[test]
    fn datagrams_reach_the_socket_and_stop_after_the_handover() {
        let name = format!("dsa-router-notify-test-{}", std::process::id());
        let sock = UnixDatagram::bind_addr(&address(&format!("@{name}")).unwrap()).unwrap();
        sock.set_nonblocking(true).unwrap();
        let n = Notify {
            to: Some(address(&format!("@{name}")).unwrap()),
            main: AtomicBool::new(true),
        };
        let mut buf = [0u8; 512];
        let mut next = || {
            let len = sock.recv(&mut buf).ok()?;
            Some(String::from_utf8_lossy(&buf[..len]).into_owned())
        };
        n.reloading();
        let r = next().unwrap();
        assert!(r.starts_with("RELOADING=1\nMONOTONIC_USEC="), "{r}");
        let usec: u64 = fields(&r)
            .find(|(k, _)| *k == "MONOTONIC_USEC")
            .unwrap()
            .1
            .parse()
            .unwrap();
        assert!(usec > 0 && usec <= monotonic_usec());
        n.ready("serving");
        assert_eq!(next().unwrap(), "READY=1\nSTATUS=serving\n");
        n.hand_main_to(4242);
        assert!(next().unwrap().starts_with("MAINPID=4242\nREADY=1\n"));
        n.stopping();
        assert_eq!(next(), None, "nothing after the main part was handed over");
    }

    #[test]
    fn without_a_socket_nothing_happens() {
        let n = Notify {
            to: None,
            main: AtomicBool::new(true),
        };
        assert!(!n.is_on());
        n.ready("serving");
        n.stopping();
    }
}
