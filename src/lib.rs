//! # dsa-router
//!
//! An LDAP router DSA. Clients connect to it as if it were one directory
//! server; each operation is routed by its target DN to one DSA of the
//! namespace partition that holds it, using CA Directory (DXserver)
//! knowledge files.
//!
//! # Layout
//! Ten layers, each a folder, listed from the bottom up; a module imports
//! only from its own layer's modules (without a circle) and from layers
//! below it (`layout`, a unit test, checks both). `docs/architecture.md`
//! follows one operation through them.
//! * [`base`]: errors, log escaping, the outbound byte stream, worker
//!   threads.
//! * [`proto`]: DNs, LDAP messages, the PROXY protocol, TLS.
//! * [`directory`]: knowledge, the routing table, replication positions.
//! * [`observe`]: the access log, metrics, traces, the client list.
//! * [`admission`]: the failed-bind defence, policies and rates, the
//!   throttle.
//! * [`backend`]: connections to DSAs, their state and health, the tasks
//!   that watch them.
//! * [`lifecycle`]: drain, hot upgrade, handover.
//! * [`service`]: the settings and the context every task shares.
//! * [`frontend`]: the accept loop and client sessions.
//! * [`app`]: the subcommands, the admin API and `ctl`, `demo`.
//!
//! # Workspace
//! The binary built with `--no-default-features` is the router and nothing
//! else. Development tools are crates of their own:
//! * `crates/testdsa` (`dsa-testdsa`): the in-memory test DSA, loaded from
//!   LDIF, with fault switches, for tests and `demo`. The default feature
//!   `dev-tools` links it into the router binary for the `demo` and
//!   `testdsa` subcommands.
//! * `crates/bench` (`dsa-bench`): the load generator, a binary of its own
//!   (`cargo run --release -p dsa-bench -- --url ...`).

// No unsafe code, but in three modules of `lifecycle`: passing descriptors
// with SCM_RIGHTS (`handover::fds`), the monotonic clock of `notify` and the
// process calls of `supervisor` (waitpid, kill, prctl). Each allows it and
// says why each block is sound.
#![deny(unsafe_code)]
#![warn(unreachable_pub)]

pub mod base;

pub mod proto;

pub mod directory;

pub mod observe;

pub mod admission;

pub mod backend;

pub mod lifecycle;

pub mod service;

pub mod frontend;

pub mod app;

#[cfg(test)]
mod layout;
