//! The project's binaries, as the tests run them: built by
//! `cargo build --workspace` (scripts/test does it first) into the same
//! target directory as the test binary.

use std::path::PathBuf;

/// The path of workspace binary `name` (`orca-pool-agent`, `orca-operator`,
/// `orca-sim`).
pub fn path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("invariant: a test knows its own path");
    // target/<profile>/deps/<test> → target/<profile>/<name>
    let dir = exe
        .parent()
        .and_then(|d| {
            if d.ends_with("deps") {
                d.parent()
            } else {
                Some(d)
            }
        })
        .expect("invariant: a test binary lives in a directory");
    let bin = dir.join(name);
    if !bin.exists() {
        panic!(
            "{} is missing: build the workspace's binaries first (cargo build --workspace --bins; scripts/test does)",
            bin.display()
        );
    }
    bin
}
