//! Helpers shared by the integration tests that include this module.

use std::process::Command;

/// Runs the `settle` binary; (success, stdout, stderr).
pub fn settle(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_settle")).args(args).output().expect("run settle");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
