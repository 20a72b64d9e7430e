#![no_main]
//! `settledb_server::fuzzing::sql_front_end`: see its documentation and docs/fuzzing.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| settledb_server::fuzzing::sql_front_end(data));
