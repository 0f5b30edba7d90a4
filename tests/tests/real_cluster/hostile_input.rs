//! What a tenant writes cannot end or stall the operator. With the replica
//! held to the chart's memory limit (256 MiB of data) and a stuck limit of
//! 20 s, one namespace's Schedulers point at a CA "file" that is
//! `/dev/zero`, at a FIFO in the CA directory the chart names, at a
//! database whose `orca.schedulers` holds 1500 rows (three of them a
//! 100 MB image each) and at one whose every row takes seconds to read,
//! and a pool's schedule never fires — all written by an editor with a
//! token of their own. The replica stays up and healthy, each of those
//! says why it cannot run, and another namespace's pool scaled up
//! meanwhile gets its instances. (Against 865d898's operator the replica was killed within
//! seconds.)

use std::time::Duration;

use kube::{api::PostParams, Api};
use orca_operator::crd::{Scheduler, SchedulerStatus, WarmPool};
use orca_tests::{
    eventually::eventually,
    hostile::{
        fifo, huge_database, paused, secret, sleeper, slow_database, with_ca, CHART_MEMORY_LIMIT,
    },
    on_cluster::OnCluster,
};

use super::{classes::editor, warm_pool::Ec2Stage};

/// Scheduler `name`'s status once it is Degraded with a message holding
/// `said`.
async fn said(stage: &OnCluster, name: &str, said: &str) -> SchedulerStatus {
    stage
        .wait_scheduler(name, said, Duration::from_secs(60), |s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Degraded" && c.status == "True" && c.message.contains(said))
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_ca_paths_and_databases_stop_neither_the_operator_nor_anyone_else() {
    let client = orca_tests::cluster::ControlPlane::shared().client().await;
    let victim = orca_tests::cluster::ControlPlane::shared()
        .namespace(&client, "input-victim")
        .await;
    // The directory the chart names for CA files, with a FIFO in it.
    let ca_dir = std::env::temp_dir().join(format!("orca-input-ca-{}", std::process::id()));
    let fifo = fifo(&ca_dir, "fifo.pem");
    let dirs = format!("databaseCaDirectories={{{}}}", ca_dir.display());
    let stage = OnCluster::watching(
        "input",
        std::slice::from_ref(&victim),
        &[
            "tenancy.requireClass=false",
            "tenancy.trustEveryEditor=true",
            &dirs,
        ],
    )
    .await
    .with_held_replica("a", &["--stuck-after-seconds=20"], CHART_MEMORY_LIMIT)
    .await;
    let ec2 = Ec2Stage::new(&stage, "unused").await;

    // The victim's pool, served while all is quiet.
    secret(stage.client(), &victim, "orca-db", stage.url()).await;
    Api::<Scheduler>::namespaced(stage.client().clone(), &victim)
        .create(&PostParams::default(), &paused("orca", "orca-db"))
        .await
        .unwrap_or_else(|e| panic!("the victim's Scheduler: {e}"));
    let mut pool = ec2.pool("runners", 1, 3, 3);
    pool.spec.boot_timeout_seconds = 600;
    let pools = Api::<WarmPool>::namespaced(stage.client().clone(), &victim);
    pools
        .create(&PostParams::default(), &pool)
        .await
        .unwrap_or_else(|e| panic!("the victim's pool: {e}"));
    let victims = orca_operator::warmpool::Ownership::new(
        &victim,
        "runners",
        "orca",
        "orca-operator",
        orca_tests::release::TEST_CLUSTER,
    );
    let present = |n: usize| {
        let (ec2, owner) = (&ec2, &victims);
        async move {
            eventually(
                &format!("{n} of the victim's instances"),
                Duration::from_secs(60),
                || async {
                    let up = ec2
                        .ec2
                        .describe(owner)
                        .await
                        .map_err(|e| e.to_string())?
                        .iter()
                        .filter(|i| i.state().is_present())
                        .count();
                    (up >= n).then_some(()).ok_or(format!("{up}"))
                },
            )
            .await
        }
    };
    present(1).await;

    // The attacks, by an editor of the namespace: the built-in `edit`
    // role and a token of their own.
    let mallory = editor(&stage, stage.ns(), "mallory").await;
    let ns = stage.ns();
    secret(&mallory, ns, "zero", &with_ca(stage.url(), "/dev/zero")).await;
    secret(
        &mallory,
        ns,
        "fifo",
        &with_ca(stage.url(), fifo.to_str().unwrap()),
    )
    .await;
    secret(&mallory, ns, "huge", &huge_database().await).await;
    secret(&mallory, ns, "slow", &slow_database().await).await;
    let theirs = Api::<Scheduler>::namespaced(mallory.clone(), ns);
    for name in ["zero", "fifo", "huge", "slow"] {
        let s = sleeper(name, name);
        // The aggregated role reaches `edit` once kube-controller-manager
        // has aggregated it.
        eventually(
            &format!("mallory's Scheduler {name}"),
            Duration::from_secs(30),
            || async {
                theirs
                    .create(&PostParams::default(), &s)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            },
        )
        .await;
    }
    // And a schedule that never fires (the 30th and 31st of February),
    // which the CRD's rules cannot tell, on a Scheduler of its own.
    // (The stage's Secret orca-db holds its database already.)
    theirs
        .create(&PostParams::default(), &paused("orca", "orca-db"))
        .await
        .unwrap_or_else(|e| panic!("mallory's paused Scheduler: {e}"));
    let mut never = ec2.pool("never", 0, 0, 1);
    never.spec.schedules = serde_yaml::from_str(
        "[{cron: '0 0 30-31 2 *', timezone: UTC, duration: 1h, idle: {min: 1, max: 1}}]",
    )
    .unwrap();
    Api::<WarmPool>::namespaced(mallory.clone(), ns)
        .create(&PostParams::default(), &never)
        .await
        .unwrap_or_else(|e| panic!("mallory's pool: {e}"));
    // Meanwhile, the victim scales up.
    pools
        .patch(
            "runners",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"idle": {"min": 3}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("scaling the victim's pool: {e}"));
    let healthy = async {
        for _ in 0..60 {
            let replica = &stage.replicas()[0];
            match replica.health() {
                Ok((200, _)) => {}
                other => panic!("the replica is not healthy: {other:?}\n{}", stage.logs()),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    tokio::join!(healthy, present(3));

    said(
        &stage,
        "zero",
        "sslrootcert /dev/zero: the operator reads CA files only in the directories",
    )
    .await;
    said(&stage, "fifo", "is not a regular file").await;
    said(&stage, "huge", "holds more than 1000 scheduler instances").await;
    said(&stage, "slow", "ran past its deadline").await;
    stage
        .wait_pool("never", "InvalidSchedule", Duration::from_secs(30), |p| {
            p.conditions.iter().any(|c| {
                c.type_ == "Degraded"
                    && c.reason == "InvalidSchedule"
                    && c.message.contains("spec.schedules[0].cron")
                    && c.message.contains("never fires")
            })
        })
        .await;
    let replica = &stage.replicas()[0];
    assert!(
        matches!(replica.health(), Ok((200, _))),
        "{:?}\n{}",
        replica.health(),
        stage.logs()
    );
}
