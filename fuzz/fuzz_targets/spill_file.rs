#![no_main]
//! `settledb::fuzzing::spill_file`: see its documentation and docs/fuzzing.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| settledb::fuzzing::spill_file(data));
