//! The Kubernetes mode's WarmPool controller
//! (docs/architecture.md#the-warmpool-controller): `reconcile` puts the
//! finalizer on the WarmPool and runs a pass of its pool on the database of
//! the Scheduler the pool names, writing its status and Events back; on
//! deletion the passes terminate the instances (or leave them) before the
//! finalizer goes. kube's client runs against the HTTP-level mock of
//! `k8s_mode`, answered by path, with a real PostgreSQL and moto's EC2
//! server. The harness reconciles again as the controller's requeue would;
//! the whole controller, with its watches, runs on a real API server in
//! `real_cluster`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::controller::Action;
use orca_db::pool::{hand_out, mark_idle, Request};
use orca_operator::crd::{FormerPlace, OnDelete, Scheduler, SchedulerSpec, WarmPool, WarmPoolSpec};
use orca_operator::fence::Fence;
use orca_operator::warmpool::k8s::{
    reconcile, Context, PoolControllerConfig, ReconcileError, FINALIZER,
};
use orca_tests::mock_api::{mock_client, not_found, secret, ApiServerVerifier, Call, NS};
use orca_tests::{
    ec2_faults::{Ec2Faults, Fault},
    warm,
};
use serde_json::{json, Value};

/// The WarmPool's name; `warm::owner` tags its instances as `default/warm`.
const POOL: &str = "warm";
const SCHEDULER: &str = "sched";
const API: &str = "/apis/orca.dev/v1alpha1/namespaces/default";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/default/events";

fn warm_pool(spec: WarmPoolSpec, generation: i64) -> WarmPool {
    let mut wp = WarmPool::new(POOL, spec);
    wp.metadata.namespace = Some(NS.into());
    wp.metadata.uid = Some("warmpool-uid".into());
    wp.metadata.generation = Some(generation);
    wp.metadata.resource_version = Some(generation.to_string());
    wp
}

fn scheduler() -> Scheduler {
    let spec: SchedulerSpec = serde_json::from_value(json!({
        "image": "orca:v1",
        "command": ["orca-sim", "scheduler"],
        "database": {"urlSecretRef": {"name": "orca-db", "key": "url"}},
    }))
    .unwrap();
    let mut s = Scheduler::new(SCHEDULER, spec);
    s.metadata.namespace = Some(NS.into());
    s.metadata.uid = Some("scheduler-uid".into());
    s
}

fn config(fence: Fence) -> PoolControllerConfig {
    PoolControllerConfig::new(warm::tuning(Duration::from_secs(60)), fence)
}

fn context(client: kube::Client) -> Arc<Context> {
    Arc::new(Context::new(client, config(Fence::always())))
}

/// A pool of t3.micro on the first subnet, through `endpoint`.
fn spec(stage: &warm::Stage, endpoint: &str, min: i32, max: i32) -> WarmPoolSpec {
    warm::spec(endpoint, &["t3.micro"], &stage.subnets()[..1], min, max, 4)
}

/// The pool's instances in EC2 that are not going away, by their
/// ownership tags as EC2 itself reports them.
async fn instances(stage: &warm::Stage) -> Vec<String> {
    let out = stage
        .ec2()
        .client()
        .describe_instances()
        .send()
        .await
        .unwrap_or_else(|e| panic!("moto's DescribeInstances failed: {e}"));
    let owner = warm::owner(&format!("{NS}/{POOL}"));
    let mut ids = Vec::new();
    for i in out.reservations().iter().flat_map(|r| r.instances()) {
        let tag = |k: &str| {
            i.tags()
                .iter()
                .find(|t| t.key() == Some(k))
                .and_then(|t| t.value())
                .map(String::from)
        };
        let state = i.state().and_then(|s| s.name()).map(|n| n.as_str());
        let ours = owner
            .tags()
            .iter()
            .all(|(k, v)| tag(k).as_deref() == Some(v));
        if ours && matches!(state, Some("pending" | "running")) {
            ids.push(i.instance_id().unwrap_or_default().to_string());
        }
    }
    ids.sort();
    ids
}

/// A pool of one on `stage`'s EC2 and database, reconciled until its
/// instance is launching.
async fn one_launching(stage: &warm::Stage) -> (Cluster, Arc<Context>) {
    let (k8s, _, ctx) = one_launching_on(stage).await;
    (k8s, ctx)
}

/// As [`one_launching`], with the client, for an operator restarted on it.
async fn one_launching_on(stage: &warm::Stage) -> (Cluster, kube::Client, Arc<Context>) {
    let wp = warm_pool(spec(stage, &stage.moto().endpoint(), 1, 1), 1);
    let (mut k8s, client) =
        Cluster::new(wp.clone(), Some(scheduler()), Some(url_secret(stage.url())));
    let ctx = context(client.clone());
    k8s.reconcile(&ctx, wp).await;
    k8s.until("one launching", |k| k.status()["launching"] == 1)
        .await;
    assert_eq!(instances(stage).await.len(), 1);
    (k8s, client, ctx)
}

