//! The `WarmPool`: EC2 instances kept warm for a Scheduler's runs
//! (docs/architecture.md#the-warmpool-controller).
//!
//! The WarmPool's spec and status types, each field
//! documented where the CRD's schema comes from.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};

use super::period::Period;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// EC2 instances whose agents wait, idle, for the runs a Scheduler hands
/// them.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "orca.dev",
    version = "v1alpha1",
    kind = "WarmPool",
    doc = "EC2 instances kept warm for a Scheduler's runs: the operator launches them, and terminates the idle, stale and leaked ones, never one that was just handed a run.",
    namespaced,
    status = "WarmPoolStatus",
    shortname = "wpool",
    category = "orca",
    printcolumn = r#"{"name":"Scheduler","type":"string","jsonPath":".spec.scheduler"}"#,
    printcolumn = r#"{"name":"Idle","type":"integer","jsonPath":".status.idle"}"#,
    printcolumn = r#"{"name":"Busy","type":"integer","jsonPath":".status.busy"}"#,
    printcolumn = r#"{"name":"Launching","type":"integer","jsonPath":".status.launching"}"#,
    printcolumn = r#"{"name":"Stopped","type":"integer","jsonPath":".status.stopped"}"#,
    printcolumn = r#"{"name":"Degraded","type":"string","jsonPath":".status.conditions[?(@.type==\"Degraded\")].reason"}"#,
    printcolumn = r#"{"name":"Drifted","type":"integer","jsonPath":".status.drifted","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new("self.idle.max <= self.maxInstances").message("idle.max must not exceed maxInstances"))]
