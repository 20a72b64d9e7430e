#![no_main]
//! `settledb::fuzzing::twophase_state`: see its documentation and docs/fuzzing.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| settledb::fuzzing::twophase_state(data));
