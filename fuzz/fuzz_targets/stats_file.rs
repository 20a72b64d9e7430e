#![no_main]
//! `settledb::fuzzing::stats_file`: see its documentation and docs/fuzzing.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| settledb::fuzzing::stats_file(data));
