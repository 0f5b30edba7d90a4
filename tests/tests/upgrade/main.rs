//! Upgrades on a real control plane of their own: this binary changes the
//! cluster's CRDs, which the other suites share, so it starts its own
//! (one per test binary). It starts from what a previous release left
//! behind (`tests/fixtures/releases/`) and upgrades as
//! docs/operations.md#upgrade says.

mod from_d589380;
mod over_running_state;
mod stale_crds;

use std::{path::PathBuf, time::Duration};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use orca_operator::crd::{Scheduler, WarmPool};
use orca_tests::{
    cluster::ControlPlane,
    eventually::eventually,
    on_cluster::kubectl,
    release::{helm, repo, run_as_admin},
};
use tokio::sync::{Mutex, MutexGuard};

/// The previous release's fixtures.
pub fn fixtures() -> PathBuf {
    repo().join("tests/fixtures/releases/d589380")
}

/// The cluster's orca CRDs, which every test here changes: one test at a
/// time holds them, starting with none installed (the objects of earlier
/// tests let go of their finalizers and deleted with them).
pub async fn fresh_crds(cp: &ControlPlane) -> MutexGuard<'static, ()> {
    static CRDS: Mutex<()> = Mutex::const_new(());
    let held = CRDS.lock().await;
    let client = cp.client().await;
    clear_finalizers::<Scheduler>(&client).await;
    clear_finalizers::<WarmPool>(&client).await;
    kubectl_run(
        cp,
        &[
            "delete",
            "crd",
            "schedulers.orca.dev",
            "warmpools.orca.dev",
            "warmpoolclasses.orca.dev",
            "--ignore-not-found",
            "--wait=true",
            "--timeout=120s",
        ],
    );
    held
}

/// Takes the finalizers off every `K` in the cluster (their operator may
/// be gone), so that deleting its CRD deletes them.
async fn clear_finalizers<K>(client: &kube::Client)
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let clear = serde_json::json!({"metadata": {"finalizers": null}});
    let patch = kube::api::Patch::Merge(&clear);
    let Ok(list) = kube::Api::<K>::all(client.clone())
        .list(&Default::default())
        .await
    else {
        return;
    };
    for object in list {
        let meta = object.meta();
        let api = kube::Api::<K>::namespaced(
            client.clone(),
            meta.namespace.as_deref().unwrap_or_default(),
        );
        let name = meta.name.clone().unwrap_or_default();
        let _ = api.patch(&name, &Default::default(), &patch).await;
    }
}

/// The Helm release of the operator, in every test here (the captured
/// release's name).
pub use orca_tests::release_state::RELEASE;

/// The previous release as its users installed it, in namespace `ns`
/// (with no replica: the test runs the operator), its CRDs established.
pub fn install_previous(cp: &ControlPlane, ns: &str) {
    let old_chart = fixtures().join("chart");
    helm_run(
        cp,
        &[
            "install",
            RELEASE,
            old_chart.to_str().expect("a UTF-8 path"),
            "--namespace",
            ns,
            "--set",
            "replicaCount=0",
            "--wait",
        ],
    );
    established(cp, &["schedulers.orca.dev", "warmpools.orca.dev"]);
}

/// The upgrade to this release in namespace `ns`, as
/// docs/operations.md#upgrade says for a release from before `clusterName`
/// and WarmPoolClasses: its RoleBinding's `roleRef` (a Role) cannot become
/// this release's (a ClusterRole) in place, so it is deleted first.
/// `sets` (`key=value`) are the user's own values besides.
pub fn upgrade_as_documented(cp: &ControlPlane, ns: &str, sets: &[String]) {
    kubectl_run(cp, &["delete", "rolebinding", RELEASE, "--namespace", ns]);
    let chart = repo().join("charts/orca-operator");
    let cluster = format!("clusterName={}", orca_tests::release::TEST_CLUSTER);
    let mut args = vec![
        "upgrade",
        RELEASE,
        chart.to_str().expect("a UTF-8 path"),
        "--namespace",
        ns,
        "--reset-then-reuse-values",
        "--take-ownership",
        "--wait",
        "--set",
        &cluster,
        "--set",
        "tenancy.requireClass=false",
    ];
    for set in sets {
        args.extend(["--set", set.as_str()]);
    }
    helm_run(cp, &args);
}

/// The rollback to the previous release (revision 1) in namespace `ns`,
/// as docs/operations.md#upgrade says: its RoleBinding goes back to a
/// Role, by hand: deleted, then this release's in-use finalizer taken off
/// (a running operator puts it back on a binding not being deleted).
/// The CRDs are kept (newer than its operator, which accepts them).
pub async fn rollback_as_documented(cp: &ControlPlane, client: &kube::Client, ns: &str) {
    kubectl_run(
        cp,
        &[
            "delete",
            "rolebinding",
            RELEASE,
            "--namespace",
            ns,
            "--wait=false",
        ],
    );
    kubectl_run(
        cp,
        &[
            "patch",
            "rolebinding",
            RELEASE,
            "--namespace",
            ns,
            "--type",
            "merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ],
    );
    helm_run(cp, &["rollback", RELEASE, "1", "--namespace", ns, "--wait"]);
    let api: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    for name in [
        "schedulers.orca.dev",
        "warmpools.orca.dev",
        "warmpoolclasses.orca.dev",
    ] {
        assert!(
            api.get_opt(name).await.unwrap().is_some(),
            "the rollback deleted CRD {name}"
        );
    }
}

/// Waits until the CRDs `names` are established.
pub fn established(cp: &ControlPlane, names: &[&str]) {
    let mut args = vec!["wait", "--for=condition=Established", "--timeout=60s"];
    let crds: Vec<String> = names.iter().map(|n| format!("crd/{n}")).collect();
    args.extend(crds.iter().map(String::as_str));
    kubectl_run(cp, &args);
}

/// Polls `what` for `within`, as [`eventually`] does.
pub async fn within<T, F, Fut>(what: &str, secs: u64, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    eventually(what, Duration::from_secs(secs), check).await
}

/// `kubectl args…` as the admin.
pub fn kubectl_run(cp: &ControlPlane, args: &[&str]) -> String {
    run_as_admin(cp, &kubectl(), args, None)
}

/// `helm args…` as the admin.
pub fn helm_run(cp: &ControlPlane, args: &[&str]) -> String {
    run_as_admin(cp, &helm(), args, None)
}
