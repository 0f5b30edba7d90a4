//! The `Scheduler`: an image of the orca scheduler, the database it uses,
//! and how its rollouts hand over (SPEC §5–§6).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, LocalObjectReference, ResourceRequirements, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A scheduler deployment whose image changes are rolled with the overlap
/// handover: join → lead → register → drain.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "orca.dev",
    version = "v1alpha1",
    kind = "Scheduler",
    namespaced,
    status = "SchedulerStatus",
    shortname = "osched",
    category = "orca",
    printcolumn = r#"{"name":"Image","type":"string","jsonPath":".spec.image"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Leader","type":"string","jsonPath":".status.leader.pod"}"#,
    printcolumn = r#"{"name":"Draining","type":"integer","jsonPath":".status.draining"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerSpec {
    /// The scheduler's container image. A change starts a rollout.
    #[x_kube(validation = Rule::new("self.size() > 0").message("image must not be empty"))]
    pub image: String,
    /// The command; the image's entrypoint when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// More environment for the scheduler container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    pub database: Database,
    /// Roll with the overlap handover (the new scheduler beside the old);
    /// false recreates: the old pod goes, then the new one starts.
    #[serde(default = "default_true")]
    pub overlap: bool,
    /// Registers the new image's pipelines, as a Job, once it leads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub register: Option<Register>,
    #[serde(default)]
    pub handover: Handover,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplate>,
    /// Stops acting on this Scheduler: nothing is created or deleted.
    #[serde(default)]
    pub paused: bool,
}

fn default_true() -> bool {
    true
}

/// Where the database URL is: a key of a Secret in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Database {
    pub url_secret_ref: SecretKeyRef,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
pub struct SecretKeyRef {
    #[x_kube(validation = Rule::new("self.size() > 0").message("the Secret's name must not be empty"))]
    pub name: String,
    #[x_kube(validation = Rule::new("self.size() > 0").message("the Secret's key must not be empty"))]
    pub key: String,
}

/// The register step of a rollout.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Register {
    #[x_kube(validation = Rule::new("self.size() > 0").message("register.command must name a program"))]
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(default = "default_register_timeout")]
    #[schemars(range(min = 1))]
    pub timeout_seconds: i64,
}

fn default_register_timeout() -> i64 {
    600
}

/// Time limits of a handover's steps.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Handover {
    /// New pod created → its instance joined and live; past it the rollout
    /// is aborted and the old instance keeps leading.
    #[serde(default = "default_join")]
    #[schemars(range(min = 1))]
    pub join_timeout_seconds: i64,
    /// Drain asked → the new instance leads (`wait_for_lead`).
    #[serde(default = "default_lead")]
    #[schemars(range(min = 1))]
    pub lead_timeout_seconds: i64,
    /// How long an old instance may drain its runs before its pod is deleted.
    #[serde(default = "default_drain")]
    #[schemars(range(min = 1))]
    pub drain_timeout_seconds: i64,
    /// A rollout not finished by then is reported `Degraded`.
    #[serde(default = "default_progress")]
    #[schemars(range(min = 1))]
    pub progress_deadline_seconds: i64,
    /// An instance unseen this long is gone (seed 002's stale limit).
    #[serde(default = "default_stale")]
    #[schemars(range(min = 1))]
    pub stale_seconds: i64,
    /// With overlap off the scheduler writes no instance row to wait for:
    /// its pod is up once its container has run this many seconds without
    /// exiting (then `Ready`, and the register Job).
    #[serde(default = "default_settle")]
    #[schemars(range(min = 0))]
    pub settle_seconds: i64,
}

fn default_join() -> i64 {
    120
}
fn default_lead() -> i64 {
    60
}
fn default_drain() -> i64 {
    3600
}
fn default_progress() -> i64 {
    5400
}
fn default_stale() -> i64 {
    10
}
fn default_settle() -> i64 {
    10
}

impl Default for Handover {
    fn default() -> Self {
        Handover {
            join_timeout_seconds: default_join(),
            lead_timeout_seconds: default_lead(),
            drain_timeout_seconds: default_drain(),
            progress_deadline_seconds: default_progress(),
            stale_seconds: default_stale(),
            settle_seconds: default_settle(),
        }
    }
}

/// What the operator copies onto each scheduler pod.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplate {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
}

/// Where a Scheduler is, for the eye.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Default)]
pub enum Phase {
    #[default]
    Pending,
    Starting,
    HandingOver,
    Registering,
    Draining,
    Ready,
    Degraded,
    Paused,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Starting => "Starting",
            Phase::HandingOver => "HandingOver",
            Phase::Registering => "Registering",
            Phase::Draining => "Draining",
            Phase::Ready => "Ready",
            Phase::Degraded => "Degraded",
            Phase::Paused => "Paused",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub phase: Phase,
    /// The image of the revision that leads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_image: Option<String>,
    /// The image of the spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<LeaderStatus>,
    /// Every revision that has a pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revisions: Vec<RevisionStatus>,
    /// How many old instances are draining.
    #[serde(default)]
    pub draining: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handover: Option<HandoverStatus>,
    /// Times the current revision's pod was recreated.
    #[serde(default)]
    pub restarts: i32,
    /// A revision whose rollout was aborted (its instance never joined);
    /// it is not tried again until the spec changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborted_revision: Option<String>,
    /// The sequence number of the last pod created: pod names are never
    /// reused, so an old instance row can't be taken for a new pod's.
    #[serde(default)]
    pub last_sequence: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaderStatus {
    /// Its row in `orca.schedulers`; 0 with overlap off, where the
    /// scheduler writes no row and its one pod leads once settled.
    pub instance: i64,
    pub pod: String,
    pub image: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionStatus {
    pub revision: String,
    pub image: String,
    pub pod: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<i64>,
    /// waiting, leading or draining (seed 002), or ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default)]
    pub runs: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

/// When each step of the last handover happened (RFC 3339).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HandoverStatus {
    pub from: String,
    pub to: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joined: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub led: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registered: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drained: Option<String>,
}
