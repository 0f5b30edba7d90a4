//! Pods and Jobs as local processes. Each lives in a directory of
//! `<dir>/.status/{pods,jobs}/<name>/`: `pod.json` (what it is), `pid` (its
//! supervisor), `started` once its command runs, `log`, `termination-log`,
//! `exit.json` once it has ended, `deleting` once a delete was asked. The
//! directory is the "cluster": a restarted operator reads it back, as a
//! restarted controller lists pods.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Stdio,
};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::scheduler::{JobState, JobView, PodState, PodView};

/// What a local pod or job is.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PodMeta {
    /// `namespace/name` of the Scheduler it belongs to.
    scheduler: String,
    revision: String,
    sequence: u32,
    image: String,
    created: DateTime<Utc>,
    /// A register job's: the hash of the register step it runs (a Job's
    /// label `orca.dev/register`); absent for pods and older jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    register: Option<String>,
}

impl PodMeta {
    /// This one, of a registration Job: `register` hashes its spec.
    pub fn with_register(self, register: String) -> Self {
        PodMeta {
            register: Some(register),
            ..self
        }
    }

    /// A pod or Job of `scheduler` at `revision`, its `sequence`th, of
    /// `image`, made at `created`; `register`: a registration's hash.
    pub fn new(
        scheduler: String,
        revision: String,
        sequence: u32,
        image: String,
        created: DateTime<Utc>,
        register: Option<String>,
    ) -> Self {
        PodMeta {
            scheduler,
            revision,
            sequence,
            image,
            created,
            register,
        }
    }

    /// `namespace/name` of the Scheduler it belongs to.
    pub fn scheduler(&self) -> &String {
        &self.scheduler
    }
}

/// How a local pod or job ended: its exit code and when (`exit.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Exit {
    code: i32,
    finished: DateTime<Utc>,
    /// Recorded by the operator, not by the supervisor: the supervisor was
    /// gone (killed with a local mode, say) before its command ended.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    supervisor_gone: bool,
}

impl Exit {
    /// An exit with `code`, finished now.
    pub fn now(code: i32) -> Self {
        Exit {
            code,
            finished: Utc::now(),
            supervisor_gone: false,
        }
    }
}

/// Records that the command runs, as the kubelet records `startedAt`.
pub(super) fn write_started(dir: &Path) {
    let tmp = dir.join("started.tmp");
    if std::fs::write(&tmp, Utc::now().to_rfc3339()).is_ok() {
        let _ = std::fs::rename(&tmp, dir.join("started"));
    }
}

pub(super) fn write_exit(dir: &Path, exit: &Exit) {
    let tmp = dir.join("exit.json.tmp");
    if let Ok(text) = serde_json::to_string(exit) {
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, dir.join("exit.json"));
        }
    }
}

/// How long a pod or job may be without its supervisor's `pid` file while
/// it is being started.
const NO_PID: std::time::Duration = std::time::Duration::from_secs(10);

/// The exit of a pod or job whose supervisor `pid` is gone without having
/// written one: recorded in `exit.json` the first time it is seen (unless
/// the supervisor wrote its own meanwhile, which is kept), so that its
/// failure keeps one time, as a kubelet records a container's termination
/// once. A time taken afresh at each reading would always be now, and a
/// back-off counted from it (a register Job's) would never end.
///
/// Without a `pid` file the supervisor is taken for gone once `pod.json`
/// is older than [`NO_PID`] (an operator killed as it started one); a
/// younger one is being started.
fn record_gone(dir: &Path, pid: Option<i32>) -> Option<Exit> {
    let gone = match pid {
        Some(pid) => !alive(pid),
        None => std::fs::metadata(dir.join("pod.json"))
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > NO_PID)),
    };
    if !gone {
        return None;
    }
    let gone = Exit {
        supervisor_gone: true,
        ..Exit::now(137)
    };
    let tmp = dir.join("exit.json.gone");
    if let Ok(text) = serde_json::to_string(&gone) {
        // A link, not a rename: it never replaces an exit.json there.
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::hard_link(&tmp, dir.join("exit.json"));
            let _ = std::fs::remove_file(&tmp);
        }
    }
    read_exit(dir)
}

