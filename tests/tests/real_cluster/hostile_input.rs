//! What a tenant writes cannot end or stall the operator. With the replica
//! held to the chart's memory limit (256 MiB of data) and a stuck limit of
//! 20 s, one namespace's Schedulers point at a CA "file" that is
//! `/dev/zero`, at a FIFO in the CA directory the chart names, at a
//! database whose `orca.schedulers` holds 1500 rows (three of them a
//! 100 MB image each) and at one whose every row takes seconds to read.
//! The replica stays up and healthy, each of those Schedulers says why it
//! cannot run, and another namespace's pool scaled up meanwhile gets its
//! instances. (Against 865d898's operator the replica was killed within
//! seconds.)

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::{
    api::{ObjectMeta, PostParams},
    Api,
};
use orca_operator::crd::{Scheduler, SchedulerStatus, WarmPool};
use orca_tests::{eventually::eventually, on_cluster::OnCluster, pg};

use super::warm_pool::Ec2Stage;

/// The chart's memory limit of the operator's container.
const CHART_MEMORY_LIMIT: u64 = 256 * 1024 * 1024;

/// A Scheduler `name` on Secret `secret`'s URL, whose pods only sleep (they
/// never join: the operator reads its database and waits).
fn sleeper(name: &str, secret: &str) -> Scheduler {
    let yaml = format!(
        "apiVersion: orca.dev/v1alpha1\nkind: Scheduler\nmetadata: {{name: {name}}}\n\
         spec:\n  image: v1\n  command: [\"sleep\", \"3600\"]\n\
         \x20 database:\n    urlSecretRef: {{name: {secret}, key: url}}\n\
         \x20 handover: {{joinTimeoutSeconds: 600}}\n"
    );
    serde_yaml::from_str(&yaml).unwrap_or_else(|e| panic!("a Scheduler: {e}\n{yaml}"))
}

/// A paused Scheduler `orca` on Secret `orca-db`: a pool's.
fn paused() -> Scheduler {
    let yaml = "apiVersion: orca.dev/v1alpha1\nkind: Scheduler\nmetadata: {name: orca}\n\
                spec:\n  image: v1\n  paused: true\n\
                \x20 database:\n    urlSecretRef: {name: orca-db, key: url}\n";
    serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("a Scheduler: {e}"))
}

async fn secret(stage: &OnCluster, ns: &str, name: &str, url: &str) {
    let s = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        string_data: Some([("url".to_string(), url.to_string())].into()),
        ..Default::default()
    };
    Api::<Secret>::namespaced(stage.client.clone(), ns)
        .create(&PostParams::default(), &s)
        .await
        .unwrap_or_else(|e| panic!("Secret {ns}/{name}: {e}"));
}

/// `url` with `sslmode=verify-full&sslrootcert=<path>`.
fn with_ca(url: &str, path: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}sslmode=verify-full&sslrootcert={path}")
}

/// A fresh database whose `orca.schedulers` holds 1500 live rows, three of
/// them naming a 100 MB image.
async fn huge_database() -> String {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    db.execute(
        "insert into orca.schedulers (host, pid, image, migrations, role, running)
         select 'h-' || n, n, case when n <= 3 then repeat('x', 100 * 1024 * 1024) else 'v' end,
                1, 'waiting', ''
         from generate_series(1, 1500) n",
        &[],
    )
    .await
    .unwrap_or_else(|e| panic!("the huge rows: {e}"));
    url
}

/// A fresh database each of whose `orca.schedulers` rows takes 3 s to
/// read, three of them: a statement 9 s long, within the statement
/// time-out.
async fn slow_database() -> String {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    for sql in [
        "insert into orca.schedulers (host, pid, image, migrations, role, running)
         select 'h-' || n, n, 'v', 1, 'waiting', '' from generate_series(1, 3) n",
        "alter table orca.schedulers rename to schedulers_rows",
        "create view orca.schedulers as
         select * from orca.schedulers_rows where pg_sleep(3) is not null",
    ] {
        db.execute(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("the slow rows: {e}"));
    }
    url
}

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
    std::fs::create_dir_all(&ca_dir).unwrap();
    let fifo = ca_dir.join("fifo.pem");
    let _ = std::fs::remove_file(&fifo);
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string naming a path in the test's directory.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let dirs = format!("databaseCaDirectories={{{}}}", ca_dir.display());
    let stage = OnCluster::watching(
        "input",
        std::slice::from_ref(&victim),
        &["tenancy.requireClass=false", &dirs],
    )
    .await
    .with_held_replica("a", &["--stuck-after-seconds=20"], CHART_MEMORY_LIMIT)
    .await;
    let ec2 = Ec2Stage::new(&stage, "unused").await;

    // The victim's pool, served while all is quiet.
    secret(&stage, &victim, "orca-db", &stage.url).await;
    Api::<Scheduler>::namespaced(stage.client.clone(), &victim)
        .create(&PostParams::default(), &paused())
        .await
        .unwrap_or_else(|e| panic!("the victim's Scheduler: {e}"));
    let mut pool = ec2.pool("runners", 1, 3, 3);
    pool.spec.boot_timeout_seconds = 600;
    let pools = Api::<WarmPool>::namespaced(stage.client.clone(), &victim);
    pools
        .create(&PostParams::default(), &pool)
        .await
        .unwrap_or_else(|e| panic!("the victim's pool: {e}"));
    let victims = orca_operator::pool::Ownership::new(
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
                        .filter(|i| i.state.is_present())
                        .count();
                    (up >= n).then_some(()).ok_or(format!("{up}"))
                },
            )
            .await
        }
    };
    present(1).await;

    // The attacks.
    secret(&stage, &stage.ns, "zero", &with_ca(&stage.url, "/dev/zero")).await;
    secret(
        &stage,
        &stage.ns,
        "fifo",
        &with_ca(&stage.url, fifo.to_str().unwrap()),
    )
    .await;
    secret(&stage, &stage.ns, "huge", &huge_database().await).await;
    secret(&stage, &stage.ns, "slow", &slow_database().await).await;
    for (name, secret) in [
        ("zero", "zero"),
        ("fifo", "fifo"),
        ("huge", "huge"),
        ("slow", "slow"),
    ] {
        stage.apply_scheduler(&sleeper(name, secret)).await;
    }
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
            let replica = &stage.replicas[0];
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
    let replica = &stage.replicas[0];
    assert!(
        matches!(replica.health(), Ok((200, _))),
        "{:?}\n{}",
        replica.health(),
        stage.logs()
    );
}
