//! Why a hot upgrade failed on the old process's side (the answer to an
//! [`super::Ask`]): the old process keeps serving.

use super::msg::Bad;
use std::fmt;

/// Why the new process did not take over.
#[derive(Debug)]
pub enum UpgradeError {
    /// Another upgrade is under way.
    InProgress,
    /// The path of the router's own binary is unknown.
    NoBinary,
    /// The socket pair could not be made.
    SocketPair(std::io::Error),
    /// The handover socket failed (made inheritable, or read).
    Socket(std::io::Error),
    /// The router is shutting down (the upgrade was cancelled).
    ShuttingDown,
    /// The binary could not be started.
    Spawn {
        binary: String,
        error: std::io::Error,
    },
    /// The new process refused, saying why.
    Refused(String),
    /// A message out of turn (as `Debug` shows it).
    Unexpected(String),
    /// The listeners could not be sent.
    Listeners(std::io::Error),
    /// The new process ended (or the upgrade was cancelled) before it
    /// was ready.
    Ended,
    /// A message that is not one.
    Bad(Bad),
    /// The new process did not answer in time.
    NoAnswer,
    /// The task that ran the upgrade failed.
    Task(tokio::task::JoinError),
    /// The thread that hands the sessions over could not start.
    Thread(std::io::Error),
}

impl fmt::Display for UpgradeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpgradeError::InProgress => f.write_str("an upgrade is already in progress"),
            UpgradeError::NoBinary => f.write_str("the router's own binary is unknown"),
            UpgradeError::SocketPair(e) => write!(f, "cannot make the handover socket: {e}"),
            UpgradeError::Socket(e) => write!(f, "handover socket: {e}"),
            UpgradeError::ShuttingDown => f.write_str("the router is shutting down"),
            UpgradeError::Spawn { binary, error } => write!(f, "cannot start {binary}: {error}"),
            UpgradeError::Refused(why) => write!(
                f,
                "the new process refused the handover: {}",
                why.trim_end()
            ),
            UpgradeError::Unexpected(m) => write!(f, "unexpected handover message {m}"),
            UpgradeError::Listeners(e) => write!(f, "cannot hand over the listeners: {e}"),
            UpgradeError::Ended => f.write_str(
                "the new process ended before it was ready (see its log), or the upgrade was cancelled",
            ),
            UpgradeError::Bad(e) => write!(f, "{e}"),
            UpgradeError::NoAnswer => f.write_str("the new process did not answer in time"),
            UpgradeError::Task(e) => write!(f, "upgrade task: {e}"),
            UpgradeError::Thread(e) => write!(f, "cannot start the handover thread: {e}"),
        }
    }
}

impl std::error::Error for UpgradeError {}
