//! The pool agent (docs/protocol.md#the-agents-commands): the real
//! `orca-pool-agent` binary as a child process against a real PostgreSQL,
//! the scheduler's side played by `orca_db::pool`, the library the
//! reference scheduler uses.

use std::{
    process::Stdio,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use orca_db::pool::{self, Request};
use orca_tests::{bins, pg};
use tokio::{
    io::{AsyncBufReadExt, AsyncRead, BufReader},
    process::{Child, Command},
    task::JoinHandle,
};

/// In every URL given to an agent; the server (trust auth) ignores it, and
/// it must never appear in anything an agent prints.
const SECRET: &str = "pw-Zq81-never-printed";

fn with_password(url: &str) -> String {
    url.replacen(
        "postgres://postgres@",
        &format!("postgres://postgres:{SECRET}@"),
        1,
    )
}

/// A running agent, its stdout and stderr collected as they come.
struct Agent {
    child: Child,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
}

fn collect(
    stream: impl AsyncRead + Unpin + Send + 'static,
) -> (Arc<Mutex<String>>, JoinHandle<()>) {
    let text = Arc::new(Mutex::new(String::new()));
    let sink = text.clone();
    let task = tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut t = sink.lock().unwrap();
            t.push_str(&line);
            t.push('\n');
        }
    });
    (text, task)
}

impl Agent {
    fn spawn(url: &str, args: &[&str], env: &[(&str, &str)]) -> Agent {
        let mut cmd = Command::new(bins::path("orca-pool-agent"));
        cmd.args(args)
            .env("ORCA_DATABASE_URL", with_password(url))
            .env_remove("ORCA_POOL")
            .env_remove("ORCA_POOL_AGENT_GRACE_MS")
            // No metadata service unless a test gives its stand-in: the
            // address on EC2 is no test's to read.
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env_remove("ORCA_POOL_AGENT_IMDS")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("starting orca-pool-agent");
        let (out, o) = collect(child.stdout.take().unwrap());
        let (err, e) = collect(child.stderr.take().unwrap());
        Agent {
            child,
            out,
            err,
            readers: vec![o, e],
        }
    }

    /// `pool-next <instance> 0 0 <seconds>`: a fresh instance of `pool`.
    fn fresh(url: &str, instance: &str, pool: &str, seconds: &str, grace_ms: &str) -> Agent {
        let mut env = vec![("ORCA_POOL", pool)];
        if !grace_ms.is_empty() {
            env.push(("ORCA_POOL_AGENT_GRACE_MS", grace_ms));
        }
        Agent::spawn(url, &["pool-next", instance, "0", "0", seconds], &env)
    }

    fn stderr(&self) -> String {
        self.err.lock().unwrap().clone()
    }

    fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("polling the agent").is_none()
    }

    /// Waits for a log line containing `needle`.
    async fn logged(&self, needle: &str, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.stderr().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "the agent did not log `{needle}` within {within:?}; stderr:\n{}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits for the agent to log ` idle`: false if it exited first.
    async fn idle_within(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if self.stderr().contains(" idle") {
                return true;
            }
            if !self.is_running() {
                // Its last lines may still be on their way.
                tokio::time::sleep(Duration::from_millis(50)).await;
                return self.stderr().contains(" idle");
            }
            assert!(
                Instant::now() < deadline,
                "the agent was not idle within {within:?}; stderr:\n{}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits for the exit: (code, stdout, stderr). Nothing it printed may
    /// hold the password.
    async fn exit_within(mut self, within: Duration) -> (i32, String, String) {
        let status = match tokio::time::timeout(within, self.child.wait()).await {
            Ok(status) => status.expect("waiting for the agent"),
            Err(_) => panic!(
                "the agent did not exit within {within:?}; stderr:\n{}",
                self.stderr()
            ),
        };
        for reader in self.readers.drain(..) {
            reader.await.unwrap();
        }
        let (out, err) = (self.out.lock().unwrap().clone(), self.stderr());
        assert!(
            !out.contains(SECRET) && !err.contains(SECRET),
            "the password was printed:\n{out}{err}"
        );
        (status.code().expect("the agent was not killed"), out, err)
    }
}

/// The live idle row of `instance`, once its agent has made it.
async fn idle_row(db: &orca_db::Db, instance: &str) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let row = db
            .query_opt(
                "select id from orca.instances where instance = $1 and ended is null and idle is not null",
                &[&instance],
            )
            .await
            .unwrap();
        if let Some(row) = row {
            return row.get(0);
        }
        assert!(Instant::now() < deadline, "{instance} never went idle");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn request<'a>(
    pool: &'a str,
    run: i64,
    start: i32,
    role: &'a str,
    head: &'a str,
    new_code: bool,
) -> Request<'a> {
    Request::new(pool, run, start, role, head, new_code)
}

const FRESH: Duration = Duration::from_secs(30);

async fn agents_connected(db: &orca_db::Db, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let connected: i64 = db
            .query_one(
                "select count(*) from pg_stat_activity
                 where datname = current_database() and application_name = 'orca-pool-agent'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if connected == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{connected} agents connected, not {n}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

mod hand_out;
mod interruption;
mod outages;
mod pool_next;
mod pool_wait;
mod races;
mod reserve;
mod usage;
