//! The upgrade over what the previous release left running: its objects
//! with the status it wrote, its Scheduler's pod and register Job, its
//! database rows and two idle EC2 instances, loaded from
//! `tests/fixtures/releases/d589380/state/` (captured from a real run by
//! `scripts/capture-release`). `helm upgrade` as docs/operations.md#upgrade
//! says brings this release's Deployment, two replicas of its image; for
//! 60 s it creates or deletes no pod, Job, instance row or EC2 instance,
//! while it writes both statuses in its own shape; then a rollout hands
//! over and the pool replaces its instances when their AMI changes, and
//! every write came from the one pod that leads. A rollback to the
//! previous chart keeps the CRDs, the objects and what runs.

use std::{collections::BTreeSet, time::Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{
    api::{Patch, PatchParams},
    Api,
};
use orca_operator::crd::{Phase, Scheduler, WarmPool};
use orca_tests::{
    cluster::{port_of, ControlPlane},
    image, pg,
    release::{overlapping_leaders, writes_by_pods},
    release_state::{self, NAMESPACE, POOL, SCHEDULER},
    warm,
};

use super::{
    fixtures, fresh_crds, fresh_release_namespace, handed_over_to, install_previous, quiet,
    rollback_as_documented, running, serving, upgrade_as_documented, within, RELEASE,
};

/// The image of this release that the upgrade installs.
const REPOSITORY: &str = "localhost/orca-operator";
const TAG: &str = "upgraded";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_upgrade_over_what_d589380_left_running_changes_nothing_then_rolls_out_and_replaces() {
    let t0 = Instant::now();
    // Where the test is, in its output (seen when it fails).
    let stage = |what: &str| eprintln!("[over_running_state] {:>6.1?} {what}", t0.elapsed());
    let cp = ControlPlane::shared();
    let _crds = fresh_crds(cp).await;
    let client = cp.client().await;
    fresh_release_namespace(cp, &client).await;
    install_previous(cp, NAMESPACE);
    let loaded = release_state::load(&client, &fixtures().join("state")).await;
    let (stop_hosts, hosts_stopped) = tokio::sync::oneshot::channel::<()>();
    release_state::hosts(&loaded.moto().endpoint(), loaded.url(), async move {
        let _ = hosts_stopped.await;
    })
    .await;

    stage("restored state");
    // What the release left running, running again: its scheduler leads
    // from the restored pod, and both instances' agents poll.
    let db = pg::connect(loaded.url()).await;
    serving(&db, 2).await;

    let before = running(&client, loaded.url(), loaded.ec2()).await;
    assert_eq!(before.pods.len(), 1, "{before:?}");
    assert_eq!(before.jobs.len(), 1, "{before:?}");
    assert_eq!(before.instances.len(), 2, "{before:?}");
    let schedulers: Api<Scheduler> = Api::namespaced(client.clone(), NAMESPACE);
    let pools: Api<WarmPool> = Api::namespaced(client.clone(), NAMESPACE);
    let captured_version = pools.get(POOL).await.unwrap().metadata.resource_version;

    stage("upgrading");
    // The upgrade, as docs/operations.md#upgrade says, of an installation
    // that runs two replicas of the operator's image: the chart's
    // Deployment, run by the test node, reaching the database and EC2.
    let archive = image::archive();
    cp.load_image(&format!("{REPOSITORY}:{TAG}"), &archive);
    cp.expose(pg::Cluster::shared().port());
    cp.expose(port_of(&loaded.moto().endpoint()));
    upgrade_as_documented(
        cp,
        NAMESPACE,
        &[
            "replicaCount=2".into(),
            format!("image.repository={REPOSITORY}"),
            format!("image.tag={TAG}"),
            "image.pullPolicy=Never".into(),
            "env[0].name=AWS_ACCESS_KEY_ID".into(),
            "env[0].value=upgraded".into(),
            "env[1].name=AWS_SECRET_ACCESS_KEY".into(),
            "env[1].value=upgraded".into(),
        ],
    );
    let started = Instant::now();
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let leader = within("one of the upgraded pods leading", 60, || async {
        let lease = leases.get_opt(RELEASE).await.map_err(|e| e.to_string())?;
        lease
            .and_then(|l| l.spec?.holder_identity)
            .filter(|h| h.starts_with(RELEASE))
            .ok_or_else(|| "no pod of the Deployment holds the Lease".to_string())
    })
    .await;
    let log = || cp.pod_log(NAMESPACE, &leader);

    stage("statuses");
    // Both statuses in this release's shape: the pool's roster of its
    // instances and the Secret it follows, fields the previous release
    // never wrote; the Scheduler's leader the restored pod.
    within("the pool's status in this release's shape", 60, || async {
        let pool = pools.get(POOL).await.map_err(|e| e.to_string())?;
        let status = pool.status.clone().unwrap_or_default();
        let listed: BTreeSet<String> = status.instances.iter().map(|i| i.id.clone()).collect();
        if pool.metadata.resource_version != captured_version
            && listed == before.instances
            && status.database_secret.is_some()
            && status.idle == 2
        {
            Ok(())
        } else {
            Err(format!("{status:?}"))
        }
    })
    .await;
    // The Scheduler's leader: the restored pod, as the instance it runs now
    // (the previous release wrote the instance it ran then, whose row the
    // restored scheduler left as it was when it took the lead over).
    let pod = before
        .pods
        .iter()
        .next()
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    within("the Scheduler's status rewritten", 60, || async {
        let rows = db
            .query(
                "select id, host, role, ended::text from orca.schedulers \
                 where seen > now() - interval '2 seconds' order by id",
                &[],
            )
            .await
            .map_err(|e| e.to_string())?;
        let rows: Vec<(i64, String, String, Option<String>)> = rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect();
        let leading = rows
            .iter()
            .find(|r| r.2 == "leading" && r.3.is_none())
            .map(|r| r.0)
            .unwrap_or(-1);
        let s = schedulers.get(SCHEDULER).await.map_err(|e| e.to_string())?;
        let status = s.status.clone().unwrap_or_default();
        let leader = status.leader.as_ref();
        if status.phase == Phase::Ready
            && leader.is_some_and(|l| l.pod == pod && l.instance == leading)
        {
            Ok(())
        } else {
            Err(format!("{rows:?}; {status:?}"))
        }
    })
    .await;

    stage("quiet 60 s");
    // Nothing that runs changes for 60 s of this release leading: each
    // sample, at least one a second, finds what ran before the upgrade.
    quiet(&client, loaded.url(), loaded.ec2(), &before, || {
        format!("{:?} into the upgrade\n{}", started.elapsed(), log())
    })
    .await;

    stage("rollout and replacement");
    // Then it acts as it would on its own objects: a rollout hands over,
    // and a changed launch replaces an instance.
    let patch = |v: serde_json::Value| Patch::Merge(v);
    schedulers
        .patch(
            SCHEDULER,
            &PatchParams::default(),
            &patch(serde_json::json!({"spec": {"image": "v2"}})),
        )
        .await
        .unwrap();
    handed_over_to(&schedulers, "v2").await;
    let image = warm::ANOTHER_IMAGE.to_string();
    pools
        .patch(
            POOL,
            &PatchParams::default(),
            // And SSM where EC2 is (moto serves both): this release keeps
            // the database URL in SSM, at ssmEndpoint, never at EC2's
            // endpoint (docs/operations.md#upgrade).
            &patch(serde_json::json!({"spec": {"launch": {"imageId": image},
                "ssmEndpoint": loaded.moto().endpoint()}})),
        )
        .await
        .unwrap();
    within("both instances replaced, one at a time", 240, || async {
        let now = running(&client, loaded.url(), loaded.ec2()).await;
        let status = pools
            .get(POOL)
            .await
            .map_err(|e| e.to_string())?
            .status
            .unwrap_or_default();
        let kept = before.instances.intersection(&now.instances).count();
        if kept == 0 && now.instances.len() == 2 && status.idle == 2 && status.drifted == 0 {
            Ok(())
        } else {
            Err(format!("{now:?} {status:?}"))
        }
    })
    .await;

    stage("writers");
    // Two replicas, one leader: every write in the namespace by an
    // operator pod's token came from the pod that leads.
    let writes = writes_by_pods(cp, NAMESPACE);
    let writers: BTreeSet<&str> = writes.iter().map(|(pod, _, _)| pod.as_str()).collect();
    assert_eq!(
        writers,
        BTreeSet::from([leader.as_str()]),
        "{:?}",
        overlapping_leaders(&writes)
    );

    stage("rollback");
    // A rollback to the previous release: its chart again (no replica),
    // the CRDs kept, and nothing that runs deleted with the Deployment.
    let rolled = running(&client, loaded.url(), loaded.ec2()).await;
    rollback_as_documented(cp, &client, NAMESPACE).await;
    assert!(schedulers.get_opt(SCHEDULER).await.unwrap().is_some());
    assert!(pools.get_opt(POOL).await.unwrap().is_some());
    assert_eq!(running(&client, loaded.url(), loaded.ec2()).await, rolled);
    let _ = stop_hosts.send(());
}
