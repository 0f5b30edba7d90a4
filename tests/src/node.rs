//! A stand-in kubelet for a real kube-apiserver: the test control plane has
//! no kubelet and no scheduler, so this agent registers a `Node`, binds every
//! unscheduled pod to it and runs each pod's containers as local processes,
//! reporting their state in the pod's status as a kubelet would — as far as
//! the tests need, and no further:
//!
//! - there are no images: a container must have a `command`, run with the
//!   agent's own environment (less `ORCA_*`) under the pod's; an image listed
//!   in [`NodeOptions::unpullable`] fails to pull, and no other image matters;
//! - the containers of a pod start together once all can (image, command and
//!   environment resolved), and are never restarted: `restartPolicy`
//!   `OnFailure` and `Always` are treated as `Never`;
//! - init containers, probes, volumes and resource limits are not supported
//!   (a pod with init containers waits with `CreateContainerError`);
//! - `$(VAR)` references in `env` values, `command` and `args` are expanded
//!   from the container's environment, as Kubernetes does;
//! - a pod's containers share its directory `<work_dir>/<namespace>/<pod>/`:
//!   the working directory, the combined stdout/stderr in `log`, and the
//!   termination log (`/dev/termination-log` in a real pod) at
//!   `termination-log`, whose path is in the container's
//!   `ORCA_TERMINATION_LOG` (a second container's is
//!   `termination-log.<container>`). `terminationMessagePath` is ignored.
//!
//! Every process is killed (SIGKILL to its process group) when the [`Node`]
//! is dropped, and dies with the test process at the latest.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    io,
    os::unix::process::ExitStatusExt,
    path::{Path, PathBuf},
    process::{ExitStatus, Stdio},
    sync::{mpsc, Arc, Mutex, PoisonError},
    time::Duration,
};

use anyhow::Context as _;
use chrono::{SecondsFormat, Utc};
use futures::{stream::FuturesUnordered, StreamExt};
use k8s_openapi::api::{
    coordination::v1::Lease,
    core::v1::{ConfigMap, Container, Node as KubeNode, Pod, Secret},
};
use kube::{
    api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions},
    runtime::{watcher, WatchStreamExt},
    Api, Client,
};
use serde_json::{json, Value};
use tokio::{
    process::{Child, Command},
    sync::{oneshot, watch},
    task::JoinSet,
    time::Instant,
};

/// The node's (and every pod's) address.
const LOOPBACK: &str = "127.0.0.1";
/// How often the node reports itself alive, well within the node lifecycle
/// controller's grace period (40 s or more).
const HEARTBEAT: Duration = Duration::from_secs(10);
/// The lease duration a kubelet gives its node lease.
const LEASE_SECONDS: i32 = 40;
/// How often a pod waiting on a missing Secret or ConfigMap, or an API call
/// that failed, is tried again.
const RETRY: Duration = Duration::from_secs(2);
/// Kubernetes' default `terminationGracePeriodSeconds`.
const DEFAULT_GRACE_SECONDS: i64 = 30;
/// The longest termination message, as the kubelet's per-container cap.
const MESSAGE_BYTES: usize = 4096;
/// How many lines of the log `FallbackToLogsOnError` takes, as the kubelet.
const MESSAGE_LINES: usize = 80;

/// What the test node is and where it runs its pods.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// The `Node` object's name, e.g. `orca-test-node`.
    pub name: String,
    /// Where pods live: `<work_dir>/<namespace>/<pod>/` holds a pod's `log`
    /// and `termination-log` and is its containers' working directory.
    pub work_dir: PathBuf,
    /// Images that fail to pull (`ErrImagePull`), to test a pod that never
    /// starts: an exact image, or a prefix ending in `*`.
    pub unpullable: Vec<String>,
}

/// A running test node. Dropping it stops the agent and SIGKILLs every
/// process it started; the `Node` object stays in the API.
pub struct Node {
    work_dir: PathBuf,
    groups: Arc<Groups>,
    /// The heartbeat and the pod watch (which owns the pods' tasks).
    _tasks: JoinSet<()>,
}

impl Node {
    /// Registers the node (Ready, with room for 500 pods), keeps it and its
    /// lease fresh so that kube-controller-manager never evicts its pods,
    /// and runs every pod that is bound to it or bound to nothing. Its tasks
    /// run on the calling tokio runtime, which must outlive the Node.
    pub async fn start(client: Client, options: NodeOptions) -> anyhow::Result<Node> {
        let NodeOptions {
            name,
            work_dir,
            unpullable,
        } = options;
        std::fs::create_dir_all(&work_dir)
            .with_context(|| format!("cannot create the test node's {}", work_dir.display()))?;
        let since = now();
        let nodes: Api<KubeNode> = Api::all(client.clone());
        let object: KubeNode = serde_json::from_value(node_object(&name, &since))?;
        let node_uid = match nodes.create(&PostParams::default(), &object).await {
            Ok(created) => created.metadata.uid,
            Err(kube::Error::Api(s)) if s.is_already_exists() => {
                nodes.get(&name).await?.metadata.uid
            }
            Err(e) => return Err(e).context(format!("cannot register node {name}")),
        };
        report_node(&nodes, &name, &since)
            .await
            .with_context(|| format!("cannot report node {name} ready"))?;
        let groups = Arc::new(Groups::default());
        let runtime = tokio::runtime::Handle::try_current()
            .context("the test node runs on a tokio runtime")?;
        let spawner = spawner(runtime, groups.clone())
            .context("cannot start the test node's spawner thread")?;
        let ctx = Arc::new(Ctx {
            client,
            node: name.clone(),
            work_dir: work_dir.clone(),
            unpullable,
            groups: groups.clone(),
            spawner,
        });
        let mut tasks = JoinSet::new();
        tasks.spawn(heartbeat(ctx.clone(), node_uid, since));
        tasks.spawn(watch_pods(ctx));
        tracing::info!(node = %name, "test node registered");
        Ok(Node {
            work_dir,
            groups,
            _tasks: tasks,
        })
    }

