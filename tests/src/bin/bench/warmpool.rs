//! `bench warmpool`: the WarmPool controller of the Kubernetes mode
//! (docs/architecture.md#benchmarks), in this process against the test
//! control plane (kube-apiserver, etcd), moto behind a counting proxy and a
//! real PostgreSQL, printed as `| figure | value | target |` lines:
//! - a pool dropping below target (a hand-out takes its idle instance) →
//!   its `RunInstances` call, p50/p99: LISTEN, the trigger, the pass;
//! - what a steady idle pool of 100 asks of EC2 and of the Kubernetes API
//!   in a minute (the requests of the controller's own client, counted by a
//!   layer of it; the watches' long-running GETs apart);
//! - a run's demand → its hand-out from the stopped reserve, with real
//!   agents on local hosts, and the EC2 calls and API requests it took.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use crate::figures::{self, ms, row};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    api::{ObjectMeta, PostParams},
    client::ClientBuilder,
    Api, Client,
};
use orca_operator::{
    crd::{Scheduler, WarmPool},
    fence::Fence,
    runtime::watches::{ClusterWatches, Watches},
    warmpool::{k8s::PoolControllerConfig, Ownership, Tuning},
};
use orca_tests::{
    cluster::ControlPlane,
    counting::{per_minute, Requests},
    ec2_faults::Ec2Faults,
    moto::Moto,
    pg,
    release::Release,
    warm,
};

/// A namespace with the CRDs installed (the chart), the Secret `orca-db`
/// and Scheduler `sched` naming it (as `warm::owner` tags instances); the controller runs over it with a
/// client whose requests are counted.
struct Stage {
    admin: Client,
    ns: String,
    url: String,
    requests: Requests,
    controller: tokio::task::JoinHandle<()>,
}

impl Stage {
    async fn new(cp: &'static ControlPlane, prefix: &str) -> Stage {
        let admin = cp.client().await;
        let ns = cp.namespace(&admin, prefix).await;
        let _release = Release::install(cp, &ns, &ns, &[ns.as_str()], &[]);
        let url = pg::Cluster::shared().migrated_db().await;
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some("orca-db".into()),
                ..Default::default()
            },
            string_data: Some([("url".to_string(), url.clone())].into()),
            ..Default::default()
        };
        Api::<Secret>::namespaced(admin.clone(), &ns)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap_or_else(|e| panic!("the Secret: {e}"));
        let scheduler: Scheduler = serde_json::from_value(serde_json::json!({
            "apiVersion": "orca.dev/v1alpha1", "kind": "Scheduler",
            "metadata": {"name": "sched"},
            "spec": {"image": "orca:bench", "command": ["true"],
                     "database": {"urlSecretRef": {"name": "orca-db", "key": "url"}}},
        }))
        .expect("invariant: a valid Scheduler");
        Api::<Scheduler>::namespaced(admin.clone(), &ns)
            .create(&PostParams::default(), &scheduler)
            .await
            .unwrap_or_else(|e| panic!("the Scheduler: {e}"));
        let requests = Requests::default();
        let client = ClientBuilder::try_from(cp.admin_config().await)
            .unwrap_or_else(|e| panic!("a client: {e}"))
            .with_layer(&requests)
            .build();
        let config = PoolControllerConfig::new(
            Tuning::default().with_leak_grace(Some(Duration::from_secs(600))),
            Fence::always(),
        );
        let mut watches = Watches::new(&client, &Some(ns.clone()));
        let mut cluster = ClusterWatches::new(&client);
        let run = orca_operator::warmpool::k8s::run(client, config, &mut watches, &mut cluster);
        let controller = tokio::spawn(async move {
            futures::join!(run, watches.run(), cluster.run());
        });
        Stage {
            admin,
            ns,
            url,
            requests,
            controller,
        }
    }

    async fn pool(&self, name: &str, endpoint: &str, subnets: &[String], min: i32) {
        let mut spec = warm::spec(endpoint, &["t3.micro"], &subnets[..1], min, min, 1000);
        spec.scheduler = "sched".into();
        Api::<WarmPool>::namespaced(self.admin.clone(), &self.ns)
            .create(&PostParams::default(), &WarmPool::new(name, spec))
            .await
            .unwrap_or_else(|e| panic!("the WarmPool: {e}"));
    }

    fn owner(&self, pool: &str) -> Ownership {
        warm::owner(&format!("{}/{pool}", self.ns))
    }
}

/// Plays the agents of `owner`'s instances that have no row yet: a warm
/// row each, idle. How many it added.
async fn report_idle(
    db: &orca_db::Db,
    ec2: &orca_operator::warmpool::Ec2,
    owner: &Ownership,
) -> usize {
    let ids: Vec<String> = ec2
        .describe(owner)
        .await
        .unwrap_or_else(|e| panic!("DescribeInstances: {e}"))
        .into_iter()
        .filter(|i| i.state().is_present())
        .map(|i| i.id().to_string())
        .collect();
    db.query(
        "insert into orca.instances (instance, pool, role, idle, polled)
         select i, $2, 'warm', now(), now() from unnest($1::text[]) i
         where not exists (select 1 from orca.instances where instance = i)
         returning id",
        &[&ids, &owner.pool()],
    )
    .await
    .unwrap_or_else(|e| panic!("inserting idle rows: {e}"))
    .len()
}

