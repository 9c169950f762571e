//! # dsa-router
//!
//! An LDAP router DSA. Clients connect to it as if it were one directory
//! server; each operation is routed by its target DN to one DSA of the
//! namespace partition that holds it, using CA Directory (DXserver)
//! knowledge files.
//!
//! # Layout
//! * [`dn`]: DN parsing (RFC 4514 strings and the knowledge `<type value>`
//!   form), normalization and ancestry. Pure.
//! * [`error`]: the one error type: who caused it, whether the operation
//!   may be retried, and its LDAP result code and message.
//! * [`knowledge`]: the DXserver knowledge grammar, `source` resolution and
//!   validation into one immutable [`knowledge::Snapshot`]. Pure apart from
//!   reading files.
//! * [`route`]: partitions, the ordered list, load-share groups and target
//!   selection for reads and writes. Pure: a function of the snapshot and the
//!   per-DSA run-time view.
//! * `dsa_state`: per-DSA run-time state (health, admin state, in-flight
//!   counts, read latencies, ejections, what its root DSE advertises),
//!   keyed by DSA name so it survives knowledge reloads.
//! * `health`: active probes, rise/fall, passive signals.
//! * [`wire`]: framing, message-ID rewriting, request decoding, the PDUs
//!   the router writes itself, and the connection-state model
//!   ([`wire::state`]: which requests need a DSA connection of the
//!   client's own).
//! * `upstream`: connections to DSAs (multiplexed, message IDs remapped),
//!   per-DSA pools, and what each DSA's root DSE advertises.
//! * [`session`]: one client connection: routing each request, identity
//!   (simple and SASL binds), extended operations, the bounded outbound
//!   queue.
//! * [`config`]: the configuration, plain data filled by the command line.
//! * [`context`]: the application context ([`context::Context`]): configuration, metrics and the
//!   routing snapshot, swapped whole.
//! * [`server`]: the accept loop, `run(listener, router, shutdown)`.
//! * [`drain`]: graceful drain on SIGTERM or `ctl shutdown`: no new
//!   connections, operations in flight answered, each connection closed
//!   between operations with a Notice of Disconnection.
//! * [`upgrade`]: hot upgrade (`ctl upgrade`, SIGUSR2): the new process
//!   takes the listening sockets and every plain-LDAP session between
//!   operations; [`handover`]: what the two processes pass each other
//!   (descriptors with SCM_RIGHTS, the messages, a session's state).
//! * [`clients`]: the client sessions `/status` lists (address,
//!   identity, TLS, since when, handed over), kept off the operations'
//!   path.
//! * [`proxy_protocol`]: PROXY protocol v1/v2 headers from the load
//!   balancers listed in `--proxy-protocol-from` (the client's address).
//! * `demo`: `dsa-router demo`, the seed setup on loopback with test DSAs
//!   (feature `dev-tools`).
//! * `limits`: CPU and memory thresholds over a window, cgroup-aware sampling.
//! * `tail`: hedged reads and outlier ejection (one task: read latencies,
//!   the hedge budget, the ejection rules), and ejection for binds.
//! * [`fuzzing`]: what the fuzz targets run (`fuzz/`, `scripts/fuzz.sh`).
//! * [`access`]: the access log, formatted on the operation's thread and
//!   written by a thread of its own.
//! * [`logsafe`]: client- and DSA-supplied text in log lines, escaped
//!   ([`logsafe::esc`]).
//! * [`admin`]: the admin HTTP API (status, metrics, control) and `ctl`.
//! * [`cli`]: the subcommands: `check` and `explain` (their output), and
//!   `serve` and `demo` ([`cli::serve`]: the flags, the startup sequence,
//!   signals and `--watch`).
//! * [`tls`]: rustls configuration (client-facing and towards DSAs), the
//!   client stream types, StartTLS.
//! * [`workers`]: the worker threads (a single-threaded runtime each), how
//!   many are in use, and sessions moving between them.
//! * `outbox`: an ordered outbound byte stream with many producers (a
//!   client's responses, the corked requests to a DSA).
//! * `metrics`: the counters of `/metrics`, fixed arrays of atomics.
//! * `fasthash`: the unkeyed hasher of the maps on every operation's path.
//! * [`replication`]: replication positions (OpenLDAP CSNs, `contextCSN`
//!   per server ID), write marks and the per-DSA read gate
//!   (`--max-replication-lag`, `--max-staleness`). Pure state.
//! * [`follow`]: what reads positions at run time: the `contextCSN`
//!   poller, read-your-writes by position, their `/status` and `/metrics`.
//! * [`guard`]: the failed-bind defence: bounded counts of failed binds
//!   per bind DN and client address, and their back-off.
//! * [`policy`]: client policies and rates (`--policy FILE`): ordered
//!   rules of who may do what where, rate buckets; pure matching, the
//!   session's hooks are `session::policy`; `membership`: what reads the
//!   member sets of the groups rules name (`member_of`) from the DSAs
//!   holding them, off the operations' path.
//! * [`otel`]: OpenTelemetry traces (`--otlp-endpoint`): a span per
//!   sampled operation, a child per DSA attempt, exported in batches off
//!   the operation's path; the W3C trace context control.
//! * `layout`: the module graph checks (a unit test: no import circle in
//!   a folder, what may import what).
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

// No unsafe code, but in one module: passing descriptors with SCM_RIGHTS
// (`handover::fds`, which allows it and says why each block is sound).
#![deny(unsafe_code)]
#![warn(unreachable_pub)]

pub mod access;
pub mod admin;
pub mod cli;
pub mod clients;
pub mod config;
pub mod context;
#[cfg(feature = "dev-tools")]
pub mod demo;
pub mod dn;
pub mod drain;
pub(crate) mod dsa_state;
pub mod error;
pub(crate) mod fasthash;
pub mod follow;
#[doc(hidden)]
pub mod fuzzing;
pub mod guard;
pub mod handover;
pub(crate) mod health;
pub mod knowledge;
pub(crate) mod limits;
pub mod logsafe;
pub(crate) mod membership;
pub(crate) mod metrics;
pub mod otel;
pub(crate) mod outbox;
pub mod policy;
pub mod proxy_protocol;
pub mod replication;
pub mod route;
pub mod server;
pub mod session;
pub(crate) mod tail;
pub mod tls;
pub mod upgrade;
pub(crate) mod upstream;
pub mod wire;
pub mod workers;

#[cfg(test)]
mod layout;
