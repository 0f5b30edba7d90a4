//! Local EC2 hosts (docs/architecture.md#the-local-mode): for
//! `orca-operator local` and the tests, the instances of an EC2 endpoint
//! without machines behind it (moto's server) are played by local
//! processes. For each instance of the pool EC2 lists as running, this runs
//! what its user-data would (see [`crate::warmpool::userdata`]): the real
//! `orca-pool-agent pool-next` with `ORCA_INSTANCE` = the instance id, the
//! `runCommand` as `sh -c` for each run it is handed, and `pool-next`
//! again; when `pool-next` exits non-zero it terminates the instance in
//! EC2, as the power-off would. An instance EC2 no longer lists as running
//! has its processes killed, and so does every host once its pool stops.
//! The hosts' processes are this process's: each gets SIGKILL when it
//! ends, even killed (a restarted local mode starts the hosts again from
//! EC2's listing; an agent left from before would be a second one on the
//! same instance, or poll a database that is gone).

use std::{collections::HashMap, fmt, path::PathBuf, process::Stdio, sync::Arc, time::Duration};

use tokio::{process::Command, task::JoinHandle};

use super::spawn::spawn_tied_async;
use crate::warmpool::{
    ec2::{Ec2, Ec2Error, Ownership},
    plan::Ec2State,
};

/// What every local host runs.
#[derive(Clone)]
pub struct HostConfig {
    /// The `orca-pool-agent` binary.
    agent: PathBuf,
    /// `ORCA_DATABASE_URL` of the agents; never shown.
    database_url: String,
    /// `namespace/name`: `ORCA_POOL`.
    pool: String,
    /// `pool-next`'s `seconds`.
    idle_seconds: i64,
    /// The command each run runs.
    run_command: String,
    /// More environment for the agents and run commands (tests:
    /// `ORCA_POOL_AGENT_GRACE_MS`).
    env: Vec<(String, String)>,
    /// How often EC2 is listed.
    poll: Duration,
    /// Let the agents' stderr through (else discarded).
    agent_stderr: bool,
}

impl HostConfig {
    /// Hosts that run `agent` for `pool` (`namespace/name`) on the
    /// database `database_url`, idle for `idle_seconds` before they power
    /// off, each run running `run_command`; EC2 listed every 500 ms, the
    /// agents' stderr discarded.
    pub fn new(
        agent: PathBuf,
        database_url: &str,
        pool: &str,
        idle_seconds: i64,
        run_command: &str,
    ) -> Self {
        HostConfig {
            agent,
            database_url: database_url.to_string(),
            pool: pool.to_string(),
            idle_seconds,
            run_command: run_command.to_string(),
            env: Vec::new(),
            poll: Duration::from_millis(500),
            agent_stderr: false,
        }
    }

    /// With more environment for the agents and run commands.
    pub fn with_env(self, env: Vec<(String, String)>) -> Self {
        HostConfig { env, ..self }
    }

    /// Listing EC2 every `poll`.
    pub fn with_poll(self, poll: Duration) -> Self {
        HostConfig { poll, ..self }
    }

    /// Letting the agents' stderr through, if `agent_stderr`.
    pub fn with_agent_stderr(self, agent_stderr: bool) -> Self {
        HostConfig {
            agent_stderr,
            ..self
        }
    }
}

impl fmt::Debug for HostConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostConfig")
            .field("agent", &self.agent)
            .field("pool", &self.pool)
            .field("idle_seconds", &self.idle_seconds)
            .finish_non_exhaustive()
    }
}

/// The local hosts of one pool.
pub struct Hosts {
    ec2: Ec2,
    owner: Ownership,
    cfg: Arc<HostConfig>,
    running: HashMap<String, JoinHandle<()>>,
    /// Whether instances without the cluster's tag are the pool's too.
    any_cluster: bool,
}

impl Hosts {
    /// No hosts yet for the pool `owner` names in `ec2`; each one started
    /// runs as `cfg` says.
    pub fn new(ec2: Ec2, owner: Ownership, cfg: HostConfig) -> Self {
        Hosts {
            ec2,
            owner,
            cfg: Arc::new(cfg),
            running: HashMap::new(),
            any_cluster: false,
        }
    }

    /// These hosts also play the pool's instances that carry no cluster
    /// tag: those a release launched before instances carried one (the
    /// upgrade tests start from them), whichever cluster adopts them later.
    pub fn of_any_cluster(mut self) -> Self {
        self.any_cluster = true;
        self
    }

    /// Lists the pool's instances once: starts a host for each new running
    /// one, stops the host of each that is not running any more.
    pub async fn sync(&mut self) -> Result<(), Ec2Error> {
        let listed = if self.any_cluster {
            self.ec2
                .describe_tagged(&self.owner.legacy_tags())
                .await?
                .into_iter()
                .filter_map(|t| t.into_instance())
                .collect()
        } else {
            self.ec2.describe(&self.owner).await?
        };
        let up: HashMap<&str, Ec2State> = listed
            .iter()
            .filter(|i| matches!(i.state(), Ec2State::Pending | Ec2State::Running))
            .map(|i| (i.id(), i.state()))
            .collect();
        self.running.retain(|id, task| {
            // Dropping the task's future kills its processes (kill_on_drop),
            // as a terminated machine would. A host that powered off stays
            // until EC2 no longer lists its instance, so it is not started
            // again.
            let keep = up.contains_key(id.as_str());
            if !keep {
                task.abort();
            }
            keep
        });
        for (id, state) in up {
            if state == Ec2State::Running && !self.running.contains_key(id) {
                let task = tokio::spawn(host(self.ec2.clone(), id.to_string(), self.cfg.clone()));
                self.running.insert(id.to_string(), task);
            }
        }
        Ok(())
    }