/// Plays the end of every run of `owner`'s pool: the agents end their
/// rows and power their instances off.
async fn finish_runs(db: &orca_db::Db, ec2: &orca_operator::warmpool::Ec2, owner: &Ownership) {
    let ids: Vec<String> = db
        .query(
            "update orca.instances set ended = now(), ended_by = 'agent'
             where pool = $1 and ended is null and run is not null returning instance",
            &[&owner.pool()],
        )
        .await
        .unwrap_or_else(|e| panic!("ending the runs' rows: {e}"))
        .iter()
        .map(|r| r.get(0))
        .collect();
    if !ids.is_empty() {
        ec2.terminate(&ids)
            .await
            .unwrap_or_else(|e| panic!("TerminateInstances: {e}"));
    }
}

const SAMPLES: i64 = 100;

async fn bench_below_target(cp: &'static ControlPlane, moto: &Moto) {
    let stage = Stage::new(cp, "bench-latency").await;
    let faults = Ec2Faults::start(&moto.endpoint());
    let ec2 = warm::ec2(&moto.endpoint()).await;
    let subnets = warm::subnets(&ec2).await;
    stage.pool("latency", &faults.endpoint(), &subnets, 1).await;
    let owner = stage.owner("latency");
    let db = pg::connect(&stage.url).await;
    let mut sched = pg::connect(&stage.url).await;
    let (mut samples, mut listed) = (Vec::new(), 0usize);
    for run in 1..=SAMPLES {
        // The agent of what was launched reports idle, and the passes that
        // wakes have time to end: the figure is of a settled pool's path,
        // not of a queue behind a pass still at work.
        let deadline = Instant::now() + Duration::from_secs(60);
        while report_idle(&db, &ec2, &owner).await == 0 {
            assert!(Instant::now() < deadline, "nothing launched within 60 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (handed, call) =
            warm::hand_out_until_launch(&mut sched, &faults, owner.pool(), run).await;
        samples.push(call.saturating_duration_since(handed));
        // Whether that pass listed EC2 first (its listing too old to reuse).
        if faults
            .calls_of("DescribeInstances")
            .iter()
            .any(|c| c.at() >= handed && c.at() <= call)
        {
            listed += 1;
        }
        // The run ends and its instance powers off, as one of `maxUses: 1`:
        // the pool stays one idle instance and the run's.
        finish_runs(&db, &ec2, &owner).await;
    }
    stage.controller.abort();
    let at = |v: &mut Vec<Duration>, p: f64| {
        v.sort();
        v[((v.len().max(1) - 1) as f64 * p).round() as usize]
    };
    row(
        &format!(
            "Kubernetes mode: pool below target → RunInstances, p50 / p99 ({SAMPLES} hand-outs)"
        ),
        format!(
            "{} / {}",
            ms(at(&mut samples, 0.5)),
            ms(at(&mut samples, 0.99))
        ),
        "p99 ≤ 250 ms",
    );
    row(
        "… of those hand-outs, the passes that listed EC2 first (the listing older than its reuse)",
        format!("{listed} of {SAMPLES}"),
        "—",
    );
}

async fn bench_steady_state(cp: &'static ControlPlane, moto: &Moto) {
    let stage = Stage::new(cp, "bench-steady").await;
    let faults = Ec2Faults::start(&moto.endpoint());
    let ec2 = warm::ec2(&moto.endpoint()).await;
    let subnets = warm::subnets(&ec2).await;
    let owner = stage.owner("steady");
    let db = pg::connect(&stage.url).await;
    warm::launch_by_hand(&ec2, owner.pool(), &subnets[0], 100, "bench-k8s-steady-100").await;
    report_idle(&db, &ec2, &owner).await;
    // The agents' beat, once a second for all of them.
    let beat_url = stage.url.clone();
    let pool = owner.pool().clone();
    let beat = tokio::spawn(async move {
        let db = pg::connect(&beat_url).await;
        loop {
            let _ = db
                .execute(
                    "update orca.instances set polled = now() where pool = $1 and ended is null",
                    &[&pool],
                )
                .await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    stage
        .pool("steady", &faults.endpoint(), &subnets, 100)
        .await;
    // Past the first passes (the status written once), count a minute.
    tokio::time::sleep(Duration::from_secs(5)).await;
    faults.forget_calls();
    stage.requests.take();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let calls = faults.calls();
    let requests = stage.requests.take();
    beat.abort();
    stage.controller.abort();
    let mut ec2_calls: BTreeMap<String, usize> = BTreeMap::new();
    for c in &calls {
        *ec2_calls.entry(c.action().to_string()).or_default() += 1;
    }
    let count = |m: &BTreeMap<String, usize>| {
        if m.is_empty() {
            "none".to_string()
        } else {
            m.iter()
                .map(|(a, n)| format!("{n} {a}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    row(
        "Kubernetes mode: EC2 calls per steady-state minute, idle pool of 100 (resync 20 s)",
        count(&ec2_calls),
        "a few Describe calls, nothing else",
    );
    row(
        "Kubernetes mode: API requests per steady-state minute, idle pool of 100 (watches apart)",
        per_minute(&requests, 1),
        "none",
    );
}

/// A pool of no idle instances and a stopped reserve of one, its
/// instances played by local hosts running the real agent: each run asks,
/// the controller starts the reserve instance, its agent boots again and
/// goes idle, and the run's hand-out succeeds. Timed from the ask to the
/// hand-out, with what the controller asked of EC2 and of the API
/// meanwhile.
async fn bench_reserve(cp: &'static ControlPlane, moto: &Moto) {
    let stage = Stage::new(cp, "bench-reserve").await;
    let faults = Ec2Faults::start(&moto.endpoint());
    let ec2 = warm::ec2(&moto.endpoint()).await;
    let subnets = warm::subnets(&ec2).await;
    let owner = stage.owner("reserve");
    let mut spec = warm::spec(&faults.endpoint(), &["t3.micro"], &subnets[..1], 0, 0, 10);
    spec.scheduler = "sched".into();
    spec.stopped = Some(orca_operator::crd::StoppedRange {
        min: 1,
        max: Some(2),
    });
    Api::<WarmPool>::namespaced(stage.admin.clone(), &stage.ns)
        .create(&PostParams::default(), &WarmPool::new("reserve", spec))
        .await
        .unwrap_or_else(|e| panic!("the WarmPool: {e}"));
    let hosts = warm::hosts_for(&moto.endpoint(), &stage.url, owner.clone(), "true").await;
    let (stop_hosts, hosts_stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(hosts.run(async move {
        let _ = hosts_stopped.await;
    }));
    let db = pg::connect(&stage.url).await;
    let mut sched = pg::connect(&stage.url).await;
    const RUNS: i64 = 10;
    let (mut samples, mut calls, mut requests) = (Vec::new(), Vec::new(), Vec::new());
    for run in 1..=RUNS {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let stopped = ec2
                .describe(&owner)
                .await
                .unwrap_or_else(|e| panic!("DescribeInstances: {e}"))
                .iter()
                .filter(|i| i.state() == orca_operator::warmpool::Ec2State::Stopped)
                .count();
            let idle: i64 = db
                .query_one(
                    "select count(*) from orca.instances
                     where pool = $1 and ended is null and idle is not null",
                    &[&owner.pool()],
                )
                .await
                .unwrap()
                .get(0);
            if stopped >= 1 && idle == 0 {
                break;
            }
            assert!(Instant::now() < deadline, "no stopped reserve within 90 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        faults.forget_calls();
        stage.requests.take();
        db.execute(
            "insert into orca.runs (id, pipeline, status, start) values ($1, 'p', 'running', 1)",
            &[&run],
        )
        .await
        .unwrap();
        let req = orca_db::pool::Request::new(owner.pool(), run, 1, "head", "", true);
        let asked = Instant::now();
        orca_db::pool::ask_for_instance(&db, &req).await.unwrap();
        while orca_db::pool::hand_out(&mut sched, &req, Duration::from_secs(5))
            .await
            .unwrap()
            .is_none()
        {
            assert!(
                asked.elapsed() < Duration::from_secs(60),
                "no hand-out within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        samples.push(asked.elapsed());
        calls.extend(faults.calls().into_iter().map(|c| c.action().to_string()));
        requests.extend(stage.requests.take());
    }
    let _ = stop_hosts.send(());
    stage.controller.abort();
    samples.sort();
    row(
        "Kubernetes mode: demand → hand-out from the stopped reserve {min: 1, max: 2}, p50 / max (10 runs; real agents on local hosts polling EC2 every 200 ms)",
        format!("{} / {}", ms(samples[samples.len() / 2]), ms(samples[samples.len() - 1])),
        "no launch",
    );
    let mut by: BTreeMap<String, usize> = BTreeMap::new();
    for c in calls {
        *by.entry(c.to_string()).or_default() += 1;
    }
    row(
        "… EC2 calls per hand-out, the controller's and the local hosts' (their DescribeInstances)",
        by.iter()
            .map(|(a, n)| format!("{:.1} {a}", *n as f64 / RUNS as f64))
            .collect::<Vec<_>>()
            .join(", "),
        "1 StartInstances, no RunInstances",
    );
    row(
        "… API requests per hand-out (watches apart)",
        per_minute(&requests, RUNS as usize),
        "the status and events of the passes",
    );
}

pub fn run() {
    warm::aws_env();
    let runtime = figures::runtime();
    let cp = ControlPlane::shared();
    runtime.block_on(async {
        let moto = Moto::start();
        bench_below_target(cp, &moto).await;
        bench_steady_state(cp, &moto).await;
        bench_reserve(cp, &moto).await;
    });
}
