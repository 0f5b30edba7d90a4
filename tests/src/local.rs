//! `orca-operator local <dir>` as the end-to-end tests and the demo drive
//! it: a real operator process on a directory of YAML, with the database of
//! a test (or its own), ended as a user ends it (SIGTERM, or Ctrl-C), and
//! the processes it started found wherever they went.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use orca_operator::{crd::SchedulerStatus, local::spawn::spawn_tied_with};

use crate::bins;

/// An environment variable the operator of a [`LocalMode`] is started with
/// (its directory), and so every process it starts, and they start, unless
/// one clears its environment: how [`LocalMode::processes`] finds them once
/// they are reparented.
pub const TAG: &str = "ORCA_TEST_LOCAL_MODE";

/// How long dropping a [`LocalMode`] waits for the operator to end after
/// SIGTERM before it kills it.
const STOP_GRACE: Duration = Duration::from_secs(60);

/// How a user ends the local mode.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    /// SIGTERM to the operator (`kill <pid>`, a service manager).
    Term,
    /// Ctrl-C in the terminal: SIGINT to the operator's whole process
    /// group, as the terminal sends it to the foreground job.
    CtrlC,
}

/// A process found in `/proc`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Process {
    pid: i32,
    /// Its command line, the arguments joined by spaces.
    command: String,
}

impl Process {
    /// Its command line, the arguments joined by spaces.
    pub fn command(&self) -> &str {
        &self.command
    }
}

impl fmt::Display for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.pid, self.command)
    }
}

/// A process of the table: its parent, and whether it is a zombie (ended,
/// not yet reaped: no longer running).
struct Entry {
    ppid: i32,
    zombie: bool,
    command: String,
}

/// Every process in `/proc` now.
fn table() -> BTreeMap<i32, Entry> {
    let mut all = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return all;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((_, after)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = after.split_whitespace();
        let state = fields.next().unwrap_or("");
        let ppid = fields.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let command = std::fs::read(entry.path().join("cmdline"))
            .map(|c| {
                c.split(|b| *b == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        all.insert(
            pid,
            Entry {
                ppid,
                zombie: matches!(state, "Z" | "X"),
                command,
            },
        );
    }
    all
}

/// The running processes among `roots` and their descendants.
fn with_descendants(all: &BTreeMap<i32, Entry>, roots: BTreeSet<i32>) -> Vec<Process> {
    let mut found = roots;
    loop {
        let more: Vec<i32> = all
            .iter()
            .filter(|(pid, e)| found.contains(&e.ppid) && !found.contains(pid))
            .map(|(pid, _)| *pid)
            .collect();
        if more.is_empty() {
            break;
        }
        found.extend(more);
    }
    found
        .into_iter()
        .filter_map(|pid| {
            let e = all.get(&pid)?;
            (!e.zombie).then(|| Process {
                pid,
                command: e.command.clone(),
            })
        })
        .collect()
}

/// The running processes whose environment holds `TAG=<value>`, and their
/// descendants (PostgreSQL's server processes write their titles over
/// their environment).
pub fn tagged(value: &str) -> Vec<Process> {
    let all = table();
    let wanted = format!("{TAG}={value}");
    let roots = all
        .keys()
        .copied()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == wanted.as_bytes()))
        })
        .collect();
    with_descendants(&all, roots)
}

/// The running descendants of process `pid` (not itself).
pub fn descendants(pid: i32) -> Vec<Process> {
    let all = table();
    let children = all
        .iter()
        .filter(|(_, e)| e.ppid == pid)
        .map(|(p, _)| *p)
        .collect();
    with_descendants(&all, children)
}

