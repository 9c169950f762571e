//! Shared helpers for integration tests. Include with `mod support;` from a
//! file in `tests/`. Not every test crate uses every helper, hence the
//! `dead_code` allowance.
#![allow(dead_code)]

pub mod certs;
pub mod router;
pub mod slapd;