    /// The combined stdout and stderr of pod `namespace/pod` so far (its
    /// containers share one log); empty if it has none.
    pub fn log(&self, namespace: &str, pod: &str) -> String {
        std::fs::read(pod_dir(&self.work_dir, namespace, pod).join("log"))
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // Before the tasks go: a process spawned from now on is killed at
        // once by the spawner thread.
        self.groups.close();
    }
}

fn pod_dir(work_dir: &Path, namespace: &str, pod: &str) -> PathBuf {
    work_dir.join(namespace).join(pod)
}

/// What the agent's tasks share.
struct Ctx {
    client: Client,
    node: String,
    work_dir: PathBuf,
    unpullable: Vec<String>,
    groups: Arc<Groups>,
    spawner: mpsc::Sender<SpawnRequest>,
}

impl Ctx {
    fn unpullable(&self, image: &str) -> bool {
        self.unpullable.iter().any(|u| match u.strip_suffix('*') {
            Some(prefix) => image.starts_with(prefix),
            None => image == u,
        })
    }
}

// ---------------------------------------------------------------------------
// Processes

/// The process groups of the running containers, each led by the container's
/// process. Once closed (the Node dropped), every group is killed, and so is
/// any group that starts after.
#[derive(Default)]
struct Groups(Mutex<GroupSet>);

#[derive(Default)]
struct GroupSet {
    closed: bool,
    live: HashSet<i32>,
}

fn killpg(pgid: i32, signal: i32) {
    // SAFETY: killpg has no memory-safety preconditions.
    unsafe { libc::killpg(pgid, signal) };
}

impl Groups {
    fn lock(&self) -> std::sync::MutexGuard<'_, GroupSet> {
        // The set stays consistent whatever panicked while holding it.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn add(&self, pgid: i32) {
        let mut set = self.lock();
        if set.closed {
            killpg(pgid, libc::SIGKILL);
        } else {
            set.live.insert(pgid);
        }
    }

    /// Signals a group whose leader has not been reaped (so its id cannot
    /// have been reused).
    fn signal(&self, pgid: i32, signal: i32) {
        if self.lock().live.contains(&pgid) {
            killpg(pgid, signal);
        }
    }

    /// The leader was just reaped: what is left of its group dies with it,
    /// as the rest of a container does when its main process exits.
    fn ended(&self, pgid: i32) {
        if self.lock().live.remove(&pgid) {
            killpg(pgid, libc::SIGKILL);
        }
    }

    fn close(&self) {
        let mut set = self.lock();
        set.closed = true;
        for pgid in set.live.drain() {
            killpg(pgid, libc::SIGKILL);
        }
    }
}

type SpawnRequest = (Command, oneshot::Sender<io::Result<Child>>);

/// A thread that spawns the containers' processes and lives as long as the
/// Node: `PR_SET_PDEATHSIG` fires when the *thread* that forked ends, so the
/// processes die when the Node goes (or the test process), and never
/// because a runtime's thread came and went.
fn spawner(
    runtime: tokio::runtime::Handle,
    groups: Arc<Groups>,
) -> io::Result<mpsc::Sender<SpawnRequest>> {
    let (tx, rx) = mpsc::channel::<SpawnRequest>();
    std::thread::Builder::new()
        .name("orca-test-node".into())
        .spawn(move || {
            // tokio's child processes need its runtime to be reaped.
            let _runtime = runtime.enter();
            // Ends when the Node and all its tasks are gone.
            for (mut command, reply) in rx {
                let spawned = command.spawn().and_then(|child| match child.id() {
                    Some(pid) => {
                        groups.add(pid as i32);
                        Ok(child)
                    }
                    None => Err(io::Error::other(
                        "invariant: a child just spawned has not been reaped",
                    )),
                });
                if let Err(Ok(child)) = reply.send(spawned) {
                    // Its task was aborted meanwhile (kill_on_drop kills it).
                    if let Some(pid) = child.id() {
                        groups.ended(pid as i32);
                    }
                }
            }
        })?;
    Ok(tx)
}

/// Starts `command` through the spawner thread.
async fn spawn(ctx: &Ctx, command: Command) -> io::Result<Child> {
    let (reply, answer) = oneshot::channel();
    ctx.spawner
        .send((command, reply))
        .map_err(|_| io::Error::other("the test node's spawner thread has ended"))?;
    answer
        .await
        .map_err(|_| io::Error::other("the test node's spawner thread has ended"))?
}

fn exit_code(status: &io::Result<ExitStatus>) -> i32 {
    match status {
        Ok(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(9)),
        Err(_) => 255,
    }
}

