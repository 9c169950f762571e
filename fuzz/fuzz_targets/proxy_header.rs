//! See `dsa_router::fuzzing::proxy_header`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| dsa_router::fuzzing::proxy_header(data));
