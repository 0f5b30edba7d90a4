//! Deleting a Scheduler on the real cluster: its finalizer holds it while
//! the live instance drains; the run in hand finishes, the row ends, and
//! only then do the Scheduler and its pods go.

use std::time::Duration;

use kube::api::DeleteParams;
use orca_tests::{eventually::eventually, on_cluster::OnCluster, pg, sim::probe};

use super::v1_ready;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_scheduler_drains_its_instance_before_the_pods_go() {
    let stage = OnCluster::new("delete").await;
    v1_ready(&stage).await;
    let object = stage.schedulers().get("orca").await.expect("the Scheduler");
    assert!(
        object
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "orca.dev/scheduler"),
        "the operator holds the Scheduler with its finalizer: {:?}",
        object.metadata.finalizers
    );
    let db = pg::connect(stage.url()).await;
    let runs = probe::queue(&db, "sleep:5", 1).await;
    eventually("v1 starts the run", Duration::from_secs(20), || async {
        match probe::runs(&db, &runs).await.values().next() {
            Some(r) if r.status() == "running" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    stage
        .schedulers()
        .delete("orca", &DeleteParams::default())
        .await
        .expect("deleting the Scheduler");
    // Held while the run is in hand: the pod still runs.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        stage
            .schedulers()
            .get_opt("orca")
            .await
            .expect("get")
            .is_some(),
        "the Scheduler went before its instance drained"
    );
    stage
        .wait_event("orca", "Deleting", Duration::from_secs(10))
        .await;
    eventually(
        "the Scheduler and its pods are gone",
        Duration::from_secs(60),
        || async {
            let left = stage
                .schedulers()
                .get_opt("orca")
                .await
                .map_err(|e| e.to_string())?;
            let pods = stage
                .pods()
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            if left.is_none() && pods.items.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "scheduler there: {}, pods: {:?}",
                    left.is_some(),
                    pods.items
                        .iter()
                        .map(|p| p.metadata.name.clone())
                        .collect::<Vec<_>>()
                ))
            }
        },
    )
    .await;
    let run = probe::runs(&db, &runs).await;
    let run = run.values().next().expect("the run");
    assert_eq!(
        run.status(),
        "succeeded",
        "the run in hand finished: {run:?}"
    );
    assert_eq!(run.start(), 1, "started once: {run:?}");
    let ended: i64 = db
        .query_one(
            "select count(*) from orca.schedulers where ended is not null and drained is not null",
            &[],
        )
        .await
        .expect("the instance")
        .get(0);
    assert_eq!(ended, 1, "v1 drained and ended its row");
}