// ---------------------------------------------------------------------------
// The Node object and its lease

fn now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn node_status(name: &str, since: &str) -> Value {
    let heartbeat = now();
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": heartbeat,
            "lastTransitionTime": since,
        })
    };
    let resources = json!({"cpu": "64", "memory": "256Gi", "pods": "500"});
    json!({
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "the test node has memory"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "the test node has disk"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "the test node has PIDs"),
            condition("Ready", "True", "KubeletReady", "the test node runs pods as local processes"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": LOOPBACK},
            {"type": "Hostname", "address": name},
        ],
        "nodeInfo": {
            "operatingSystem": std::env::consts::OS,
            "architecture": arch(),
            "containerRuntimeVersion": "orca-test://0",
        },
    })
}

/// Go's name for this machine's architecture, as in `kubernetes.io/arch`.
fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn node_object(name: &str, since: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": std::env::consts::OS,
                "kubernetes.io/arch": arch(),
            },
        },
        "status": node_status(name, since),
    })
}

/// Reports the node Ready, with a fresh heartbeat.
async fn report_node(nodes: &Api<KubeNode>, name: &str, since: &str) -> kube::Result<()> {
    let patch = json!({"status": node_status(name, since)});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

/// Renews the node's lease in `kube-node-lease`, creating it if need be.
async fn renew_lease(ctx: &Ctx, node_uid: Option<&str>) -> anyhow::Result<()> {
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), "kube-node-lease");
    let spec = json!({
        "holderIdentity": ctx.node,
        "leaseDurationSeconds": LEASE_SECONDS,
        "renewTime": Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true),
    });
    let patch = json!({ "spec": spec });
    match leases
        .patch(&ctx.node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.is_not_found() => {
            let owner: Vec<Value> = node_uid
                .map(
                    |uid| json!({"apiVersion": "v1", "kind": "Node", "name": ctx.node, "uid": uid}),
                )
                .into_iter()
                .collect();
            let lease: Lease = serde_json::from_value(json!({
                "metadata": {
                    "name": ctx.node,
                    "namespace": "kube-node-lease",
                    "ownerReferences": owner,
                },
                "spec": spec,
            }))?;
            leases.create(&PostParams::default(), &lease).await?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Keeps the node's Ready condition and its lease fresh, so that the node
/// lifecycle controller never marks it NotReady nor evicts its pods.
async fn heartbeat(ctx: Arc<Ctx>, node_uid: Option<String>, since: String) {
    let nodes: Api<KubeNode> = Api::all(ctx.client.clone());
    let mut tick = tokio::time::interval(HEARTBEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = report_node(&nodes, &ctx.node, &since).await {
            tracing::warn!(node = %ctx.node, error = %e, "node heartbeat failed");
        }
        if let Err(e) = renew_lease(&ctx, node_uid.as_deref()).await {
            tracing::warn!(node = %ctx.node, error = %e, "node lease renewal failed");
        }
    }
}

// ---------------------------------------------------------------------------
// The pod watch

/// Watches every pod and hands each one that is this node's (or no node's
/// yet) to a task of its own, keyed by uid: a pod is run once, however often
/// the watch restarts. The tasks die with this one.
async fn watch_pods(ctx: Arc<Ctx>) {
    let api: Api<Pod> = Api::all(ctx.client.clone());
    let mut events = Box::pin(watcher(api, watcher::Config::default()).default_backoff());
    // Each known pod's latest version, for its task; `None` once it is gone.
    let mut pods: HashMap<String, watch::Sender<Option<Pod>>> = HashMap::new();
    // The uids seen since the watch (re)started its listing.
    let mut listed: HashSet<String> = HashSet::new();
    let mut tasks: JoinSet<()> = JoinSet::new();
    loop {
        tokio::select! {
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                if let Err(e) = done {
                    if e.is_panic() {
                        tracing::error!(node = %ctx.node, error = %e, "a pod's task panicked");
                    }
                }
            }
            event = events.next() => match event {
                None => return,
                Some(Err(e)) => tracing::warn!(node = %ctx.node, error = %e, "pod watch failed; retrying"),
                Some(Ok(watcher::Event::Init)) => listed.clear(),
                Some(Ok(watcher::Event::InitApply(pod))) => {
                    if let Some(uid) = pod.metadata.uid.clone() {
                        listed.insert(uid);
                    }
                    dispatch(&ctx, &mut pods, &mut tasks, pod);
                }
                Some(Ok(watcher::Event::Apply(pod))) => dispatch(&ctx, &mut pods, &mut tasks, pod),
                Some(Ok(watcher::Event::InitDone)) => {
                    // Those not listed again were deleted while unwatched.
                    pods.retain(|uid, tx| {
                        let keep = listed.contains(uid);
                        if !keep {
                            tx.send_replace(None);
                        }
                        keep
                    });
                }
                Some(Ok(watcher::Event::Delete(pod))) => {
                    if let Some(tx) = pod.metadata.uid.as_ref().and_then(|uid| pods.remove(uid)) {
                        tx.send_replace(None);
                    }
                }
            }
        }
    }
}

fn dispatch(
    ctx: &Arc<Ctx>,
    pods: &mut HashMap<String, watch::Sender<Option<Pod>>>,
    tasks: &mut JoinSet<()>,
    pod: Pod,
) {
    let Some(uid) = pod.metadata.uid.clone() else {
        return;
    };
    if let Some(tx) = pods.get(&uid) {
        // Its task may have ended: the update then has no one to go to.
        tx.send_replace(Some(pod));
        return;
    }
    match pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
        None => {}
        Some(node) if node == ctx.node => {}
        Some(_) => return,
    }
    let (tx, rx) = watch::channel(Some(pod));
    pods.insert(uid, tx);
    tasks.spawn(run_pod(ctx.clone(), rx));
}

