//! Upgrades on a real control plane of their own: this binary changes the
//! cluster's CRDs, which the other suites share, so it starts its own
//! (one per test binary). It starts from what a previous release left
//! behind (`tests/fixtures/releases/`) and upgrades as
//! docs/operations.md#upgrade says.

mod from_d589380;
mod from_e207371;
mod over_running_state;
mod stale_crds;

use std::{
    collections::BTreeSet,
    path::PathBuf,
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{batch::v1::Job, core::v1::Pod},
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::Api;
use orca_operator::{
    crd::{Phase, Scheduler, WarmPool},
    warmpool::{Ec2, Ec2State},
};
use orca_tests::{
    cluster::ControlPlane,
    eventually::eventually,
    on_cluster::kubectl,
    pg,
    release::{helm, repo, run_as_admin},
    release_state::{NAMESPACE, POOL, SCHEDULER},
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
    clear_finalizers(&client, Api::<Scheduler>::all(client.clone())).await;
    clear_finalizers(&client, Api::<WarmPool>::all(client.clone())).await;
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

/// Takes the finalizers off every `K` that `list` lists (their operator
/// may be gone), so that deleting them, their CRD or their namespace
/// deletes them.
async fn clear_finalizers<K>(client: &kube::Client, list: Api<K>)
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let clear = serde_json::json!({"metadata": {"finalizers": null}});
    let patch = kube::api::Patch::Merge(&clear);
    let Ok(list) = list.list(&Default::default()).await else {
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

/// Namespace [`NAMESPACE`], where a release's captured state loads, new
/// and empty: the release an earlier test installed there uninstalled
/// (the in-use finalizers of its RoleBindings and Secrets taken off: no
/// operator runs), the
/// namespace deleted with what it held (its pods at once: the test node
/// that ran them may be gone) and made again.
pub async fn fresh_release_namespace(cp: &ControlPlane, client: &kube::Client) {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    if namespaces.get_opt(NAMESPACE).await.unwrap().is_some() {
        // This release's in-use finalizers, which no operator takes off now.
        use k8s_openapi::api::{core::v1::Secret, rbac::v1::RoleBinding};
        let bindings = Api::<RoleBinding>::namespaced(client.clone(), NAMESPACE);
        clear_finalizers(client, bindings).await;
        let secrets = Api::<Secret>::namespaced(client.clone(), NAMESPACE);
        clear_finalizers(client, secrets).await;
        helm_run(
            cp,
            &[
                "uninstall",
                RELEASE,
                "--namespace",
                NAMESPACE,
                "--ignore-not-found",
                "--wait",
            ],
        );
        kubectl_run(
            cp,
            &[
                "delete",
                "pods",
                "--all",
                "--namespace",
                NAMESPACE,
                "--grace-period=0",
                "--force",
            ],
        );
        kubectl_run(cp, &["delete", "namespace", NAMESPACE, "--wait=false"]);
        within("the namespace of the previous test gone", 120, || async {
            match namespaces
                .get_opt(NAMESPACE)
                .await
                .map_err(|e| e.to_string())?
            {
                None => Ok(()),
                Some(ns) => Err(format!("{:?}", ns.status)),
            }
        })
        .await;
    }
    cp.namespace_named(client, NAMESPACE).await;
}

/// The Helm release of the operator, in every test here (the captured
/// release's name).
pub use orca_tests::release_state::RELEASE;

/// The previous release as its users installed it, in namespace `ns`
/// (with no replica: the test runs the operator), its CRDs established.
pub fn install_previous(cp: &ControlPlane, ns: &str) {
    install_release(cp, ns, &fixtures(), &[]);
}

/// The release whose fixtures are in `dir` (its `chart/`) as its users
/// installed it, in namespace `ns`, with `sets` (`key=value`) and no
/// replica (the test runs the operator); its CRDs established.
pub fn install_release(cp: &ControlPlane, ns: &str, dir: &std::path::Path, sets: &[&str]) {
    let old_chart = dir.join("chart");
    let mut args = vec![
        "install",
        RELEASE,
        old_chart.to_str().expect("a UTF-8 path"),
        "--namespace",
        ns,
        "--set",
        "replicaCount=0",
        "--wait",
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    helm_run(cp, &args);
    established(cp, &["schedulers.orca.dev", "warmpools.orca.dev"]);
}

/// The upgrade to this release in namespace `ns`, as
/// docs/operations.md#upgrade says for a release from before `clusterName`
/// and WarmPoolClasses: its RoleBinding's `roleRef` (a Role) cannot become
/// this release's (a ClusterRole) in place, so it is deleted first.
/// `sets` (`key=value`) are the user's own values besides.
pub fn upgrade_as_documented(cp: &ControlPlane, ns: &str, sets: &[String]) {
    kubectl_run(cp, &["delete", "rolebinding", RELEASE, "--namespace", ns]);
    let cluster = format!("clusterName={}", orca_tests::release::TEST_CLUSTER);
    let mut all = vec![cluster];
    all.extend(sets.iter().cloned());
    helm_upgrade(cp, ns, &all);
}

/// The command at the top of docs/operations.md#upgrade, with
/// `tenancy.requireClass=false` (pools without a class run) and `sets`.
pub fn helm_upgrade(cp: &ControlPlane, ns: &str, sets: &[String]) {
    let chart = repo().join("charts/orca-operator");
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

/// What runs: the Scheduler's pods and its Jobs (by uid, and whether being
/// deleted), the pool's instance rows (by id, and whether ended) and its
/// EC2 instances that are not terminated; and every instance EC2 lists in
/// any state (moto keeps terminated ones listed), so that one launched and
/// terminated between two samples is seen all the same.
#[derive(Debug, PartialEq)]
pub struct Running {
    pub pods: BTreeSet<String>,
    pub jobs: BTreeSet<String>,
    pub rows: BTreeSet<(i64, bool)>,
    pub instances: BTreeSet<String>,
    pub ever: BTreeSet<String>,
}

pub async fn running(client: &kube::Client, url: &str, ec2: &Ec2) -> Running {
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
    let db = pg::connect(url).await;
    let rows = db
        .query("select id, ended is not null from orca.instances", &[])
        .await
        .expect("the instance rows")
        .iter()
        .map(|r| (r.get::<_, i64>(0), r.get::<_, bool>(1)))
        .collect();
    let listed = ec2
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
            .filter_map(|t| t.instance())
            .filter(|i| !matches!(i.state(), Ec2State::Terminated | Ec2State::ShuttingDown))
            .map(|i| i.id().to_string())
            .collect(),
        ever: listed
            .into_iter()
            .filter_map(|t| t.into_instance())
            .map(|i| i.id().to_string())
            .collect(),
    }
}

/// Waits until what a release left running serves again: its restored
/// scheduler leads, and `agents` instances' agents poll.
pub async fn serving(db: &orca_db::Db, agents: i64) {
    within(
        "the restored scheduler leading and the agents polling",
        90,
        || async {
            let count = |sql: &'static str| async move {
                db.query_one(sql, &[])
                    .await
                    .map(|r| r.get::<_, i64>(0))
                    .map_err(|e| e.to_string())
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
            if leading == 1 && polling == agents {
                Ok(())
            } else {
                Err(format!("{leading} leading, {polling} polling"))
            }
        },
    )
    .await;
}

/// Watches what runs for 60 s, at least once a second: every sample finds
/// `before`, or the test fails saying `when` (how long into the upgrade,
/// the operator's log).
pub async fn quiet(
    client: &kube::Client,
    url: &str,
    ec2: &Ec2,
    before: &Running,
    when: impl Fn() -> String,
) {
    let quiet = Instant::now();
    let mut samples = 0;
    while quiet.elapsed() < Duration::from_secs(60) {
        let next = Instant::now() + Duration::from_secs(1);
        let now = running(client, url, ec2).await;
        samples += 1;
        assert_eq!(&now, before, "this release changed what runs, {}", when());
        tokio::time::sleep_until(next.into()).await;
    }
    assert!(
        samples >= 30,
        "{samples} samples in 60 s: the window was not watched"
    );
}

/// Waits until the Scheduler has handed over to `image`: Ready, its leader
/// of that image, the previous leader drained.
pub async fn handed_over_to(schedulers: &Api<Scheduler>, image: &str) {
    within(&format!("the handover to {image}"), 120, || async {
        let s = schedulers.get(SCHEDULER).await.map_err(|e| e.to_string())?;
        let status = s.status.clone().unwrap_or_default();
        let drained = status
            .last_handover
            .as_ref()
            .is_some_and(|h| h.drained.is_some());
        if status.phase == Phase::Ready
            && status.leader.as_ref().is_some_and(|l| l.image == image)
            && drained
        {
            Ok(())
        } else {
            Err(format!("{status:?}"))
        }
    })
    .await;
}
