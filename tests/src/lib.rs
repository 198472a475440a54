//! Helpers for pipehub's end-to-end tests: they locate and run the real `pipehub` binary.

use std::path::PathBuf;

/// The path of the `pipehub` binary built for this test run.
pub fn pipehub_bin() -> PathBuf {
    // Cargo builds workspace binaries into the same target directory as this crate's tests.
    let mut dir = std::env::current_exe().expect("the test binary knows its own path");
    dir.pop();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir.join(format!("pipehub{}", std::env::consts::EXE_SUFFIX))
}
