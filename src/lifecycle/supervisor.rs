//! The router as a container's first process (PID 1): a hot upgrade's old
//! process exits once its sessions have moved, and a container whose first
//! process exits stops. So `serve` run as PID 1 stays small: it starts
//! `serve` again as its child (the same binary and arguments) and only
//! watches it.
//!
//! * It forwards SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 to the
//!   router's main process (`docker stop`, `docker kill -s HUP|USR2`).
//! * It gives the child a `$NOTIFY_SOCKET` of its own (an abstract Unix
//!   socket) and reads it as systemd would ([`crate::lifecycle::notify`]):
//!   on a hot upgrade the old process names the new one with `MAINPID=`,
//!   accepted only for a child of the current main process.
//! * It is a child subreaper (PID 1 is one anyway), so the new process,
//!   orphaned when the old one exits, becomes its child; it reaps every
//!   exited child.
//! * When the main process exits (a drain, or a failure), it exits with
//!   the same status (128 + N for a signal N).

#![allow(unsafe_code)] // waitpid, kill and prctl: integer arguments only

use super::notify::{self, fields};
use std::io;
use std::os::unix::net::UnixDatagram;
use std::process::{Command, ExitCode};

/// Whether `serve` is to supervise itself: it runs as PID 1 and is not a
/// hot upgrade's new process.
pub fn wanted(handover: bool) -> bool {
    !handover && std::process::id() == 1
}

/// Which process is the router's main one.
#[derive(Debug)]
pub struct Follow {
    main: i32,
}

impl Follow {
    /// Following `main`.
    pub fn new(main: i32) -> Follow {
        Follow { main }
    }

    /// The main process now.
    pub fn main(&self) -> i32 {
        self.main
    }

    /// A notification: the new main process when it names one (`MAINPID=`)
    /// that is a child of the current one (`parent_of` tells a process's
    /// parent).
    pub fn message(&mut self, msg: &str, parent_of: impl Fn(i32) -> Option<i32>) -> Option<i32> {
        let (_, v) = fields(msg).find(|(k, _)| *k == "MAINPID")?;
        let new: i32 = v.trim().parse().ok()?;
        if new <= 1 || new == self.main {
            return None;
        }
        if parent_of(new) != Some(self.main) {
            tracing::warn!(
                pid = new,
                main = self.main,
                "supervisor: MAINPID names no child of the main process; ignored"
            );
            return None;
        }
        self.main = new;
        Some(new)
    }

    /// Child `pid` exited with wait status `status`: the supervisor's exit
    /// code when it was the main process.
    pub fn exited(&self, pid: i32, status: i32) -> Option<u8> {
        (pid == self.main).then(|| exit_code(status))
    }
}

/// A wait status as an exit code: the process's own, or 128 + the signal
/// that ended it.
pub fn exit_code(status: i32) -> u8 {
    if libc::WIFEXITED(status) {
        u8::try_from(libc::WEXITSTATUS(status)).unwrap_or(1)
    } else if libc::WIFSIGNALED(status) {
        u8::try_from(128 + libc::WTERMSIG(status)).unwrap_or(1)
    } else {
        1
    }
}

/// A process's parent, from `/proc/PID/stat`.
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "PID (comm) STATE PPID ...": comm may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Supervise `serve`: start it, follow it, exit as it does.
pub fn run() -> ExitCode {
    match supervise() {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: supervisor: {e}");
            ExitCode::from(1)
        }
    }
}

fn supervise() -> io::Result<u8> {
    // SAFETY: prctl with integer arguments; it changes only this process's
    // flag.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    // Unique even where containers share a network namespace (abstract
    // names live there).
    let name = format!(
        "@dsa-router-supervisor-{}-{}",
        std::process::id(),
        notify::monotonic_usec()
    );
    let sock = UnixDatagram::bind_addr(&notify::address(&name)?)?;
    sock.set_nonblocking(true)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(watch(sock, name))
}

