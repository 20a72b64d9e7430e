#![no_main]
//! `settledb::fuzzing::pgoutput_message`: see its documentation and docs/fuzzing.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| settledb::fuzzing::pgoutput_message(data));
