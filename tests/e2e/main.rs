//! End-to-end tests, one file per feature, whichever DSA each test runs
//! against: the router in process in front of in-memory test DSAs
//! ([`support::inproc`]), or as a `dsa-router serve` process in front of
//! real OpenLDAP slapd ([`support::slapd`], the five-DSA setup of
//! [`five_dsas`]), driven by OpenLDAP's tools, Python `ldap3`, Rust
//! `ldap3` and, for the status page, headless Chromium. `testdsa` and
//! `slapd_harness` test the test DSA and the slapd harness themselves;
//! `five_dsas` and `inproc_checks` hold helpers shared by several files.
//!
//! Needs slapd, ldap-utils and the Python module ldap3
//! (`scripts/install-deps.sh`); without them the slapd tests fail.

#[path = "../support/mod.rs"]
mod support;

mod access_log;
mod admin_api;
mod backpressure;
mod bind_ejection;
mod binds;
mod busy_dsa;
mod connection_state;
mod controls;
mod drain;
mod dsa_addresses;
mod failed_binds;
mod failover;
mod fanout;
mod five_dsas;
mod horizontal_partitions;
mod identity;
mod inproc_checks;
mod knowledge_flags;
mod load_share;
mod lookalikes;
mod malformed;
mod metrics;
mod out_of_scope;
mod own_connections;
mod paged_lost;
mod paged_results;
mod pipelining;
mod policy;
mod policy_groups;
mod policy_hide;
mod post_read;
mod proxied_authorization;
mod proxy_protocol;
mod replication;
mod replication_pair;
mod root_dse;
mod router_dsa_name;
mod routing;
mod sasl;
mod search_results;
mod send_proxy;
mod slapd_aliases;
mod slapd_harness;
mod status_page;
mod testdsa;
mod tls;
mod tls_both_sides;
mod traces;
mod traces_binds;
mod traces_cap;
mod upgrade;
mod workers;
