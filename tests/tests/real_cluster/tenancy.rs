//! Tenants that meet, on the real cluster. Two Schedulers of one name in two
//! namespaces, both on one database: each tells its own instances from the
//! other's (the host name carries the namespace), so the second starts
//! nothing while the first's instance is live and says why — where both once
//! took each other's rows for their own and churned hundreds of pods a
//! minute.

use std::time::Duration;

use orca_operator::crd::Phase;
use orca_tests::on_cluster::OnCluster;

use super::{ready_with, scheduler};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_schedulers_of_one_name_in_two_namespaces_never_take_each_others_rows() {
    let a = OnCluster::new("team-a").await;
    let b = OnCluster::new("team-b").await;
    // team-b's Secret names team-a's database.
    b.secret("orca-db", "url", a.url()).await;

    a.apply_scheduler(&scheduler("orca", "v1", &[], "")).await;
    let ready = a
        .wait_scheduler(
            "orca",
            "team-a's v1 Ready",
            Duration::from_secs(60),
            ready_with("v1"),
        )
        .await;
    let leader = ready.leader.clone().expect("a leader");
    assert!(
        a.scheduler_pods("orca").await.len() == 1,
        "team-a runs one pod"
    );

    b.apply_scheduler(&scheduler("orca", "v1", &[], "")).await;
    let shared = b
        .wait_scheduler(
            "orca",
            "team-b Degraded: its database is shared",
            Duration::from_secs(30),
            |s| {
                s.phase == Phase::Degraded
                    && s.conditions
                        .iter()
                        .any(|c| c.type_ == "Degraded" && c.reason == "DatabaseShared")
            },
        )
        .await;
    let message = shared
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains(a.ns()),
        "the condition names the other Scheduler's instance, with its namespace: {message}"
    );

    // A while on: team-b started nothing, team-a's instance still leads,
    // and no pod of either was replaced.
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert!(
        b.scheduler_pods("orca").await.is_empty(),
        "team-b started a pod beside team-a's live instance"
    );
    let pods = a.scheduler_pods("orca").await;
    assert_eq!(
        pods.len(),
        1,
        "team-a's pods: {:?}",
        pods.iter().map(|p| &p.metadata.name).collect::<Vec<_>>()
    );
    let now = a
        .schedulers()
        .get("orca")
        .await
        .expect("team-a's Scheduler");
    let status = now.status.unwrap_or_default();
    assert_eq!(status.phase, Phase::Ready, "{status:?}");
    assert_eq!(
        status.leader.map(|l| l.instance),
        Some(leader.instance),
        "team-a's instance was drained"
    );
    let events = a.events("orca").await;
    assert!(
        !events.iter().any(|e| e.starts_with("AskedDrain")),
        "team-a's instance was asked to drain: {events:#?}"
    );
}
