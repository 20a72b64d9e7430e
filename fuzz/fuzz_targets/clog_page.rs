#![no_main]
//! `settledb::fuzzing::clog_page`: see its documentation and docs/fuzzing.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| settledb::fuzzing::clog_page(data));
