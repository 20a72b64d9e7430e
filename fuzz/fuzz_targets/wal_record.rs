#![no_main]
//! `settledb::fuzzing::wal_record`: see its documentation and docs/fuzzing.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| settledb::fuzzing::wal_record(data));
