//! Deleting a WarmPool on the real cluster: with `onDelete: Terminate` the
//! operator's finalizer holds it until every instance is terminated in
//! EC2; with `Orphan` it goes at once and the instances are left running.
//! What is left in EC2 is asked of moto by the test's own client, by the
//! pool's ownership tags.

use std::time::Duration;

use kube::{api::DeleteParams, ResourceExt};
use orca_operator::{
    crd::OnDelete,
    warmpool::{k8s::FINALIZER, Ec2State},
};
use orca_tests::{eventually::eventually, on_cluster::OnCluster};

use super::{scheduler, warm_pool::Ec2Stage};

/// The database URL parameter of Scheduler `orca` of the stage, as SSM
/// holds it behind `ec2`'s proxy.
async fn url_parameter(stage: &OnCluster, ec2: &Ec2Stage) -> Option<String> {
    let name = orca_operator::warmpool::ssm::parameter_name(
        orca_tests::release::TEST_CLUSTER,
        stage.ns(),
        "orca",
    );
    orca_tests::warm::parameter(&ec2.proxy.endpoint(), &name).await
}

/// The pool's instances EC2 lists as pending or running, sorted.
pub(super) async fn up(ec2: &Ec2Stage) -> Vec<String> {
    let listed = ec2
        .ec2
        .describe(&ec2.owner)
        .await
        .unwrap_or_else(|e| panic!("moto's DescribeInstances failed: {e}"));
    let mut ids: Vec<String> = listed
        .into_iter()
        .filter(|i| matches!(i.state(), Ec2State::Pending | Ec2State::Running))
        .map(|i| i.id().to_string())
        .collect();
    ids.sort();
    ids
}

/// A WarmPool `name` on `ec2` with `on_delete`, once two instances of it
/// are idle; their ids.
async fn two_idle(
    stage: &OnCluster,
    ec2: &Ec2Stage,
    name: &str,
    on_delete: OnDelete,
) -> Vec<String> {
    stage
        .apply_scheduler(&scheduler("orca", "v1", &[], ""))
        .await;
    let mut pool = ec2.pool(name, 2, 2, 4);
    pool.spec.on_delete = on_delete;
    stage.create_pool(&pool).await;
    stage
        .wait_pool(name, "two idle instances", Duration::from_secs(90), |s| {
            s.idle == 2
        })
        .await;
    let object = stage.pools().get(name).await.expect("the WarmPool");
    assert_eq!(
        object.metadata.finalizers.as_deref(),
        Some(&[FINALIZER.to_string()][..]),
        "the operator holds the WarmPool with its finalizer"
    );
    let ids = up(ec2).await;
    assert_eq!(ids.len(), 2, "{ids:?}");
    ids
}

/// Deletes WarmPool `name`; the object as the API server answered (held
/// by the finalizer), if it was not deleted at once.
pub(super) async fn delete(stage: &OnCluster, name: &str) -> Option<orca_operator::crd::WarmPool> {
    stage
        .pools()
        .delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting the WarmPool: {e}"))
        .left()
}

/// Waits until WarmPool `name` is gone.
pub(super) async fn gone(stage: &OnCluster, name: &str, within: Duration) {
    eventually(&format!("WarmPool {name} gone"), within, || async {
        match stage
            .pools()
            .get_opt(name)
            .await
            .map_err(|e| e.to_string())?
        {
            None => Ok(()),
            Some(p) => Err(format!("{:?} {:?}", p.metadata.finalizers, p.status)),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_warm_pool_terminates_its_instances_before_it_goes() {
    let stage = OnCluster::new("pooldel").await;
    let ec2 = Ec2Stage::new(&stage, "runners").await;
    let ids = two_idle(&stage, &ec2, "runners", OnDelete::Terminate).await;
    assert_eq!(
        url_parameter(&stage, &ec2).await.as_deref(),
        Some(stage.url()),
        "the instances' database URL is not in its parameter"
    );

    let held = delete(&stage, "runners")
        .await
        .expect("held by the finalizer");
    assert!(held.metadata.deletion_timestamp.is_some());
    assert!(held.finalizers().iter().any(|f| f == FINALIZER));
    ec2.proxy.forget_calls();
    gone(&stage, "runners", Duration::from_secs(60)).await;
    assert_eq!(
        up(&ec2).await,
        Vec::<String>::new(),
        "the WarmPool went before its instances"
    );
    assert!(
        ec2.proxy.calls_of("RunInstances").is_empty(),
        "launched while deleting"
    );
    assert_eq!(
        url_parameter(&stage, &ec2).await,
        None,
        "the parameter outlived the Scheduler's last pool there"
    );
    let terminated: Vec<String> = ec2
        .proxy
        .calls_of("TerminateInstances")
        .into_iter()
        .filter(|c| c.fault().is_none())
        .map(|c| c.body().to_string())
        .collect();
    for id in &ids {
        assert!(
            terminated.iter().any(|body| body.contains(id.as_str())),
            "{id} not terminated by the operator: {terminated:?}"
        );
    }
    let events = stage
        .wait_event("runners", "Deleted", Duration::from_secs(10))
        .await;
    for reason in ["Deleting:", "Terminated:"] {
        assert!(
            events.iter().any(|e| e.starts_with(reason)),
            "no {reason} {events:#?}"
        );
    }
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("Terminated:") && e.contains("PoolDeleted")),
        "{events:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphaned_warm_pool_goes_at_once_and_leaves_its_instances() {
    let stage = OnCluster::new("poolorphan").await;
    let ec2 = Ec2Stage::new(&stage, "runners").await;
    let ids = two_idle(&stage, &ec2, "runners", OnDelete::Orphan).await;

    ec2.proxy.forget_calls();
    delete(&stage, "runners").await;
    gone(&stage, "runners", Duration::from_secs(20)).await;
    let events = stage
        .wait_event("runners", "Deleted", Duration::from_secs(10))
        .await;
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("Deleted:") && e.contains("Orphan")),
        "{events:#?}"
    );
    // Left running: nothing terminated them, a while after.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(up(&ec2).await, ids, "the instances are left running");
    assert_eq!(
        url_parameter(&stage, &ec2).await.as_deref(),
        Some(stage.url()),
        "the parameter the left instances read was deleted"
    );
    assert!(ec2.proxy.calls_of("TerminateInstances").is_empty());
}
