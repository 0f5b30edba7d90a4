//! `orca-sim scheduler` as a child process of a test or a benchmark: its
//! stderr collected line by line, waited on by pattern, signalled, reaped.

use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, ExitStatus, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use orca_operator::local::spawn::spawn_tied;

use crate::bins;

/// How to start one scheduler.
#[derive(Clone, Debug)]
pub struct SimOptions {
    tick_ms: u64,
    stale_seconds: f64,
    overlap: bool,
    /// LISTEN for notifications (off: polling only).
    listen: bool,
    image: String,
    host: String,
    /// More flags (`--floor`, `--migrations`, `--pool`).
    args: Vec<String>,
    termination_log: Option<PathBuf>,
}

impl SimOptions {
    /// These, with `overlap` set.
    pub fn with_overlap(self, overlap: bool) -> Self {
        SimOptions { overlap, ..self }
    }

    /// These, with `listen` set.
    pub fn with_listen(self, listen: bool) -> Self {
        SimOptions { listen, ..self }
    }

    /// These, with `args` set.
    pub fn with_args(self, args: Vec<String>) -> Self {
        SimOptions { args, ..self }
    }

    /// These, with `termination_log` set.
    pub fn with_termination_log(self, termination_log: Option<PathBuf>) -> Self {
        SimOptions {
            termination_log,
            ..self
        }
    }
}

impl SimOptions {
    /// Whether it joins beside a leader (the overlap handover).
    pub fn overlap(&self) -> bool {
        self.overlap
    }

    /// LISTEN for notifications (off: polling only).
    pub fn listen(&self) -> bool {
        self.listen
    }

    /// More flags (`--floor`, `--migrations`, `--pool`).
    pub fn args(&self) -> &Vec<String> {
        &self.args
    }

    /// Where it writes why it ended, if anywhere.
    pub fn termination_log(&self) -> &Option<PathBuf> {
        &self.termination_log
    }
}

impl SimOptions {
    /// Overlap on, image `image`, host `sim-<image>`.
    pub fn new(image: &str, tick_ms: u64, stale_seconds: f64) -> Self {
        SimOptions {
            tick_ms,
            stale_seconds,
            overlap: true,
            listen: true,
            image: image.into(),
            host: format!("sim-{image}"),
            args: Vec::new(),
            termination_log: None,
        }
    }
}

/// A running (or ended) `orca-sim`.
pub struct Sim {
    image: String,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    status: Option<ExitStatus>,
}

impl Sim {
    pub fn start(url: &str, opts: &SimOptions) -> Sim {
        let mut cmd = Command::new(bins::path("orca-sim"));
        cmd.arg("scheduler")
            .arg("--tick-ms")
            .arg(opts.tick_ms.to_string())
            .arg("--stale-seconds")
            .arg(opts.stale_seconds.to_string())
            .args(&opts.args)
            .env("ORCA_DATABASE_URL", url)
            .env("ORCA_OVERLAP", if opts.overlap { "on" } else { "off" })
            .env("ORCA_SIM_LISTEN", if opts.listen { "on" } else { "off" })
            .env("ORCA_IMAGE", &opts.image)
            .env("HOSTNAME", &opts.host)
            .env("RUST_LOG", "info")
            .env(
                "ORCA_TERMINATION_LOG",
                opts.termination_log
                    .clone()
                    .unwrap_or_else(|| PathBuf::from("/dev/null")),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child =
            spawn_tied(cmd, None).unwrap_or_else(|e| panic!("orca-sim could not start: {e}"));
        let stderr = child
            .stderr
            .take()
            .expect("invariant: stderr was asked piped");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Sim {
            image: opts.image.clone(),
            child,
            lines,
            status: None,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Every stderr line so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// The stderr lines containing `pattern`.
    pub fn matching(&self, pattern: &str) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|l| l.contains(pattern))
            .collect()
    }

    /// Waits for a stderr line containing `pattern`; fails the test, with
    /// the output so far, if none comes within `within`.
    pub async fn wait_for(&mut self, pattern: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            if let Some(line) = self.matching(pattern).into_iter().next() {
                return line;
            }
            if Instant::now() > deadline || self.exited().is_some() {
                panic!(
                    "orca-sim {} printed no line with {pattern:?} within {within:?} (exit {:?}):\n{}",
                    self.image,
                    self.status,
                    self.lines().join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Its instance id, from its `joined id=N` line.
    pub async fn id(&mut self) -> i64 {
        let line = self.wait_for("joined id=", Duration::from_secs(10)).await;
        field(&line, "id").unwrap_or_else(|| panic!("no id in {line:?}"))
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(self.pid(), sig) };
    }

    /// Its exit status, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// Waits for it to exit; fails the test if it doesn't within `within`.
    pub async fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.exited() {
                // Let the reader thread take the last lines.
                tokio::time::sleep(Duration::from_millis(20)).await;
                return status;
            }
            if Instant::now() > deadline {
                panic!(
                    "orca-sim {} did not exit within {within:?}:\n{}",
                    self.image,
                    self.lines().join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The value of `name=…` in a log line.
pub fn field<T: std::str::FromStr>(line: &str, name: &str) -> Option<T> {
    let key = format!(" {name}=");
    let at = line.find(&key)? + key.len();
    line[at..]
        .split(|c: char| c.is_whitespace())
        .next()?
        .trim_matches('"')
        .parse()
        .ok()
}
