//! Recreate that is never two, on the real cluster: with `overlap: false` a
//! scheduler pod deleted by hand keeps running until its deletion's grace
//! is over (a scheduler drains on SIGTERM; this one ignores it), and no
//! second scheduler of the Scheduler starts beside it — it once did at
//! once. Once the old pod is gone, the next starts and is Ready.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::{api::DeleteParams, ResourceExt};
use orca_operator::crd::Phase;
use orca_tests::on_cluster::OnCluster;

use super::scheduler;

/// How long the deleted pod goes on running (its deletion's grace).
const GRACE: u32 = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_off_a_pod_deleted_by_hand_is_replaced_only_once_it_is_gone() {
    let stage = OnCluster::new("never-two").await;
    let mut s = scheduler("orca", "v1", &[], "  overlap: false\n");
    // A scheduler that takes SIGTERM for nothing: it runs until SIGKILL.
    s.spec.command = vec![
        "sh".into(),
        "-c".into(),
        "trap '' TERM; while true; do sleep 1; done".into(),
    ];
    s.spec.args = vec![];
    stage.apply_scheduler(&s).await;
    stage
        .wait_scheduler("orca", "Ready", Duration::from_secs(60), |s| {
            s.phase == Phase::Ready
        })
        .await;
    let first = stage.scheduler_pods("orca").await;
    assert_eq!(first.len(), 1);
    let first = first[0].name_any();

    stage
        .pods()
        .delete(
            &first,
            &DeleteParams {
                grace_period_seconds: Some(GRACE),
                ..Default::default()
            },
        )
        .await
        .expect("deleting the pod by hand");
    let deleted = Instant::now();
    // While the first still runs, it is the only pod.
    while deleted.elapsed() < Duration::from_secs(u64::from(GRACE) - 2) {
        let pods: Vec<Pod> = stage.scheduler_pods("orca").await;
        let others: Vec<String> = pods
            .iter()
            .map(|p| p.name_any())
            .filter(|n| *n != first)
            .collect();
        assert!(
            others.is_empty(),
            "{others:?} started {:?} after {first} was deleted, while it still ran",
            deleted.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let s = stage
        .wait_scheduler(
            "orca",
            "Ready again, on a new pod",
            Duration::from_secs(60),
            |s| s.phase == Phase::Ready && s.leader.as_ref().is_some_and(|l| l.pod != first),
        )
        .await;
    assert!(
        deleted.elapsed() >= Duration::from_secs(u64::from(GRACE)),
        "the new pod led {:?} after the deletion, within the old one's grace: {s:?}",
        deleted.elapsed()
    );
    let pods = stage.scheduler_pods("orca").await;
    assert_eq!(
        pods.len(),
        1,
        "{:?}",
        pods.iter().map(|p| p.name_any()).collect::<Vec<_>>()
    );
}
