//! The DSAs the tests run against: the five-DSA slapd setup
//! ([`five_dsas`]) and the in-process checks ([`inproc_checks`]) shared by
//! other folders, and the tests of the test DSA and of the slapd harness
//! themselves.

pub(crate) mod five_dsas;
pub(crate) mod inproc_checks;
mod own_directory;
mod slapd_harness;
mod testdsa;