#[x_kube(validation = Rule::new("!has(self.stopped) || self.stopped.min <= self.maxInstances").message("stopped.min must not exceed maxInstances"))]
#[x_kube(validation = Rule::new("!has(self.stopped) || !has(self.launch.capacityType) || self.launch.capacityType == 'onDemand'").message("stopped needs launch.capacityType onDemand: spot instances are not stopped and started"))]
#[x_kube(validation = Rule::new("has(self.classRef) || size(self.region) > 0").message("region must not be empty (or name a class: classRef)"))]
#[x_kube(validation = Rule::new("has(self.classRef) || has(self.launch.launchTemplate) || (has(self.launch.imageId) && has(self.launch.instanceTypes) && size(self.launch.instanceTypes) > 0 && has(self.launch.subnetIds) && size(self.launch.subnetIds) > 0)").message("launch needs a launchTemplate, or an imageId with instanceTypes and subnetIds (or name a class: classRef)"))]
#[x_kube(validation = Rule::new("has(self.classRef) || (has(self.launch.runCommand) && size(self.launch.runCommand) > 0)").message("launch.runCommand must not be empty (or name a class: classRef)"))]
#[x_kube(validation = Rule::new("!has(self.schedules) || self.schedules.all(s, s.idle.max <= self.maxInstances)").message("schedules[].idle.max must not exceed maxInstances"))]
#[serde(rename_all = "camelCase")]
pub struct WarmPoolSpec {
    /// The Scheduler, in the same namespace, whose database (its Secret's URL)
    /// the pool and its instances use. Required, non-empty.
    #[x_kube(validation = Rule::new("self.size() > 0").message("scheduler must name a Scheduler"))]
    pub scheduler: String,
    /// The WarmPoolClass the pool launches as: its region, endpoint and
    /// launch, within its instance types, capacity types and limits. With a
    /// class the pool sets none of region, endpoint and the launch fields
    /// but instanceTypes (a subset of the class's) and capacityType (one it
    /// allows). Default none: the pool says all of it itself (which a
    /// chart installed with tenancy.requireClass refuses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_ref: Option<ClassRef>,
    /// The EC2 region to launch in. Required, non-empty, without a classRef;
    /// with one, the class's.
    // Defaulted to "" in the schema, which reads as unset: an operator of
    // a release before classes, which requires the field, still reads a
    // pool of a class (after a rollback), where a missing field would
    // fail its listing of every WarmPool.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("default" = ""))]
    pub region: String,
    /// Another EC2 endpoint URL, e.g. a VPC endpoint (the tests use moto's
    /// server). Default: the region's (with a classRef, the class's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Another SSM endpoint URL (e.g. an SSM VPC endpoint), where the
    /// operator keeps the database URL parameter and the instances read it
    /// (databaseUrlIn parameter). Default: the region's own SSM — never the
    /// EC2 endpoint, which serves EC2 alone. With a classRef, the class's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_endpoint: Option<String>,
    /// How many idle instances to keep warm, and at most. Required.
    pub idle: IdleRange,
    /// Periods with an idle range of their own, e.g. more warm instances in
    /// working hours. While a period is under way its idle range replaces
    /// idle; of several, the first (in this list) wins. status.activeSchedule
    /// says which. Default none; at most 20.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub schedules: Vec<IdleSchedule>,
    /// Raise the idle floor ahead of the demand the pool's own history
    /// foresees for each hour of the week (see Forecast). Default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forecast: Option<super::forecast::Forecast>,
    /// Keep runs' time to start under a target at the least cost: idle and
    /// stopped instances chosen each hour from the pool's demand history and
    /// measured start times, within the ranges above (see Objective).
    /// Default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objective: Option<super::objective::Objective>,
    /// A reserve of instances kept stopped: launched, booted once, their
    /// agents reported, then stopped (no compute bill, EBS only). When idle
    /// instances fall below idle.min or runs wait, reserve instances are
    /// started before new ones are launched, and the reserve is refilled
    /// after. A stopped instance is never handed a run nor counted idle.
    /// Default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<StoppedRange>,
    /// Never more instances than this, booting, idle, busy and stopped together.
    /// Required, at least 1 and at least idle.max.
    #[schemars(range(min = 1, max = 10000))]
    pub max_instances: i32,
    /// Seconds an idle instance waits for a run; a minute after that its agent
    /// ends its row and powers the instance off (pool-next's seconds). Default
    /// 600.
    #[serde(default = "default_idle_seconds")]
    #[schemars(range(min = 1, max = 31536000))]
    pub idle_seconds: i64,
    /// Runs an instance serves before it is retired, once idle. 0 (the
    /// default): unlimited.
    #[serde(default)]
    #[schemars(range(min = 0, max = 2147483647))]
    pub max_uses: i32,
    /// Seconds after launch by which an instance's agent must have reported,
    /// else the instance is terminated (BootTimeout). One without a row that
    /// the running operator did not launch itself is terminated as Leaked after
    /// the larger of this and 60 seconds. Default 300.
    #[serde(default = "default_boot_timeout")]
    #[schemars(range(min = 1, max = 31536000))]
    pub boot_timeout_seconds: i64,
    /// How instances are launched and what they run. Required without a
    /// classRef; with one, only instanceTypes and capacityType, to narrow
    /// the class's.
    #[serde(default)]
    pub launch: Launch,
    /// true: nothing is launched or terminated, except once the WarmPool is
    /// deleted with onDelete Terminate; the status still counts the instances.
    /// Default false.
    #[serde(default)]
    pub paused: bool,
    /// What deleting the WarmPool does to its instances. Terminate (the
    /// default): nothing more is launched, the idle and booting instances are
    /// terminated at once and each busy one once its run is over (or
    /// drainTimeoutSeconds after the deletion); the operator's finalizer
    /// orca.dev/warm-pool keeps the WarmPool until EC2 lists none of its
    /// instances pending, running, stopping or stopped. Orphan: the finalizer goes at once and
    /// the instances are left running (their agents power them off once idle).
    #[serde(default)]
    pub on_delete: OnDelete,
    /// With onDelete Terminate: seconds after the deletion a busy instance may
    /// go on with its run before it is terminated anyway. Default 3600.
    #[serde(default = "default_drain_timeout")]
    #[schemars(range(min = 0, max = 31536000))]
    pub drain_timeout_seconds: i64,
    /// How instances whose launch spec is out of date (drifted: another AMI,
    /// launch template or version, security groups, instance profile, agent,
    /// run command or database file, or an instance type or subnet no longer
    /// listed) are replaced. Default: one at a time.
    #[serde(default)]
    pub disruption: Disruption,
    /// Periods in which voluntary disruption may happen: replacing drifted
    /// instances (running or in the stopped reserve). Outside all of them
    /// drifted instances stay until a window opens; dead, hung, leaked or
    /// timed-out instances are still replaced at once, and a deleted pool
    /// still terminates everything. Same fields as schedules. Default none:
    /// any time. At most 20.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub maintenance_windows: Vec<Period>,
}

/// A WarmPool's class, by name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
pub struct ClassRef {
    /// The WarmPoolClass's name. Required, non-empty.
    #[x_kube(validation = Rule::new("self.size() > 0").message("classRef.name must name a WarmPoolClass"))]
    pub name: String,
}

/// How drifted instances are replaced: idle and stopped ones first, each
/// only once a replacement is up (so the pool never drops below idle.min
/// for it), busy ones once their run is over.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// Drifted instances replaced at a time: replacements booting for them
    /// at most this many. 0: drifted instances are left to idleSeconds and
    /// maxUses. Default 1.
    #[serde(default = "default_max_drifted")]
    #[schemars(range(min = 0, max = 10000))]
    pub max_drifted: i32,
}

