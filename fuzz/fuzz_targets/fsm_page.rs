#![no_main]
//! `settledb::fuzzing::fsm_page`: see its documentation and docs/fuzzing.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| settledb::fuzzing::fsm_page(data));
