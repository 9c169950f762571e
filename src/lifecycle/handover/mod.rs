//! Hot upgrade (architecture.md, "Lifecycle"): what the old and the new router process hand
//! each other, and the router-wide state of a handover. The low-level
//! parts, which know nothing of sessions: descriptor passing (`fds`, the
//! crate's only `unsafe` code), the messages (`msg`) and a session's state
//! (`state`, a versioned format the new process decodes like any input).
//! The upgrade itself (starting the new binary, the exchange) is
//! `crate::lifecycle::upgrade`; a session's part (when it may leave, its export and
//! resumption) is `session::handover`.

mod error;
pub mod fds;
pub mod msg;
pub mod state;

pub use error::UpgradeError;
use state::SessionState;
use std::sync::Mutex;
use tokio::sync::{mpsc, oneshot};

/// An upgrade asked for (`ctl upgrade`, SIGUSR2). The binary started is
/// always the router's own ([`crate::lifecycle::upgrade::Upgrader`]): an ask cannot
/// name one.
pub struct Ask {
    /// How it went: the new process's id and binary, or why not.
    pub reply: Option<oneshot::Sender<Result<Upgraded, UpgradeError>>>,
}

/// A new process took over.
#[derive(Debug, Clone)]
pub struct Upgraded {
    pub pid: u32,
    pub binary: String,
}

/// A session that leaves for the new process: its socket (off every
/// runtime) and state; `done` says whether it went (else the socket comes
/// back, to be closed with a notice).
pub struct Export {
    pub sock: std::net::TcpStream,
    pub state: SessionState,
    pub done: oneshot::Sender<Result<(), std::net::TcpStream>>,
}

/// A session that came from the old process, for the accept loop.
pub struct Adopted {
    pub sock: std::net::TcpStream,
    pub state: SessionState,
}

/// The router's handover state (in the context).
pub struct Handover {
    asks: mpsc::Sender<Ask>,
    asked: tokio::sync::Mutex<mpsc::Receiver<Ask>>,
    /// Set once the new process serves: sessions leave through it.
    exporting: Mutex<Option<mpsc::UnboundedSender<Export>>>,
    /// In a new process: sessions from the old one, taken by the accept
    /// loop.
    adopted: Mutex<Option<mpsc::Receiver<Adopted>>>,
}

impl Default for Handover {
    fn default() -> Handover {
        let (asks, asked) = mpsc::channel(4);
        Handover {
            asks,
            asked: tokio::sync::Mutex::new(asked),
            exporting: Mutex::new(None),
            adopted: Mutex::new(None),
        }
    }
}

impl Handover {
    /// Ask for an upgrade; `Err` when one is already waiting.
    pub fn ask(&self, ask: Ask) -> Result<(), Ask> {
        self.asks.try_send(ask).map_err(|e| match e {
            mpsc::error::TrySendError::Full(a) | mpsc::error::TrySendError::Closed(a) => a,
        })
    }

    /// The next upgrade asked for (the signal task's loop).
    pub async fn asked(&self) -> Option<Ask> {
        self.asked.lock().await.recv().await
    }

    /// The new process serves: sessions leave through `tx` from now on.
    pub fn export_to(&self, tx: mpsc::UnboundedSender<Export>) {
        *self.exporting.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
    }

    /// Where a session leaves to, when a new process took over.
    pub fn exporting(&self) -> Option<mpsc::UnboundedSender<Export>> {
        self.exporting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Every session left or ended: the channel to the new process closes.
    pub fn finish(&self) {
        self.exporting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
    }

    /// In a new process: the sessions from the old one arrive on `rx`.
    pub fn adopt_from(&self, rx: mpsc::Receiver<Adopted>) {
        *self.adopted.lock().unwrap_or_else(|p| p.into_inner()) = Some(rx);
    }

    /// The sessions from the old process, if this process took over from
    /// one (taken once, by the accept loop).
    pub fn take_adopted(&self) -> Option<mpsc::Receiver<Adopted>> {
        self.adopted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}