fn read_exit(dir: &Path) -> Option<Exit> {
    std::fs::read_to_string(dir.join("exit.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
}

/// A local pod or job as found on disk.
#[derive(Clone, Debug)]
pub struct Local {
    name: String,
    dir: PathBuf,
    meta: PodMeta,
    pid: Option<i32>,
    /// When the supervisor started the command (a container's `startedAt`).
    started: Option<DateTime<Utc>>,
    exit: Option<Exit>,
    deleting: bool,
}

impl Local {
    /// The pod's or Job's name.
    pub fn name(&self) -> &String {
        &self.name
    }

    /// What the local mode keeps of it beside the process.
    pub fn meta(&self) -> &PodMeta {
        &self.meta
    }
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

impl Local {
    fn state(&self) -> (Option<Exit>, String) {
        let message = std::fs::read_to_string(self.dir.join("termination-log")).unwrap_or_default();
        match (&self.exit, self.pid) {
            (Some(e), _) if e.supervisor_gone => (Some(e.clone()), "its supervisor is gone".into()),
            (Some(e), _) => (Some(e.clone()), message),
            (None, Some(pid)) if alive(pid) => (None, message),
            // The supervisor itself was killed: the pod is gone.
            (None, _) => (Some(Exit::now(137)), "its supervisor is gone".into()),
        }
    }

    /// It as a pod, as the rollout reads one: running, or exited with its
    /// code and termination message.
    pub fn pod_view(&self) -> PodView {
        let (exit, message) = self.state();
        let state = match exit {
            Some(e) => PodState::Exited {
                code: e.code,
                message,
                finished: e.finished,
            },
            None => PodState::Running,
        };
        // A process has no image to pull: it never waits; one told to stop
        // has no grace set by anyone: the local supervisor ends it.
        PodView::new(
            self.name.clone(),
            self.name.clone(),
            self.meta.revision.clone(),
            self.meta.sequence,
            self.meta.image.clone(),
            self.meta.created,
            state,
        )
        .with_started(self.started)
        .with_deleting(self.deleting)
    }

    /// It as a Job, as the rollout reads one: running, succeeded, or failed
    /// with its exit code and termination message (else its last log line).
    pub fn job_view(&self) -> JobView {
        let (exit, message) = self.state();
        let last_log_line = || {
            std::fs::read_to_string(self.dir.join("log"))
                .ok()
                .and_then(|l| l.lines().last().map(str::to_string))
                .unwrap_or_default()
        };
        JobView::new(
            self.name.clone(),
            self.meta.revision.clone(),
            self.meta.register.clone(),
            self.meta.created,
            match exit {
                None => JobState::Running,
                Some(e) if e.code == 0 => JobState::Succeeded { at: e.finished },
                Some(e) => JobState::Failed {
                    at: e.finished,
                    message: format!(
                        "exit code {}: {}",
                        e.code,
                        if message.is_empty() {
                            last_log_line()
                        } else {
                            message
                        }
                    ),
                },
            },
        )
    }

    /// Whether its command has not ended and its supervisor is alive.
    pub fn running(&self) -> bool {
        self.state().0.is_none()
    }

    /// Asks it to stop (SIGTERM to the supervisor, which passes it on); an
    /// ended one is removed at once.
    pub fn delete(&self) {
        if self.running() {
            let _ = std::fs::write(self.dir.join("deleting"), Utc::now().to_rfc3339());
            if let Some(pid) = self.pid {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// Kills it at once: its supervisor's process group, which holds the
    /// supervisor and its command (the supervisor leads a session of its
    /// own), as the end of a pod's grace period does.
    pub fn kill(&self) {
        if let Some(pid) = self.pid {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
    }
}

/// The pods (or jobs) of a local-mode directory.
pub struct Table {
    root: PathBuf,
}

impl Table {
    /// The table kept under `root`, one directory per pod or job.
    pub fn new(root: PathBuf) -> Self {
        Table { root }
    }

    /// What the table holds of Scheduler `scheduler`.
    pub fn of(&self, scheduler: &str) -> Vec<Local> {
        let all = self.list().into_values();
        all.filter(|l| l.meta.scheduler == scheduler).collect()
    }

    /// Everything in the table, by name.
    pub fn list(&self) -> BTreeMap<String, Local> {
        let mut all = BTreeMap::new();
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return all;
        };
        for entry in entries.flatten() {
            let dir = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(meta) = std::fs::read_to_string(dir.join("pod.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<PodMeta>(&t).ok())
            else {
                continue;
            };
            let pid = std::fs::read_to_string(dir.join("pid"))
                .ok()
                .and_then(|p| p.trim().parse().ok());
            let started = std::fs::read_to_string(dir.join("started"))
                .ok()
                .and_then(|t| DateTime::parse_from_rfc3339(t.trim()).ok())
                .map(|t| t.with_timezone(&Utc));
            let exit = read_exit(&dir).or_else(|| record_gone(&dir, pid));
            let deleting = dir.join("deleting").exists();
            let local = Local {
                name: name.clone(),
                dir,
                meta,
                pid,
                started,
                exit,
                deleting,
            };
            // A deleted one that has ended is gone, as a pod would be.
            if local.deleting && !local.running() {
                let _ = std::fs::remove_dir_all(&local.dir);
                continue;
            }
            all.insert(name, local);
        }
        all
    }

    /// Starts `command` under a supervisor, detached from this process (a
    /// restarted operator finds it running).
    pub fn start(
        &self,
        name: &str,
        meta: &PodMeta,
        command: &[String],
        env: &[(String, String)],
        timeout: Option<u64>,
    ) -> std::io::Result<()> {
        let dir = self.root.join(name);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("pod.json"),
            serde_json::to_string_pretty(meta).map_err(std::io::Error::other)?,
        )?;
        let me = std::env::current_exe()?;
        let mut cmd = std::process::Command::new(me);
        cmd.arg("local-supervise").arg(&dir);
        if let Some(t) = timeout {
            cmd.arg("--timeout").arg(t.to_string());
        }
        cmd.arg("--")
            .args(command)
            .env("ORCA_TERMINATION_LOG", dir.join("termination-log"))
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        use std::os::unix::process::CommandExt;
        // SAFETY: setsid is async-signal-safe; a session of its own keeps a
        // terminal's Ctrl-C for the operator, which drains its pods itself.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        std::fs::write(dir.join("pid"), child.id().to_string())?;
        // The supervisor is reaped by a thread so it never lingers as a zombie
        // while this operator runs.
        std::thread::spawn(move || {
            let mut child = child;
            let _ = child.wait();
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> PodMeta {
        PodMeta::new(
            "default/orca".into(),
            "r1".into(),
            1,
            "v1".into(),
            Utc::now(),
            Some("h".into()),
        )
    }

    /// A supervisor killed with its operator leaves no exit: the job reads
    /// as failed at one time, however often it is read, so that the back-off
    /// a register Job's failure starts can end (the time was "now" at each
    /// reading, and the rollout never tried again).
    #[test]
    fn a_job_whose_supervisor_is_gone_failed_once_at_one_time() {
        let root = std::env::temp_dir().join(format!("orca-pods-{}", std::process::id()));
        let dir = root.join("orca-register-r1-1");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("pod.json"),
            serde_json::to_string(&meta()).unwrap(),
        )
        .unwrap();
        // The pid of a process that has ended: a killed supervisor's.
        let mut ended = std::process::Command::new("true").spawn().unwrap();
        ended.wait().unwrap();
        std::fs::write(dir.join("pid"), ended.id().to_string()).unwrap();
        let table = Table::new(root.clone());
        let failed_at = |table: &Table| match table.list()["orca-register-r1-1"].job_view().state()
        {
            JobState::Failed { at, message } => {
                assert_eq!(message, "exit code 137: its supervisor is gone");
                *at
            }
            other => panic!("not failed: {other:?}"),
        };
        let first = failed_at(&table);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(failed_at(&table), first, "the failure moved in time");
        // A restarted operator reads the same.
        assert_eq!(failed_at(&Table::new(root.clone())), first);
        let _ = std::fs::remove_dir_all(&root);
    }
}
