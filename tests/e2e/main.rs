//! End-to-end tests: the router in process in front of in-memory test
//! DSAs (`router_testdsa`, `malformed`, `tls`), the test DSA itself
//! (`testdsa`), and the router as a process in front of real OpenLDAP
//! slapd, driven by OpenLDAP's tools, Python `ldap3` and Rust `ldap3`
//! (`interop_slapd`, `fanout_slapd`, `security_slapd`, `sasl_slapd`,
//! `controls_slapd`, `stateful_slapd`, `tls_slapd`, and the status page in
//! headless Chromium (`status_page`), and `slapd_harness` for the harness
//! itself), and the admin API's defences against other web pages, other
//! machines and leaked passwords (`admin_api`).
//!
//! Needs slapd, ldap-utils and the Python module ldap3
//! (`scripts/install-deps.sh`); without them the slapd tests fail.

#[path = "../support/mod.rs"]
mod support;

mod access_log;
mod admin_api;
mod bind_ejection;
mod busy_dsa;
mod controls_slapd;
mod dsa_addresses;
mod failed_binds;
mod fanout_slapd;
mod horizontal_slapd;
mod interop_slapd;
mod knowledge_slapd;
mod malformed;
mod out_of_scope;
mod replication;
mod router_testdsa;
mod sasl_slapd;
mod security_slapd;
mod slapd_harness;
mod stateful_slapd;
mod status_page;
mod testdsa;
mod tls;
mod tls_slapd;
mod workers;
mod write_failover;
