//! Hot upgrade: `ctl upgrade` or SIGUSR2 starts the binary at the router's
//! own path (as at its start: a new version installed there) with the
//! router's own arguments and `--handover-fd N`, the new process's end of
//! a Unix socket pair ([`crate::lifecycle::handover`]). Nothing a request says
//! chooses the binary. SIGTERM while the new process has not taken over
//! abandons the upgrade (the new process is stopped) and drains.
//!
//! 1. The new process loads its knowledge and builds its context first;
//!    if it cannot, it says why (REFUSED) and exits: the old one keeps
//!    serving and `ctl upgrade` reports the reason.
//! 2. Ready, it receives the listening sockets (LDAP, LDAPS, admin) with
//!    SCM_RIGHTS, accepts on them and says so (SERVING).
//! 3. The old process stops accepting (the sockets stay open: nothing
//!    queued in them is lost) and each of its client sessions leaves at
//!    its next moment between operations, its socket and state sent over
//!    the same socket pair (`session::handover`); sessions that cannot
//!    leave drain as on SIGTERM. The old process exits when none is left.
//!
//! `old` is the old process's side, `new` the new one's.

pub mod new;
pub mod old;

pub use new::{Incoming, Inherited, TakeOverError};
pub use old::Upgrader;

/// The flag that gives the new process its end of the socket pair.
pub const FLAG: &str = "--handover-fd";

/// How long the new process may take to load its knowledge and say it is
/// ready, and then to take the listeners and serve.
pub const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
pub const SERVING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
