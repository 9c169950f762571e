//! The new process's side of a hot upgrade: say whether it can take over,
//! take the listening sockets, then resume the sessions that come.

use super::{READY_TIMEOUT, SERVING_TIMEOUT};
use crate::lifecycle::handover::msg::{self, Msg};
use crate::lifecycle::handover::state::SessionState;
use crate::lifecycle::handover::{fds, Adopted};
use std::net::TcpListener;
use std::os::unix::net::UnixStream;

/// Why this process cannot take over from the old one.
#[derive(Debug)]
pub enum TakeOverError {
    /// `--handover-fd N` is no socket of this process.
    Fd { fd: i32, error: std::io::Error },
    /// The old process cannot be told (it is gone).
    OldGone(std::io::Error),
    /// Receiving the listeners failed.
    Recv(std::io::Error),
    /// A descriptor passed as a listener is not a TCP socket.
    NotTcp(std::io::Error),
    /// A message out of turn (as `Debug` shows it).
    Unexpected(String),
    /// A message that is not one.
    Bad(msg::Bad),
}

impl std::fmt::Display for TakeOverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TakeOverError::Fd { fd, error } => write!(f, "{} {fd}: {error}", super::FLAG),
            TakeOverError::OldGone(e) => write!(f, "handover: the old process is gone: {e}"),
            TakeOverError::Recv(e) => write!(f, "handover: {e}"),
            TakeOverError::NotTcp(e) => {
                write!(f, "handover: a listener is not a TCP socket: {e}")
            }
            TakeOverError::Unexpected(m) => write!(f, "handover: unexpected message {m}"),
            TakeOverError::Bad(e) => write!(f, "handover: {e}"),
        }
    }
}

impl std::error::Error for TakeOverError {}

/// The socket pair's end this process was given (`--handover-fd`).
pub struct Incoming {
    sock: UnixStream,
}

/// The listening sockets the old process handed over.
#[derive(Default)]
pub struct Inherited {
    pub ldap: Option<TcpListener>,
    pub ldaps: Option<TcpListener>,
    pub admin: Option<TcpListener>,
}

impl Incoming {
    /// Take descriptor `fd` as the handover socket.
    pub fn open(fd: i32) -> Result<Incoming, TakeOverError> {
        let sock = fds::inherited(fd).map_err(|error| TakeOverError::Fd { fd, error })?;
        Ok(Incoming { sock })
    }

    /// This process cannot take over: the old one is told why.
    pub fn refuse(&self, why: &str) {
        let _ = fds::send(
            &self.sock,
            &msg::encode(&Msg::Refused(why.to_string())),
            &[],
        );
    }

    /// Ready (knowledge loaded): the listeners the old process hands over.
    pub fn ready(&self) -> Result<Inherited, TakeOverError> {
        fds::send(&self.sock, &msg::encode(&Msg::Ready), &[]).map_err(TakeOverError::OldGone)?;
        let _ = self
            .sock
            .set_read_timeout(Some(READY_TIMEOUT.max(SERVING_TIMEOUT)));
        let mut buf = vec![0u8; 1024];
        let (n, got) = fds::recv(&self.sock, &mut buf).map_err(TakeOverError::Recv)?;
        match msg::decode(&buf[..n], got) {
            Ok(Msg::Listeners { ldap, ldaps, admin }) => {
                let tcp = |f: Option<std::os::fd::OwnedFd>| {
                    let Some(f) = f else { return Ok(None) };
                    let l = TcpListener::from(f);
                    l.local_addr()
                        .and_then(|_| l.set_nonblocking(true))
                        .map_err(TakeOverError::NotTcp)?;
                    Ok(Some(l))
                };
                Ok(Inherited {
                    ldap: tcp(ldap)?,
                    ldaps: tcp(ldaps)?,
                    admin: tcp(admin)?,
                })
            }
            Ok(other) => Err(TakeOverError::Unexpected(format!("{other:?}"))),
            Err(e) => Err(TakeOverError::Bad(e)),
        }
    }

    /// This process accepts on the listeners: the old one stops, and its
    /// sessions come (resumed by the accept loop, see
    /// [`crate::lifecycle::handover::Handover::take_adopted`]). Call before the accept
    /// loop starts.
    pub fn serving(self, handover: &crate::lifecycle::handover::Handover) {
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        handover.adopt_from(rx);
        if let Err(e) = fds::send(&self.sock, &msg::encode(&Msg::Serving), &[]) {
            tracing::warn!(error = %e, "handover: the old process is gone");
            return;
        }
        let sock = self.sock;
        let spawned = std::thread::Builder::new()
            .name("dsa-router-handover".into())
            .spawn(move || receive(sock, tx));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "handover: cannot receive sessions");
        }
    }
}

/// Receive the sessions the old process hands over until it ends.
fn receive(sock: UnixStream, tx: tokio::sync::mpsc::Sender<Adopted>) {
    let _ = sock.set_read_timeout(None);
    let mut buf = vec![0u8; fds::MAX_MSG];
    let mut got = 0u64;
    loop {
        let (n, passed) = match fds::recv(&sock, &mut buf) {
            Ok((0, _)) => break,
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "handover: receiving sessions failed");
                break;
            }
        };
        let (state, fd) = match msg::decode(&buf[..n], passed) {
            Ok(Msg::Session(state, fd)) => (state, fd),
            Ok(Msg::End) => break,
            Ok(other) => {
                tracing::warn!("handover: unexpected message {other:?}");
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "handover: a bad message");
                continue;
            }
        };
        let sock = std::net::TcpStream::from(fd);
        let state = match SessionState::decode(&state) {
            Ok(s) if sock.peer_addr().is_ok() => s,
            Ok(_) => {
                tracing::warn!(
                    "handover: a session's socket is not a connected TCP socket; closing it"
                );
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "handover: closing a session whose state cannot be read");
                continue;
            }
        };
        got += 1;
        if tx.blocking_send(Adopted { sock, state }).is_err() {
            break;
        }
    }
    tracing::info!(
        sessions = got,
        "handover: sessions taken over from the old process"
    );
}
