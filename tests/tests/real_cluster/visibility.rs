//! What only the user can fix is said where the user looks, on the real
//! cluster: a call the chart's RBAC (its ClusterRole, edited here) does not allow makes the
//! Scheduler `Degraded` with reason `Forbidden` and the API server's
//! message naming the verb and the resource, with a Warning Event — once
//! only in the operator's log. And a replica whose reconcile hangs answers
//! `/healthz` with an error naming it, so that the kubelet restarts it.

use std::time::Duration;

use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::{
    api::{Patch, PatchParams},
    Api,
};
use orca_operator::crd::Phase;
use orca_tests::{eventually::eventually, on_cluster::OnCluster, release::Replica};

use super::scheduler;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbidden_call_is_said_on_the_scheduler_naming_verb_and_resource() {
    let stage = OnCluster::without_operator("forbidden").await;
    // The chart's rules, less `get` on Secrets.
    let roles: Api<ClusterRole> = Api::all(stage.client().clone());
    let name = stage.release().fullname();
    let mut role = roles.get(&name).await.expect("the chart's ClusterRole");
    for rule in role.rules.iter_mut().flatten() {
        if rule.resources.iter().flatten().any(|r| r == "secrets") {
            rule.verbs.retain(|v| v != "get");
        }
    }
    role.metadata.managed_fields = None;
    roles
        .patch(&name, &PatchParams::default(), &Patch::Merge(&role))
        .await
        .expect("editing the ClusterRole");
    let stage = stage.with_replica("a").await;
    stage
        .apply_scheduler(&scheduler("orca", "v1", &[], ""))
        .await;
    let status = stage
        .wait_scheduler(
            "orca",
            "Degraded, Forbidden",
            Duration::from_secs(60),
            |s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Degraded" && c.status == "True" && c.reason == "Forbidden")
            },
        )
        .await;
    assert_eq!(status.phase, Phase::Degraded);
    let message = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains("cannot get resource \"secrets\""),
        "the condition names the verb and the resource: {message}"
    );
    let (reason, text) = stage.column("schedulers", "orca", "REASON");
    assert_eq!(
        reason.as_deref(),
        Some("Forbidden"),
        "kubectl get shows the reason: {text}"
    );
    let events = stage
        .wait_event("orca", "Forbidden", Duration::from_secs(10))
        .await;
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("Forbidden:") && e.contains("secrets")),
        "{events:#?}"
    );
}

/// A database that takes connections and never answers: each pass of the
/// Scheduler would wait out the connect's own time limit (5 s). Its
/// reconcile is stopped at its deadline (a fifth of `--stuck-after-seconds
/// 10`: 2 s), the Scheduler says so, and the replica stays healthy — the
/// stuck limit, which restarts the replica, is left for a hang the
/// deadline cannot stop. (Before the deadline, a slow tenant's database
/// restarted the replica and everyone's reconciles with it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_that_hangs_is_stopped_at_its_deadline_and_the_replica_stays_healthy() {
    let blackhole = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = blackhole.local_addr().expect("its address").port();
    let held = std::thread::spawn(move || {
        let mut open = Vec::new();
        for conn in blackhole.incoming().flatten() {
            open.push(conn);
        }
    });
    let mut stage = OnCluster::without_operator("liveness").await;
    stage
        .secret(
            "orca-db",
            "url",
            &format!("postgres://orca:pw@127.0.0.1:{port}/orca"),
        )
        .await;
    let replica = Replica::start_with(
        stage.cp(),
        stage.client(),
        stage.release(),
        "a",
        &["--stuck-after-seconds", "10"],
    )
    .await;
    stage.add_replica(replica);
    eventually("/healthz answers", Duration::from_secs(30), || async {
        match stage.replicas()[0].health()? {
            (200, _) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    stage
        .apply_scheduler(&scheduler("orca", "v1", &[], ""))
        .await;
    let healthy = async {
        for _ in 0..30 {
            match stage.replicas()[0].health() {
                Ok((200, _)) => {}
                other => panic!("the replica is not healthy: {other:?}"),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    let said = stage.wait_scheduler(
        "orca",
        "ReconcileDeadlineExceeded",
        Duration::from_secs(30),
        |s| {
            s.conditions.iter().any(|c| {
                c.type_ == "Degraded"
                    && c.reason == "ReconcileDeadlineExceeded"
                    && c.message.contains("ran past its deadline of 2s")
            })
        },
    );
    tokio::join!(healthy, said);
    drop(held);
}