// ---------------------------------------------------------------------------
// A pod's life

type Updates = watch::Receiver<Option<Pod>>;

/// The latest version of the pod; `None` once it is gone from the API.
fn latest(rx: &mut Updates) -> Option<Pod> {
    rx.borrow_and_update().clone()
}

fn deleting(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// How long a deleted pod's processes have between SIGTERM and SIGKILL.
fn grace(pod: &Pod) -> Duration {
    let seconds = pod
        .metadata
        .deletion_grace_period_seconds
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(DEFAULT_GRACE_SECONDS);
    Duration::from_secs(seconds.max(0) as u64)
}

/// One pod, from binding to its removal from the API.
async fn run_pod(ctx: Arc<Ctx>, mut rx: Updates) {
    let Some(first) = latest(&mut rx) else {
        return;
    };
    let namespace = first.metadata.namespace.clone().unwrap_or_default();
    let name = first.metadata.name.clone().unwrap_or_default();
    let uid = first.metadata.uid.clone().unwrap_or_default();
    let pod = PodApi {
        api: Api::namespaced(ctx.client.clone(), &namespace),
        namespace,
        name,
        uid,
    };
    let Some(bound) = bind(&ctx, &pod, &mut rx).await else {
        return;
    };
    let phase = bound.status.as_ref().and_then(|s| s.phase.as_deref());
    let started_before = phase == Some("Running")
        || bound
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.state
                        .as_ref()
                        .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
                })
            });
    if matches!(phase, Some("Succeeded" | "Failed")) {
        // Ended before this agent: only its deletion is left to do.
    } else if started_before {
        pod.lost(&bound).await;
    } else if !run(&ctx, &pod, &mut rx).await {
        return;
    }
    if await_deletion(&mut rx).await {
        pod.delete(&mut rx).await;
    }
}

/// A pod's name, uid and API, for its task.
struct PodApi {
    api: Api<Pod>,
    namespace: String,
    name: String,
    uid: String,
}

/// Waits until the pod is bound to this node, binding it if it is bound to
/// none; the pod as bound, or `None` if it is another node's or gone.
async fn bind(ctx: &Ctx, pod: &PodApi, rx: &mut Updates) -> Option<Pod> {
    loop {
        let mut current = latest(rx)?;
        let node_name = current.spec.as_ref().and_then(|s| s.node_name.clone());
        match node_name.as_deref() {
            Some(node) if node == ctx.node => return Some(current),
            Some(_) => return None,
            // An unbound pod being deleted is removed by the API server.
            None if deleting(&current) => {}
            None => {
                let binding = json!({
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": ctx.node},
                });
                match pod
                    .api
                    .create_subresource::<_, Value>(
                        "binding",
                        &pod.name,
                        &PostParams::default(),
                        &binding,
                    )
                    .await
                {
                    Ok(_) => {
                        tracing::info!(pod = %pod.key(), node = %ctx.node, "bound");
                        current.spec.get_or_insert_with(Default::default).node_name =
                            Some(ctx.node.clone());
                        return Some(current);
                    }
                    Err(e) => {
                        tracing::warn!(pod = %pod.key(), error = %e, "cannot bind; retrying");
                    }
                }
            }
        }
        tokio::select! {
            changed = rx.changed() => changed.ok()?,
            _ = tokio::time::sleep(RETRY) => {}
        }
    }
}

/// Waits until the pod is deleted: true, or gone from the API: false.
async fn await_deletion(rx: &mut Updates) -> bool {
    loop {
        match latest(rx) {
            None => return false,
            Some(pod) if deleting(&pod) => return true,
            Some(_) => {}
        }
        if rx.changed().await.is_err() {
            return false;
        }
    }
}

impl PodApi {
    fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn dir(&self, ctx: &Ctx) -> PathBuf {
        pod_dir(&ctx.work_dir, &self.namespace, &self.name)
    }

