//! End-to-end tests, one file per feature, grouped by area in folders
//! (each a module: `cargo test --profile ci --test e2e protocol::tls::`
//! runs the tests of `protocol/tls.rs`):
//!
//! * `routing/`: where operations go: partitions, load-share groups, write
//!   precedence, failover, fan-out, hash slots, DSA addresses, knowledge
//!   flags, the root DSE and search results, aliases, the router's own
//!   connections and its name on the DSAs (`operations.rs`: reads, writes
//!   and binds across the partitions).
//! * `binds/`: simple and SASL binds, failed-bind limits, look-alike DNs,
//!   bind timeouts, the identity conveyed to the DSAs, proxied
//!   authorization (`rights.rs`: never more rights than directly).
//! * `policy/`: client policies (`rules.rs`: rules and rates; groups,
//!   hidden attributes).
//! * `replication/`: replicated slapd: read-your-writes
//!   (`read_your_writes.rs`), a multi-provider pair, post-read.
//! * `admin/`: the admin API and `ctl`, the status page, metrics, the
//!   access log, OpenTelemetry traces.
//! * `lifecycle/`: drain, upgrade by handover (with `upgrade_load.py`),
//!   worker threads.
//! * `protocol/`: malformed PDUs, controls, paged results, pipelining and
//!   backpressure, connection state through real clients, TLS, PROXY
//!   protocol.
//! * `dsas/`: the five-DSA slapd setup (`five_dsas`), the README's "own
//!   directory" section run as written (`own_directory`) and the in-process
//!   checks (`inproc_checks`) other folders share, and the tests of the
//!   test DSA (`testdsa`) and of the slapd harness (`slapd_harness`).
//!
//! Whichever DSA a test runs against: the router in process in front of
//! in-memory test DSAs ([`support::inproc`]), or as a `dsa-router serve`
//! process in front of real OpenLDAP slapd ([`support::slapd`]), driven by
//! OpenLDAP's tools and Rust `ldap3` ([`support::ldap`]), Python `ldap3`
//! and, for the status page, headless Chromium; knowledge files come from
//! [`support::knowledge`].
//!
//! Needs slapd, ldap-utils and the Python module ldap3
//! (`scripts/install-deps.sh`); without them the slapd tests fail.

#[path = "../support/mod.rs"]
mod support;

mod admin;
mod binds;
mod dsas;
mod lifecycle;
mod policy;
mod protocol;
mod replication;
mod routing;
