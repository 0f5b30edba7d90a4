//! Running a pod's containers as local processes until they have exited,
//! passing on the pod's deletion: SIGTERM, then SIGKILL once the grace
//! period is over.

use super::*;

/// Runs the pod's containers until they have all exited, or the pod is
/// gone or deleted; false if it is gone from the API.
pub(super) async fn run(ctx: &Ctx, pod: &PodApi, rx: &mut Updates) -> bool {
    let start = now();
    // Wait until every container can start.
    let mut reported: Option<Vec<ContainerStatus>> = None;
    let launches = loop {
        let Some(current) = latest(rx) else {
            return false;
        };
        if deleting(&current) {
            return true;
        }
        let retry = match prepare(ctx, pod, &current).await {
            Ok(launches) => break launches,
            Err(waiting) => {
                let (containers, retry) = waiting.into_parts();
                if reported.as_ref() != Some(&containers) {
                    for c in &containers {
                        if let State::Waiting { reason, message } = &c.state() {
                            if reason != "ContainerCreating" {
                                tracing::info!(pod = %pod.key(), container = %c.name(), %reason, %message, "cannot start");
                            }
                        }
                    }
                    if !pod
                        .report(&pod_status("Pending", &start, &containers))
                        .await
                    {
                        return false;
                    }
                    reported = Some(containers);
                }
                retry
            }
        };
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { return false },
            _ = tokio::time::sleep(RETRY), if retry => {}
        }
    };
    let mut last = latest(rx);
    let Some(current) = &last else {
        return false;
    };
    if deleting(current) {
        return true;
    }

    // Start them.
    let dir = pod.dir(ctx);
    if let Err(e) = fresh_dir(&dir) {
        tracing::warn!(pod = %pod.key(), dir = %dir.display(), error = %e, "cannot prepare the pod's directory");
    }
    let mut containers = Vec::new();
    let mut waits = FuturesUnordered::new();
    for (i, launch) in launches.into_iter().enumerate() {
        let spawned = match launch.command(&dir) {
            Ok(command) => spawn(ctx, command).await,
            Err(e) => Err(e),
        };
        let (pid, state) = match spawned {
            Ok(child) => {
                let pid = child.id();
                tracing::info!(pod = %pod.key(), container = %launch.name(), pid, "started");
                waits.push(wait(i, child));
                (pid, State::Running { started: now() })
            }
            Err(e) => {
                tracing::info!(pod = %pod.key(), container = %launch.name(), error = %e, "cannot start");
                (None, start_error(&launch, e))
            }
        };
        let status = ContainerStatus::new(
            launch.name().to_string(),
            launch.image().to_string(),
            pid,
            state,
            None,
            0,
        );
        containers.push((status, launch));
    }
    let statuses = |containers: &[(ContainerStatus, Launch)]| -> Vec<ContainerStatus> {
        containers.iter().map(|(c, _)| c.clone()).collect()
    };
    let phase = |containers: &[(ContainerStatus, Launch)]| {
        let codes: Vec<Option<i32>> = containers.iter().map(|(c, _)| c.state().code()).collect();
        match codes.iter().all(Option::is_some) {
            false => "Running",
            true if codes.iter().all(|c| *c == Some(0)) => "Succeeded",
            true => "Failed",
        }
    };
    if !pod
        .report(&pod_status(
            phase(&containers),
            &start,
            &statuses(&containers),
        ))
        .await
    {
        signal_all(ctx, &containers, libc::SIGKILL);
        return false;
    }

    // Wait for them, passing on a deletion.
    let mut terminated_at: Option<Instant> = None;
    let mut killed = false;
    let mut gone = false;
    while !waits.is_empty() {
        let deadline = match (terminated_at, &last) {
            (Some(at), Some(p)) if !killed => Some(at + grace(p)),
            _ => None,
        };
        tokio::select! {
            Some((i, status)) = waits.next() => {
                let (c, launch) = &mut containers[i];
                let code = exit_code(&status);
                if let Some(pid) = c.pid() {
                    ctx.groups.ended(pid as i32);
                }
                let mut message = launch.message(&dir, code);
                if let Err(e) = &status {
                    message = format!("cannot wait for the process: {e}");
                }
                tracing::info!(pod = %pod.key(), container = %c.name(), code, "exited");
                let started = match &c.state() {
                    State::Running { started } => Some(started.clone()),
                    _ => None,
                };
                c.set_state(State::Terminated {
                    code,
                    reason: if code == 0 { "Completed" } else { "Error" }.into(),
                    message,
                    started,
                    finished: now(),
                });
                if !gone && !waits.is_empty() {
                    gone = !pod.report(&pod_status("Running", &start, &statuses(&containers))).await;
                }
            }
            changed = rx.changed(), if !gone => {
                last = if changed.is_ok() { latest(rx) } else { None };
                match &last {
                    None => {
                        tracing::info!(pod = %pod.key(), "gone from the API: killing its processes");
                        gone = true;
                        signal_all(ctx, &containers, libc::SIGKILL);
                        killed = true;
                    }
                    Some(p) if deleting(p) && terminated_at.is_none() => {
                        tracing::info!(pod = %pod.key(), grace = ?grace(p), "deleted: SIGTERM");
                        signal_all(ctx, &containers, libc::SIGTERM);
                        terminated_at = Some(Instant::now());
                    }
                    Some(_) => {}
                }
            }
            _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                tracing::info!(pod = %pod.key(), "grace period over: SIGKILL");
                signal_all(ctx, &containers, libc::SIGKILL);
                killed = true;
            }
        }
    }
    if gone {
        return false;
    }
    pod.report(&pod_status(
        phase(&containers),
        &start,
        &statuses(&containers),
    ))
    .await
}

/// Signals the process group of each container still running.
fn signal_all(ctx: &Ctx, containers: &[(ContainerStatus, Launch)], signal: i32) {
    for (c, _) in containers {
        if let (Some(pid), true) = (c.pid(), c.running()) {
            ctx.groups.signal(pid as i32, signal);
        }
    }
}

async fn wait(i: usize, mut child: Child) -> (usize, io::Result<ExitStatus>) {
    (i, child.wait().await)
}

/// Empties (or makes) a pod's directory: a pod of the same name before it
/// left its files there.
pub(super) fn fresh_dir(dir: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::create_dir_all(dir)?;
    std::fs::File::create(dir.join("log"))?;
    Ok(())
}

fn start_error(launch: &Launch, e: io::Error) -> State {
    let program = launch
        .argv()
        .first()
        .map(String::as_str)
        .unwrap_or_default();
    State::Terminated {
        code: 128,
        reason: "StartError".into(),
        message: format!("cannot start {program:?}: {e}"),
        started: None,
        finished: now(),
    }
}