impl Default for Disruption {
    fn default() -> Self {
        Disruption {
            max_drifted: default_max_drifted(),
        }
    }
}

fn default_max_drifted() -> i32 {
    1
}

fn default_idle_seconds() -> i64 {
    600
}
fn default_boot_timeout() -> i64 {
    300
}
fn default_drain_timeout() -> i64 {
    3600
}

/// What deleting a WarmPool does to its instances.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum OnDelete {
    /// Launch nothing more; terminate the idle and booting instances at once
    /// (paused or not), and each busy one once its run is over or
    /// drainTimeoutSeconds after the deletion. The WarmPool goes once EC2
    /// lists none of its instances pending, running, stopping or stopped.
    #[default]
    Terminate,
    /// The WarmPool goes at once and its instances are left running; their
    /// agents power them off once idle for idleSeconds and a minute.
    Orphan,
}

/// How many idle instances to keep.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new("self.min <= self.max").message("idle.min must not exceed idle.max"))]
pub struct IdleRange {
    /// Idle instances to keep: the operator launches up to this many plus the
    /// runs waiting for an instance, less those idle or booting. Required, at
    /// least 0.
    #[schemars(range(min = 0, max = 10000))]
    pub min: i32,
    /// Idle instances beyond this many plus the runs waiting are retired,
    /// longest idle first. Required, at least idle.min.
    #[schemars(range(min = 0, max = 10000))]
    pub max: i32,
}

/// How many instances to keep in the stopped reserve.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new("!has(self.max) || self.min <= self.max").message("stopped.min must not exceed stopped.max"))]
pub struct StoppedRange {
    /// Stopped instances to keep: the operator stops idle instances beyond
    /// idle.min, or launches for the reserve, up to this many. Required, at
    /// least 0.
    #[schemars(range(min = 0, max = 10000))]
    pub min: i32,
    /// Stopped instances beyond this many are terminated. Default stopped.min.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10000))]
    pub max: Option<i32>,
}

impl StoppedRange {
    /// `max`, or `min` when it is not set.
    pub fn max_or_min(&self) -> i32 {
        self.max.unwrap_or(self.min)
    }
}

/// A period of the day or week with an idle range of its own.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct IdleSchedule {
    /// When the period starts and how long it lasts.
    #[serde(flatten)]
    pub period: Period,
    /// The idle range while a period is under way. Required.
    pub idle: IdleRange,
}

/// How instances are launched: a launch template, or an image with types,
/// subnets and security groups.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Launch {
    /// The EC2 launch template to launch from; the fields below, where set,
    /// override it. Required unless imageId, instanceTypes and subnetIds are
    /// all set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_template: Option<LaunchTemplateRef>,
    /// The AMI to launch, overriding the launch template's. Required without a
    /// launchTemplate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// Instance types, tried in order when one has no capacity (each in every
    /// subnet before the next type). Required without a launchTemplate; empty:
    /// the template's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instance_types: Vec<String>,
    /// Subnets to launch into, tried in order for each instance type. Required
    /// without a launchTemplate; empty: the template's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnet_ids: Vec<String>,
    /// Security group ids for the instances, overriding the launch template's.
    /// Empty: the template's, or else the VPC's default group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_group_ids: Vec<String>,
    /// The IAM instance profile for the instances, by name or by ARN (a value
    /// starting arn:), overriding the launch template's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iam_instance_profile: Option<String>,
    /// More tags for the instances. No key may start with orca.dev/: those
    /// are the operator's own (whose an instance is, and the class and
    /// namespace a class's limits count it in).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(validation = Rule::new("self.all(k, !k.startsWith('orca.dev/'))").message("launch.tags: keys under orca.dev/ are the operator's own"))]
    pub tags: BTreeMap<String, String>,
    /// Where the image keeps orca-pool-agent. Default
    /// /usr/local/bin/orca-pool-agent.
    #[serde(default = "default_agent_path")]
    pub agent_path: String,
    /// What runs a handed-out run on the instance: a shell command (sh -c) with
    /// ORCA_RUN, ORCA_START, ORCA_HEAD, ORCA_NEW_CODE and ORCA_INSTANCE in its
    /// environment, besides ORCA_DATABASE_URL and ORCA_POOL. Required,
    /// non-empty (with a classRef, the class's).
    // Defaulted to "" in the schema, as `region` is.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("default" = ""))]
    pub run_command: String,
    /// What capacity to launch: onDemand (the default), spot, or
    /// spotThenOnDemand (spot in every instance type and subnet first, then
    /// on-demand in each once spot has no capacity there). An offering
    /// without capacity is skipped for three minutes, spot or not.
    #[serde(default, skip_serializing_if = "CapacityType::is_on_demand")]
    pub capacity_type: CapacityType,
    /// A file on the image holding the database URL, which the user-data script
    /// reads; databaseUrlIn is then not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database_url_file: Option<String>,
    /// How the instances get the database URL when no databaseUrlFile is set.
    /// parameter (the default): the operator keeps it in the SSM Parameter
    /// Store SecureString /orca/CLUSTER/NAMESPACE/SCHEDULER/database-url of the
    /// pool's region, and the user-data names only the parameter, which the
    /// agent reads with the instance's role (docs/operations.md#aws-permissions).
    /// userData: the URL, password included, is written into the user-data,
    /// readable by anyone allowed ec2:DescribeInstanceAttribute and by every
    /// process on the instance; a Warning Event says so at each launch.
    /// Changing it replaces no instance: new launches use the new way.
    #[serde(default, skip_serializing_if = "DatabaseUrlIn::is_parameter")]
    pub database_url_in: DatabaseUrlIn,
}

