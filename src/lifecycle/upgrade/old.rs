//! The old process's side of a hot upgrade: start the new binary, hand it
//! the listening sockets once it is ready, then the sessions that leave.

use super::{FLAG, READY_TIMEOUT, SERVING_TIMEOUT};
use crate::lifecycle::handover::msg::{self, Msg};
use crate::lifecycle::handover::{fds, Export, UpgradeError};
use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// What an upgrade needs of the running router: its binary and arguments
/// as at start, and (copies of) its listening sockets.
pub struct Upgrader {
    exe: Option<PathBuf>,
    args: Vec<OsString>,
    ldap: Option<OwnedFd>,
    ldaps: Option<OwnedFd>,
    admin: Option<OwnedFd>,
    /// The socket pair of an upgrade under way (until the new process
    /// serves), for [`Upgrader::cancel`].
    waiting: Mutex<Option<UnixStream>>,
    cancelled: AtomicBool,
}

/// A new process that serves.
pub struct Started {
    pub pid: u32,
    pub binary: String,
    /// The socket pair's old end, for the sessions.
    pub sock: UnixStream,
}

impl Upgrader {
    /// The binary this process runs (the path `/proc/self/exe` names now:
    /// whatever file is at that path at upgrade time is started) and its
    /// arguments, without a handover flag of its own.
    pub fn at_start() -> Upgrader {
        let mut args = Vec::new();
        let mut skip = false;
        for a in std::env::args_os().skip(1) {
            if std::mem::take(&mut skip) {
                continue;
            }
            if a == FLAG {
                skip = true;
                continue;
            }
            if a.to_str()
                .is_some_and(|s| s.starts_with(&format!("{FLAG}=")))
            {
                continue;
            }
            args.push(a);
        }
        Upgrader {
            exe: std::env::current_exe().ok(),
            args,
            ldap: None,
            ldaps: None,
            admin: None,
            waiting: Mutex::new(None),
            cancelled: AtomicBool::new(false),
        }
    }

    /// Abandon the upgrade under way, if any (SIGTERM): the wait for the
    /// new process ends at once, [`Upgrader::start`] stops it and fails.
    /// No upgrade starts after this.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        let waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = waiting.as_ref() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    /// The listening sockets to hand over (copies: the old process keeps
    /// accepting on its own until the new one serves).
    pub fn listening(&mut self, ldap: OwnedFd, ldaps: Option<OwnedFd>, admin: Option<OwnedFd>) {
        self.ldap = Some(ldap);
        self.ldaps = ldaps;
        self.admin = admin;
    }

    /// Start the binary at this process's own path and hand it the
    /// listeners; `Err` says why not (the new process refused, failed, took
    /// too long, or the upgrade was cancelled: it is stopped then), and
    /// this process goes on serving.
    pub fn start(&self) -> Result<Started, UpgradeError> {
        let bin = self.exe.clone().ok_or(UpgradeError::NoBinary)?;
        let shown = bin.display().to_string();
        let (ours, theirs) = fds::pair().map_err(UpgradeError::SocketPair)?;
        fds::inheritable(theirs.as_fd()).map_err(UpgradeError::Socket)?;
        {
            let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
            if self.cancelled.load(Ordering::SeqCst) {
                return Err(UpgradeError::ShuttingDown);
            }
            *waiting = ours.try_clone().ok();
        }
        // However this ends, a later cancel leaves the socket (then the
        // sessions') alone.
        let _waiting = Waiting(&self.waiting);
        let mut tries = 0;
        let mut child = loop {
            let spawned = Command::new(&bin)
                .args(&self.args)
                .arg(FLAG)
                .arg(theirs.as_raw_fd().to_string())
                .stdin(Stdio::null())
                .spawn();
            match spawned {
                // A binary just installed may still be open for writing
                // for a moment (ETXTBSY): try again briefly.
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 20 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                other => {
                    break other.map_err(|error| UpgradeError::Spawn {
                        binary: shown.clone(),
                        error,
                    })?
                }
            }
        };
        drop(theirs);
        tracing::info!(binary = %shown, pid = child.id(), "upgrade: new process started; waiting for it to load its knowledge");
        match self.hand_listeners(&ours) {
            Ok(()) => Ok(Started {
                pid: child.id(),
                binary: shown,
                sock: ours,
            }),
            Err(e) => {
                stop(&mut child);
                if self.cancelled.load(Ordering::SeqCst) {
                    return Err(UpgradeError::ShuttingDown);
                }
                Err(e)
            }
        }
    }

    /// READY, LISTENERS, SERVING.
    fn hand_listeners(&self, sock: &UnixStream) -> Result<(), UpgradeError> {
        let _ = sock.set_read_timeout(Some(READY_TIMEOUT));
        match next(sock)? {
            Msg::Ready => {}
            Msg::Refused(why) => return Err(UpgradeError::Refused(why)),
            other => return Err(UpgradeError::Unexpected(format!("{other:?}"))),
        }
        let dup = |f: &Option<OwnedFd>| f.as_ref().and_then(|f| f.try_clone().ok());
        let l = Msg::Listeners {
            ldap: dup(&self.ldap),
            ldaps: dup(&self.ldaps),
            admin: dup(&self.admin),
        };
        let with: Vec<_> = [&self.ldap, &self.ldaps, &self.admin]
            .into_iter()
            .flatten()
            .map(|f| f.as_fd())
            .collect();
        fds::send(sock, &msg::encode(&l), &with).map_err(UpgradeError::Listeners)?;
        let _ = sock.set_read_timeout(Some(SERVING_TIMEOUT));
        match next(sock)? {
            Msg::Serving => Ok(()),
            other => Err(UpgradeError::Unexpected(format!("{other:?}"))),
        }
    }
}

/// The slot of [`Upgrader::cancel`] while an upgrade waits; emptied on
/// drop.
struct Waiting<'a>(&'a Mutex<Option<UnixStream>>);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

/// The next message from the new process.
fn next(sock: &UnixStream) -> Result<Msg, UpgradeError> {
    let mut buf = vec![0u8; 64 * 1024];
    match fds::recv(sock, &mut buf) {
        Ok((0, _)) => Err(UpgradeError::Ended),
        Ok((n, got)) => msg::decode(&buf[..n], got).map_err(UpgradeError::Bad),
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Err(UpgradeError::NoAnswer),
        Err(e) => Err(UpgradeError::Socket(e)),
    }
}

/// Stop a new process that failed (it may have exited already).
fn stop(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        let _ = child.kill();
    }
    let _ = child.wait();
}

/// Send each session that leaves to the new process, until none is left
/// (then END). A session that cannot be sent gets its socket back.
pub fn send_sessions(sock: UnixStream, mut rx: tokio::sync::mpsc::UnboundedReceiver<Export>) {
    // A new process that stops reading does not hold sessions forever.
    let _ = sock.set_write_timeout(Some(std::time::Duration::from_secs(5)));
    let mut sent = 0u64;
    while let Some(e) = rx.blocking_recv() {
        let bytes = msg::session(&e.state.encode());
        match fds::send(&sock, &bytes, &[e.sock.as_fd()]) {
            Ok(()) => {
                sent += 1;
                let _ = e.done.send(Ok(()));
            }
            Err(err) => {
                tracing::warn!(client = %e.state.peer, error = %err, "cannot hand a session over");
                let _ = e.done.send(Err(e.sock));
            }
        }
    }
    let _ = fds::send(&sock, &msg::encode(&Msg::End), &[]);
    tracing::info!(
        sessions = sent,
        "upgrade: sessions handed over to the new process"
    );
}
