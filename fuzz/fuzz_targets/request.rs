//! See `dsa_router::app::fuzzing::request`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| dsa_router::app::fuzzing::request(data));