/// Start the router and follow it until its main process exits.
async fn watch(sock: UnixDatagram, name: String) -> io::Result<u8> {
    use tokio::signal::unix::{signal, SignalKind};
    let sock = tokio::net::UnixDatagram::from_std(sock)?;
    // Handlers first: a child that exits at once is not missed.
    let mut chld = signal(SignalKind::child())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let mut usr1 = signal(SignalKind::user_defined1())?;
    let mut usr2 = signal(SignalKind::user_defined2())?;
    let child = Command::new(std::env::current_exe()?)
        .args(std::env::args_os().skip(1))
        .env(notify::SOCKET_ENV, &name)
        .spawn()?;
    let mut follow = Follow::new(i32::try_from(child.id()).unwrap_or(-1));
    // Reaped below with waitpid, like every other child.
    drop(child);
    tracing::info!(
        pid = follow.main(),
        "supervisor: running as PID 1; the router runs as its child"
    );
    let mut buf = vec![0u8; 4096];
    loop {
        tokio::select! {
            biased;
            Ok(n) = sock.recv(&mut buf) => on_message(&mut follow, &buf[..n]),
            _ = chld.recv() => {}
            _ = term.recv() => forward(follow.main(), libc::SIGTERM),
            _ = int.recv() => forward(follow.main(), libc::SIGINT),
            _ = hup.recv() => forward(follow.main(), libc::SIGHUP),
            _ = usr1.recv() => forward(follow.main(), libc::SIGUSR1),
            _ = usr2.recv() => forward(follow.main(), libc::SIGUSR2),
        }
        // Notifications before exits: a MAINPID= sent before its sender
        // exited is read before that exit is.
        while let Ok(n) = sock.try_recv(&mut buf) {
            on_message(&mut follow, &buf[..n]);
        }
        if let Some(code) = reap(&follow) {
            tracing::info!(code, "supervisor: the router exited");
            return Ok(code);
        }
    }
}

fn on_message(follow: &mut Follow, msg: &[u8]) {
    if let Some(pid) = follow.message(&String::from_utf8_lossy(msg), parent_of) {
        tracing::info!(
            pid,
            "supervisor: hot upgrade: the new process is the router's main process"
        );
    }
}

fn forward(pid: i32, signo: i32) {
    // SAFETY: kill with integer arguments.
    unsafe { libc::kill(pid, signo) };
}

/// Reap every exited child; the exit code when the main one was among them.
fn reap(follow: &Follow) -> Option<u8> {
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid int for waitpid to fill.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return None;
        }
        if let Some(code) = follow.exited(pid, status) {
            return Some(code);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_main_process_moves_only_to_a_child_of_the_main_one() {
        let mut f = Follow::new(10);
        let parents = |pid| match pid {
            11 => Some(10),
            12 => Some(11),
            _ => Some(99),
        };
        assert_eq!(f.message("READY=1\nSTATUS=serving\n", parents), None);
        assert_eq!(f.message("MAINPID=12\nREADY=1\n", parents), None);
        assert_eq!(f.message("MAINPID=50\n", parents), None);
        assert_eq!(f.message("MAINPID=1\n", parents), None);
        assert_eq!(f.message("MAINPID=x\n", parents), None);
        assert_eq!(f.main(), 10);
        assert_eq!(f.message("MAINPID=11\nREADY=1\n", parents), Some(11));
        assert_eq!(f.main(), 11);
        assert_eq!(f.message("MAINPID=12\n", parents), Some(12));
        // The old process's exit is only reaped; the main one's ends it.
        assert_eq!(f.exited(11, 0), None);
        assert_eq!(f.exited(12, 3 << 8), Some(3));
    }

    #[test]
    fn exit_codes_follow_the_wait_status() {
        assert_eq!(exit_code(0), 0);
        assert_eq!(exit_code(1 << 8), 1);
        assert_eq!(exit_code(libc::SIGKILL), 137);
        assert_eq!(exit_code(libc::SIGTERM), 143);
    }

    #[test]
    fn parents_come_from_proc() {
        let me = i32::try_from(std::process::id()).unwrap_or(0);
        let parent = i32::try_from(std::os::unix::process::parent_id()).unwrap_or(0);
        assert_eq!(parent_of(me), Some(parent));
        assert_eq!(parent_of(-5), None);
    }
}
