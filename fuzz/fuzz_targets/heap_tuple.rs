#![no_main]
//! `settledb::fuzzing::heap_tuple`: see its documentation and docs/fuzzing.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| settledb::fuzzing::heap_tuple(data));