    /// The instances hosted just now.
    pub fn hosted(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.running.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Syncs every `poll` until `stop` resolves; then stops every host.
    pub async fn run<S: std::future::Future<Output = ()>>(mut self, stop: S) {
        tokio::pin!(stop);
        loop {
            if let Err(e) = self.sync().await {
                tracing::warn!(pool = %self.cfg.pool, error = %e, "local hosts: cannot list instances");
            }
            tokio::select! {
                _ = &mut stop => break,
                _ = tokio::time::sleep(self.cfg.poll) => {}
            }
        }
        self.stop_all().await;
    }

    /// Stops every host and waits until each one's processes are killed:
    /// an aborted task drops its future (and so kills its process groups)
    /// only when the runtime next gets to it, and a process exiting before
    /// that would leave them.
    pub async fn stop_all(&mut self) {
        let tasks: Vec<JoinHandle<()>> = self.running.drain().map(|(_, t)| t).collect();
        for task in &tasks {
            task.abort();
        }
        for task in tasks {
            let _ = task.await;
        }
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for task in self.running.values() {
            task.abort();
        }
    }
}

fn command(cfg: &HostConfig, program: &std::path::Path, instance: &str) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("ORCA_DATABASE_URL", &cfg.database_url)
        .env("ORCA_POOL", &cfg.pool)
        .env("ORCA_INSTANCE", instance)
        .envs(cfg.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stderr(if cfg.agent_stderr {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .kill_on_drop(true)
        // Its own process group, so everything it started goes with it.
        .process_group(0);
    cmd
}

/// Kills a process group when dropped: when its process is done, or when
/// the host stops (its instance was terminated) while it runs.
struct Group(Option<u32>);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.and_then(|p| i32::try_from(p).ok()) {
            // SAFETY: kill(2) has no memory-safety preconditions; the group
            // is one this host made (process_group(0) above).
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
}

/// Starts `cmd`, tied to this process: it gets SIGKILL when this process
/// ends, however it ends.
fn spawn(cmd: Command) -> std::io::Result<tokio::process::Child> {
    spawn_tied_async(cmd, libc::SIGKILL)
}

/// Runs `cmd` to the end; its whole process group is killed after, or
/// if this future is dropped.
async fn run_to_end(cmd: Command) -> std::io::Result<std::process::Output> {
    let child = spawn(cmd)?;
    let _group = Group(child.id());
    child.wait_with_output().await
}

/// One machine: the user-data loop, then the power-off.
async fn host(ec2: Ec2, instance: String, cfg: Arc<HostConfig>) {
    let (mut run, mut start) = ("0".to_string(), "0".to_string());
    loop {
        let mut next = command(&cfg, &cfg.agent, &instance);
        next.args([
            "pool-next",
            &instance,
            &run,
            &start,
            &cfg.idle_seconds.max(1).to_string(),
        ])
        .stdout(Stdio::piped());
        let out = match run_to_end(next).await {
            Ok(out) => out,
            Err(e) => {
                tracing::warn!(instance = %instance, agent = %cfg.agent.display(), error = %e,
                    "local host: cannot start the agent");
                break;
            }
        };
        let line = String::from_utf8_lossy(&out.stdout).trim_end().to_string();
        let fields: Vec<&str> = line.split(' ').collect();
        if !out.status.success() || fields.len() != 5 || fields[0] != "next" {
            tracing::info!(instance = %instance, status = %out.status, "local host: pool-next is done; powering off");
            break;
        }
        (run, start) = (fields[1].to_string(), fields[2].to_string());
        let mut work = command(&cfg, std::path::Path::new("sh"), &instance);
        work.args(["-c", &cfg.run_command])
            .env("ORCA_RUN", fields[1])
            .env("ORCA_START", fields[2])
            .env("ORCA_HEAD", fields[3])
            .env("ORCA_NEW_CODE", fields[4])
            .stdout(Stdio::null());
        // pool-watch beside the run, as user-data starts it: killed with its
        // group once the run is over (or when this host stops).
        let mut watch = command(&cfg, &cfg.agent, &instance);
        watch.args(["pool-watch", &instance]).stdout(Stdio::null());
        let watcher = match spawn(watch) {
            Ok(child) => Some((Group(child.id()), child)),
            Err(e) => {
                tracing::warn!(instance = %instance, error = %e, "local host: cannot start pool-watch");
                None
            }
        };
        let ran = run_to_end(work).await.map(|o| o.status);
        drop(watcher);
        match ran {
            Ok(s) if !s.success() => {
                tracing::info!(instance = %instance, run = %run, status = %s, "local host: run command failed")
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(instance = %instance, error = %e, "local host: cannot start the run command")
            }
        }
    }
    // The power-off: InstanceInitiatedShutdownBehavior=terminate.
    if let Err(e) = ec2.terminate(std::slice::from_ref(&instance)).await {
        tracing::warn!(instance = %instance, error = %e, "local host: cannot terminate after power-off");
    }
}
