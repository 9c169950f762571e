//! See `dsa_router::fuzzing::dn`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| dsa_router::fuzzing::dn(data));
