//! `orca-operator local-supervise`: what the kubelet is to a pod, for a
//! local-mode process. It outlives the operator (a restarted operator finds
//! its pods where it left them), runs the command, passes SIGTERM on (and
//! SIGKILLs after a grace period, as Kubernetes does), and records the exit
//! code where the operator looks.

use std::{
    path::Path,
    process::{ExitCode, Stdio},
    time::Duration,
};

use tokio::{process::Command, signal::unix::SignalKind};

use super::pods::{write_exit, write_started, Exit};

/// As Kubernetes' default `terminationGracePeriodSeconds`.
const GRACE: Duration = Duration::from_secs(30);

/// Runs `command` with its output in `dir`'s log, killed after `timeout`
/// seconds if one is given; records its start and exit in `dir` and exits
/// with its code.
pub async fn supervise(dir: &Path, timeout: Option<u64>, command: &[String]) -> ExitCode {
    let Some((program, args)) = command.split_first() else {
        eprintln!("local-supervise: no command");
        return ExitCode::from(2);
    };
    let log = match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("log"))
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!("local-supervise: {}: {e}", dir.display());
            return ExitCode::from(2);
        }
    };
    let err_log = log
        .try_clone()
        .expect("invariant: a just-opened file can be cloned");
    let mut child = match Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err_log)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            let message = format!("cannot start {program}: {e}");
            let _ = std::fs::write(dir.join("termination-log"), &message);
            write_exit(dir, &Exit::now(127));
            return ExitCode::from(127);
        }
    };
    write_started(dir);
    let mut term = tokio::signal::unix::signal(SignalKind::terminate())
        .expect("invariant: SIGTERM can be handled");
    let deadline = async {
        match timeout {
            Some(s) => tokio::time::sleep(Duration::from_secs(s)).await,
            None => std::future::pending().await,
        }
    };
    let pid = child.id().map(|p| p as i32);
    let signal = |sig| {
        if let Some(pid) = pid {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, sig) };
        }
    };
    tokio::pin!(deadline);
    let status = tokio::select! {
        status = child.wait() => status,
        _ = term.recv() => {
            signal(libc::SIGTERM);
            match tokio::time::timeout(GRACE, child.wait()).await {
                Ok(status) => status,
                Err(_) => { signal(libc::SIGKILL); child.wait().await }
            }
        }
        _ = &mut deadline => {
            let _ = std::fs::write(dir.join("termination-log"), "timed out");
            signal(libc::SIGKILL);
            child.wait().await
        }
    };
    let code = match status {
        Ok(s) => {
            use std::os::unix::process::ExitStatusExt;
            s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(9))
        }
        Err(_) => 255,
    };
    write_exit(dir, &Exit::now(code));
    ExitCode::from(code.clamp(0, 255) as u8)
}
