//! Ending the local mode as a user does — SIGTERM, or Ctrl-C in its
//! terminal — ends every process it started: the pool's agents and the run
//! command of a busy instance, the scheduler and its supervisor, moto, and
//! its own PostgreSQL. Killed (SIGKILL), it still takes its hosts and
//! servers along; only its pods live on, as pods outlive a crashed
//! controller.

use orca_tests::local::{wait_until_none, Process, Stop};

use super::*;

/// A pool on the local mode's own moto whose instances' run command lasts:
/// a run handed out is still running when the local mode is stopped.
const POOL: &str = "apiVersion: orca.dev/v1alpha1
kind: WarmPool
metadata:
  name: runners
spec:
  scheduler: orca
  region: us-east-1
  idle: {min: 2, max: 3}
  maxInstances: 4
  idleSeconds: 600
  launch:
    imageId: ami-12c6146b
    instanceTypes: [t3.micro]
    subnetIds: [subnet-1]
    runCommand: sleep 600
";

/// The kinds of process the local mode starts, as [`kind`] names them: its
/// pods (a supervisor and its scheduler), its hosts' agents, its servers,
/// and a run command.
const KINDS: [&str; 6] = [
    "orca-operator local-supervise",
    "orca-sim scheduler",
    "orca-pool-agent pool-next",
    "moto_server",
    "postgres -D",
    "sleep 600",
];

/// A process's program (without its directory) and first argument: what
/// tells the kinds apart (a supervisor's command line holds its pod's too).
fn kind(p: &Process) -> String {
    let mut words = p.command().split(' ');
    let program = words.next().unwrap_or("").rsplit('/').next().unwrap_or("");
    format!("{program} {}", words.next().unwrap_or(""))
}

fn is(p: &Process, kinds: &[&str]) -> bool {
    kinds.iter().any(|k| kind(p).contains(k))
}

fn list(processes: &[Process]) -> String {
    processes
        .iter()
        .map(|p| format!("  {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The local mode on its own PostgreSQL and moto, its scheduler leading,
/// its pool's agents waiting idle; with `busy`, one instance is also
/// handed a run, whose command runs.
async fn running_with_a_pool(busy: bool) -> LocalMode {
    let mut local = LocalMode::own_database(&scheduler("v1", "", ""));
    local.write("warmpool.yaml", POOL);
    local.start();
    local.wait_for("v1 ready", Duration::from_secs(60), ready_with("v1"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while local.pool_status("runners").idle < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the pool never had two idle instances; the operator said:\n{}",
            local.output().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let kinds: &[&str] = if busy { &KINDS } else { &KINDS[..5] };
    if busy {
        // As a scheduler hands out a run.
        local.hand_out("default/runners").await;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let running = local.processes();
        let missing: Vec<&str> = kinds
            .iter()
            .copied()
            .filter(|k| !running.iter().any(|p| is(p, &[k])))
            .collect();
        if missing.is_empty() {
            return local;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never running: {missing:?}; running:\n{}\nthe operator said:\n{}",
            list(&running),
            local.output().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn ends_every_process(how: Stop) {
    let mut local = running_with_a_pool(true).await;
    let status = local.stop(how, Duration::from_secs(180));
    assert!(
        status.success(),
        "the local mode ended with {status} after {how:?}; it said:\n{}",
        local.output().join("\n")
    );
    let left = wait_until_none(Duration::from_secs(5), || local.processes());
    assert!(
        left.is_empty(),
        "still running 5 s after the local mode ended ({how:?}):\n{}",
        list(&left)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_every_process_the_local_mode_started() {
    ends_every_process(Stop::Term).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_ends_every_process_the_local_mode_started() {
    ends_every_process(Stop::CtrlC).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_local_mode_takes_its_hosts_along_and_leaves_its_pods() {
    let mut local = running_with_a_pool(false).await;
    local.kill();
    // The agents (which would poll a database that is gone, for ever),
    // moto and PostgreSQL end with the operator.
    let left = wait_until_none(Duration::from_secs(5), || {
        local
            .processes()
            .into_iter()
            .filter(|p| is(p, &KINDS[2..]))
            .collect()
    });
    assert!(
        left.is_empty(),
        "still running 5 s after the local mode was killed:\n{}",
        list(&left)
    );
    // Its pods live on, as pods outlive a crashed controller (the test's
    // end kills them).
    let pods = local.processes();
    for k in &KINDS[..2] {
        assert!(
            pods.iter().any(|p| is(p, &[k])),
            "no {k} left after the kill:\n{}",
            list(&pods)
        );
    }
}
