//! A stand-in kubelet for a real kube-apiserver: the test control plane has
//! no kubelet and no scheduler, so this agent registers a `Node`, binds every
//! unscheduled pod to it and runs each pod's containers as local processes,
//! reporting their state in the pod's status as a kubelet would — as far as
//! the tests need, and no further:
//!
//! - a container of an image the node has (the `images` of its [`NodeOptions`]: the
//!   operator's own, unpacked from its OCI archive) runs from that image's
//!   root file system, in a network of its own, with its service account's
//!   token, probes and restarts — see `image_pod` for what is and is not
//!   done as a kubelet does;
//! - any other container must have a `command`, run with the agent's own
//!   environment (less `ORCA_*`) under the pod's; an image listed in
//!   its `unpullable` fails to pull, and no other image matters;
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
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
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

mod environment;
mod image_pod;
mod launch;
mod pod;
mod pod_watch;
mod process;
mod registration;
mod running;
mod status;

// What the submodules share, each through `use super::*`.
use self::{
    environment::{container_env, expand},
    launch::{prepare, Launch},
    pod::{deleting, grace, latest, run_pod, PodApi, Updates},
    pod_watch::watch_pods,
    process::{dies_with_the_node, exit_code, spawn, spawner, Groups, SpawnRequest},
    registration::{heartbeat, node_object, now, report_node},
    running::{fresh_dir, run},
    status::{pod_status, ContainerStatus, State},
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
    name: String,
    /// Where pods live: `<work_dir>/<namespace>/<pod>/` holds a pod's `log`
    /// and `termination-log` and is its containers' working directory.
    work_dir: PathBuf,
    /// Images that fail to pull (`ErrImagePull`), to test a pod that never
    /// starts: an exact image, or a prefix ending in `*`.
    unpullable: Vec<String>,
    /// The images the node has, by reference (filled in as tests load
    /// them); a pod whose containers are all of these runs from them.
    images: Arc<Mutex<BTreeMap<String, NodeImage>>>,
    /// The loopback ports of this machine that a pod in a network of its
    /// own reaches at the same address (the API server's, the databases',
    /// moto's), as a cluster network would route them.
    exposed: Arc<Mutex<BTreeSet<u16>>>,
    /// The API server as pods reach it: its loopback port (the
    /// `KUBERNETES_SERVICE_PORT` of image pods) and its CA (their
    /// `ca.crt`).
    api_port: u16,
    ca_file: PathBuf,
}

impl NodeOptions {
    /// The options of node `name`: its pods' directory `work_dir`, the
    /// images that fail to pull, the images it has, the loopback ports its
    /// pods reach, and the API server's port and CA as pods reach it.
    pub fn new(
        name: String,
        work_dir: PathBuf,
        unpullable: Vec<String>,
        images: Arc<Mutex<BTreeMap<String, NodeImage>>>,
        exposed: Arc<Mutex<BTreeSet<u16>>>,
        api_port: u16,
        ca_file: PathBuf,
    ) -> Self {
        NodeOptions {
            name,
            work_dir,
            unpullable,
            images,
            exposed,
            api_port,
            ca_file,
        }
    }
}

/// An image the node has: its root file system, unpacked, and its config.
#[derive(Clone, Debug)]
pub struct NodeImage {
    root: PathBuf,
    entrypoint: Vec<String>,
    cmd: Vec<String>,
    /// `KEY=value` each.
    env: Vec<String>,
    /// `uid[:gid]`, numeric; empty: root.
    user: String,
    working_dir: String,
}

impl NodeImage {
    /// An image unpacked at `root`, with its config's entrypoint, command,
    /// environment, user and working directory.
    pub fn new(
        root: PathBuf,
        entrypoint: Vec<String>,
        cmd: Vec<String>,
        env: Vec<String>,
        user: String,
        working_dir: String,
    ) -> Self {
        NodeImage {
            root,
            entrypoint,
            cmd,
            env,
            user,
            working_dir,
        }
    }
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
            images,
            exposed,
            api_port,
            ca_file,
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
            images,
            exposed,
            api_port,
            ca_file,
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
    images: Arc<Mutex<BTreeMap<String, NodeImage>>>,
    exposed: Arc<Mutex<BTreeSet<u16>>>,
    api_port: u16,
    ca_file: PathBuf,
    groups: Arc<Groups>,
    spawner: mpsc::Sender<SpawnRequest>,
}

impl Ctx {
    /// The image `reference` if the node has it.
    fn image(&self, reference: &str) -> Option<NodeImage> {
        self.images
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(reference)
            .cloned()
    }

    fn unpullable(&self, image: &str) -> bool {
        self.unpullable.iter().any(|u| match u.strip_suffix('*') {
            Some(prefix) => image.starts_with(prefix),
            None => image == u,
        })
    }
}
