//! See `dsa_router::app::fuzzing::schema`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| dsa_router::app::fuzzing::schema(data));
