//! `orca-operator local <dir>` as the end-to-end tests drive it: a real
//! operator process on a directory of YAML, with the database of a test.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use orca_operator::crd::SchedulerStatus;

use crate::bins;

/// A local-mode directory and the operator running on it.
pub struct LocalMode {
    pub dir: PathBuf,
    pub url: String,
    child: Option<Child>,
    lines: Arc<Mutex<Vec<String>>>,
}

impl LocalMode {
    /// A fresh directory holding `scheduler_yaml` and a Secret with `url`.
    pub fn new(url: &str, scheduler_yaml: &str) -> LocalMode {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("orca-local-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("secret.yaml"),
            format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: orca-db\nstringData:\n  url: {url}\n"),
        )
        .unwrap();
        let local = LocalMode {
            dir,
            url: url.to_string(),
            child: None,
            lines: Arc::new(Mutex::new(Vec::new())),
        };
        local.apply(scheduler_yaml);
        local
    }

    /// Writes the Scheduler's YAML, as `kubectl apply` would.
    pub fn apply(&self, scheduler_yaml: &str) {
        let tmp = self.dir.join("scheduler.yaml.tmp");
        std::fs::write(&tmp, scheduler_yaml).unwrap();
        std::fs::rename(&tmp, self.dir.join("scheduler.yaml")).unwrap();
    }

    /// Writes another manifest file into the directory.
    pub fn write(&self, file: &str, yaml: &str) {
        let tmp = self.dir.join(format!("{file}.tmp"));
        std::fs::write(&tmp, yaml).unwrap();
        std::fs::rename(&tmp, self.dir.join(file)).unwrap();
    }

    /// The status the local mode wrote for WarmPool `default/<name>`.
    pub fn pool_status(&self, name: &str) -> orca_operator::crd::WarmPoolStatus {
        std::fs::read_to_string(
            self.dir
                .join(format!(".status/warmpool-default-{name}.yaml")),
        )
        .ok()
        .and_then(|t| serde_yaml::from_str(&t).ok())
        .unwrap_or_default()
    }

    /// Starts the operator.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "the operator already runs");
        let mut child = Command::new(bins::path("orca-operator"))
            .arg("local")
            .arg(&self.dir)
            .env_remove("ORCA_DATABASE_URL")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting orca-operator local");
        let out = child.stdout.take().expect("invariant: stdout is piped");
        let lines = self.lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        });
        self.child = Some(child);
    }

    /// Kills the operator at once (SIGKILL): its processes live on, as pods
    /// outlive a crashed controller.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Everything the operator printed so far.
    pub fn output(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    pub fn status(&self) -> SchedulerStatus {
        std::fs::read_to_string(self.dir.join(".status/scheduler-default-orca.yaml"))
            .ok()
            .and_then(|t| serde_yaml::from_str(&t).ok())
            .unwrap_or_default()
    }

    /// Waits up to `limit` for `check` on the status; panics with the
    /// operator's output if it never holds.
    pub fn wait_for(
        &self,
        what: &str,
        limit: Duration,
        check: impl Fn(&SchedulerStatus) -> bool,
    ) -> SchedulerStatus {
        let deadline = Instant::now() + limit;
        loop {
            let s = self.status();
            if check(&s) {
                return s;
            }
            if Instant::now() > deadline {
                panic!(
                    "{what}: not within {limit:?}; status {s:#?}\noperator said:\n{}",
                    self.output().join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The pod directories that exist now.
    pub fn pods(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.dir.join(".status/pods"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// The supervisor pids of every pod and job still on disk.
    fn pids(&self) -> Vec<i32> {
        ["pods", "jobs"]
            .iter()
            .flat_map(|k| {
                std::fs::read_dir(self.dir.join(".status").join(k))
                    .into_iter()
                    .flatten()
                    .flatten()
            })
            .filter_map(|e| std::fs::read_to_string(e.path().join("pid")).ok())
            .filter_map(|p| p.trim().parse().ok())
            .collect()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for LocalMode {
    fn drop(&mut self) {
        self.kill();
        // Each supervisor leads a process group with its command.
        for pid in self.pids() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
