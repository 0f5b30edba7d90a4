//! `helm upgrade` from the previous release as docs/operations.md#upgrade
//! says: its chart installed the CRDs from `crds/`, outside any release,
//! and knew no `clusterName` and no WarmPoolClasses. The upgrade takes the
//! CRDs over (`--take-ownership`), upgrades them, keeps every object, and
//! this release's operator runs on them; a rollback keeps them.

use kube::Api;
use orca_operator::crd::{schema::SCHEMA_ANNOTATION, Scheduler, WarmPool};
use orca_tests::{
    cluster::ControlPlane,
    release::{Release, Replica},
};

use super::{
    fixtures, fresh_crds, install_previous, kubectl_run, rollback_as_documented,
    upgrade_as_documented, within, RELEASE,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// Each CRD this release generates, as installed: kept by Helm, owned by
/// `release` in `namespace`, and stamped with this release's schema.
async fn assert_crds_are_this_releases(client: &kube::Client, namespace: &str) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for ours in orca_operator::crd::crds() {
        let name = ours.metadata.name.clone().unwrap();
        let installed = api
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("CRD {name}: {e}"));
        let annotations = installed.metadata.annotations.unwrap_or_default();
        let ours = ours.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations.get(SCHEMA_ANNOTATION),
            ours.get(SCHEMA_ANNOTATION),
            "{name} is not this release's"
        );
        assert_eq!(
            annotations
                .get("helm.sh/resource-policy")
                .map(String::as_str),
            Some("keep"),
            "{name}"
        );
        assert_eq!(
            annotations
                .get("meta.helm.sh/release-name")
                .map(String::as_str),
            Some(RELEASE),
            "{name} is not the release's"
        );
        assert_eq!(
            annotations
                .get("meta.helm.sh/release-namespace")
                .map(String::as_str),
            Some(namespace),
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_upgrade_from_d589380_takes_its_crds_over_keeps_its_objects_and_runs_on_them() {
    let cp = ControlPlane::shared();
    let _crds = fresh_crds(cp).await;
    let client = cp.client().await;
    let ns = cp.namespace(&client, "from-d589380").await;

    // The previous release, installed as its users did, with their objects.
    install_previous(cp, &ns);
    let objects = fixtures().join("objects.yaml");
    kubectl_run(cp, &["apply", "-n", &ns, "-f", objects.to_str().unwrap()]);
    let schedulers: Api<Scheduler> = Api::namespaced(client.clone(), &ns);
    let pools: Api<WarmPool> = Api::namespaced(client.clone(), &ns);
    let scheduler = schedulers.get("orca").await.unwrap();
    let pool = pools.get("runners").await.unwrap();

    // The upgrade, as docs/operations.md#upgrade says.
    upgrade_as_documented(cp, &ns, &[]);
    assert_crds_are_this_releases(&client, &ns).await;
    // Every object kept, as it was written.
    let after = schedulers.get("orca").await.unwrap();
    assert_eq!(after.metadata.uid, scheduler.metadata.uid);
    assert_eq!(
        serde_json::to_value(&after.spec).unwrap(),
        serde_json::to_value(&scheduler.spec).unwrap()
    );
    let after = pools.get("runners").await.unwrap();
    assert_eq!(after.metadata.uid, pool.metadata.uid);
    assert_eq!(
        serde_json::to_value(&after.spec).unwrap(),
        serde_json::to_value(&pool.spec).unwrap()
    );

    // This release's operator, as the upgraded chart runs it: ready on
    // the CRDs the upgrade brought, leading, and writing the status.
    let release = Release::new(RELEASE.into(), ns.clone(), vec![ns.clone()]);
    let replica = Replica::start(cp, &client, &release, "a").await;
    within("the replica ready", 60, || async {
        match replica.readiness() {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    within("the Scheduler's status written", 60, || async {
        let s = schedulers.get("orca").await.map_err(|e| e.to_string())?;
        s.status
            .filter(|s| s.observed_generation.is_some())
            .map(|_| ())
            .ok_or_else(|| "no status yet".to_string())
    })
    .await;
    assert!(
        !replica.log().contains("older than this operator"),
        "{}",
        replica.log()
    );
    drop(replica);

    // A rollback to the previous release keeps the CRDs and every object.
    rollback_as_documented(cp, &client, &ns).await;
    assert_eq!(
        schedulers.get("orca").await.unwrap().metadata.uid,
        scheduler.metadata.uid
    );
    assert_eq!(
        pools.get("runners").await.unwrap().metadata.uid,
        pool.metadata.uid
    );
}
