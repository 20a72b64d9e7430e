#![no_main]
//! `settledb::fuzzing::vm_page`: see its documentation and docs/fuzzing.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| settledb::fuzzing::vm_page(data));
