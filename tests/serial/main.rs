//! Availability (failover, administration, reload) and throttling, end to
//! end with every part a real process: routers, test DSAs
//! (`dsa-router testdsa`, hence the `dev-tools` feature) and slapd.
//!
//! These tests burn CPU and measure latencies, so they run one at a time
//! ([`support::SERIAL`]), in a binary of their own: no other test runs
//! beside them.

#[path = "../support/mod.rs"]
mod support;

mod availability;
mod memory;
mod soak;
mod throttle;
