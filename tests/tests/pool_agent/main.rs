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
    Request {
        pool,
        run,
        start,
        role,
        head_address: head,
        new_code,
    }
}

const FRESH: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_fresh_instance_waits_idle_then_takes_a_hand_out_and_so_on() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut db = pg::connect(&url).await;
    let mut agent = Agent::fresh(&url, "i-0fresh", "ns/fresh", "600", "");
    let warm = idle_row(&db, "i-0fresh").await;
    let row = db
        .query_one(
            "select pool, role, run, pooled from orca.instances where id = $1",
            &[&warm],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "ns/fresh");
    assert_eq!(row.get::<_, String>(1), "warm");
    assert_eq!(row.get::<_, Option<i64>>(2), None);
    assert!(!row.get::<_, bool>(3));
    // It waits, beating `polled`.
    let polled = "select extract(epoch from polled)::float8 from orca.instances where id = $1";
    let before: f64 = db.query_one(polled, &[&warm]).await.unwrap().get(0);
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert!(agent.is_running(), "{}", agent.stderr());
    let after: f64 = db.query_one(polled, &[&warm]).await.unwrap().get(0);
    assert!(after > before, "polled was not beaten");

    let req = request("ns/fresh", 41, 2, "head", "10.0.0.7:6379", true);
    let handed = pool::hand_out(&mut db, &req, FRESH)
        .await
        .unwrap()
        .expect("an idle instance");
    assert_eq!(handed.instance, "i-0fresh");
    let (code, out, _) = agent.exit_within(Duration::from_secs(5)).await;
    assert_eq!((code, out.as_str()), (0, "next 41 2 10.0.0.7:6379 1\n"));
    let row = db
        .query_one(
            "select joined is not null, pooled, ended is null from orca.instances where id = $1",
            &[&handed.row],
        )
        .await
        .unwrap();
    assert_eq!((row.get(0), row.get(1), row.get(2)), (true, true, true));
    let ended_by: String = db
        .query_one(
            "select ended_by from orca.instances where id = $1",
            &[&warm],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(ended_by, "handout");

    // After the run: pool-next for the run it served marks that row idle.
    let agent = Agent::spawn(&url, &["pool-next", "i-0fresh", "41", "2", "600"], &[]);
    assert_eq!(idle_row(&db, "i-0fresh").await, handed.row);
    let req = request("ns/fresh", 42, 0, "worker", "10.0.0.9:6379", false);
    pool::hand_out(&mut db, &req, FRESH)
        .await
        .unwrap()
        .expect("idle again");
    let (code, out, _) = agent.exit_within(Duration::from_secs(5)).await;
    assert_eq!((code, out.as_str()), (0, "next 42 0 10.0.0.9:6379 0\n"));
}

#[tokio::test]
async fn a_row_ended_with_no_other_ends_the_agent_within_a_second() {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    let agent = Agent::fresh(&url, "i-0shut", "ns/p", "600", "");
    let row = idle_row(&db, "i-0shut").await;
    // Let the agent settle into its wait, so the exit is the notification's.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(pool::end_idle(&db, row, "scheduler").await.unwrap());
    let started = Instant::now();
    let (code, out, _) = agent.exit_within(Duration::from_secs(5)).await;
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn no_hand_out_in_time_ends_the_idle_row_and_exits_1() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut db = pg::connect(&url).await;
    let started = Instant::now();
    // 1 s, and a grace of 1 s instead of the minute (test-only setting).
    let agent = Agent::fresh(&url, "i-0late", "ns/late", "1", "1000");
    let row = idle_row(&db, "i-0late").await;
    let (code, out, _) = agent.exit_within(Duration::from_secs(10)).await;
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "gave up after {:?}",
        started.elapsed()
    );
    let ended_by: Option<String> = db
        .query_one("select ended_by from orca.instances where id = $1", &[&row])
        .await
        .unwrap()
        .get(0);
    assert_eq!(ended_by.as_deref(), Some("agent"));
    let req = request("ns/late", 7, 0, "worker", "h:1", false);
    assert_eq!(pool::hand_out(&mut db, &req, FRESH).await.unwrap(), None);
}

