//! Teardown in any order, on the real cluster: a Secret, a Scheduler and a
//! WarmPool applied from one directory, runs going on the pool's instances,
//! then the directory deleted with `kubectl delete -f` (the Secret goes
//! first, in milliseconds), or the whole namespace deleted — and the
//! operator restarted in the middle of either. Every run finishes before its
//! scheduler's pod goes, every instance is terminated, every finalizer is
//! removed, and everything goes.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::{api::DeleteParams, Api};
use orca_operator::{crd::WarmPool, warmpool::Ec2State};
use orca_tests::{
    eventually::eventually,
    on_cluster::{kubectl, OnCluster},
    pg,
    sim::probe,
};

use super::{ready_with, scheduler, warm_pool::Ec2Stage};

/// How long each run takes on its instance.
const RUN_SECONDS: u64 = 15;

/// The stage's Scheduler `orca` at v1, placing its runs on pool `runners`,
/// and that pool (two idle), both Ready; two runs handed to its instances.
/// The runs' ids.
async fn runs_going(stage: &OnCluster, ec2: &Ec2Stage) -> Vec<i64> {
    let pool_arg = format!("{}/runners", stage.ns());
    let mut s = scheduler("orca", "v1", &["--pool", &pool_arg], "");
    // The pods' grace is this and a minute: a namespace's deletion looks
    // again only that long after it found them still terminating.
    s.spec.handover.drain_timeout_seconds = 30;
    stage.apply_scheduler(&s).await;
    let pool: WarmPool = ec2.pool("runners", 2, 2, 4);
    stage.create_pool(&pool).await;
    stage
        .wait_scheduler(
            "orca",
            "v1 Ready",
            Duration::from_secs(60),
            ready_with("v1"),
        )
        .await;
    stage
        .wait_pool("runners", "two idle", Duration::from_secs(90), |s| {
            s.idle == 2
        })
        .await;
    let db = pg::connect(stage.url()).await;
    let runs = probe::queue(&db, "sleep:1", 2).await;
    eventually(
        "both runs on an instance",
        Duration::from_secs(30),
        || async {
            let busy: i64 = db
                .query_one(
                    "select count(*) from orca.instances where ended is null and run = any($1)",
                    &[&runs],
                )
                .await
                .map_err(|e| e.to_string())?
                .get(0);
            if busy == 2 {
                Ok(())
            } else {
                Err(format!("{busy} busy"))
            }
        },
    )
    .await;
    runs
}

/// Every run of `runs` succeeded, started once.
async fn all_succeeded(stage: &OnCluster, runs: &[i64]) {
    let db = pg::connect(stage.url()).await;
    let rows = probe::runs(&db, runs).await;
    assert_eq!(rows.len(), runs.len(), "{rows:?}");
    for (id, r) in &rows {
        assert_eq!(r.status(), "succeeded", "run {id} was lost: {r:?}");
        assert_eq!(r.start(), 1, "run {id} started again: {r:?}");
    }
}

/// The pool's instances EC2 still lists as pending, running, stopping or
/// stopped.
async fn left_in_ec2(ec2: &Ec2Stage) -> Vec<String> {
    ec2.ec2
        .describe(&ec2.owner)
        .await
        .unwrap_or_else(|e| panic!("moto's DescribeInstances failed: {e}"))
        .into_iter()
        .filter(|i| {
            matches!(
                i.state(),
                Ec2State::Pending | Ec2State::Running | Ec2State::Stopping | Ec2State::Stopped
            )
        })
        .map(|i| i.id().to_string())
        .collect()
}

