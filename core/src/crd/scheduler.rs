//! The `Scheduler`: an image of the orca scheduler, the database it uses,
//! and how its rollouts hand over (docs/protocol.md#the-operators-rollout).
//!
//! The Scheduler's spec and status types, each
//! field documented where the CRD's schema comes from.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, LocalObjectReference, PodSecurityContext, ResourceRequirements,
    SecurityContext, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The scheduler to run. A new image is rolled out with the overlap
/// handover: the new pod starts beside the old, its instance joins, the old
/// ones are asked to drain, the new one leads, the register Job runs, and
/// the old pods go once drained.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "orca.dev",
    version = "v1alpha1",
    kind = "Scheduler",
    doc = "An orca pipeline scheduler: its image, the database it uses, and how a change of image is handed over from the running scheduler to the new one.",
    namespaced,
    status = "SchedulerStatus",
    shortname = "osched",
    category = "orca",
    printcolumn = r#"{"name":"Image","type":"string","jsonPath":".spec.image"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Degraded\")].reason"}"#,
    printcolumn = r#"{"name":"Leader","type":"string","jsonPath":".status.leader.pod"}"#,
    printcolumn = r#"{"name":"Draining","type":"integer","jsonPath":".status.draining"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerSpec {
    /// The scheduler's container image. Required, non-empty; a change starts a
    /// rollout.
    #[x_kube(validation = Rule::new("self.size() > 0").message("image must not be empty"))]
    pub image: String,
    /// The scheduler container's command. Empty (the default): the image's
    /// entrypoint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// The scheduler container's arguments. Empty (the default): the image's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// More environment for the scheduler and register containers. Entries
    /// named ORCA_DATABASE_URL, ORCA_OVERLAP or ORCA_IMAGE are ignored: the
    /// operator sets those.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Requests and limits of the scheduler and register containers. Default:
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Where the database URL is. Required; the pods get it as
    /// ORCA_DATABASE_URL through a secretKeyRef, never as a literal.
    pub database: Database,
    /// true: hand over with the new scheduler beside the old (ORCA_OVERLAP=on).
    /// false: recreate, the old pod goes before the new one starts
    /// (ORCA_OVERLAP=off). Default true.
    #[serde(default = "default_true")]
    pub overlap: bool,
    /// The Job that registers the new image's pipelines once the new revision
    /// leads (with overlap off: once its pod is up), run with the new image and
    /// the scheduler's environment and pod template. A failed Job is retried as
    /// a new Job after a back-off; a change of register registers again,
    /// without a rollout. Default: none, no register step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub register: Option<Register>,
    /// Time limits of a rollout's steps, in seconds. A change of them starts no
    /// rollout.
    #[serde(default)]
    pub handover: Handover,
    /// What the operator copies onto each scheduler pod and register Job pod. A
    /// change starts a rollout. Default: nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplate>,
    /// true: the operator creates and deletes nothing for this Scheduler, and
    /// its phase is Paused. Default false.
    #[serde(default)]
    pub paused: bool,
    /// Periods in which a rollout may start, e.g. {cron: "0 2 * * 2-4",
    /// timezone: Europe/Berlin, duration: 3h}. Outside all of them a new
    /// revision waits, the Deferred condition saying so and status.nextWindow
    /// until when; a rollout that has started goes on past its window's end.
    /// The annotation orca.dev/rollout-now set to the waiting revision (the
    /// Deferred condition names it; kubectl orca rollout now sets it) starts
    /// that revision at once.
    /// The first deployment and replacing a current pod that exited never wait.
    /// Default none: rollouts start at once. At most 20.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub maintenance_windows: Vec<super::period::Period>,
}

fn default_true() -> bool {
    true
}

/// Where the database URL is: a key of a Secret in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Database {
    /// The Secret key whose value is the database URL
    /// (postgres://user:password@host:port/db?sslmode=…).
    pub url_secret_ref: SecretKeyRef,
}

impl Database {
    /// The URL in key `key` of Secret `name`.
    pub fn in_secret(name: &str, key: &str) -> Self {
        Database {
            url_secret_ref: SecretKeyRef {
                name: name.into(),
                key: key.into(),
                ca_key: None,
            },
        }
    }
}

