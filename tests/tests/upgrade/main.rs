//! Upgrades on a real control plane of their own: this binary changes the
//! cluster's CRDs, which the other suites share, so it starts its own
//! (one per test binary). It starts from what a previous release left
//! behind (`tests/fixtures/releases/`) and upgrades as
//! docs/operations.md#upgrade says.

mod stale_crds;

use std::process::Command;

use orca_tests::{cluster::ControlPlane, on_cluster::kubectl, release::helm};

/// Runs `program` with `args` against the control plane as its admin;
/// panics with its output unless it succeeds. Returns stdout and stderr.
pub fn run(cp: &ControlPlane, program: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .arg("--kubeconfig")
        .arg(cp.admin_kubeconfig())
        .output()
        .unwrap_or_else(|e| panic!("{} could not run: {e}", program.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{} {}: {text}",
        program.display(),
        args.join(" ")
    );
    text
}

/// `kubectl args…` as the admin.
pub fn kubectl_run(cp: &ControlPlane, args: &[&str]) -> String {
    run(cp, &kubectl(), args)
}

/// `helm args…` as the admin.
pub fn helm_run(cp: &ControlPlane, args: &[&str]) -> String {
    run(cp, &helm(), args)
}
