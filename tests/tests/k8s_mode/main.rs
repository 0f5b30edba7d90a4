//! The Kubernetes mode's Scheduler controller where an HTTP-level mock of
//! the API shows quickly what a real server would take long to: one
//! `reconcile` at a time against a mock that answers each call in order and
//! checks it (a bad database reference, a fence closing mid-reconcile,
//! fields an older writer left), and the election's timing under a paused
//! clock. The handover itself is tested on a real control plane
//! (tests/tests/real_cluster/).

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use orca_operator::crd::{Scheduler, SchedulerSpec};
use orca_operator::fence::Fence;
use orca_operator::k8s::{reconcile, Context, Metrics};
use orca_tests::mock_api::{self as fixtures, mock_client, secret, ApiServerVerifier, NAME, NS};
use orca_tests::pg;
use prometheus_client::registry::Registry;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

fn scheduler(image: &str) -> Scheduler {
    let spec: SchedulerSpec = serde_json::from_value(json!({
        "image": image,
        "command": ["orca-sim", "scheduler"],
        "database": {"urlSecretRef": {"name": "orca-db", "key": "url"}},
        "register": {"command": ["orca-sim", "register"], "timeoutSeconds": 120},
        "handover": {"staleSeconds": 60},
    }))
    .unwrap();
    let mut s = Scheduler::new(NAME, spec);
    s.metadata.namespace = Some(NS.into());
    s.metadata.uid = Some("scheduler-uid".into());
    s.metadata.generation = Some(1);
    // As an earlier pass left it: these tests are about what comes after.
    s.metadata.finalizers = Some(vec![
        orca_operator::scheduler::k8s::deletion::FINALIZER.into()
    ]);
    s
}

fn context(client: kube::Client) -> (Arc<Context>, Registry) {
    fenced_context(client, Fence::always())
}

fn fenced_context(client: kube::Client, fence: Fence) -> (Arc<Context>, Registry) {
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    (
        Arc::new(Context::new(client, metrics, "orca-operator-0", fence)),
        registry,
    )
}

fn start(
    s: &Scheduler,
    ctx: &Arc<Context>,
) -> JoinHandle<Result<Action, orca_operator::k8s::ReconcileError>> {
    tokio::spawn(reconcile(Arc::new(s.clone()), ctx.clone()))
}

/// The reconcile ends without another call, and without an error.
async fn settle(
    task: JoinHandle<Result<Action, orca_operator::k8s::ReconcileError>>,
    api: &mut ApiServerVerifier,
) {
    tokio::select! {
        done = task => {
            let result = done.expect("reconcile panicked");
            assert!(result.is_ok(), "reconcile failed: {:?}", result.err());
        }
        call = api.next("no further call") => {
            panic!("an unexpected call: {} {}?{} {}", call.method(), call.path(), call.query(), call.body())
        }
    }
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} condition in {status}"))
}

mod crd_look;
mod degraded;
mod election;
mod fence;
mod secret_urls;
mod status;
mod undecodable;