    /// Patches the pod's status (tried a few times: a pod left `Running`
    /// would hang a test); false if the pod is gone.
    async fn report(&self, status: &Value) -> bool {
        for _ in 0..10 {
            match self
                .api
                .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(status))
                .await
            {
                Ok(_) => return true,
                Err(kube::Error::Api(s)) if s.is_not_found() => return false,
                Err(e) => {
                    tracing::warn!(pod = %self.key(), error = %e, "cannot report the pod's status; retrying");
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
        true
    }

    /// Removes the pod from the API (grace 0: its processes have ended),
    /// unless it is gone or was replaced by another of the same name.
    async fn delete(&self, rx: &mut Updates) {
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        loop {
            match self.api.delete(&self.name, &params).await {
                Ok(_) => {
                    tracing::info!(pod = %self.key(), "deleted");
                    return;
                }
                Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() => return,
                Err(e) => {
                    tracing::warn!(pod = %self.key(), error = %e, "cannot delete; retrying");
                }
            }
            tokio::select! {
                changed = rx.changed() => if changed.is_err() || latest(rx).is_none() { return },
                _ = tokio::time::sleep(RETRY) => {}
            }
        }
    }

    /// A pod started by an earlier agent on this node: its processes died
    /// with that agent, so it failed, as a kubelet reports a container it
    /// can no longer find.
    async fn lost(&self, pod: &Pod) {
        let containers: Vec<ContainerStatus> = pod
            .spec
            .iter()
            .flat_map(|s| &s.containers)
            .map(|c| ContainerStatus {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                pid: None,
                state: State::Terminated {
                    code: 137,
                    reason: "ContainerStatusUnknown".into(),
                    message: "The container could not be located when the pod was terminated"
                        .into(),
                    started: None,
                    finished: now(),
                },
            })
            .collect();
        let start = pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .and_then(|t| serde_json::to_value(t).ok())
            .and_then(|t| t.as_str().map(str::to_string))
            .unwrap_or_else(now);
        tracing::info!(pod = %self.key(), "started by an earlier agent: failed");
        self.report(&pod_status("Failed", &start, &containers))
            .await;
    }
}

/// Runs the pod's containers until they have all exited, or the pod is
/// gone or deleted; false if it is gone from the API.
async fn run(ctx: &Ctx, pod: &PodApi, rx: &mut Updates) -> bool {
    let start = now();
    // Wait until every container can start.
    let mut reported: Option<Vec<ContainerStatus>> = None;
    let launches = loop {
        let Some(current) = latest(rx) else {
            return false;
        };
        if deleting(&current) {
            return true;
        }
        let retry = match prepare(ctx, pod, &current).await {
            Ok(launches) => break launches,
            Err(Waiting { containers, retry }) => {
                if reported.as_ref() != Some(&containers) {
                    for c in &containers {
                        if let State::Waiting { reason, message } = &c.state {
                            if reason != "ContainerCreating" {
                                tracing::info!(pod = %pod.key(), container = %c.name, %reason, %message, "cannot start");
                            }
                        }
                    }
                    if !pod
                        .report(&pod_status("Pending", &start, &containers))
                        .await
                    {
                        return false;
                    }
                    reported = Some(containers);
                }
                retry
            }
        };
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { return false },
            _ = tokio::time::sleep(RETRY), if retry => {}
        }
    };
    let mut last = latest(rx);
    let Some(current) = &last else {
        return false;
    };
    if deleting(current) {
        return true;
    }

    // Start them.
    let dir = pod.dir(ctx);
    if let Err(e) = fresh_dir(&dir) {
        tracing::warn!(pod = %pod.key(), dir = %dir.display(), error = %e, "cannot prepare the pod's directory");
    }
    let mut containers = Vec::new();
    let mut waits = FuturesUnordered::new();
    for (i, launch) in launches.into_iter().enumerate() {
        let spawned = match launch.command(&dir) {
            Ok(command) => spawn(ctx, command).await,
            Err(e) => Err(e),
        };
        let (pid, state) = match spawned {
            Ok(child) => {
                let pid = child.id();
                tracing::info!(pod = %pod.key(), container = %launch.name, pid, "started");
                waits.push(wait(i, child));
                (pid, State::Running { started: now() })
            }
            Err(e) => {
                tracing::info!(pod = %pod.key(), container = %launch.name, error = %e, "cannot start");
                (None, start_error(&launch, e))
            }
        };
        let status = ContainerStatus {
            name: launch.name.clone(),
            image: launch.image.clone(),
            pid,
            state,
        };
        containers.push((status, launch));
    }
    let statuses = |containers: &[(ContainerStatus, Launch)]| -> Vec<ContainerStatus> {
        containers.iter().map(|(c, _)| c.clone()).collect()
    };
    let phase = |containers: &[(ContainerStatus, Launch)]| {
        let codes: Vec<Option<i32>> = containers.iter().map(|(c, _)| c.state.code()).collect();
        match codes.iter().all(Option::is_some) {
            false => "Running",
            true if codes.iter().all(|c| *c == Some(0)) => "Succeeded",
            true => "Failed",
        }
    };
    if !pod
        .report(&pod_status(
            phase(&containers),
            &start,
            &statuses(&containers),
        ))
        .await
    {
        signal_all(ctx, &containers, libc::SIGKILL);
        return false;
    }

    // Wait for them, passing on a deletion.
    let mut terminated_at: Option<Instant> = None;
    let mut killed = false;
    let mut gone = false;
    while !waits.is_empty() {
        let deadline = match (terminated_at, &last) {
            (Some(at), Some(p)) if !killed => Some(at + grace(p)),
            _ => None,
        };
        tokio::select! {
            Some((i, status)) = waits.next() => {
                let (c, launch) = &mut containers[i];
                let code = exit_code(&status);
                if let Some(pid) = c.pid {
                    ctx.groups.ended(pid as i32);
                }
                let mut message = launch.message(&dir, code);
                if let Err(e) = &status {
                    message = format!("cannot wait for the process: {e}");
                }
                tracing::info!(pod = %pod.key(), container = %c.name, code, "exited");
                let started = match &c.state {
                    State::Running { started } => Some(started.clone()),
                    _ => None,
                };
                c.state = State::Terminated {
                    code,
                    reason: if code == 0 { "Completed" } else { "Error" }.into(),
                    message,
                    started,
                    finished: now(),
                };
                if !gone && !waits.is_empty() {
                    gone = !pod.report(&pod_status("Running", &start, &statuses(&containers))).await;
                }
            }
            changed = rx.changed(), if !gone => {
                last = if changed.is_ok() { latest(rx) } else { None };
                match &last {
                    None => {
                        tracing::info!(pod = %pod.key(), "gone from the API: killing its processes");
                        gone = true;
                        signal_all(ctx, &containers, libc::SIGKILL);
                        killed = true;
                    }
                    Some(p) if deleting(p) && terminated_at.is_none() => {
                        tracing::info!(pod = %pod.key(), grace = ?grace(p), "deleted: SIGTERM");
                        signal_all(ctx, &containers, libc::SIGTERM);
                        terminated_at = Some(Instant::now());
                    }
                    Some(_) => {}
                }
            }
            _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                tracing::info!(pod = %pod.key(), "grace period over: SIGKILL");
                signal_all(ctx, &containers, libc::SIGKILL);
                killed = true;
            }
        }
    }
    if gone {
        return false;
    }
    pod.report(&pod_status(
        phase(&containers),
        &start,
        &statuses(&containers),
    ))
    .await
}

