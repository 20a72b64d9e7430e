#![no_main]
//! `settledb_server::fuzzing::frontend_messages`: see its documentation and docs/fuzzing.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| settledb_server::fuzzing::frontend_messages(data));
