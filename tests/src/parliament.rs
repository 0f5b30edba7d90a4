//! parliament, the IAM policy linter (PyPI), from the venv the scripts
//! make (`$ORCA_PARLIAMENT`, else beside `$ORCA_MOTO_SERVER`, else
//! `.cache/venv/bin/parliament` of this checkout): it knows every action,
//! resource type and condition key AWS documents, and says where a policy
//! names one that does not exist, pairs a key with an action that does not
//! take it, or is malformed.

use std::{
    io::Write,
    path::PathBuf,
    process::{Command, Stdio},
};

use serde_json::Value;

fn path() -> PathBuf {
    if let Ok(p) = std::env::var("ORCA_PARLIAMENT") {
        return PathBuf::from(p);
    }
    if let Some(dir) = std::env::var_os("ORCA_MOTO_SERVER")
        .map(PathBuf::from)
        .and_then(|p| p.parent().map(PathBuf::from))
    {
        return dir.join("parliament");
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache/venv/bin/parliament")
}

/// Every finding parliament has on `policy` (a policy document's text),
/// down to its least severity (`INFO`), each as parliament's JSON says it
/// (`issue`, `severity`, `detail`, `location`); none, for a policy it finds
/// nothing wrong with.
pub fn findings(policy: &str) -> Vec<Value> {
    let bin = path();
    if !bin.exists() {
        panic!(
            "parliament is missing: no {} (scripts/lib/setup.sh's ensure_moto installs it into \
             the venv, as scripts/test does; or set ORCA_PARLIAMENT)",
            bin.display()
        );
    }
    // The policy on standard input: `--file` with a path is refused
    // whenever standard input is not a terminal, as under a test.
    let mut child = Command::new(&bin)
        .args(["--json", "--minimum_severity", "INFO"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{} could not start: {e}", bin.display()));
    child
        .stdin
        .take()
        .expect("invariant: stdin is piped")
        .write_all(policy.as_bytes())
        .expect("parliament reads the policy");
    let out = child.wait_with_output().expect("parliament ends");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // 0: nothing found; 1: findings, a JSON object a line; anything else
    // is parliament failing.
    match out.status.code() {
        Some(0 | 1) => {}
        _ => panic!(
            "parliament failed ({}): {}{}",
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
    let found: Vec<Value> = stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("parliament said {l:?}: {e}")))
        .collect();
    assert_eq!(
        found.is_empty(),
        out.status.success(),
        "parliament's exit status and findings disagree: {}: {stdout}",
        out.status
    );
    found
}
