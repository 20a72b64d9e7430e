#![no_main]
//! `settledb::fuzzing::slot_state`: see its documentation and docs/fuzzing.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| settledb::fuzzing::slot_state(data));
