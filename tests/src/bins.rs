//! The project's binaries, as the tests run them: built by
//! `cargo build --workspace` (scripts/test does it first) into the same
//! target directory as the test binary.

use std::{io, path::PathBuf};

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

/// The directory of the workspace's binaries, which the test node's image
/// has on its `PATH` (a Scheduler's `command: ["orca-sim"]` finds it there,
/// as it would in a real image).
pub fn dir() -> PathBuf {
    path("orca-sim")
        .parent()
        .expect("invariant: a binary lives in a directory")
        .to_path_buf()
}

/// The agent binary the local hosts run: this workspace's, or
/// `$ORCA_AGENT_UNDER_TEST` (an older release's, to capture what it left
/// behind).
pub fn agent() -> PathBuf {
    std::env::var_os("ORCA_AGENT_UNDER_TEST")
        .map(PathBuf::from)
        .unwrap_or_else(|| path("orca-pool-agent"))
}

/// Where this machine's program `name` is: on this process's PATH, or in
/// /usr/sbin or /usr/bin — for a command run with an environment of its
/// own, which has no PATH.
pub fn host_program(name: &str) -> io::Result<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(["/usr/sbin", "/usr/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| io::Error::other(format!("{name} is not installed")))
}
