//! See `dsa_router::fuzzing::schema`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| dsa_router::fuzzing::schema(data));
