//! Figures of the pool agent (docs/architecture.md#benchmarks), as
//! `| figure | value | target |` rows: hand-out latency (1, 500 and 2000
//! waiting agents, each a real agent process with its own backend),
//! statements per idle agent per second, idle RSS, binary size,
//! start-up time. It runs the static agent of `$ORCA_STATIC_AGENT`
//! (scripts/build-static) against a throwaway cluster of its own;
//! scripts/bench runs it.

use std::{
    collections::HashMap,
    process::Stdio,
    time::{Duration, Instant},
};

use crate::figures::{percentile, row};
use anyhow::{bail, Context, Result};
use orca_db::{
    pool::{self, Request},
    Db,
};
use orca_tests::pg;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
    sync::oneshot,
};

const FRESH: Duration = Duration::from_secs(60);
const MANY: usize = 500;
/// The most agents waiting on one database the bench runs.
const MOST: usize = 2000;

/// An agent whose `next` line is timed when it arrives.
struct Agent {
    child: Child,
    line: oneshot::Receiver<Instant>,
}

fn spawn(bin: &str, url: &str, args: &[&str], pool_name: &str) -> Result<Agent> {
    let mut child = Command::new(bin)
        .args(args)
        .env("ORCA_DATABASE_URL", url)
        .env("ORCA_POOL", pool_name)
        .env("ORCA_LOG", "warn")
        // Off EC2: no metadata service to read spot notices from.
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {bin}"))?;
    let stdout = child.stdout.take().context("the agent's stdout")?;
    let (tx, line) = oneshot::channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        if let Ok(Some(_)) = lines.next_line().await {
            let _ = tx.send(Instant::now());
        }
    });
    Ok(Agent { child, line })
}

async fn count(db: &Db, sql: &str) -> Result<i64> {
    Ok(db.query_one(sql, &[]).await?.get(0))
}