/// The operator restarted: replica `a` stopped, `b` started.
async fn restart(stage: &mut OnCluster) {
    stage.stop_replica(0);
    let b =
        orca_tests::release::Replica::start(stage.cp(), stage.client(), stage.release(), "b").await;
    stage.add_replica(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_delete_of_the_directory_with_runs_going_loses_nothing() {
    let mut stage = OnCluster::new("teardown").await;
    let ec2 = Ec2Stage::running(&stage, "runners", &format!("sleep {RUN_SECONDS}")).await;
    let runs = runs_going(&stage, &ec2).await;

    // The directory a user applied: the Secret first, as `ls` sorts it.
    let dir = tempfile_dir("teardown");
    std::fs::write(
        dir.join("a-secret.yaml"),
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: orca-db\nstringData:\n  url: {}\n",
            stage.url()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("b-scheduler.yaml"),
        "apiVersion: orca.dev/v1alpha1\nkind: Scheduler\nmetadata:\n  name: orca\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("c-warmpool.yaml"),
        "apiVersion: orca.dev/v1alpha1\nkind: WarmPool\nmetadata:\n  name: runners\n",
    )
    .unwrap();
    let out = std::process::Command::new(kubectl())
        .arg("--kubeconfig")
        .arg(stage.cp().admin_kubeconfig())
        .args(["delete", "-n", stage.ns(), "--wait=false", "-f"])
        .arg(&dir)
        .output()
        .expect("kubectl ran");
    assert!(
        out.status.success(),
        "kubectl delete -f: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The Secret is kept while its users need it: it used to go at once.
    let secrets: Api<Secret> = Api::namespaced(stage.client().clone(), stage.ns());
    let kept = secrets.get_opt("orca-db").await.expect("get");
    assert!(
        kept.as_ref()
            .is_some_and(|s| s.metadata.deletion_timestamp.is_some()),
        "the Secret is kept, being deleted: {kept:?}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    restart(&mut stage).await;

    eventually(
        "the Secret, the Scheduler, the WarmPool and the pods gone",
        Duration::from_secs(120),
        || async {
            let secret = secrets
                .get_opt("orca-db")
                .await
                .map_err(|e| e.to_string())?;
            let scheduler = stage
                .schedulers()
                .get_opt("orca")
                .await
                .map_err(|e| e.to_string())?;
            let pool = stage
                .pools()
                .get_opt("runners")
                .await
                .map_err(|e| e.to_string())?;
            let pods = stage
                .pods()
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            if secret.is_none() && scheduler.is_none() && pool.is_none() && pods.items.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "secret {:?}, scheduler {:?}, pool {:?}, pods {}",
                    secret.map(|s| s.metadata.finalizers),
                    scheduler.map(|s| s.status),
                    pool.map(|p| p.status),
                    pods.items.len()
                ))
            }
        },
    )
    .await;
    all_succeeded(&stage, &runs).await;
    assert_eq!(
        left_in_ec2(&ec2).await,
        Vec::<String>::new(),
        "instances left running"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_namespace_with_runs_going_loses_nothing() {
    let mut stage = OnCluster::apart("nsdel").await;
    let ec2 = Ec2Stage::running(&stage, "runners", &format!("sleep {RUN_SECONDS}")).await;
    let runs = runs_going(&stage, &ec2).await;

    let namespaces: Api<Namespace> = Api::all(stage.client().clone());
    namespaces
        .delete(stage.ns(), &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting namespace {}: {e}", stage.ns()));
    tokio::time::sleep(Duration::from_secs(3)).await;
    restart(&mut stage).await;

    eventually("the namespace gone", Duration::from_secs(240), || async {
        match namespaces
            .get_opt(stage.ns())
            .await
            .map_err(|e| e.to_string())?
        {
            None => Ok(()),
            Some(n) => Err(format!("{:?}", n.status)),
        }
    })
    .await;
    all_succeeded(&stage, &runs).await;
    assert_eq!(
        left_in_ec2(&ec2).await,
        Vec::<String>::new(),
        "instances left running"
    );
}

/// A fresh directory for a test's files.
fn tempfile_dir(prefix: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "orca-{prefix}-{}-{}",
        std::process::id(),
        orca_tests::cluster::random_hex(4)
    ));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    dir
}