/// Signals the process group of each container still running.
fn signal_all(ctx: &Ctx, containers: &[(ContainerStatus, Launch)], signal: i32) {
    for (c, _) in containers {
        if let (Some(pid), true) = (c.pid, c.running()) {
            ctx.groups.signal(pid as i32, signal);
        }
    }
}

async fn wait(i: usize, mut child: Child) -> (usize, io::Result<ExitStatus>) {
    (i, child.wait().await)
}

/// Empties (or makes) a pod's directory: a pod of the same name before it
/// left its files there.
fn fresh_dir(dir: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::create_dir_all(dir)?;
    std::fs::File::create(dir.join("log"))?;
    Ok(())
}

fn start_error(launch: &Launch, e: io::Error) -> State {
    let program = launch.argv.first().map(String::as_str).unwrap_or_default();
    State::Terminated {
        code: 128,
        reason: "StartError".into(),
        message: format!("cannot start {program:?}: {e}"),
        started: None,
        finished: now(),
    }
}

// ---------------------------------------------------------------------------
// Containers

/// A container ready to start.
struct Launch {
    name: String,
    image: String,
    /// `command` then `args`, expanded.
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    hostname: String,
    /// Where its termination message goes (`ORCA_TERMINATION_LOG`).
    termination_log: PathBuf,
    fallback_to_logs: bool,
}

impl Launch {
    fn command(&self, dir: &Path) -> io::Result<Command> {
        let (program, args) = self
            .argv
            .split_first()
            .ok_or_else(|| io::Error::other("no command"))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("log"))?;
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(dir)
            .env_clear()
            .envs(std::env::vars_os().filter(|(k, _)| !k.to_string_lossy().starts_with("ORCA_")))
            .env("HOSTNAME", &self.hostname)
            .envs(&self.env)
            .env("ORCA_TERMINATION_LOG", &self.termination_log)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .kill_on_drop(true);
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // The parent died before the line above: nobody would kill it.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        Ok(command)
    }

    /// The termination message of a container that exited with `code`: its
    /// termination log, else (with `FallbackToLogsOnError` and a failure)
    /// the tail of the pod's log.
    fn message(&self, dir: &Path, code: i32) -> String {
        let written = std::fs::read(&self.termination_log)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        if !written.is_empty() {
            return head(&written, MESSAGE_BYTES).to_string();
        }
        if self.fallback_to_logs && code != 0 {
            let log = std::fs::read(dir.join("log"))
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            return tail(&log, MESSAGE_LINES, MESSAGE_BYTES).to_string();
        }
        String::new()
    }
}

