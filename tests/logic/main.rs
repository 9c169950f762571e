//! Pure-logic tests, no network: knowledge loading and its error
//! positions (passwords never shown in them), the seed's routing table (through the library and the
//! `explain --json` command line), property tests, the connection future's
//! size.
//!
//! The tests under `tests/` are three crates (three binaries to link, not
//! one per file): `logic` (this one), `e2e` (end to end, routers in front
//! of test DSAs and real slapd) and `serial` (availability and throttling,
//! one test at a time).

/// The knowledge builder of `tests/support` (this crate needs no other
/// support).
#[path = "../support/knowledge.rs"]
#[allow(dead_code)]
mod knowledge;

mod future_size;
mod fuzz_inputs;
mod knowledge_load;
mod knowledge_secrets;
mod monitoring;
mod properties;
mod reference_doc;
mod seed_table;
