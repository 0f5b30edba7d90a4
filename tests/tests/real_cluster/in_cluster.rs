//! The operator as the chart deploys it: the image `scripts/image` built,
//! run by the test node from the image's root file system in the pods of
//! the chart's own Deployment — two replicas, the in-cluster configuration
//! from the projected ServiceAccount token, the chart's probes deciding
//! readiness — doing what a user installs it for: one pod leads, a
//! handover and a warm pool are done, the leader's pod deleted hands over
//! to the other, and `helm upgrade` to a new tag rolls the Deployment
//! (kube-controller-manager's Deployment controller) with never two
//! leaders acting at once, as the API server's audit log tells; a standby
//! that hangs is restarted by its liveness probe; and the teardown, the
//! WarmPool's instances terminated before it goes and then the Scheduler.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::{
    api::{DeleteParams, ListParams},
    Api,
};
use orca_tests::{
    cluster::ControlPlane,
    eventually::eventually,
    image,
    on_cluster::OnCluster,
    pg,
    release::{overlapping_leaders, writes_by_pods},
};

use super::{pool_deletion, ready_with, scheduler, warm_pool::v1_and_one_idle};

const REPOSITORY: &str = "localhost/orca-operator";
/// The tag `scripts/image` gives this build's image.
const TAG: &str = env!("CARGO_PKG_VERSION");
const NEXT: &str = concat!(env!("CARGO_PKG_VERSION"), "-next");

/// The chart's values for the in-cluster operator: two replicas of the
/// image, and AWS credentials for moto in its environment.
fn values(tag: &str) -> Vec<String> {
    vec![
        "replicaCount=2".into(),
        format!("image.repository={REPOSITORY}"),
        format!("image.tag={tag}"),
        "image.pullPolicy=Never".into(),
        "env[0].name=AWS_ACCESS_KEY_ID".into(),
        "env[0].value=in-cluster".into(),
        "env[1].name=AWS_SECRET_ACCESS_KEY".into(),
        "env[1].value=in-cluster".into(),
    ]
}

/// The operator's pods that are not being deleted: `(name, image, ready)`.
async fn operator_pods(stage: &OnCluster) -> Vec<(String, String, bool)> {
    let selector = format!("app.kubernetes.io/instance={}", stage.release().name());
    let pods = Api::<Pod>::namespaced(stage.client().clone(), stage.release().namespace())
        .list(&ListParams::default().labels(&selector))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    pods.into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let image = p
                .spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.clone())
                .unwrap_or_default();
            (p.metadata.name.unwrap_or_default(), image, ready)
        })
        .collect()
}