/// `instance`'s agent reports to `stage`'s database and it is handed a
/// run: busy.
async fn busy(stage: &warm::Stage, instance: &str) {
    let pool = format!("{NS}/{POOL}");
    let mut db = orca_tests::pg::connect(stage.url()).await;
    mark_idle(&db, instance, 0, 0, Some(&pool))
        .await
        .unwrap()
        .expect("a warm row");
    let req = Request::new(&pool, 1, 1, "head", "", true);
    hand_out(&mut db, &req, Duration::from_secs(60))
        .await
        .unwrap()
        .expect("the instance for the run");
}

/// The pool reconciled `times` times, 300 ms apart: what a pass after pass
/// does to it.
async fn reconciled_a_while(k8s: &mut Cluster, ctx: &Arc<Context>, times: usize) {
    for _ in 0..times {
        let pool = k8s.pool.clone();
        k8s.reconcile(ctx, pool).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The pool's spec edited to `spec` (its generation 2), reconciled once.
async fn edit(k8s: &mut Cluster, ctx: &Arc<Context>, spec: WarmPoolSpec) {
    k8s.pool.spec = spec;
    k8s.pool.metadata.generation = Some(2);
    let edited = k8s.pool.clone();
    k8s.reconcile(ctx, edited).await;
}

/// `stage`'s pool moved onto `stage`'s own EC2 and its first subnet.
/// A pool launched on `old`, its instance busy there, then moved onto
/// `new`: the old place drains, its busy instance left to its run. The
/// cluster, its client, the operator, and the instance left behind.
async fn moved_leaving_one_busy(
    old: &warm::Stage,
    new: &warm::Stage,
) -> (Cluster, kube::Client, Arc<Context>, Vec<String>) {
    let (mut k8s, client, ctx) = one_launching_on(old).await;
    let there = instances(old).await;
    assert_eq!(there.len(), 1);
    busy(old, &there[0]).await;
    edit(&mut k8s, &ctx, moved_onto(new)).await;
    k8s.until("the old place draining", |k| {
        retiring_after_edit(k) == Some(1)
    })
    .await;
    (k8s, client, ctx, there)
}

fn moved_onto(stage: &warm::Stage) -> WarmPoolSpec {
    let mut moved = spec(stage, &stage.moto().endpoint(), 1, 1);
    moved.launch.subnet_ids = stage.subnets()[..1].to_vec();
    moved
}

/// How many former places the status names, once the edit is seen.
fn retiring_after_edit(k: &Cluster) -> Option<usize> {
    (k.status()["observedGeneration"] == 2)
        .then(|| k.status()["retiring"].as_array().map_or(0, Vec::len))
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} condition in {status}"))
}

fn url_secret(url: &str) -> Secret {
    secret(&[("url", url)])
}

/// Applies a JSON patch (RFC 6902) of `test`, `add` and `remove` as the API
/// server does, all or nothing; why not.
fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), String> {
    let mut out = doc.clone();
    for op in ops.as_array().ok_or("a JSON patch is an array")? {
        let path = op["path"].as_str().ok_or("an op without a path")?;
        let (parent, last) = path.rsplit_once('/').ok_or("a path without /")?;
        match op["op"].as_str() {
            Some("test") => {
                let at = out.pointer(path).cloned().unwrap_or(Value::Null);
                if at != op["value"] {
                    return Err(format!(
                        "test of {path} failed: {at} is not {}",
                        op["value"]
                    ));
                }
            }
            Some("add") => match out.pointer_mut(parent) {
                Some(Value::Array(a)) if last == "-" => a.push(op["value"].clone()),
                Some(Value::Array(a)) => {
                    let i: usize = last.parse().map_err(|_| format!("bad index in {path}"))?;
                    a.insert(i, op["value"].clone());
                }
                Some(Value::Object(m)) => {
                    m.insert(last.to_string(), op["value"].clone());
                }
                _ => return Err(format!("no parent for {path}")),
            },
            Some("remove") => match out.pointer_mut(parent) {
                Some(Value::Array(a)) => {
                    let i: usize = last.parse().map_err(|_| format!("bad index in {path}"))?;
                    if i >= a.len() {
                        return Err(format!("no {path}"));
                    }
                    a.remove(i);
                }
                Some(Value::Object(m)) => {
                    m.remove(last).ok_or(format!("no {path}"))?;
                }
                _ => return Err(format!("no parent for {path}")),
            },
            other => return Err(format!("an op the tests do not know: {other:?}")),
        }
    }
    *doc = out;
    Ok(())
}

mod harness;

use harness::Cluster;

mod capacity;
mod deletion;
mod fence;
mod launching;
mod moving;
