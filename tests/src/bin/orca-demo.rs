//! `scripts/demo`: the local mode on `examples/`, narrated. v1 starts and
//! leads; runs flow; v2 is applied and handed over to, step by step with
//! times; v1 drains its runs and exits; a warm pool of instances on moto
//! serves a run and refills; a summary; the local mode is stopped as Ctrl-C
//! would, and no process the demo started is left. Exits 0 when all of that
//! happened. Ctrl-C or SIGTERM during the demo stops the local mode and
//! PostgreSQL the same way before it exits.

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{bail, Context};
use orca_operator::{crd::Phase, local::postgres::Cluster};
use orca_tests::{
    local::{self, LocalMode, Process, Stop},
    pg,
};
use tokio::signal::unix::{signal, SignalKind};

fn say(start: Instant, text: impl AsRef<str>) {
    println!(
        "[{:>6.1}s] {}",
        start.elapsed().as_secs_f64(),
        text.as_ref()
    );
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// The example Scheduler with another image and the demo's tick.
fn scheduler_yaml(image_tag: &str, pool: Option<&str>) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(examples().join("scheduler.yaml"))
        .context("reading examples/scheduler.yaml")?;
    let mut out = text.replace("orca:v1", &format!("orca:{image_tag}"));
    out = out.replace(
        r#"args: ["--tick-ms", "500"]"#,
        &match pool {
            Some(p) => {
                format!(r#"args: ["--tick-ms", "500", "--stale-seconds", "5", "--pool", "{p}"]"#)
            }
            None => r#"args: ["--tick-ms", "500", "--stale-seconds", "5"]"#.to_string(),
        },
    );
    out = out.replace("staleSeconds: 10", "staleSeconds: 5");
    Ok(out)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let start = Instant::now();
    // Listening before anything is started: the default action of either
    // signal would end this process alone and leave the local mode (in a
    // process group of its own, out of the terminal's Ctrl-C) running.
    let mut int = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
    let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    // On a signal the demo's future is dropped, and with it the local mode
    // (stopped by SIGTERM, and waited for) and then PostgreSQL.
    let stopped = tokio::select! {
        outcome = demo(start) => return outcome,
        _ = int.recv() => "interrupted (SIGINT)",
        _ = term.recv() => "terminated (SIGTERM)",
    };
    let left = left_behind(None);
    if !left.is_empty() {
        bail!("{stopped}; still running:\n{}", list(&left));
    }
    bail!("{stopped}: the local mode and PostgreSQL are stopped")
}

async fn demo(start: Instant) -> anyhow::Result<()> {
    say(start, "starting a throwaway PostgreSQL");
    let cluster = tokio::task::spawn_blocking(Cluster::private).await?;
    let url = cluster.fresh_db().await;
    let mut local = LocalMode::new(&url, &scheduler_yaml("v1", None)?);
    say(
        start,
        format!("orca-operator local {}", local.dir().display()),
    );
    local.start();

    // 1. v1 starts and leads.
    let s = wait(&local, Duration::from_secs(60), |s| s.phase == Phase::Ready).await?;
    let v1 = s.leader.clone().context("v1 leads")?;
    say(
        start,
        format!(
            "v1 leads: instance {} in pod {} ({})",
            v1.instance, v1.pod, v1.image
        ),
    );

    // 2. Runs flow.
    let db = pg::connect(&url).await;
    let mut runs = Vec::new();
    for _ in 0..4 {
        let id: i64 = db
            .query_one(
                "insert into orca.runs (pipeline) values ('sleep:6') returning id",
                &[],
            )
            .await?
            .get(0);
        runs.push(id);
    }
    say(start, format!("queued runs {runs:?} (6 s each)"));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let n: i64 = db
            .query_one(
                "select count(*) from orca.runs where id = any($1) and status = 'running'",
                &[&runs],
            )
            .await?
            .get(0);
        if n == runs.len() as i64 {
            break;
        }
        if Instant::now() > deadline {
            bail!("v1 did not start the runs");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    say(start, format!("v1 runs all {} of them", runs.len()));

    // 3. v2 is applied; the handover, step by step.
    let applied = Instant::now();
    local.apply(&scheduler_yaml("v2", None)?);
    say(start, "applied image v2");
    let mut seen = std::collections::BTreeSet::new();
    let steps = [
        ("HandoverStarted", "v2's pod starts beside v1"),
        ("Joined", "v2 joined"),
        ("AskedDrain", "v1 asked to drain"),
        ("Leading", "v2 leads (verified in pg_locks)"),
        ("Registering", "register job runs with v2"),
        ("Registered", "v2's pipelines registered"),
        ("Removed", "v1 drained its runs, ended and its pod is gone"),
        ("HandoverComplete", "handover complete"),
    ];
    let deadline = Instant::now() + Duration::from_secs(90);
    let from = local.output().len();
    while seen.len() < steps.len() {
        let out = local.output();
        for (reason, text) in steps {
            if !seen.contains(reason)
                && out[from.min(out.len())..]
                    .iter()
                    .any(|l| l.contains(&format!(" {reason}:")))
            {
                seen.insert(reason);
                say(
                    start,
                    format!("  +{:>4.1}s  {text}", applied.elapsed().as_secs_f64()),
                );
            }
        }
        if Instant::now() > deadline {
            bail!(
                "the handover did not finish; the operator said:\n{}",
                out.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let s = local.status();
    let v2 = s.leader.clone().context("v2 leads")?;
    let h = s
        .last_handover
        .clone()
        .context("the handover is recorded")?;
    let took = |a: &Option<String>, b: &Option<String>| -> Option<f64> {
        let a = chrono::DateTime::parse_from_rfc3339(a.as_deref()?).ok()?;
        let b = chrono::DateTime::parse_from_rfc3339(b.as_deref()?).ok()?;
        Some((b - a).num_milliseconds() as f64 / 1000.0)
    };
    let join_to_lead = took(&h.joined, &h.led);

    // v1's runs finished under v1, once each.
    let lost: i64 = db
        .query_one(
            "select count(*) from orca.runs where id = any($1) and not (status = 'succeeded' and start = 1 and instance = $2)",
            &[&runs, &v1.instance],
        )
        .await?
        .get(0);

    // 4. A warm pool of instances on moto serves a run, and refills.
    let pool = std::fs::read_to_string(examples().join("warmpool.yaml"))
        .context("reading examples/warmpool.yaml")?;
    // One run per instance, so the pool has to refill after serving one.
    let pool = pool.replace("  idleSeconds: 600", "  idleSeconds: 600\n  maxUses: 1");
    local.write("warmpool.yaml", &pool);
    say(
        start,
        "applied WarmPool runners (idle 2..4, one run per instance) and v3, which runs on it",
    );
    local.apply(&scheduler_yaml("v3", Some("default/runners"))?);
    let p = wait_pool(&local, Duration::from_secs(60), |p| p.idle >= 2).await?;
    say(
        start,
        format!(
            "warm pool: {} instances idle on moto, their agents waiting in pool-next",
            p.idle
        ),
    );
    wait(&local, Duration::from_secs(60), |s| {
        s.phase == Phase::Ready && s.leader.as_ref().is_some_and(|l| l.image.ends_with(":v3"))
    })
    .await?;
    say(start, "v3 leads");
    let queued = Instant::now();
    let lines_before = local.output().len();
    let run: i64 = db
        .query_one(
            "insert into orca.runs (pipeline) values ('sleep:1') returning id",
            &[],
        )
        .await?
        .get(0);
    let deadline = Instant::now() + Duration::from_secs(30);
    let handed = loop {
        if let Some(row) = db
            .query_opt(
                "select instance, extract(epoch from joined - created)::float8 from orca.instances
                 where run = $1 and pooled and joined is not null",
                &[&run],
            )
            .await?
        {
            break (row.get::<_, String>(0), queued.elapsed());
        }
        if Instant::now() > deadline {
            bail!(
                "run {run} was not handed an instance; the operator said:\n{}",
                local.output().join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    say(
        start,
        format!(
            "run {run} handed warm instance {} {:.0} ms after it was queued",
            handed.0,
            handed.1.as_secs_f64() * 1000.0
        ),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status: String = db
            .query_one("select status from orca.runs where id = $1", &[&run])
            .await?
            .get(0);
        if status == "succeeded" {
            break;
        }
        if Instant::now() > deadline {
            bail!("run {run} did not finish on its instance");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    say(
        start,
        format!(
            "run {run} succeeded on {}; that instance has served its one run",
            handed.0
        ),
    );
    let (refill, fresh) =
        wait_pool_output(&local, Duration::from_secs(60), &handed.0, lines_before).await?;
    say(start, format!("the pool retires it and refills: {refill}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let idle: i64 = db
            .query_one(
                "select count(*) from orca.instances where pool = 'default/runners' and ended is null and idle is not null",
                &[],
            )
            .await?
            .get(0);
        let fresh_idle: bool = db
            .query_one(
                "select exists (select 1 from orca.instances where instance = $1 and ended is null and idle is not null)",
                &[&fresh],
            )
            .await?
            .get(0);
        if fresh_idle && idle >= 2 {
            say(
                start,
                format!("{fresh}'s agent is waiting: the pool has {idle} idle instances again"),
            );
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "the pool did not refill; the operator said:\n{}",
                local.output().join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let leader = local.status().leader.context("v3 leads")?;

    // The summary.
    println!();
    say(start, "summary");
    println!(
        "  handover {} → {}: joined → leads {:.0} ms (tick 500 ms), pod started → old drained {:.1} s",
        h.from,
        h.to,
        join_to_lead.unwrap_or(f64::NAN) * 1000.0,
        took(&h.started, &h.drained).unwrap_or(f64::NAN)
    );
    println!(
        "  v2 took over from instance {} as instance {}; now instance {} ({}) leads",
        v1.instance, v2.instance, leader.instance, leader.image
    );
    println!("  runs lost: {lost}");
    println!(
        "  a queued run was handed a warm instance in {:.0} ms",
        handed.1.as_secs_f64() * 1000.0
    );
    if lost != 0 {
        bail!("{lost} runs did not finish exactly once under v1");
    }

    // The end: the local mode stopped as Ctrl-C or SIGTERM stops it, then
    // PostgreSQL; nothing the demo started may be left running.
    println!();
    say(start, "stopping the local mode (SIGTERM)");
    let status = local.stop(Stop::Term, Duration::from_secs(180));
    if !status.success() {
        bail!(
            "the local mode ended with {status}; it said:\n{}",
            local.output().join("\n")
        );
    }
    drop(db);
    drop(cluster);
    let left = left_behind(Some(&local));
    if !left.is_empty() {
        bail!(
            "processes the demo started are still running:\n{}",
            list(&left)
        );
    }
    say(
        start,
        "stopped: every process the demo started has ended (agents, run commands, schedulers, moto, PostgreSQL)",
    );
    Ok(())
}

/// What the demo started that still runs a few seconds on: the processes
/// of the local mode (found by its tag wherever they were reparented) and
/// the demo's own children (its PostgreSQL).
fn left_behind(local: Option<&LocalMode>) -> Vec<Process> {
    let me = std::process::id() as i32;
    local::wait_until_none(Duration::from_secs(5), || {
        let mut left = local.map(LocalMode::processes).unwrap_or_default();
        left.extend(local::descendants(me));
        left.sort();
        left.dedup();
        left
    })
}

fn list(processes: &[Process]) -> String {
    processes
        .iter()
        .map(|p| format!("  {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn wait_pool(
    local: &LocalMode,
    limit: Duration,
    check: impl Fn(&orca_operator::crd::WarmPoolStatus) -> bool,
) -> anyhow::Result<orca_operator::crd::WarmPoolStatus> {
    let deadline = Instant::now() + limit;
    loop {
        let s = local.pool_status("runners");
        if check(&s) {
            return Ok(s);
        }
        if Instant::now() > deadline {
            bail!(
                "the warm pool: not within {limit:?}; the operator said:\n{}",
                local.output().join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The lines where the pool terminated `instance` and launched another, and
/// the new instance's id.
async fn wait_pool_output(
    local: &LocalMode,
    limit: Duration,
    instance: &str,
    from: usize,
) -> anyhow::Result<(String, String)> {
    let deadline = Instant::now() + limit;
    loop {
        let out = local.output();
        let since = &out[from.min(out.len())..];
        let retired = since
            .iter()
            .find(|l| l.contains("warmpool") && l.contains("Terminated") && l.contains(instance));
        if let Some(retired) = retired {
            // The replacement may be launched in the same pass, before the
            // termination is reported.
            if let Some(launch) = since
                .iter()
                .find(|l| l.contains("warmpool") && l.contains("Launched"))
            {
                let retired = retired
                    .split_once(": ")
                    .map(|x| x.1)
                    .unwrap_or(retired)
                    .to_string();
                let fresh = launch.rsplit(' ').next().unwrap_or_default().to_string();
                let launch = launch
                    .split_once(": ")
                    .map(|x| x.1)
                    .unwrap_or(launch)
                    .to_string();
                return Ok((format!("{retired}; {launch}"), fresh));
            }
        }
        if Instant::now() > deadline {
            bail!(
                "the pool did not retire {instance} and refill; the operator said:\n{}",
                out.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn wait(
    local: &LocalMode,
    limit: Duration,
    check: impl Fn(&orca_operator::crd::SchedulerStatus) -> bool,
) -> anyhow::Result<orca_operator::crd::SchedulerStatus> {
    let deadline = Instant::now() + limit;
    loop {
        let s = local.status();
        if check(&s) {
            return Ok(s);
        }
        if Instant::now() > deadline {
            bail!(
                "not within {limit:?}; the operator said:\n{}",
                local.output().join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
