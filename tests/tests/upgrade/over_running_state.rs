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

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use k8s_openapi::api::{batch::v1::Job, coordination::v1::Lease, core::v1::Pod};
use kube::{
    api::{Patch, PatchParams},
    Api,
};
use orca_operator::{
    crd::{Phase, Scheduler, WarmPool},
    pool::Ec2State,
};
use orca_tests::{
    cluster::{port_of, ControlPlane},
    image, pg,
    release::{overlapping_leaders, writes_by_pods},
    release_state::{self, Loaded, NAMESPACE, POOL, SCHEDULER},
    warm,
};

use super::{
    fixtures, fresh_crds, install_previous, rollback_as_documented, upgrade_as_documented, within,
    RELEASE,
};

/// The image of this release that the upgrade installs.
const REPOSITORY: &str = "localhost/orca-operator";
const TAG: &str = "upgraded";

/// What runs: the Scheduler's pods and its Jobs (by uid, and whether being
/// deleted), the pool's instance rows (by id, and whether ended) and its
/// EC2 instances that are not terminated; and every instance EC2 lists in
/// any state (moto keeps terminated ones listed), so that one launched and
/// terminated between two samples is seen all the same.
#[derive(Debug, PartialEq)]
struct Running {
    pods: BTreeSet<String>,
    jobs: BTreeSet<String>,
    rows: BTreeSet<(i64, bool)>,
    instances: BTreeSet<String>,
    ever: BTreeSet<String>,
}

async fn running(client: &kube::Client, loaded: &Loaded) -> Running {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let of_scheduler = kube::api::ListParams::default().labels("orca.dev/scheduler");
    let jobs: Api<Job> = Api::namespaced(client.clone(), NAMESPACE);
    let named = |meta: &kube::api::ObjectMeta| {
        format!(
            "{} {}{}",
            meta.name.clone().unwrap_or_default(),
            meta.uid.clone().unwrap_or_default(),
            if meta.deletion_timestamp.is_some() {
                " deleting"
            } else {
                ""
            }
        )
    };
    let db = pg::connect(&loaded.url).await;
    let rows = db
        .query("select id, ended is not null from orca.instances", &[])
        .await
        .expect("the instance rows")
        .iter()
        .map(|r| (r.get::<_, i64>(0), r.get::<_, bool>(1)))
        .collect();
    let listed = loaded
        .ec2
        .describe_tagged(&[("orca.dev/pool", &format!("{NAMESPACE}/{POOL}"))])
        .await
        .expect("moto lists the pool's instances");
    Running {
        pods: pods
            .list(&of_scheduler)
            .await
            .expect("the pods")
            .iter()
            .map(|p| named(&p.metadata))
            .collect(),
        jobs: jobs
            .list(&Default::default())
            .await
            .expect("the Jobs")
            .iter()
            .map(|j| named(&j.metadata))
            .collect(),
        rows,
        instances: listed
            .iter()
            .filter_map(|t| t.instance.as_ref())
            .filter(|i| !matches!(i.state, Ec2State::Terminated | Ec2State::ShuttingDown))
            .map(|i| i.id.clone())
            .collect(),
        ever: listed
            .into_iter()
            .filter_map(|t| t.instance)
            .map(|i| i.id)
            .collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_upgrade_over_what_d589380_left_running_changes_nothing_then_rolls_out_and_replaces() {
    let t0 = Instant::now();
    // Where the test is, in its output (seen when it fails).
    let stage = |what: &str| eprintln!("[over_running_state] {:>6.1?} {what}", t0.elapsed());
    let cp = ControlPlane::shared();
    let _crds = fresh_crds(cp).await;
    let client = cp.client().await;
    cp.namespace_named(&client, NAMESPACE).await;
    install_previous(cp, NAMESPACE);
    let loaded = release_state::load(&client, &fixtures().join("state")).await;
    let (stop_hosts, hosts_stopped) = tokio::sync::oneshot::channel::<()>();
    release_state::hosts(&loaded.moto.endpoint(), &loaded.url, async move {
        let _ = hosts_stopped.await;
    })
    .await;

    stage("restored state");
    // What the release left running, running again: its scheduler leads
    // from the restored pod, and both instances' agents poll.
    let db = pg::connect(&loaded.url).await;
    within(
        "the restored scheduler leading and both agents polling",
        60,
        || async {
            let count = |sql: &'static str| {
                let db = &db;
                async move {
                    db.query_one(sql, &[])
                        .await
                        .map(|r| r.get::<_, i64>(0))
                        .map_err(|e| e.to_string())
                }
            };
            let leading = count(
                "select count(*) from orca.schedulers where ended is null \
                 and role = 'leading' and seen > now() - interval '2 seconds'",
            )
            .await?;
            let polling = count(
                "select count(*) from orca.instances where ended is null \
                 and idle is not null and polled > now() - interval '2 seconds'",
            )
            .await?;
            match (leading, polling) {
                (1, 2) => Ok(()),
                _ => Err(format!("{leading} leading, {polling} polling")),
            }
        },
    )
    .await;

    let before = running(&client, &loaded).await;
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
    cp.expose(port_of(&loaded.moto.endpoint()));
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
    let quiet = Instant::now();
    let mut samples = 0;
    while quiet.elapsed() < Duration::from_secs(60) {
        let next = Instant::now() + Duration::from_secs(1);
        let now = running(&client, &loaded).await;
        samples += 1;
        assert_eq!(
            now,
            before,
            "{:?} into the upgrade, this release changed what runs\n{}",
            started.elapsed(),
            log()
        );
        tokio::time::sleep_until(next.into()).await;
    }
    assert!(
        samples >= 30,
        "{samples} samples in 60 s: the window was not watched"
    );

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
    within("the handover to v2", 120, || async {
        let s = schedulers.get(SCHEDULER).await.map_err(|e| e.to_string())?;
        let status = s.status.clone().unwrap_or_default();
        let drained = status
            .last_handover
            .as_ref()
            .is_some_and(|h| h.drained.is_some());
        if status.phase == Phase::Ready
            && status.leader.as_ref().is_some_and(|l| l.image == "v2")
            && drained
        {
            Ok(())
        } else {
            Err(format!("{status:?}"))
        }
    })
    .await;
    let image = warm::another_image(&loaded.ec2).await;
    pools
        .patch(
            POOL,
            &PatchParams::default(),
            // And SSM where EC2 is (moto serves both): this release keeps
            // the database URL in SSM, at ssmEndpoint, never at EC2's
            // endpoint (docs/operations.md#upgrade).
            &patch(serde_json::json!({"spec": {"launch": {"imageId": image},
                "ssmEndpoint": loaded.moto.endpoint()}})),
        )
        .await
        .unwrap();
    within("both instances replaced, one at a time", 240, || async {
        let now = running(&client, &loaded).await;
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
    let rolled = running(&client, &loaded).await;
    rollback_as_documented(cp, &client, NAMESPACE).await;
    assert!(schedulers.get_opt(SCHEDULER).await.unwrap().is_some());
    assert!(pools.get_opt(POOL).await.unwrap().is_some());
    assert_eq!(running(&client, &loaded).await, rolled);
    let _ = stop_hosts.send(());
}
