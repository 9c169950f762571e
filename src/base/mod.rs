//! Building blocks that know nothing of routing: the error type, the
//! unkeyed hasher of the hot maps, log escaping, the ordered outbound
//! byte stream, the worker threads and giving freed memory back.
//!
//! * [`error`]: the one error type: who caused it, whether the operation
//!   may be retried, and its LDAP result code and message.
//! * `fasthash`: the unkeyed hasher of the maps on every operation's path.
//! * [`instance`]: this process's instance marker, which its root DSE
//!   carries so that it knows itself at any address.
//! * [`logsafe`]: client- and DSA-supplied text in log lines, escaped
//!   ([`logsafe::esc`]).
//! * [`memory`]: freed memory given back to the system while the router
//!   runs (after a flood).
//! * `outbox`: an ordered outbound byte stream with many producers (a
//!   client's responses, the corked requests to a DSA).
//! * [`units`]: durations (`500ms`, `15m`) and sizes (`4MiB`) as settings
//!   take them, each setting with its range.
//! * [`workers`]: the worker threads (a single-threaded runtime each), how
//!   many are in use, and sessions moving between them.

pub mod error;
pub(crate) mod fasthash;
pub mod instance;
pub mod logsafe;
pub mod memory;
pub(crate) mod outbox;
pub mod units;
pub mod workers;