/// Once exactly two pods of `tag` are ready and no other is left: their
/// names.
async fn two_ready(stage: &OnCluster, tag: &str, within: Duration) -> Vec<String> {
    let image = format!("{REPOSITORY}:{tag}");
    let states = || async {
        Api::<Pod>::namespaced(stage.client().clone(), stage.release().namespace())
            .list(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .map(|p| {
                        let name = p.metadata.name.unwrap_or_default();
                        let status = p.status.unwrap_or_default();
                        format!(
                            "{name}: {:?} {:?}",
                            status.phase,
                            status.container_statuses.map(|cs| cs
                                .into_iter()
                                .map(|c| (c.restart_count, c.state, c.last_state))
                                .collect::<Vec<_>>())
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    eventually(
        &format!("two ready pods of {image}, and no other"),
        within,
        || async {
            let pods = operator_pods(stage).await;
            let ready: Vec<String> = pods
                .iter()
                .filter(|(_, i, r)| *r && *i == image)
                .map(|(n, _, _)| n.clone())
                .collect();
            if ready.len() == 2 && pods.len() == 2 {
                Ok(ready)
            } else {
                Err(format!("{pods:?}\n{:#?}", states().await))
            }
        },
    )
    .await
}

/// Once the Lease is held by a pod that `pick` accepts: that pod.
async fn leader(
    stage: &OnCluster,
    what: &str,
    within: Duration,
    pick: impl Fn(&str) -> bool,
) -> String {
    eventually(&format!("{what} holds the Lease"), within, || async {
        match stage.lease_holder().await {
            Some(h) if pick(&h) => Ok(h),
            other => Err(format!("held by {other:?}")),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_deployment_runs_the_image_leads_hands_over_and_rolls_to_a_new_tag() {
    let cp = ControlPlane::shared();
    let archive = image::archive();
    cp.load_image(&format!("{REPOSITORY}:{TAG}"), &archive);
    cp.load_image(&format!("{REPOSITORY}:{NEXT}"), &archive);
    cp.expose(pg::Cluster::shared().port());
    let values = values(TAG);
    let sets: Vec<&str> = values.iter().map(String::as_str).collect();
    let stage = OnCluster::installed_with("incluster", &sets).await;

    // Both pods ready — the standby too — and one of them leads.
    let pods = two_ready(&stage, TAG, Duration::from_secs(90)).await;
    let first = leader(&stage, "one of the two", Duration::from_secs(30), |h| {
        pods.iter().any(|p| p == h)
    })
    .await;

    // What a user installs it for, done by the operator in its pod.
    let ec2 = v1_and_one_idle(&stage).await;
    stage
        .apply_scheduler(&scheduler("orca", "v2", &[], ""))
        .await;
    stage
        .wait_scheduler(
            "orca",
            "handed over to v2",
            Duration::from_secs(90),
            ready_with("v2"),
        )
        .await;

    // The leader's pod deleted (as a node drain would): another pod — the
    // standby, or the Deployment's replacement if it starts first: the
    // leader gives the Lease up as it stops — leads within the Lease's
    // duration (15 s) and converges the pool.
    Api::<Pod>::namespaced(stage.client().clone(), stage.release().namespace())
        .delete(&first, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting the leader's pod {first}: {e}"));
    let second = leader(&stage, "another pod", Duration::from_secs(15), |h| {
        h != first
    })
    .await;
    stage.scale_idle("runners", 2).await;
    two_ready(&stage, TAG, Duration::from_secs(60)).await;

    // A new tag: the Deployment rolls both pods, and the new ones lead.
    stage.release().upgrade(cp, &[&format!("image.tag={NEXT}")]);
    let rolled = two_ready(&stage, NEXT, Duration::from_secs(120)).await;
    let third = leader(
        &stage,
        "a pod of the new tag",
        Duration::from_secs(30),
        |h| rolled.iter().any(|p| p == h),
    )
    .await;
    stage.scale_idle("runners", 3).await;

    // Never two leaders at once: each pod's writes in the namespace, from
    // the audit log, come all before or all after any other pod's.
    let writes = writes_by_pods(cp, stage.ns());
    let writers: Vec<&str> = {
        let mut w: Vec<&str> = writes.iter().map(|(p, _, _)| p.as_str()).collect();
        w.sort_unstable();
        w.dedup();
        w
    };
    for leader in [&first, &second, &third] {
        assert!(
            writers.contains(&leader.as_str()),
            "{leader} led but wrote nothing by its pod's token: {writers:?}"
        );
    }
    let overlaps = overlapping_leaders(&writes);
    assert!(
        overlaps.is_empty(),
        "two pods acted at once: {overlaps:?}\n{writes:#?}"
    );

    // The standby hangs (SIGSTOP): its liveness probe fails (`/healthz`
    // goes unanswered), the node restarts its container as a kubelet
    // would, and it stands by again, ready; the leader leads on.
    let standby = rolled
        .iter()
        .find(|p| **p != third)
        .expect("two pods, one of them leads");
    let pods = Api::<Pod>::namespaced(stage.client().clone(), stage.release().namespace());
    let container = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| cs.first().cloned())
    };
    let pid: i32 = pods
        .get(standby)
        .await
        .ok()
        .as_ref()
        .and_then(container)
        .and_then(|c| c.container_id)
        .and_then(|id| id.strip_prefix("orca-test://")?.parse().ok())
        .unwrap_or_else(|| panic!("the test node reports {standby}'s process"));
    // SAFETY: kill has no memory-safety preconditions; pid is the pod's.
    assert_eq!(
        unsafe { libc::kill(pid, libc::SIGSTOP) },
        0,
        "SIGSTOP {pid}"
    );
    eventually(
        &format!("{standby} restarted by its liveness probe and ready again"),
        Duration::from_secs(150),
        || async {
            let pod = pods.get(standby).await.map_err(|e| e.to_string())?;
            let c = container(&pod).ok_or("no container status")?;
            if c.restart_count >= 1 && c.ready {
                Ok(())
            } else {
                Err(format!("restarts {}, ready {}", c.restart_count, c.ready))
            }
        },
    )
    .await;
    assert_eq!(stage.lease_holder().await.as_deref(), Some(third.as_str()));

    // Teardown by the in-cluster operator: the WarmPool deleted, its
    // finalizer holds it until EC2 lists none of its instances running,
    // then the Scheduler deleted goes once its instances have drained.
    assert_eq!(pool_deletion::up(&ec2).await.len(), 3);
    pool_deletion::delete(&stage, "runners")
        .await
        .expect("held by the finalizer");
    pool_deletion::gone(&stage, "runners", Duration::from_secs(60)).await;
    assert_eq!(
        pool_deletion::up(&ec2).await,
        Vec::<String>::new(),
        "the WarmPool went before its instances"
    );
    stage
        .schedulers()
        .delete("orca", &DeleteParams::default())
        .await
        .expect("deleting the Scheduler");
    eventually("Scheduler orca gone", Duration::from_secs(60), || async {
        match stage.schedulers().get_opt("orca").await {
            Ok(None) => Ok(()),
            Ok(Some(s)) => Err(format!("{:?}", s.status.map(|s| s.phase))),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
}