/// A key of a Secret in the Scheduler's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, KubeSchema)]
pub struct SecretKeyRef {
    /// The Secret's name, in the Scheduler's namespace. Required, non-empty.
    #[x_kube(validation = Rule::new("self.size() > 0").message("the Secret's name must not be empty"))]
    pub name: String,
    /// The key within the Secret. Required, non-empty.
    #[x_kube(validation = Rule::new("self.size() > 0").message("the Secret's key must not be empty"))]
    pub key: String,
    /// Another key of the same Secret holding the database's CA bundle
    /// (PEM): with sslmode=verify-full the operator checks the server
    /// against it rather than the URL's sslrootcert file (which the
    /// scheduler pods and the instances still read on their own file
    /// systems). Default none.
    #[serde(default, rename = "caKey", skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.size() > 0").message("caKey must not be empty"))]
    pub ca_key: Option<String>,
}

/// The register step of a rollout.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Register {
    /// The register container's command. Required, at least a program.
    #[x_kube(validation = Rule::new("self.size() > 0").message("register.command must name a program"))]
    pub command: Vec<String>,
    /// The register container's arguments. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Seconds each register Job may run in all (its activeDeadlineSeconds)
    /// before it fails with RegisterFailed and is retried. Default 600.
    #[serde(default = "default_register_timeout")]
    #[schemars(range(min = 1, max = 31536000))]
    pub timeout_seconds: i64,
}

fn default_register_timeout() -> i64 {
    600
}

/// Time limits of a handover's steps.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Handover {
    /// Seconds from the new pod's container start (an image pull does not
    /// count) until its instance must have joined. Past it, while an older
    /// instance is live, the rollout is aborted: the new pod is deleted and the
    /// old instance keeps leading; with none live the Scheduler is Degraded
    /// (JoinTimeout) and keeps waiting. Default 120.
    #[serde(default = "default_join")]
    #[schemars(range(min = 1, max = 31536000))]
    pub join_timeout_seconds: i64,
    /// Seconds from the later of the new instance's join and the last drain
    /// asked of an older instance until the new one must lead (verified in
    /// pg_locks). Past it the Scheduler is Degraded (LeadTimeout) and keeps
    /// waiting. Default 60.
    #[serde(default = "default_lead")]
    #[schemars(range(min = 1, max = 31536000))]
    pub lead_timeout_seconds: i64,
    /// Seconds an old instance may take to finish its runs, counted from its
    /// drain request (or, if never asked, from the creation of the pod that
    /// superseded it). Past it its pod is deleted anyway (DrainTimeout event).
    /// Default 3600.
    #[serde(default = "default_drain")]
    #[schemars(range(min = 1, max = 31536000))]
    pub drain_timeout_seconds: i64,
    /// Seconds from the start of a rollout (status.rolloutStarted) after which
    /// a rollout still in motion is Degraded (ProgressDeadlineExceeded).
    /// Default 5400.
    #[serde(default = "default_progress")]
    #[schemars(range(min = 1, max = 31536000))]
    pub progress_deadline_seconds: i64,
    /// Seconds since an instance's last beat after which it counts as gone. Set
    /// it to the scheduler's own stale limit. Default 10.
    #[serde(default = "default_stale")]
    #[schemars(range(min = 1, max = 31536000))]
    pub stale_seconds: i64,
    /// With overlap off (the scheduler writes no instance row): seconds the new
    /// pod's container must run without exiting to count as up; then the
    /// Scheduler is Ready and the register Job runs. Unused with overlap on.
    /// Default 10.
    #[serde(default = "default_settle")]
    #[schemars(range(min = 0, max = 31536000))]
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
    /// Labels for the scheduler pods and register Jobs; the operator's own
    /// orca.dev/ labels win over them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations for the scheduler pods and the register Jobs' pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The pods' nodeSelector.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// The pods' tolerations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// The pods' affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// The ServiceAccount the pods run as. Default: the namespace's default
    /// ServiceAccount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Secrets, in the Scheduler's namespace, for pulling the images.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// The pods' securityContext (runAsNonRoot, runAsUser, fsGroup,
    /// seccompProfile…), e.g. to meet the namespace's Pod Security Standard.
    /// Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,
    /// The scheduler container's securityContext (allowPrivilegeEscalation,
    /// capabilities, readOnlyRootFilesystem…); the register Job's container
    /// gets it too. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_security_context: Option<SecurityContext>,
    /// The pods' PriorityClass, so a scheduler is not the first pod evicted
    /// from a full node. Default: the cluster's default priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
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
    /// The phase's name, as the status and the metrics' `phase` label
    /// spell it.
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