/// Hand-outs that won after the agent had decided to give up.
static CLOSE_CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One race of a hand-out against the agent giving up: whether the
/// hand-out won, or what went wrong.
async fn race(url: String, db: &mut orca_db::Db, i: i64) -> Result<bool, String> {
    let instance = format!("i-race{i}");
    let pool_name = format!("race/{i}");
    let run = 10_000 + i;
    let agent = Agent::fresh(&url, &instance, &pool_name, "0", "1000");
    agent.logged(" idle", Duration::from_secs(20)).await;
    // The agent gives up a second after going idle, by the database's
    // clock: the hand-out comes from 500 ms before that to 250 ms after,
    // timed by the database too (pg_sleep), since this test's own timers lag
    // under load. The second leaves room for the lag before the sleep.
    let offset = ((i * 7919) % 750 - 500) as f64 / 1000.0;
    db.execute(
        "select pg_sleep(greatest(0, extract(epoch from idle + interval '1 s' - clock_timestamp())::float8 + $2))
         from orca.instances where instance = $1",
        &[&instance, &offset],
    )
    .await
    .map_err(|e| e.to_string())?;
    let req = request(&pool_name, run, 0, "worker", "10.1.1.1:1", false);
    let handed = pool::hand_out(db, &req, FRESH)
        .await
        .map_err(|e| e.to_string())?;
    let (code, out, err) = agent.exit_within(Duration::from_secs(20)).await;
    if err.contains("handed out while giving up") {
        CLOSE_CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    match (handed, code) {
        (Some(h), 0) if h.instance == instance && out == format!("next {run} 0 10.1.1.1:1 0\n") => {
            Ok(true)
        }
        (None, 1) if out.is_empty() => Ok(false),
        (handed, code) => Err(format!(
            "race {i}: hand-out {handed:?}, agent exited {code} printing {out:?}; stderr:\n{err}"
        )),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_hand_outs_racing_the_agent_giving_up_are_never_lost() {
    let url = pg::Cluster::shared().migrated_db().await;
    const RACES: i64 = 1000;
    const AT_ONCE: i64 = 60;
    let mut lanes = Vec::new();
    for lane in 0..AT_ONCE {
        let url = url.clone();
        lanes.push(tokio::spawn(async move {
            let mut db = pg::connect(&url).await;
            let mut won = 0;
            let mut i = lane;
            while i < RACES {
                if race(url.clone(), &mut db, i).await? {
                    won += 1;
                }
                i += AT_ONCE;
            }
            Ok::<i64, String>(won)
        }));
    }
    let mut won = 0;
    for lane in lanes {
        won += lane.await.unwrap().unwrap_or_else(|e| panic!("{e}"));
    }
    eprintln!(
        "{won} of {RACES} hand-outs won the race, {} of them after the agent had decided to give up",
        CLOSE_CALLS.load(std::sync::atomic::Ordering::Relaxed)
    );
    // Both outcomes happened, so the races were real.
    assert!(won > 0 && won < RACES, "{won} of {RACES} hand-outs won");
    // And the database agrees: a joined row for every hand-out won, an
    // agent's end for every one lost.
    let db = pg::connect(&url).await;
    let row = db
        .query_one(
            "select count(*) filter (where pooled and joined is not null),
                    count(*) filter (where role = 'warm' and ended_by = 'agent'),
                    count(*) filter (where pooled and joined is null)
             from orca.instances",
            &[],
        )
        .await
        .unwrap();
    let (joined, gave_up, unjoined): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!((joined, gave_up, unjoined), (won, RACES - won, 0));
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_commands_ride_out_a_database_outage() {
    let cluster = Arc::new(pg::Cluster::private());
    let url = cluster.migrated_db().await;
    let db = pg::connect(&url).await;
    let run: i64 = db
        .query_one("insert into orca.runs (pipeline, status, start) values ('p', 'running', 1) returning id", &[])
        .await
        .unwrap()
        .get(0);
    db.execute(
        "insert into orca.instances (instance, pool, run, start, role, pooled, joined) values ('i-0work', 'ns/o', $1, 1, 'worker', true, now())",
        &[&run],
    )
    .await
    .unwrap();
    let mut next = Agent::fresh(&url, "i-0out", "ns/o", "600", "");
    let mut wait = Agent::spawn(&url, &["pool-wait", "i-0work", &run.to_string(), "1"], &[]);
    idle_row(&db, "i-0out").await;
    agents_connected(&db, 2).await;
    // The fixture's server commits asynchronously; its immediate stop would
    // lose the last commits (the schema itself) but for this.
    db.batch("checkpoint").await.unwrap();
    drop(db);

    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.stop()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        next.is_running(),
        "pool-next exited during the outage: {}",
        next.stderr()
    );
    assert!(
        wait.is_running(),
        "pool-wait exited during the outage: {}",
        wait.stderr()
    );
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.start())
        .await
        .unwrap();

    let mut db = pg::connect(&url).await;
    let req = request("ns/o", 77, 3, "head", "10.2.2.2:1", true);
    let handed = pool::hand_out(&mut db, &req, Duration::from_secs(120))
        .await
        .unwrap();
    assert_eq!(handed.map(|h| h.instance).as_deref(), Some("i-0out"));
    let (code, out, next_err) = next.exit_within(Duration::from_secs(10)).await;
    assert_eq!(
        (code, out.as_str()),
        (0, "next 77 3 10.2.2.2:1 1\n"),
        "{next_err}"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        wait.is_running(),
        "pool-wait exited though its run goes on: {}",
        wait.stderr()
    );
    db.execute(
        "update orca.runs set status = 'succeeded' where id = $1",
        &[&run],
    )
    .await
    .unwrap();
    let (code, out, wait_err) = wait.exit_within(Duration::from_secs(10)).await;
    assert_eq!((code, out.as_str()), (0, ""));
    for (name, err) in [("pool-next", next_err), ("pool-wait", wait_err)] {
        let count = |word: &str| err.lines().filter(|l| l.contains(word)).count();
        assert_eq!(
            (count("unreachable"), count("reconnected")),
            (1, 1),
            "{name} should say once that the database is lost and once that it is back:\n{err}"
        );
    }
}

#[tokio::test]
async fn a_killed_listener_still_sees_the_next_hand_out_within_a_second() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut db = pg::connect(&url).await;
    let agent = Agent::fresh(&url, "i-0kill", "ns/k", "600", "");
    idle_row(&db, "i-0kill").await;
    agents_connected(&db, 1).await;
    let killed: i64 = db
        .query_one(
            "select count(pg_terminate_backend(pid)) from pg_stat_activity
             where datname = current_database() and application_name = 'orca-pool-agent'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(killed, 1);
    let req = request("ns/k", 5, 1, "worker", "10.3.3.3:1", false);
    pool::hand_out(&mut db, &req, FRESH)
        .await
        .unwrap()
        .expect("the idle instance");
    let started = Instant::now();
    let (code, out, _) = agent.exit_within(Duration::from_secs(5)).await;
    assert_eq!((code, out.as_str()), (0, "next 5 1 10.3.3.3:1 0\n"));
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn pool_wait_ends_when_the_run_is_over_for_its_worker_and_not_before() {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    let mut agents = Vec::new();
    let mut runs = Vec::new();
    for i in 0..3 {
        let run: i64 = db
            .query_one("insert into orca.runs (pipeline, status, start) values ('p', 'running', 1) returning id", &[])
            .await
            .unwrap()
            .get(0);
        let instance = format!("i-0w{i}");
        db.execute(
            "insert into orca.instances (instance, pool, run, start, role, pooled, joined) values ($1, 'ns/w', $2, 1, 'worker', true, now())",
            &[&instance, &run],
        )
        .await
        .unwrap();
        agents.push(Agent::spawn(
            &url,
            &["pool-wait", &instance, &run.to_string(), "1"],
            &[],
        ));
        runs.push(run);
    }
    agents_connected(&db, 3).await;
    // What is not the end of the run for these workers.
    let other: i64 = db
        .query_one(
            "insert into orca.runs (pipeline, status) values ('p', 'running') returning id",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    for statement in [
        "update orca.runs set heartbeat = now(), owner = 'x' where id = any($1)",
        "update orca.runs set status = 'failed' where id = $2",
        "insert into orca.instances (instance, pool, run, start, role) values ('i-0other', 'ns/w', $2, 0, 'worker')",
        "update orca.instances set ended = now(), ended_by = 'scheduler' where instance = 'i-0other'",
        "update orca.instances set polled = now() where run = any($1)",
    ] {
        let sql = statement.replace("$2", &other.to_string());
        if sql.contains("$1") {
            db.execute(&sql, &[&runs]).await.unwrap();
        } else {
            db.execute(&sql, &[]).await.unwrap();
        }
    }
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for agent in &mut agents {
        assert!(
            agent.is_running(),
            "pool-wait ended early: {}",
            agent.stderr()
        );
    }
    db.execute(
        "update orca.runs set status = 'succeeded' where id = $1",
        &[&runs[0]],
    )
    .await
    .unwrap();
    db.execute("update orca.runs set start = 2 where id = $1", &[&runs[1]])
        .await
        .unwrap();
    db.execute(
        "update orca.instances set ended = now(), ended_by = 'scheduler' where run = $1",
        &[&runs[2]],
    )
    .await
    .unwrap();
    for (agent, why) in
        agents
            .into_iter()
            .zip(["a status change", "a start change", "its row ending"])
    {
        let (code, out, err) = agent.exit_within(Duration::from_secs(3)).await;
        assert_eq!((code, out.as_str()), (0, ""), "after {why}: {err}");
    }
}

/// (arguments, ORCA_DATABASE_URL, further environment)
type Case<'a> = (&'a [&'a str], Option<&'a str>, &'a [(&'a str, &'a str)]);

#[tokio::test]
async fn bad_arguments_and_urls_are_one_line_usage_errors_without_the_password() {
    let url = with_password(&pg::Cluster::shared().migrated_db().await);
    let bad_urls = [
        format!("postgres://postgres:{SECRET}@127.0.0.1:notaport/db"),
        format!("postgres://postgres:{SECRET}@127.0.0.1/db?sslmode=sometimes"),
        "host=".to_string(),
    ];
    let wait: &[&str] = &["pool-wait", "i-1", "2", "3"];
    let fresh: &[&str] = &["pool-next", "i-1", "0", "0", "60"];
    let mut cases: Vec<Case> = vec![
        (&[], Some(&url), &[]),
        (&["pool-sleep", "i-1"], Some(&url), &[]),
        (&["pool-wait", "i-1", "2"], Some(&url), &[]),
        (&["pool-next", "i-1", "2", "3"], Some(&url), &[]),
        (&["pool-next", "i-1", "2", "3", "4", "5"], Some(&url), &[]),
        (&["pool-wait", "i 1", "2", "3"], Some(&url), &[]),
        (&["pool-wait", "i-1", "two", "3"], Some(&url), &[]),
        (&["pool-wait", "i-1", "2", "-3"], Some(&url), &[]),
        (&["pool-next", "i-1", "2", "3", "soon"], Some(&url), &[]),
        // A fresh instance without ORCA_POOL.
        (fresh, Some(&url), &[]),
        (
            &["pool-next", "i-1", "2", "3", "60"],
            Some(&url),
            &[("ORCA_POOL_AGENT_GRACE_MS", "a minute")],
        ),
        (wait, None, &[]),
        (wait, Some(""), &[]),
    ];
    for u in &bad_urls {
        cases.push((wait, Some(u), &[]));
        cases.push((fresh, Some(u), &[("ORCA_POOL", "ns/p")]));
    }
    for (args, url, env) in cases {
        let mut cmd = std::process::Command::new(bins::path("orca-pool-agent"));
        cmd.args(args)
            .env_remove("ORCA_DATABASE_URL")
            .env_remove("ORCA_POOL")
            .env_remove("ORCA_POOL_AGENT_GRACE_MS")
            .envs(env.iter().copied());
        if let Some(u) = url {
            cmd.env("ORCA_DATABASE_URL", u);
        }
        let out = cmd.output().unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stdout, "", "{args:?}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(!stderr.contains(SECRET), "{args:?}: {stderr}");
    }
}

#[tokio::test]
async fn an_unreachable_database_is_said_once_without_the_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/orca?sslmode=disable");
    let mut agent = Agent::spawn(&url, &["pool-wait", "i-1", "2", "3"], &[]);
    agent.logged("unreachable", Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(agent.is_running());
    let err = agent.stderr();
    assert_eq!(err.matches("unreachable").count(), 1, "{err}");
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(!err.contains(SECRET), "{err}");
}

#[test]
fn the_shipped_agent_is_static_and_runs() {
    let path = std::env::var("ORCA_STATIC_AGENT").unwrap_or_else(|_| {
        panic!("ORCA_STATIC_AGENT is not set: export the path scripts/build-agent prints (scripts/test does)")
    });
    let file = std::process::Command::new("file")
        .arg("-b")
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("`file` is needed to check the static agent: {e}"));
    let kind = String::from_utf8_lossy(&file.stdout);
    assert!(
        kind.contains("statically linked") || kind.contains("static-pie linked"),
        "{path}: {kind}"
    );
    let usage = std::process::Command::new(&path).output().unwrap();
    assert_eq!(usage.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&usage.stderr).lines().count(), 1);
    let help = std::process::Command::new(&path)
        .arg("--help")
        .output()
        .unwrap();
    assert_eq!(help.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&help.stdout).contains("ORCA_POOL_AGENT_GRACE_MS"));
}

#[tokio::test]
async fn hand_out_takes_only_fresh_idle_rows_and_serves_the_demand() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut db = pg::connect(&url).await;
    let req = request("ns/d", 3, 1, "worker", "10.4.4.4:1", false);
    pool::ask_for_instance(&db, &req).await.unwrap();
    pool::ask_for_instance(&db, &req).await.unwrap();
    let open = "select count(*) from orca.pool_demand where served is null";
    assert_eq!(db.query_one(open, &[]).await.unwrap().get::<_, i64>(0), 1);
    // Stale (a dead agent), busy (not idle), another pool: none is handed out.
    db.batch(
        "insert into orca.instances (instance, pool, role, idle, polled) values
             ('i-stale', 'ns/d', 'warm', now(), now() - interval '1 minute'),
             ('i-other', 'ns/e', 'warm', now(), now());
         insert into orca.instances (instance, pool, run, role, polled) values ('i-busy', 'ns/d', 1, 'head', now())",
    )
    .await
    .unwrap();
    assert_eq!(pool::hand_out(&mut db, &req, FRESH).await.unwrap(), None);
    assert_eq!(db.query_one(open, &[]).await.unwrap().get::<_, i64>(0), 1);
    let busy: i64 = db
        .query_one(
            "select id from orca.instances where instance = 'i-busy'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        !pool::end_idle(&db, busy, "operator").await.unwrap(),
        "a busy row is not idle"
    );

    let idle: i64 = db
        .query_one(
            "insert into orca.instances (instance, pool, role, idle, polled) values ('i-idle', 'ns/d', 'warm', now(), now()) returning id",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let handed = pool::hand_out(&mut db, &req, FRESH)
        .await
        .unwrap()
        .expect("i-idle");
    assert_eq!(handed.instance, "i-idle");
    assert_eq!(db.query_one(open, &[]).await.unwrap().get::<_, i64>(0), 0);
    let row = db
        .query_one(
            "select run, start, role, head_address, new_code, pooled, ended is null from orca.instances where id = $1",
            &[&handed.row],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 3);
    assert_eq!(row.get::<_, i32>(1), 1);
    assert_eq!(row.get::<_, String>(2), "worker");
    assert_eq!(row.get::<_, String>(3), "10.4.4.4:1");
    assert!(!row.get::<_, bool>(4) && row.get::<_, bool>(5) && row.get::<_, bool>(6));
    // The handed-out row is no longer idle: the race-free end leaves it be.
    assert!(!pool::end_idle(&db, idle, "operator").await.unwrap());
    assert_eq!(pool::hand_out(&mut db, &req, FRESH).await.unwrap(), None);
}

#[tokio::test]
async fn the_operators_claim_is_no_hand_out_and_the_agent_gives_up() {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    let agent = Agent::fresh(&url, "i-0claimed", "ns/claim", "600", "");
    let warm = idle_row(&db, "i-0claimed").await;
    // Let the agent settle into its wait, so the exit is the notification's.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Its row ended and the operator's claim (a live worker row without a
    // run) in its place, in one transaction: the instance is being retired.
    db.batch(&format!(
        "begin;
         update orca.instances set ended = now(), ended_by = 'operator' where id = {warm};
         insert into orca.instances (instance, pool, role) values ('i-0claimed', 'ns/claim', 'worker');
         commit;"
    ))
    .await
    .unwrap();
    let (code, out, _) = agent.exit_within(Duration::from_secs(5)).await;
    assert_eq!((code, out.as_str()), (1, ""), "a claim is not a run");
    let joined: bool = db
        .query_one(
            "select joined is not null from orca.instances
             where instance = 'i-0claimed' and ended is null",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!joined, "the agent joined the operator's claim");
}
