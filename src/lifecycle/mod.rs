//! A router process's life: graceful drain, hot upgrade and what the old
//! and new process pass each other.
//!
//! * [`drain`]: graceful drain on SIGTERM or `ctl shutdown`: no new
//!   connections, operations in flight answered, each connection closed
//!   between operations with a Notice of Disconnection.
//! * [`upgrade`]: hot upgrade (`ctl upgrade`, SIGUSR2): the new process
//!   takes the listening sockets and every plain-LDAP session between
//!   operations.
//! * [`handover`]: what the two processes pass each other (descriptors
//!   with SCM_RIGHTS, the messages, a session's state).
//! * [`notify`]: telling the service manager (systemd, or the supervisor)
//!   that the router is ready, reloading, stopping, or that a hot
//!   upgrade's new process is the main one now.
//! * [`supervisor`]: `serve` as a container's first process: it runs the
//!   router as its child and follows it across hot upgrades.

pub mod drain;
pub mod handover;
pub mod notify;
pub mod supervisor;
pub mod upgrade;

/// A running router's drain and hot-upgrade state, shared by the accept
/// loop, the sessions and the admin API.
#[derive(Default)]
pub struct Lifecycle {
    /// Graceful drain: whether one runs, `ctl shutdown`'s request.
    pub drain: drain::Drain,
    /// Hot upgrade: `ctl upgrade`'s request, where sessions leave to.
    pub handover: handover::Handover,
    /// The service manager's socket (`$NOTIFY_SOCKET`), if any.
    pub notify: notify::Notify,
}