/// What the operator last saw of the Scheduler's pods and instances, and
/// what it remembers between passes (the last pod's sequence, an aborted
/// revision, the last handover's times).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerStatus {
    /// The metadata.generation of the spec this status was derived from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Where the Scheduler is: Pending (not reconciled yet), Starting,
    /// HandingOver, Registering or Draining (a rollout's step), Ready (an
    /// instance leads and nothing moves), Degraded (see the Degraded condition)
    /// or Paused.
    #[serde(default)]
    pub phase: Phase,
    /// The image of the pod last seen leading. During a handover it stays the
    /// old image until the new instance leads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_image: Option<String>,
    /// The image of the spec: the one being rolled out, or running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_image: Option<String>,
    /// The instance that leads, verified in pg_locks (with overlap off: the
    /// settled pod). Absent while none does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<LeaderStatus>,
    /// A line per pod of the Scheduler, old and new.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revisions: Vec<RevisionStatus>,
    /// How many live instances are draining.
    #[serde(default)]
    pub draining: i32,
    /// When each step of the last handover from one image to another happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handover: Option<HandoverStatus>,
    /// How many times a current pod that exited was replaced by a new pod of
    /// its revision, in all; never reset. The back-off counts recentRestarts
    /// instead.
    #[serde(default)]
    pub restarts: i32,
    /// A revision whose rollout was aborted because its instance never joined.
    /// It is not tried again until the spec changes, or until no older instance
    /// is left to lead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborted_revision: Option<String>,
    /// The sequence number of the last pod created (label orca.dev/sequence).
    /// Pod names are never reused, so an old instance row can't be taken for a
    /// new pod's.
    #[serde(default)]
    pub last_sequence: i64,
    /// The revision of the spec (label orca.dev/revision of its pods) when
    /// the status was written: a different one is a new rollout, which
    /// restarts `rolloutStarted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_revision: Option<String>,
    /// When the rollout in motion began (RFC 3339, the database's clock):
    /// the target revision changed, or a settled Scheduler began to move
    /// again. `handover.progressDeadlineSeconds` counts from it. Absent while
    /// nothing moves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_started: Option<String>,
    /// Restarts of the current revision's pod since one last ran ten minutes
    /// (or since the target revision changed): the next restart waits
    /// 10 s × 2^recentRestarts, at most 320 s.
    #[serde(default)]
    pub recent_restarts: i32,
    /// When the next maintenance window starts (RFC 3339), while a new
    /// revision waits for one (the Deferred condition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_window: Option<String>,
    /// The register Jobs of the target revision: attempts and failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub register: Option<RegisterStatus>,
    /// The conditions Available (an instance leads), Progressing (a rollout is
    /// in motion) and Degraded (the first problem found, by reason).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The instance that leads.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaderStatus {
    /// Its row id in orca.schedulers; 0 with overlap off, where the scheduler
    /// writes no row and its one pod leads once settled.
    pub instance: i64,
    /// The leader's pod.
    pub pod: String,
    /// The leader pod's image.
    pub image: String,
    /// When it took the lead (its row's led time), or with overlap off when its
    /// container started; RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

/// A pod of the Scheduler and its instance.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionStatus {
    /// The hash of what went into the pod (label orca.dev/revision).
    pub revision: String,
    /// The pod's image.
    pub image: String,
    /// The pod's name, which its instance records as its host.
    pub pod: String,
    /// The id of the pod's newest row in orca.schedulers; absent until its
    /// instance joins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<i64>,
    /// The instance's role: waiting, leading or draining, or ended once its row
    /// has ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// How many runs the instance is running, as of its last beat.
    #[serde(default)]
    pub runs: i32,
    /// When the pod was created (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

/// When each step of the last handover happened (RFC 3339).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HandoverStatus {
    /// The image that led before.
    pub from: String,
    /// The image handed over to.
    pub to: String,
    /// When the new pod was created (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<String>,
    /// When the new instance joined (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joined: Option<String>,
    /// When the new instance took the lead (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub led: Option<String>,
    /// When the register Job succeeded (RFC 3339); absent without a register
    /// step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registered: Option<String>,
    /// When the old instances had drained and their pods were gone, ending the
    /// handover (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drained: Option<String>,
}

/// The register step of one revision (docs/protocol.md#the-operators-rollout):
/// a failed Job is never run again; the next attempt is a new Job, after a
/// back-off.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegisterStatus {
    /// The revision whose pipelines the Jobs register.
    pub revision: String,
    /// The hash of `spec.register`'s command and args that the last Job ran
    /// (label orca.dev/register): a change registers again.
    pub hash: String,
    /// Register Jobs created for this revision; the next one is attempt
    /// `attempts + 1`, named `<scheduler>-register-<revision>-<attempt>`.
    #[serde(default)]
    pub attempts: i32,
    /// Failed Jobs in a row with this hash: the next attempt starts
    /// 10 s × 2^(failures − 1), at most 5 min, after the last one failed.
    #[serde(default)]
    pub failures: i32,
    /// The last Job seen failed, so that each failure is reported once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_job: Option<String>,
}
