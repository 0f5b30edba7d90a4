//! The operator upgraded, its CRDs not (a GitOps pipeline that applies the
//! Deployment before `crds/`, say): the new replica acts on nothing and says
//! why, until the CRDs are applied; then it goes on by itself. The CRDs
//! made old again under it (a rollback of the CRDs alone), it steps down
//! the same way, and leads again once they are upgraded.

use std::time::Duration;

use k8s_openapi::api::{core::v1::Pod, events::v1::Event};
use kube::{api::ListParams, Api};
use orca_tests::{eventually::eventually, on_cluster::OnCluster, release::repo};

use super::{established, fixtures, fresh_crds, kubectl_run};

const SCHEDULER: &str = r#"apiVersion: orca.dev/v1alpha1
kind: Scheduler
metadata:
  name: orca
spec:
  image: registry.example.com/orca:v1
  database:
    urlSecretRef: {name: orca-db, key: url}
"#;

/// A WarmPool of the previous release's schema, paused, on an endpoint
/// that answers nothing.
const POOL: &str = r#"apiVersion: orca.dev/v1alpha1
kind: WarmPool
metadata:
  name: runners
spec:
  scheduler: orca
  region: us-east-1
  endpoint: http://127.0.0.1:9
  paused: true
  idle: {min: 0, max: 0}
  maxInstances: 1
  launch:
    imageId: ami-12c6146b
    instanceTypes: [t3.micro]
    subnetIds: [subnet-none]
    runCommand: "true"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_on_the_previous_releases_crds_acts_on_nothing_and_says_so_until_they_are_applied(
) {
    let cp = orca_tests::cluster::ControlPlane::shared();
    let _crds = fresh_crds(cp).await;
    // The previous release's CRDs, as its chart's crds/ left them.
    let old = fixtures().join("chart/crds/orca.dev.yaml");
    let apply_crds = |file: &std::path::Path| {
        kubectl_run(
            cp,
            &["apply", "--server-side", "-f", file.to_str().unwrap()],
        );
    };
    apply_crds(&old);
    established(cp, &["schedulers.orca.dev", "warmpools.orca.dev"]);
    // This release's chart, its CRDs left to the pipeline that forgot them.
    // Pools without a class allowed, so that one can be written here.
    let stage = OnCluster::installed_with(
        "stale",
        &["crds.install=false", "tenancy.requireClass=false"],
    )
    .await;
    let file = std::env::temp_dir().join(format!("orca-stale-{}.yaml", stage.ns()));
    std::fs::write(&file, SCHEDULER).unwrap();
    kubectl_run(
        cp,
        &["apply", "-n", stage.ns(), "-f", file.to_str().unwrap()],
    );
    // A WarmPool written meanwhile — a team's edit, or the previous
    // operator's finalizer on one — goes through: the chart's policy of a
    // class's limits cannot read its parameters' kind (no WarmPoolClass
    // CRD yet), and the operator checks a class's limits itself. Once,
    // every write of a WarmPool was refused until the CRDs were applied.
    std::fs::write(&file, POOL).unwrap();
    kubectl_run(
        cp,
        &["apply", "-n", stage.ns(), "-f", file.to_str().unwrap()],
    );
    kubectl_run(
        cp,
        &[
            "delete",
            "warmpool",
            "runners",
            "-n",
            stage.ns(),
            "--wait=true",
        ],
    );
    let _ = std::fs::remove_file(&file);
    let stage = stage.with_replica("a").await;
    let replica = &stage.replicas()[0];

    let said = eventually(
        "/readyz to fail naming the stale CRDs",
        Duration::from_secs(30),
        || async {
            match replica.readiness() {
                Ok((503, body)) if body.contains("older than this operator") => Ok(body),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    for what in [
        "schedulers.orca.dev is older than this operator (it lacks",
        "warmpools.orca.dev is older than this operator (it lacks",
        "warmpoolclasses.orca.dev is not installed",
        "acting on nothing",
        "helm upgrade",
        "kubectl apply --server-side -f crds/orca.dev.yaml",
    ] {
        assert!(said.contains(what), "/readyz does not say {what:?}: {said}");
    }
    assert!(
        replica.log().contains("older than this operator"),
        "the log does not say why: {}",
        replica.log()
    );
    let lease = stage.release().fullname();
    let events = Api::<Event>::namespaced(stage.client().clone(), stage.release().namespace());
    eventually(
        "a Warning Event on the operator's Lease",
        Duration::from_secs(10),
        || async {
            let list = events
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .iter()
                .find(|e| {
                    e.reason.as_deref() == Some("CustomResourceDefinitionsStale")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref())
                            == Some(lease.as_str())
                        && e.type_.as_deref() == Some("Warning")
                        && e.note
                            .as_deref()
                            .is_some_and(|n| n.contains("older than this operator"))
                })
                .map(|_| ())
                .ok_or_else(|| {
                    format!(
                        "{:?}",
                        list.items.iter().map(|e| &e.reason).collect::<Vec<_>>()
                    )
                })
        },
    )
    .await;

    // Acting on nothing: no lease taken, no pod, no status written, for a
    // while longer than a replica takes to lead and act.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        stage.lease_holder().await,
        None,
        "a held-back replica took the lease"
    );
    let pods: Api<Pod> = stage.pods();
    assert!(
        pods.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "a held-back replica created pods"
    );
    let scheduler = stage.schedulers().get("orca").await.unwrap();
    assert!(
        scheduler.status.is_none(),
        "a held-back replica wrote a status: {:?}",
        scheduler.status
    );
    assert_eq!(
        replica.health().map(|(code, _)| code),
        Ok(200),
        "a held-back replica must stay alive (no restarts by the kubelet)"
    );

    // The CRDs applied, as docs/operations.md#upgrade says for pipelines.
    let ours = repo().join("crds/orca.dev.yaml");
    apply_crds(&ours);
    eventually(
        "the replica ready and leading",
        Duration::from_secs(60),
        || async {
            match (replica.readiness(), stage.lease_holder().await) {
                (Ok((200, _)), Some(holder)) if holder == "a" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    eventually(
        "the Scheduler's status written",
        Duration::from_secs(60),
        || async {
            let s = stage
                .schedulers()
                .get("orca")
                .await
                .map_err(|e| e.to_string())?;
            s.status.map(|_| ()).ok_or_else(|| "no status".to_string())
        },
    )
    .await;
    assert!(
        replica
            .log()
            .contains("hold every field this operator writes now"),
        "the log does not say it went on: {}",
        replica.log()
    );

    // The CRDs made old again under the leading replica (a rollback of the
    // CRDs alone, say): it stops acting, releases the Lease and says why,
    // alive; a change made meanwhile is not acted on.
    apply_crds(&old);
    let said = eventually(
        "the leader to step down naming the stale CRDs",
        Duration::from_secs(30),
        || async {
            match (replica.readiness(), stage.lease_holder().await) {
                (Ok((503, body)), None) if body.contains("older than this operator") => Ok(body),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(said.contains("acting on nothing"), "{said}");
    assert!(
        replica
            .log()
            .contains("stops acting and releases the lease"),
        "the log does not say it stepped down: {}",
        replica.log()
    );
    let pod_names = || async {
        let mut names: Vec<String> = pods
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        names.sort();
        names
    };
    let before = pod_names().await;
    let file = std::env::temp_dir().join(format!("orca-stale-v2-{}.yaml", stage.ns()));
    std::fs::write(&file, SCHEDULER.replace("orca:v1", "orca:v2")).unwrap();
    kubectl_run(
        cp,
        &["apply", "-n", stage.ns(), "-f", file.to_str().unwrap()],
    );
    let _ = std::fs::remove_file(&file);
    let observed = || async {
        let s = stage.schedulers().get("orca").await.unwrap();
        (
            s.metadata.generation,
            s.status.and_then(|st| st.observed_generation),
        )
    };
    let (edited, seen) = observed().await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        pod_names().await,
        before,
        "a replica on stale CRDs acted on a change"
    );
    assert_eq!(
        observed().await,
        (edited, seen),
        "a replica on stale CRDs wrote a status for the change"
    );
    assert!(
        seen < edited,
        "the edit was seen before the CRDs went stale"
    );
    assert_eq!(
        stage.lease_holder().await,
        None,
        "the Lease was taken again"
    );
    assert_eq!(
        replica.health().map(|(code, _)| code),
        Ok(200),
        "a replica that stepped down must stay alive"
    );

    // Upgraded again: it leads again by itself and acts on the change.
    apply_crds(&ours);
    eventually(
        "the replica leading again and the change seen",
        Duration::from_secs(60),
        || async {
            let (generation, seen) = observed().await;
            match stage.lease_holder().await {
                Some(holder) if holder == "a" && seen == generation => Ok(()),
                holder => Err(format!(
                    "holder {holder:?}, generation {generation:?}, observed {seen:?}"
                )),
            }
        },
    )
    .await;
}
