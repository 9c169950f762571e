//! See `dsa_router::fuzzing::request`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| dsa_router::fuzzing::request(data));