/// Where the user-data gets the database URL from.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum DatabaseUrlIn {
    /// An SSM Parameter Store SecureString the operator keeps.
    #[default]
    Parameter,
    /// The user-data itself, password included.
    UserData,
}

impl DatabaseUrlIn {
    fn is_parameter(&self) -> bool {
        *self == DatabaseUrlIn::Parameter
    }
}

impl Default for Launch {
    fn default() -> Self {
        Launch {
            launch_template: None,
            image_id: None,
            instance_types: Vec::new(),
            subnet_ids: Vec::new(),
            security_group_ids: Vec::new(),
            iam_instance_profile: None,
            tags: BTreeMap::new(),
            agent_path: default_agent_path(),
            run_command: String::new(),
            capacity_type: CapacityType::OnDemand,
            database_url_file: None,
            database_url_in: DatabaseUrlIn::Parameter,
        }
    }
}

/// The agent's path on the image when none is given.
pub const DEFAULT_AGENT_PATH: &str = "/usr/local/bin/orca-pool-agent";

/// On-demand or spot capacity.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum CapacityType {
    #[default]
    OnDemand,
    Spot,
    SpotThenOnDemand,
}

impl CapacityType {
    /// Its name in the spec.
    pub fn as_str(self) -> &'static str {
        match self {
            CapacityType::OnDemand => "onDemand",
            CapacityType::Spot => "spot",
            CapacityType::SpotThenOnDemand => "spotThenOnDemand",
        }
    }

    fn is_on_demand(&self) -> bool {
        *self == CapacityType::OnDemand
    }
}

fn default_agent_path() -> String {
    DEFAULT_AGENT_PATH.into()
}