/// Waits until `n` rows of `pool` are live and idle.
async fn idle(db: &Db, pool_name: &str, n: i64) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let have: i64 = db
            .query_one(
                "select count(*) from orca.instances where pool = $1 and ended is null and idle is not null",
                &[&pool_name],
            )
            .await?
            .get(0);
        if have >= n {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("only {have} of {n} agents of {pool_name} went idle");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Hands out to one of `agents` of `pool_name`: the time from just before
/// the hand-out's transaction begins (an upper bound on "from its commit")
/// to the `next` line, and the time the transaction itself took (its
/// commit signals every backend that listens on the database).
async fn timed_hand_out(
    db: &mut Db,
    pool_name: &str,
    run: i64,
    agents: &mut HashMap<String, Agent>,
) -> Result<(Duration, Duration)> {
    let req = Request::new(pool_name, run, 0, "worker", "10.0.0.1:6379", false);
    let begun = Instant::now();
    let handed = pool::hand_out(db, &req, FRESH)
        .await?
        .with_context(|| format!("no idle agent in {pool_name}"))?;
    let committed = begun.elapsed();
    let agent = agents
        .get_mut(handed.instance())
        .with_context(|| format!("{} is not one of the bench's", handed.instance()))?;
    let seen = tokio::time::timeout(Duration::from_secs(10), &mut agent.line)
        .await
        .with_context(|| format!("{} printed nothing within 10 s", handed.instance()))?
        .context("the agent exited without a line")?;
    agent.child.wait().await?;
    Ok((seen.saturating_duration_since(begun), committed))
}

/// What holds the hand-out back when many agents wait on one database, as
/// the p99 row says when it misses its target.
const WALL: &str = "missed; the wall: this host's 2 cores carry the agents, \
    their backends and the database, and each hand-out's commit wakes every \
    listening backend (NOTIFY's fan-out)";

fn latency_rows(what: &str, mut samples: Vec<f64>, p99_target_ms: f64) {
    samples.sort_by(f64::total_cmp);
    row(
        &format!("hand-out → `next` line, {what}, p50"),
        format!("{:.1} ms", percentile(&samples, 0.5)),
        "≤ 20 ms",
    );
    let p99 = percentile(&samples, 0.99);
    let missed = if p99 > p99_target_ms {
        format!("; {WALL}")
    } else {
        String::new()
    };
    row(
        &format!("hand-out → `next` line, {what}, p99"),
        format!("{p99:.1} ms ({} hand-outs{missed})", samples.len()),
        &format!("≤ {p99_target_ms} ms"),
    );
}

/// `n` agents of `pool_name` waiting at once, each a process with its own
/// backend, idle.
async fn waiting(
    bin: &str,
    url: &str,
    db: &Db,
    pool_name: &str,
    n: usize,
) -> Result<HashMap<String, Agent>> {
    // Started 250 at a time, each lot idle before the next, as instances
    // boot over a while: the server forks one backend at a time, and two
    // thousand connecting in one second would time out waiting for it.
    let mut agents = HashMap::new();
    for k in 0..n {
        let instance = format!("i-{}-{k}", pool_name.replace('/', "-"));
        let agent = spawn(
            bin,
            url,
            &["pool-next", &instance, "0", "0", "600"],
            pool_name,
        )?;
        agents.insert(instance, agent);
        if agents.len() % 250 == 0 || agents.len() == n {
            idle(db, pool_name, agents.len() as i64).await?;
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    Ok(agents)
}

/// 200 hand-outs one after another, 20 ms apart, while `agents` wait:
/// each to its `next` line, and each transaction alone.
async fn hand_outs(
    db: &mut Db,
    pool_name: &str,
    agents: &mut HashMap<String, Agent>,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let (mut samples, mut commits) = (Vec::new(), Vec::new());
    for run in 1..=200i64 {
        let (total, commit) = timed_hand_out(db, pool_name, 1000 + run, agents).await?;
        samples.push(ms(total));
        commits.push(ms(commit));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok((samples, commits))
}

/// The host's memory available now (`MemAvailable`), in MiB.
fn available_mib() -> Result<u64> {
    let info = std::fs::read_to_string("/proc/meminfo")?;
    info.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib / 1024)
        .context("no MemAvailable in /proc/meminfo")
}

fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS in /proc/<pid>/status")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
pub async fn run() -> Result<()> {
    let bin = std::env::var("ORCA_STATIC_AGENT")
        .context("ORCA_STATIC_AGENT is not set: scripts/bench builds the static agent with scripts/build-static and sets it")?;
    let size = std::fs::metadata(&bin)
        .with_context(|| format!("the static agent {bin}"))?
        .len();
    // Each waiting agent is a backend: room for the most, and the bench's.
    let cluster = pg::Cluster::private_for(MOST as u32 + 100);
    let url = cluster.migrated_db().await;
    let mut db = pg::connect(&url).await;

    row(
        "static agent size",
        format!("{:.2} MiB", size as f64 / 1048576.0),
        "≤ 10 MiB",
    );

    // Start-up: from a database timestamp taken before the spawn to the
    // `created` of the warm row its first statement makes (both the
    // database's clock).
    let mut startup = Vec::new();
    for k in 0..20 {
        let instance = format!("i-start{k}");
        let t0: f64 = db
            .query_one("select extract(epoch from clock_timestamp())::float8", &[])
            .await?
            .get(0);
        let agent = spawn(
            &bin,
            &url,
            &["pool-next", &instance, "0", "0", "600"],
            "bench/start",
        )?;
        let created = loop {
            let row = db
                .query_opt(
                    "select extract(epoch from created)::float8 from orca.instances where instance = $1",
                    &[&instance],
                )
                .await?;
            if let Some(r) = row {
                break r.get::<_, f64>(0);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        startup.push((created - t0) * 1000.0);
        drop(agent);
    }
    startup.sort_by(f64::total_cmp);
    row(
        "start → first statement (loopback), median / max of 20",
        format!(
            "{:.1} ms / {:.1} ms",
            percentile(&startup, 0.5),
            startup[19]
        ),
        "≤ 50 ms",
    );

    // One waiting agent, handed a run 100 times; after each run it goes
    // idle again with `pool-next` for the run it served, as on EC2.
    let mut one = Vec::new();
    let mut served = ("0".to_string(), "0".to_string());
    for run in 1..=100i64 {
        let args = [
            "pool-next",
            "i-one",
            served.0.as_str(),
            served.1.as_str(),
            "600",
        ];
        let mut agents =
            HashMap::from([("i-one".to_string(), spawn(&bin, &url, &args, "bench/one")?)]);
        idle(&db, "bench/one", 1).await?;
        // Into its wait, not mid-statement.
        tokio::time::sleep(Duration::from_millis(200)).await;
        one.push(ms(timed_hand_out(&mut db, "bench/one", run, &mut agents)
            .await?
            .0));
        served = (run.to_string(), "0".to_string());
    }
    latency_rows("1 agent waiting", one, 100.0);

    // 500 agents waiting at once, and the host memory they and their
    // backends take.
    let before = available_mib()?;
    let mut agents = waiting(&bin, &url, &db, "bench/many", MANY).await?;
    let mib_per_agent = before.saturating_sub(available_mib()?) as f64 / MANY as f64;

    // Statements: transactions committed in the database while only the
    // idle agents talk to it (the bench's two reads aside). Backends report
    // their counts about once a second, hence the long window.
    let window = Duration::from_secs(20);
    let commits = "select xact_commit from pg_stat_database where datname = current_database()";
    db.batch("select pg_stat_clear_snapshot()").await?;
    let before = count(&db, commits).await?;
    tokio::time::sleep(window).await;
    db.batch("select pg_stat_clear_snapshot()").await?;
    let after = count(&db, commits).await?;
    let per_agent = (after - before - 2) as f64 / MANY as f64 / window.as_secs_f64();
    row(
        &format!(
            "statements per idle agent per second ({MANY} idle, {}s)",
            window.as_secs()
        ),
        format!("{per_agent:.3}"),
        "≤ 1",
    );

    let mut rss: Vec<u64> = Vec::new();
    for agent in agents.values() {
        if let Some(pid) = agent.child.id() {
            rss.push(rss_kib(pid)?);
        }
    }
    rss.sort();
    row(
        "RSS of an idle agent, median / max of 500",
        format!(
            "{:.2} MiB / {:.2} MiB",
            rss[rss.len() / 2] as f64 / 1024.0,
            rss[rss.len() - 1] as f64 / 1024.0
        ),
        "≤ 8 MiB",
    );

    // 200 hand-outs one after another, while 500 to 301 agents wait.
    let (many, _) = hand_outs(&mut db, "bench/many", &mut agents).await?;
    latency_rows("500 agents waiting", many, 100.0);
    drop(agents);

    // 1000, then 2000 on one database, if the host has the memory for them
    // (as the 500 took, and a quarter more). The agents, their backends
    // and the database share this host, as the figures' names say.
    for n in [MOST / 2, MOST] {
        let free = available_mib()?;
        let need = (mib_per_agent * n as f64 * 1.25) as u64;
        if free < need {
            row(
                &format!("hand-out → `next` line, {n} agents waiting"),
                format!("not run: {free} MiB available, {need} MiB needed"),
                "p99 ≤ 50 ms",
            );
            return Ok(());
        }
        let pool_name = format!("bench/wait{n}");
        let mut agents = waiting(&bin, &url, &db, &pool_name, n).await?;
        let used = free.saturating_sub(available_mib()?);
        let (samples, mut commits) = hand_outs(&mut db, &pool_name, &mut agents).await?;
        commits.sort_by(f64::total_cmp);
        row(
            &format!("the hand-out's transaction alone (its commit wakes every listening backend), {n} agents waiting, p50 / p99"),
            format!(
                "{:.1} ms / {:.1} ms",
                percentile(&commits, 0.5),
                percentile(&commits, 0.99)
            ),
            "—",
        );
        latency_rows(
            &format!("{n} agents waiting (real agent processes and their backends on this host with the database)"),
            samples,
            50.0,
        );
        row(
            &format!("host memory taken by {n} waiting agents and their backends"),
            format!("{used} MiB"),
            "what sizing a database host needs",
        );
        drop(agents);
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    Ok(())
}