fn head(text: &str, bytes: usize) -> &str {
    let mut end = bytes.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The last `lines` lines of `text`, and at most its last `bytes` bytes.
fn tail(text: &str, lines: usize, bytes: usize) -> &str {
    let text = text.trim_end_matches('\n');
    let start = text
        .rmatch_indices('\n')
        .nth(lines.saturating_sub(1))
        .map_or(0, |(i, _)| i + 1);
    let mut start = start.max(text.len().saturating_sub(bytes));
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// Why a pod's containers cannot start yet; `retry` if that may change
/// without the pod changing (a Secret or ConfigMap may appear).
struct Waiting {
    containers: Vec<ContainerStatus>,
    retry: bool,
}

/// Resolves every container of the pod, or says why some cannot start.
async fn prepare(ctx: &Ctx, pod: &PodApi, current: &Pod) -> Result<Vec<Launch>, Waiting> {
    let spec = current.spec.clone().unwrap_or_default();
    let hostname = spec
        .hostname
        .clone()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| pod.name.clone());
    let dir = pod.dir(ctx);
    let has_init = spec.init_containers.as_ref().is_some_and(|c| !c.is_empty());
    let mut launches = Vec::new();
    let mut waiting: Vec<Option<(&str, String)>> = Vec::new();
    let mut retry = false;
    for (i, c) in spec.containers.iter().enumerate() {
        let image = c.image.clone().unwrap_or_default();
        let command = c.command.clone().unwrap_or_default();
        let blocked = if has_init {
            Some((
                "CreateContainerError",
                "the test node does not run init containers".to_string(),
            ))
        } else if ctx.unpullable(&image) {
            Some((
                "ErrImagePull",
                format!("failed to pull image {image:?}: the test node treats it as unpullable"),
            ))
        } else if command.is_empty() {
            Some((
                "CreateContainerError",
                "the test node runs only containers with a command".to_string(),
            ))
        } else {
            match container_env(ctx, current, c).await {
                Ok(env) => {
                    let argv = command
                        .iter()
                        .chain(c.args.iter().flatten())
                        .map(|a| expand(a, &env))
                        .collect();
                    let termination_log = match i {
                        0 => dir.join("termination-log"),
                        _ => dir.join(format!("termination-log.{}", c.name)),
                    };
                    launches.push(Launch {
                        name: c.name.clone(),
                        image,
                        argv,
                        env,
                        hostname: hostname.clone(),
                        termination_log,
                        fallback_to_logs: c.termination_message_policy.as_deref()
                            == Some("FallbackToLogsOnError"),
                    });
                    None
                }
                Err(message) => {
                    retry = true;
                    Some(("CreateContainerConfigError", message))
                }
            }
        };
        waiting.push(blocked);
    }
    if waiting.iter().all(Option::is_none) {
        return Ok(launches);
    }
    let containers = spec
        .containers
        .iter()
        .zip(waiting)
        .map(|(c, blocked)| {
            let (reason, message) = blocked.unwrap_or(("ContainerCreating", String::new()));
            ContainerStatus {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                pid: None,
                state: State::Waiting {
                    reason: reason.into(),
                    message,
                },
            }
        })
        .collect();
    Err(Waiting { containers, retry })
}

/// The container's environment from `envFrom` and `env`, or why it cannot
/// be made (a kubelet's `CreateContainerConfigError`).
async fn container_env(
    ctx: &Ctx,
    pod: &Pod,
    container: &Container,
) -> Result<BTreeMap<String, String>, String> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let config_maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut env = BTreeMap::new();
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let data = if let Some(r) = &from.config_map_ref {
            config_map_data(&config_maps, &r.name)
                .await?
                .or_else(|| r.optional.unwrap_or(false).then(BTreeMap::new))
                .ok_or_else(|| format!("configmap {:?} not found", r.name))?
        } else if let Some(r) = &from.secret_ref {
            secret_data(&secrets, &r.name)
                .await?
                .or_else(|| r.optional.unwrap_or(false).then(BTreeMap::new))
                .ok_or_else(|| format!("secret {:?} not found", r.name))?
        } else {
            BTreeMap::new()
        };
        for (key, value) in data {
            let name = format!("{prefix}{key}");
            if !name.is_empty() && !name.contains(['=', '\0']) {
                env.insert(name, value);
            }
        }
    }
    for var in container.env.iter().flatten() {
        let value = match (&var.value, &var.value_from) {
            (_, Some(from)) => {
                if let Some(r) = &from.secret_key_ref {
                    let data = secret_data(&secrets, &r.name).await?;
                    match data.as_ref().and_then(|d| d.get(&r.key)) {
                        Some(v) => Some(v.clone()),
                        None if r.optional.unwrap_or(false) => None,
                        None if data.is_none() => {
                            return Err(format!("secret {:?} not found", r.name))
                        }
                        None => {
                            return Err(format!(
                                "couldn't find key {} in Secret {namespace}/{}",
                                r.key, r.name
                            ))
                        }
                    }
                } else if let Some(r) = &from.config_map_key_ref {
                    let data = config_map_data(&config_maps, &r.name).await?;
                    match data.as_ref().and_then(|d| d.get(&r.key)) {
                        Some(v) => Some(v.clone()),
                        None if r.optional.unwrap_or(false) => None,
                        None if data.is_none() => {
                            return Err(format!("configmap {:?} not found", r.name))
                        }
                        None => {
                            return Err(format!(
                                "couldn't find key {} in ConfigMap {namespace}/{}",
                                r.key, r.name
                            ))
                        }
                    }
                } else if let Some(r) = &from.field_ref {
                    Some(field(pod, &ctx.node, &r.field_path)?)
                } else {
                    return Err(format!(
                        "env {}: the test node supports only value, secretKeyRef, configMapKeyRef and fieldRef",
                        var.name
                    ));
                }
            }
            (Some(value), None) => Some(expand(value, &env)),
            (None, None) => Some(String::new()),
        };
        if let Some(value) = value {
            env.insert(var.name.clone(), value);
        }
    }
    Ok(env)
}

/// A Secret's data, `None` if there is no such Secret.
async fn secret_data(
    api: &Api<Secret>,
    name: &str,
) -> Result<Option<BTreeMap<String, String>>, String> {
    let secret = api
        .get_opt(name)
        .await
        .map_err(|e| format!("cannot get secret {name:?}: {e}"))?;
    Ok(secret.map(|s| {
        let mut data: BTreeMap<String, String> = s
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
            .collect();
        data.extend(s.string_data.unwrap_or_default());
        data
    }))
}

