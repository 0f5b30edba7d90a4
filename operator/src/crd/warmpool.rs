//! The `WarmPool`: EC2 instances kept warm for a Scheduler's runs
//! (SPEC §6, seed 000).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// EC2 instances whose agents wait, idle, for the runs a Scheduler hands
/// them.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "orca.dev",
    version = "v1alpha1",
    kind = "WarmPool",
    namespaced,
    status = "WarmPoolStatus",
    shortname = "wpool",
    category = "orca",
    printcolumn = r#"{"name":"Scheduler","type":"string","jsonPath":".spec.scheduler"}"#,
    printcolumn = r#"{"name":"Idle","type":"integer","jsonPath":".status.idle"}"#,
    printcolumn = r#"{"name":"Busy","type":"integer","jsonPath":".status.busy"}"#,
    printcolumn = r#"{"name":"Launching","type":"integer","jsonPath":".status.launching"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new("self.idle.max <= self.maxInstances").message("idle.max must not exceed maxInstances"))]
#[serde(rename_all = "camelCase")]
pub struct WarmPoolSpec {
    /// The Scheduler (same namespace) whose database the pool uses.
    #[x_kube(validation = Rule::new("self.size() > 0").message("scheduler must name a Scheduler"))]
    pub scheduler: String,
    #[x_kube(validation = Rule::new("self.size() > 0").message("region must not be empty"))]
    pub region: String,
    /// Another EC2 endpoint (VPC endpoints; tests use moto's server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    pub idle: IdleRange,
    /// Never more instances than this, booting, idle and busy together.
    #[schemars(range(min = 1))]
    pub max_instances: i32,
    /// How long an idle agent waits for a run before it powers off
    /// (`pool-next`'s `seconds`).
    #[serde(default = "default_idle_seconds")]
    #[schemars(range(min = 1))]
    pub idle_seconds: i64,
    /// Runs an instance serves before it is retired; 0 is unlimited.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub max_uses: i32,
    /// An instance whose agent has not reported by then is terminated.
    #[serde(default = "default_boot_timeout")]
    #[schemars(range(min = 1))]
    pub boot_timeout_seconds: i64,
    pub launch: Launch,
    #[serde(default)]
    pub paused: bool,
}

fn default_idle_seconds() -> i64 {
    600
}
fn default_boot_timeout() -> i64 {
    300
}

/// How many idle instances to keep.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new("self.min <= self.max").message("idle.min must not exceed idle.max"))]
pub struct IdleRange {
    #[schemars(range(min = 0))]
    pub min: i32,
    #[schemars(range(min = 0))]
    pub max: i32,
}

/// How instances are launched: a launch template, or an image with types,
/// subnets and security groups.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new("has(self.launchTemplate) || (has(self.imageId) && size(self.instanceTypes) > 0 && size(self.subnetIds) > 0)").message("launch needs a launchTemplate, or an imageId with instanceTypes and subnetIds"))]
#[serde(rename_all = "camelCase")]
pub struct Launch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_template: Option<LaunchTemplateRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// Tried in order when one has no capacity.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instance_types: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnet_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_group_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iam_instance_profile: Option<String>,
    /// More tags for the instances (the ownership tags are added).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Where the image keeps `orca-pool-agent`.
    #[serde(default = "default_agent_path")]
    pub agent_path: String,
    /// What runs a handed-out run on the instance, with ORCA_RUN, ORCA_START,
    /// ORCA_HEAD, ORCA_NEW_CODE and ORCA_INSTANCE in its environment.
    #[x_kube(validation = Rule::new("self.size() > 0").message("runCommand must not be empty"))]
    pub run_command: String,
    /// A file on the image holding the database URL. Safer than the
    /// default, which puts the URL in user-data, readable by anyone with
    /// ec2:DescribeInstanceAttribute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database_url_file: Option<String>,
}

fn default_agent_path() -> String {
    "/usr/local/bin/orca-pool-agent".into()
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new("has(self.id) != has(self.name)").message("launchTemplate needs exactly one of id and name"))]
pub struct LaunchTemplateRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A version number, `$Latest` or `$Default` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WarmPoolStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub launching: i32,
    #[serde(default)]
    pub idle: i32,
    #[serde(default)]
    pub busy: i32,
    #[serde(default)]
    pub terminating: i32,
    /// Instance types and subnets without capacity just now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_errors: Vec<CapacityError>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityError {
    pub instance_type: String,
    pub subnet: String,
    /// EC2's error code, e.g. InsufficientInstanceCapacity.
    pub code: String,
    /// Until when this offering is skipped (RFC 3339).
    pub until: String,
}
