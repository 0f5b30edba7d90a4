//! `bench-coldstart`: one operator replica (the shipped static
//! `orca-operator` of scripts/build-static, beside `$ORCA_STATIC_AGENT`,
//! with the chart's arguments and its ServiceAccount's RBAC) started over
//! 1000 Schedulers and 200 WarmPools on the test control plane
//! (docs/architecture.md#benchmarks), their databases four real
//! PostgreSQL databases and their EC2 moto's server, printed as
//! `| figure | value | target |` lines:
//! - the replica's start → every object's first status (the Schedulers
//!   paused: a status each, no pods; the WarmPools at `idle.min` 0);
//! - a second replica started over them once they have their statuses →
//!   every object reconciled once (its `/metrics`);
//! - the replica's resident memory then, and its connections to each
//!   database (`pg_stat_activity`).

use std::time::{Duration, Instant};

use kube::{api::PostParams, Api};
use orca_operator::crd::{Scheduler, WarmPool};
use orca_tests::{moto::Moto, on_cluster::OnCluster, pg, release::Replica, warm};

const SCHEDULERS: usize = 1000;
const POOLS: usize = 200;
const DATABASES: usize = 4;

fn row(line: &str, value: String, target: &str) {
    println!("| {line} | {value} | {target} |");
}

fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status"));
    kib / 1024.0
}

/// How many Schedulers and WarmPools of `ns` `replica`'s `/metrics` shows
/// a pass of.
fn passes_seen(replica: &Replica, ns: &str) -> (usize, usize) {
    // Not serving yet.
    if replica.health().is_err() {
        return (0, 0);
    }
    let text = replica.scrape();
    let schedulers = text
        .lines()
        .filter(|l| {
            l.starts_with("orca_scheduler_reconciles_total{")
                && l.contains(&format!("namespace=\"{ns}\""))
        })
        .count();
    let pools = text
        .lines()
        .filter(|l| l.starts_with("orca_pool_idle_min{") && l.contains(&format!("\"{ns}/")))
        .count();
    (schedulers, pools)
}

/// Waits for `done` to say (schedulers, pools) are all there: how long
/// until all were, and until the WarmPools were.
async fn until<F, Fut>(what: &str, mut done: F) -> (Duration, Duration)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = (usize, usize)>,
{
    let started = Instant::now();
    let deadline = started + Duration::from_secs(600);
    let mut pools_done = None;
    loop {
        let (s, p) = done().await;
        if p >= POOLS && pools_done.is_none() {
            pools_done = Some(started.elapsed());
        }
        if s >= SCHEDULERS && p >= POOLS {
            return (started.elapsed(), pools_done.unwrap_or_default());
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {s} of {SCHEDULERS} Schedulers and {p} of {POOLS} WarmPools within 600 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The operator's connections to each database: the most to one, and in
/// all.
async fn connections(urls: &[String]) -> (i64, i64) {
    let db = pg::connect(&urls[0]).await;
    let mut counts = Vec::new();
    for url in urls {
        let name = url.rsplit('/').next().unwrap_or_default();
        let name = name.split('?').next().unwrap_or_default();
        let n: i64 = db
            .query_one(
                "select count(*) from pg_stat_activity
                 where datname = $1 and application_name like 'orca-operator%'",
                &[&name],
            )
            .await
            .unwrap_or_else(|e| panic!("pg_stat_activity: {e}"))
            .get(0);
        counts.push(n);
    }
    (
        counts.iter().copied().max().unwrap_or(0),
        counts.iter().sum(),
    )
}

async fn bench() {
    let moto = Moto::start();
    let ec2 = warm::ec2(&moto.endpoint()).await;
    let subnets = warm::subnets(&ec2).await;
    let stage = OnCluster::without_operator("bench-cold").await;
    let mut urls = Vec::new();
    for d in 0..DATABASES {
        let url = pg::Cluster::shared().migrated_db().await;
        stage.secret(&format!("db-{d}"), "url", &url).await;
        urls.push(url);
    }
    let schedulers: Api<Scheduler> = stage.schedulers();
    for i in 0..SCHEDULERS {
        let scheduler: Scheduler = serde_json::from_value(serde_json::json!({
            "apiVersion": "orca.dev/v1alpha1", "kind": "Scheduler",
            "metadata": {"name": format!("s-{i:04}")},
            "spec": {"image": "v1", "command": ["/bin/true"], "paused": true,
                     "database": {"urlSecretRef": {"name": format!("db-{}", i % DATABASES), "key": "url"}}},
        }))
        .expect("invariant: a valid Scheduler");
        schedulers
            .create(&PostParams::default(), &scheduler)
            .await
            .unwrap_or_else(|e| panic!("Scheduler {i}: {e}"));
    }
    for i in 0..POOLS {
        let mut spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 0, 0, 2);
        spec.scheduler = format!("s-{i:04}");
        stage
            .create_pool(&WarmPool::new(&format!("p-{i:03}"), spec))
            .await;
    }

    let mut first = Replica::start(stage.cp, &stage.client, &stage.release, "cold-a").await;
    let (took, pools) = until("first statuses", || stage.with_first_status()).await;
    row(
        &format!("Kubernetes mode: replica start → first status of each of {SCHEDULERS} Schedulers (paused) and {POOLS} WarmPools, {DATABASES} databases (the WarmPools' alone)"),
        format!("{:.1} s ({:.1} s)", took.as_secs_f64(), pools.as_secs_f64()),
        "≤ 10 s",
    );
    // Settled: the passes after the first ones done.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let pid = first.pid().expect("the replica runs");
    let (most, total) = connections(&urls).await;
    row(
        &format!("operator's resident memory, {SCHEDULERS} Schedulers and {POOLS} WarmPools"),
        format!("{:.0} MiB", rss_mib(pid)),
        "≤ 100 MiB",
    );
    row(
        &format!("operator's database connections, {SCHEDULERS} Schedulers and {POOLS} WarmPools on {DATABASES} databases: most to one database / in all"),
        format!("{most} / {total}"),
        "bounded per database, whatever the objects on it",
    );
    first.stop();

    // A restart: everything has its status; how long until the new
    // replica has reconciled each once.
    let second = Replica::start(stage.cp, &stage.client, &stage.release, "cold-b").await;
    let (took, _) = until("reconciles after a restart", || async {
        passes_seen(&second, &stage.ns)
    })
    .await;
    row(
        &format!("Kubernetes mode: replica restart → each of {SCHEDULERS} Schedulers and {POOLS} WarmPools reconciled once"),
        format!("{:.1} s", took.as_secs_f64()),
        "≤ 10 s",
    );
    drop(second);
}

fn main() {
    // The operator as it ships (its memory is the figure), unless another
    // build is named.
    if std::env::var_os("ORCA_OPERATOR_UNDER_TEST").is_none() {
        let agent = std::env::var("ORCA_STATIC_AGENT").unwrap_or_else(|_| {
            panic!("ORCA_STATIC_AGENT is not set: scripts/bench builds the static binaries with scripts/build-static and sets it")
        });
        let operator = std::path::Path::new(&agent).with_file_name("orca-operator");
        assert!(
            operator.exists(),
            "{} is missing: scripts/build-static builds it",
            operator.display()
        );
        std::env::set_var("ORCA_OPERATOR_UNDER_TEST", operator);
    }
    warm::aws_env();
    println!("| figure | value | target |");
    println!("|---|---|---|");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("invariant: a runtime can be built");
    runtime.block_on(bench());
}