/// Polls `look` until it finds nothing, for up to `limit`; what it found
/// last.
pub fn wait_until_none(limit: Duration, look: impl Fn() -> Vec<Process>) -> Vec<Process> {
    let deadline = Instant::now() + limit;
    loop {
        let left = look();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A local-mode directory and the operator running on it.
pub struct LocalMode {
    dir: PathBuf,
    url: String,
    child: Option<Child>,
    lines: Arc<Mutex<Vec<String>>>,
}

impl LocalMode {
    /// A fresh directory holding `scheduler_yaml` and a Secret with `url`.
    pub fn new(url: &str, scheduler_yaml: &str) -> LocalMode {
        let local = LocalMode::empty(url);
        local.write(
            "secret.yaml",
            &format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: orca-db\nstringData:\n  url: {url}\n"),
        );
        local.apply(scheduler_yaml);
        local
    }

    /// A fresh directory holding `scheduler_yaml` and no Secret: the local
    /// mode starts a PostgreSQL of its own ([`LocalMode::database_url`]).
    pub fn own_database(scheduler_yaml: &str) -> LocalMode {
        let local = LocalMode::empty("");
        local.apply(scheduler_yaml);
        local
    }

    fn empty(url: &str) -> LocalMode {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("orca-local-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        LocalMode {
            dir,
            url: url.to_string(),
            child: None,
            lines: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// The database: the Secret's, or the one the local mode started (once
    /// it has written its URL down).
    pub fn database_url(&self) -> Option<String> {
        if !self.url.is_empty() {
            return Some(self.url.clone());
        }
        std::fs::read_to_string(self.dir.join(".status/database-url"))
            .ok()
            .filter(|u| !u.is_empty())
    }

    /// Hands run 1 of WarmPool `pool` (`namespace/name`) an idle instance,
    /// as a scheduler does, asking again until one is idle (a status that
    /// says idle may be a pass ahead of an agent's row): the instance's id.
    pub async fn hand_out(&self, pool: &str) -> String {
        let url = self.database_url().expect("the local mode's database");
        let mut db = crate::pg::connect(&url).await;
        let req = orca_db::pool::Request::new(pool, 1, 1, "head", "", true);
        let by = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let handed = orca_db::pool::hand_out(&mut db, &req, std::time::Duration::from_secs(60))
                .await
                .expect("the hand-out's statement");
            match handed {
                Some(h) => return h.instance().to_string(),
                None if std::time::Instant::now() < by => {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await
                }
                None => panic!("no idle instance of {pool} for 30 s"),
            }
        }
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

    /// Starts the operator: the leader of a process group of its own, as a
    /// shell starts a job, and sent SIGTERM if this process ends first.
    pub fn start(&mut self) {
        use std::os::unix::process::CommandExt;
        assert!(self.child.is_none(), "the operator already runs");
        let mut cmd = Command::new(bins::path("orca-operator"));
        cmd.arg("local")
            .arg(&self.dir)
            .env_remove("ORCA_DATABASE_URL")
            .env("NO_COLOR", "1")
            .env(TAG, &self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0);
        let mut child =
            spawn_tied_with(cmd, None, libc::SIGTERM).expect("starting orca-operator local");
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

    /// Ends the operator as a user would, and waits up to `limit` for it to
    /// exit (panics, with what it printed, if it does not).
    pub fn stop(&mut self, how: Stop, limit: Duration) -> ExitStatus {
        let child = self.child.as_mut().expect("the operator runs");
        let pid = child.id() as i32;
        // SAFETY: kill has no memory-safety preconditions; the group is the
        // operator's own (`start`).
        unsafe {
            match how {
                Stop::Term => libc::kill(pid, libc::SIGTERM),
                Stop::CtrlC => libc::kill(-pid, libc::SIGINT),
            };
        }
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = child.try_wait().expect("polling the operator") {
                self.child = None;
                return status;
            }
            if Instant::now() > deadline {
                panic!(
                    "the local mode did not end within {limit:?} of {how:?}; it said:\n{}",
                    self.output().join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The running processes this local mode started (and they started),
    /// the operator included, wherever they were reparented.
    pub fn processes(&self) -> Vec<Process> {
        tagged(&self.dir.to_string_lossy())
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

    /// The supervisor pids of every pod and job still on disk that has not
    /// recorded its exit (the pid of one that has may be another's now).
    fn pids(&self) -> Vec<i32> {
        ["pods", "jobs"]
            .iter()
            .flat_map(|k| {
                std::fs::read_dir(self.dir.join(".status").join(k))
                    .into_iter()
                    .flatten()
                    .flatten()
            })
            .filter(|e| !e.path().join("exit.json").exists())
            .filter_map(|e| std::fs::read_to_string(e.path().join("pid")).ok())
            .filter_map(|p| p.trim().parse().ok())
            .collect()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for LocalMode {
    /// Ends the operator as a user would (SIGTERM), so that it ends what it
    /// started; it is killed only if it does not end in time. Then whatever
    /// is left — the pods of an operator killed before ([`LocalMode::kill`]),
    /// which outlive it by design — is killed, and the directory removed.
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + STOP_GRACE;
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        // Each supervisor leads a process group with its command.
        for pid in self.pids() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
        for p in self.processes() {
            // SAFETY: as above.
            unsafe { libc::kill(p.pid, libc::SIGKILL) };
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