/// A ConfigMap's data, `None` if there is no such ConfigMap.
async fn config_map_data(
    api: &Api<ConfigMap>,
    name: &str,
) -> Result<Option<BTreeMap<String, String>>, String> {
    let map = api
        .get_opt(name)
        .await
        .map_err(|e| format!("cannot get configmap {name:?}: {e}"))?;
    Ok(map.map(|m| {
        let mut data: BTreeMap<String, String> = m
            .binary_data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
            .collect();
        data.extend(m.data.unwrap_or_default());
        data
    }))
}

/// A `fieldRef`'s value: the fields the downward API offers for env.
fn field(pod: &Pod, node: &str, path: &str) -> Result<String, String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let quoted = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix("['"))
            .and_then(|rest| rest.strip_suffix("']"))
            .map(str::to_string)
    };
    let value = match path {
        "metadata.name" => meta.name.clone(),
        "metadata.namespace" => meta.namespace.clone(),
        "metadata.uid" => meta.uid.clone(),
        "spec.nodeName" => Some(node.to_string()),
        "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()),
        "status.podIP" | "status.hostIP" => Some(LOOPBACK.to_string()),
        _ => {
            if let Some(key) = quoted("metadata.labels") {
                meta.labels.as_ref().and_then(|l| l.get(&key).cloned())
            } else if let Some(key) = quoted("metadata.annotations") {
                meta.annotations.as_ref().and_then(|a| a.get(&key).cloned())
            } else {
                return Err(format!("fieldRef {path}: not supported by the test node"));
            }
        }
    };
    Ok(value.unwrap_or_default())
}

/// Kubernetes' `$(VAR)` expansion: a defined variable's value; `$$` is a
/// `$`; anything else is left as written.
fn expand(text: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(r) = after.strip_prefix('$') {
            out.push('$');
            rest = r;
        } else if let Some((name, r)) = after.strip_prefix('(').and_then(|r| r.split_once(')')) {
            match vars.get(name) {
                Some(value) => out.push_str(value),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = r;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

// ---------------------------------------------------------------------------
// Status

#[derive(Clone, Debug, PartialEq)]
enum State {
    Waiting {
        reason: String,
        message: String,
    },
    Running {
        started: String,
    },
    Terminated {
        code: i32,
        reason: String,
        message: String,
        started: Option<String>,
        finished: String,
    },
}

impl State {
    fn code(&self) -> Option<i32> {
        match self {
            State::Terminated { code, .. } => Some(*code),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
struct ContainerStatus {
    name: String,
    image: String,
    pid: Option<u32>,
    state: State,
}

impl ContainerStatus {
    fn running(&self) -> bool {
        matches!(self.state, State::Running { .. })
    }

    fn to_json(&self) -> Value {
        let with_message = |mut v: Value, message: &str| {
            if !message.is_empty() {
                v["message"] = json!(message);
            }
            v
        };
        let state = match &self.state {
            State::Waiting { reason, message } => {
                json!({"waiting": with_message(json!({"reason": reason}), message)})
            }
            State::Running { started } => json!({"running": {"startedAt": started}}),
            State::Terminated {
                code,
                reason,
                message,
                started,
                finished,
            } => {
                let mut t = with_message(
                    json!({"exitCode": code, "reason": reason, "finishedAt": finished}),
                    message,
                );
                if let Some(started) = started {
                    t["startedAt"] = json!(started);
                }
                json!({ "terminated": t })
            }
        };
        let mut status = json!({
            "name": self.name,
            "image": self.image,
            "imageID": self.image,
            "restartCount": 0,
            "ready": self.running(),
            "started": self.running(),
            "state": state,
        });
        if let Some(pid) = self.pid {
            status["containerID"] = json!(format!("orca-test://{pid}"));
        }
        status
    }
}

/// A status patch for the pod: `phase`, its addresses, conditions and
/// containers.
fn pod_status(phase: &str, start: &str, containers: &[ContainerStatus]) -> Value {
    let ready = !containers.is_empty() && containers.iter().all(ContainerStatus::running);
    let changed = now();
    let condition = |kind: &str, since: &str| {
        let mut c = json!({"type": kind, "status": "True", "lastTransitionTime": since});
        if !ready && matches!(kind, "ContainersReady" | "Ready") {
            c["status"] = json!("False");
            if matches!(phase, "Succeeded" | "Failed") {
                c["reason"] = json!("PodCompleted");
            } else {
                let unready: Vec<&str> = containers
                    .iter()
                    .filter(|c| !c.running())
                    .map(|c| c.name.as_str())
                    .collect();
                c["reason"] = json!("ContainersNotReady");
                c["message"] = json!(format!(
                    "containers with unready status: [{}]",
                    unready.join(" ")
                ));
            }
        }
        c
    };
    json!({
        "status": {
            "phase": phase,
            "hostIP": LOOPBACK,
            "hostIPs": [{"ip": LOOPBACK}],
            "podIP": LOOPBACK,
            "podIPs": [{"ip": LOOPBACK}],
            "startTime": start,
            "conditions": [
                condition("PodScheduled", start),
                condition("Initialized", start),
                condition("ContainersReady", &changed),
                condition("Ready", &changed),
            ],
            "containerStatuses": containers.iter().map(ContainerStatus::to_json).collect::<Vec<_>>(),
        }
    })
}
