//! `bench coldstart`: one operator replica (the shipped static
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

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use crate::figures::{self, row};
use futures::TryStreamExt;
use kube::{
    api::PostParams,
    runtime::{watcher, WatchStreamExt},
    Api, Client, Resource, ResourceExt,
};
use orca_operator::crd::{Scheduler, WarmPool};
use orca_tests::{moto::Moto, on_cluster::OnCluster, pg, release::Replica, warm};

const SCHEDULERS: usize = 1000;
const POOLS: usize = 200;
const DATABASES: usize = 4;

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

/// Watches `api` from `started` until each of its `count` objects has a
/// status of its generation (`current`): how long that took.
async fn until_current<K>(
    api: Api<K>,
    count: usize,
    current: fn(&K) -> bool,
    started: Instant,
) -> Duration
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let mut done = HashSet::new();
    let mut objects = std::pin::pin!(watcher(api, watcher::Config::default()).applied_objects());
    let deadline = started + Duration::from_secs(600);
    while done.len() < count {
        let next = tokio::time::timeout_at(deadline.into(), objects.try_next())
            .await
            .unwrap_or_else(|_| panic!("{} of {count} with a status within 600 s", done.len()));
        match next {
            Ok(Some(object)) if current(&object) => {
                done.insert(object.name_any());
            }
            Ok(_) => {}
            Err(e) => eprintln!("watch: {e}"),
        }
    }
    started.elapsed()
}

/// The API server's requests so far, by verb and resource (its
/// `apiserver_request_total`).
async fn api_requests(client: &Client) -> BTreeMap<String, f64> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("invariant: a valid request");
    let text = client
        .request_text(request)
        .await
        .unwrap_or_else(|e| panic!("the API server's /metrics: {e}"));
    let mut counts = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let Some((labels, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(&format!("{name}=\""))
                .nth(1)
                .and_then(|v| v.split('"').next())
                .unwrap_or_default()
                .to_string()
        };
        let sub = label("subresource");
        let key = format!(
            "{} {}{}",
            label("verb"),
            label("resource"),
            if sub.is_empty() {
                String::new()
            } else {
                format!("/{sub}")
            }
        );
        *counts.entry(key).or_default() += value.parse::<f64>().unwrap_or(0.0);
    }
    counts
}

/// The requests of `verbs` between `before` and `after`: in all, and by
/// verb and resource, most first.
fn requests(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    verbs: &[&str],
) -> (f64, String) {
    let mut by: Vec<(String, f64)> = after
        .iter()
        .filter(|(k, _)| verbs.iter().any(|v| k.starts_with(&format!("{v} "))))
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, n)| *n > 0.0)
        .collect();
    by.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total = by.iter().map(|(_, n)| n).sum();
    let list = by
        .iter()
        .map(|(k, n)| format!("{n:.0} {k}"))
        .collect::<Vec<_>>()
        .join(", ");
    (total, list)
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

    let before = api_requests(stage.client()).await;
    let started = Instant::now();
    let watching = futures::future::join(
        until_current(
            schedulers.clone(),
            SCHEDULERS,
            |s: &Scheduler| {
                s.status
                    .as_ref()
                    .is_some_and(|st| st.observed_generation == s.metadata.generation)
            },
            started,
        ),
        until_current(
            stage.pools(),
            POOLS,
            |p: &WarmPool| {
                p.status
                    .as_ref()
                    .is_some_and(|st| st.observed_generation == p.metadata.generation)
            },
            started,
        ),
    );
    let mut first = Replica::start(stage.cp(), stage.client(), stage.release(), "cold-a").await;
    let (took_schedulers, took_pools) = watching.await;
    let after = api_requests(stage.client()).await;
    row(
        &format!("Kubernetes mode: replica start → first status of each of {SCHEDULERS} Schedulers (paused) and {POOLS} WarmPools, {DATABASES} databases (the Schedulers' / the WarmPools')"),
        format!(
            "{:.1} s ({:.1} s / {:.1} s)",
            took_schedulers.max(took_pools).as_secs_f64(),
            took_schedulers.as_secs_f64(),
            took_pools.as_secs_f64()
        ),
        "≤ 10 s",
    );
    let (_, reads) = requests(&before, &after, &["GET", "LIST", "WATCH"]);
    row(
        "the API server's reads until then (the watches' lists, each Secret read once)",
        reads,
        "no read per object",
    );
    let (total, list) = requests(
        &before,
        &after,
        &["POST", "PUT", "PATCH", "APPLY", "DELETE"],
    );
    row(
        "the API server's writes until then",
        format!("{total:.0}: {list}"),
        "one status per object, a finalizer per pool",
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
    let second = Replica::start(stage.cp(), stage.client(), stage.release(), "cold-b").await;
    let (took, _) = until("reconciles after a restart", || async {
        passes_seen(&second, stage.ns())
    })
    .await;
    row(
        &format!("Kubernetes mode: replica restart → each of {SCHEDULERS} Schedulers and {POOLS} WarmPools reconciled once"),
        format!("{:.1} s", took.as_secs_f64()),
        "≤ 10 s",
    );
    drop(second);
}

pub fn run() {
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
    let runtime = figures::runtime();
    runtime.block_on(bench());
}