/// A launch template, by id or by name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new("has(self.id) != has(self.name)").message("launchTemplate needs exactly one of id and name"))]
pub struct LaunchTemplateRef {
    /// The launch template's id. Exactly one of id and name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The launch template's name. Exactly one of id and name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A version number, $Latest or $Default. Default $Default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// What the last pass of the pool saw and did.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WarmPoolStatus {
    /// The metadata.generation of the spec this status was written for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Instances booting: launched, their agents not reported yet.
    #[serde(default)]
    pub launching: i32,
    /// Instances idle, waiting for a run, after the last pass's retirements.
    #[serde(default)]
    pub idle: i32,
    /// Instances serving a run.
    #[serde(default)]
    pub busy: i32,
    /// Instances in the stopped reserve (stopped, or being stopped).
    #[serde(default)]
    pub stopped: i32,
    /// Instances shutting down, or being retired by the last pass.
    #[serde(default)]
    pub terminating: i32,
    /// Instances whose launch spec is out of date, being replaced
    /// (spec.disruption).
    #[serde(default, skip_serializing_if = "is_zero32")]
    pub drifted: i32,
    /// How many RunInstances batches the pool has had answered. Each batch's
    /// ClientToken is made from the pool's uid and this count, so a call retried
    /// after a lost answer (or by the next operator replica) repeats its token
    /// and a new batch never does.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub launch_batches: i64,
    /// Instance types and subnets without capacity just now, each skipped for
    /// three minutes. Kept here, so an operator restarted meanwhile skips them
    /// too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_errors: Vec<CapacityError>,
    /// The Secret (and key) holding the database URL the pool last ran on:
    /// its Scheduler's. A WarmPool being deleted after its Scheduler still
    /// reaches its database through it, to end its rows race-free before it
    /// terminates its instances; the operator keeps that Secret (finalizer
    /// orca.dev/in-use) while this names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database_secret: Option<super::scheduler::SecretKeyRef>,
    /// Where the pool ran before its spec.scheduler, region or endpoint (or
    /// its Scheduler's database) changed, while instances launched there are
    /// left: they are drained and terminated as on the WarmPool's deletion
    /// (idle ones at once, busy ones after their run, at most
    /// drainTimeoutSeconds after the change), never left behind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retiring: Vec<FormerPlace>,
    /// Where the pool's loop runs (its Scheduler, region, endpoint and
    /// database Secret, and since when): an operator restarted after the
    /// spec moved the pool, or while it is being deleted, still drains and
    /// tears down the place the instances are in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub place: Option<FormerPlace>,
    /// With a classRef: the region the class gave the pool's instances, so
    /// that a deletion after the class's still finds and terminates them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_region: Option<String>,
    /// With a classRef: the class's EC2 endpoint, if not the region's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_endpoint: Option<String>,
    /// The schedule whose period is under way (its place in spec.schedules, its
    /// cron expression, the idle range and when the period ends); none while
    /// spec.idle holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_schedule: Option<String>,
    /// With spec.forecast: the idle floor of the next hours, and how many
    /// weeks of history it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forecast: Option<super::forecast::ForecastStatus>,
    /// With spec.objective: the share of the last hour's runs that started
    /// within the target, and what the pool keeps for it and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objective: Option<super::objective::ObjectiveStatus>,
    /// Instance-seconds the operator has seen, by instance type and capacity
    /// type (onDemand or spot): idle, busy, stopped (EBS only), and booting
    /// (booting, starting, being stopped or retired). What the pool cost.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instance_seconds: Vec<InstanceSeconds>,
    /// Runs handed an instance, by where it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs_served: Option<RunsServed>,
    /// How long runs waited for an instance over the last hour, by where it
    /// came from (idle, reserve, cold).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_to_start: Option<super::time_to_start::TimeToStart>,
    /// The instances one by one (at most 100; the counts above count all):
    /// state, age, type, uses and whether drifted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<super::roster::PoolInstance>,
    /// The conditions Available (at least idle.min instances idle), Progressing
    /// (instances booting) and Degraded (the first warning of the last pass, or
    /// why the pool cannot run); while the WarmPool is being deleted, Terminating
    /// (how many instances are left).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

fn is_zero32(n: &i32) -> bool {
    *n == 0
}

/// Where a pool runs, or ran before a change of its spec.scheduler, region
/// or endpoint, or of its Scheduler's database.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FormerPlace {
    /// The Scheduler whose instances they are (the orca.dev/scheduler tag).
    pub scheduler: String,
    /// The AWS region the instances run in.
    pub region: String,
    /// The EC2 endpoint the pool used there, if not the region's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The Secret holding the database the instances report to.
    pub database_secret: super::scheduler::SecretKeyRef,
    /// When the pool moved away (RFC 3339): the drain time-out counts from
    /// it. (Of status.place: when the pool began there.)
    pub since: String,
}

/// Instance-seconds of one instance type and capacity type.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceSeconds {
    /// The instance type; empty for the launch template's.
    pub instance_type: String,
    /// onDemand or spot.
    pub capacity_type: String,
    /// Running with an idle row, waiting for a run.
    pub idle: i64,
    /// Running a run.
    pub busy: i64,
    /// Stopped in the reserve (or stopping): no compute bill.
    pub stopped: i64,
    /// Running but neither idle nor busy: booting, started from the reserve
    /// and not back yet, being stopped or retired.
    pub booting: i64,
}

/// Runs handed an instance, by where it came from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunsServed {
    /// An instance already idle: the run did not wait.
    pub idle: i64,
    /// An instance started from the stopped reserve.
    pub reserve: i64,
    /// After the run waited: a cold launch (or an instance that went idle
    /// meanwhile).
    pub cold: i64,
}

/// An offering (instance type in a subnet) EC2 had no capacity for.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityError {
    /// The instance type; empty for the launch template's.
    pub instance_type: String,
    /// The subnet; empty for the launch template's.
    pub subnet: String,
    /// true: spot capacity there (on-demand may still have some).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub spot: bool,
    /// EC2's error code, e.g. InsufficientInstanceCapacity.
    pub code: String,
    /// Until when this offering is skipped (RFC 3339).
    pub until: String,
}
