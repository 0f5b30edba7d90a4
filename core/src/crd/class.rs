//! The `WarmPoolClass`: how the platform team lets WarmPools launch — the
//! region, the network, the image, the role — which namespaces may use it,
//! and how much they may hold (docs/operations.md#warm-pool-classes).
//!
//! The class's spec and status types, each field
//! documented where the CRD's schema comes from.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::warmpool::{CapacityType, Launch};

/// Cluster-scoped and the platform team's: where and how the WarmPools that
/// name it launch, and the instances and vCPUs they may hold.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "orca.dev",
    version = "v1alpha1",
    kind = "WarmPoolClass",
    doc = "How WarmPools that name this class launch (region, endpoint, image or launch template, network, instance profile), which namespaces may use it and how many instances and vCPUs they may hold. Cluster-scoped: the platform team's.",
    status = "WarmPoolClassStatus",
    shortname = "wpclass",
    category = "orca",
    printcolumn = r#"{"name":"Region","type":"string","jsonPath":".spec.region"}"#,
    printcolumn = r#"{"name":"Pools","type":"integer","jsonPath":".status.poolCount"}"#,
    printcolumn = r#"{"name":"Instances","type":"integer","jsonPath":".status.instances"}"#,
    printcolumn = r#"{"name":"Limit","type":"integer","jsonPath":".spec.limits.instances"}"#,
    printcolumn = r#"{"name":"vCPUs","type":"integer","jsonPath":".status.vcpus"}"#,
    printcolumn = r#"{"name":"vCPU-Limit","type":"integer","jsonPath":".spec.limits.vcpus"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new("has(self.launch.launchTemplate) || (has(self.launch.imageId) && size(self.instanceTypes) > 0 && has(self.launch.subnetIds) && size(self.launch.subnetIds) > 0)").message("a class needs launch.launchTemplate, or launch.imageId with instanceTypes and launch.subnetIds"))]
#[x_kube(validation = Rule::new("!has(self.launch.instanceTypes)").message("launch.instanceTypes: a class lists its types in spec.instanceTypes"))]
#[x_kube(validation = Rule::new("!has(self.launch.capacityType)").message("launch.capacityType: a class lists its capacity types in spec.capacityTypes"))]
#[x_kube(validation = Rule::new("has(self.launch.runCommand) && size(self.launch.runCommand) > 0").message("launch.runCommand must not be empty"))]
#[x_kube(validation = Rule::new("size(self.instanceTypes) > 0 || ((!has(self.limits) || !has(self.limits.vcpus)) && (!has(self.namespaceLimits) || !has(self.namespaceLimits.vcpus)))").message("vCPU limits need instanceTypes: the vCPUs of a launch template's own type are not known"))]
#[serde(rename_all = "camelCase")]
pub struct WarmPoolClassSpec {
    /// The EC2 region its pools launch in. Required, non-empty.
    #[x_kube(validation = Rule::new("self.size() > 0").message("region must not be empty"))]
    pub region: String,
    /// Another EC2 endpoint URL, e.g. a VPC endpoint. Default: the region's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Another SSM endpoint URL (e.g. an SSM VPC endpoint), where the
    /// operator keeps each Scheduler's database URL parameter and its pools'
    /// instances read it. Default: the region's own SSM (never the EC2
    /// endpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_endpoint: Option<String>,
    /// How instances are launched and what they run: a launch template, or
    /// an image with subnets, and the security groups, instance profile,
    /// tags, agent path, database URL file and run command (the WarmPool's
    /// launch fields, but instanceTypes and capacityType, which are below).
    /// Required.
    pub launch: Launch,
    /// The instance types a pool may launch, in the order tried. A pool may
    /// name a subset (its spec.launch.instanceTypes); empty: the launch
    /// template's, and then no vCPU limit may be set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instance_types: Vec<String>,
    /// The capacity types a pool may use; the first is a pool's when it
    /// names none that is allowed. Default: onDemand alone.
    #[serde(default = "default_capacity_types")]
    #[schemars(length(min = 1))]
    pub capacity_types: Vec<CapacityType>,
    /// Which namespaces' WarmPools may use the class, by their labels.
    /// Default (unset): every namespace the operator watches; {} too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<LabelSelector>,
    /// Instances (booting, idle, busy, stopped) and vCPUs all the class's
    /// pools together may hold. Default: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ClassLimits>,
    /// The same, for the pools of each namespace together. Default: no
    /// limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_limits: Option<ClassLimits>,
    /// What a pool of the class may decide about how long its instances
    /// live: a pool that asks for more is refused (ClassDenied), by the
    /// chart's admission policy and by the operator. Default: no bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_limits: Option<PoolLimits>,
}

/// Bounds on the lifetimes a pool of the class sets for its instances:
/// each keeps an instance running (and billed) that no run may need.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolLimits {
    /// spec.idleSeconds at most: an idle instance's agent powers it off this
    /// long (and a minute) after its last run, whatever became of its pool.
    /// Unset: no bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 31536000))]
    pub max_idle_seconds: Option<i64>,
    /// spec.bootTimeoutSeconds at most. Unset: no bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 31536000))]
    pub max_boot_timeout_seconds: Option<i64>,
    /// spec.drainTimeoutSeconds at most: how long a busy instance of a
    /// deleted or moved pool may go on. Unset: no bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 31536000))]
    pub max_drain_timeout_seconds: Option<i64>,
    /// Whether a pool may leave its instances running when it is deleted
    /// (spec.onDelete Orphan). false: onDelete Orphan is refused, and a pool
    /// deleted with it is torn down as with Terminate. Default true.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub orphan: bool,
}

impl Default for PoolLimits {
    fn default() -> Self {
        PoolLimits {
            max_idle_seconds: None,
            max_boot_timeout_seconds: None,
            max_drain_timeout_seconds: None,
            orphan: true,
        }
    }
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

fn default_capacity_types() -> Vec<CapacityType> {
    vec![CapacityType::OnDemand]
}

/// A ceiling: instances, vCPUs, or both. A launch that would pass it is not
/// made; nothing already running is terminated for it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassLimits {
    /// Instances at most. Unset: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000000))]
    pub instances: Option<i64>,
    /// vCPUs at most (each instance type's, from EC2's DescribeInstanceTypes).
    /// Unset: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100000000))]
    pub vcpus: Option<i64>,
}

/// What the class's pools hold, as the leading operator last counted it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WarmPoolClassStatus {
    /// Instances all its pools hold (booting, idle, busy, stopped).
    #[serde(default)]
    pub instances: i64,
    /// Their vCPUs.
    #[serde(default)]
    pub vcpus: i64,
    /// How many WarmPools name the class.
    #[serde(default)]
    pub pool_count: i64,
    /// Each namespace with pools of the class: what it holds against
    /// spec.namespaceLimits, and its pools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<NamespaceUsage>,
    /// Ready (the class is counted) and LimitReached (a pool of the class
    /// wanted more than a limit allows just now).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// One namespace's use of a class.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceUsage {
    /// The namespace.
    pub namespace: String,
    /// Instances its pools of the class hold.
    pub instances: i64,
    /// Their vCPUs.
    pub vcpus: i64,
    /// Whether the class admits the namespace (spec.namespaces): pools of a
    /// namespace it does not admit launch nothing.
    pub allowed: bool,
    /// Its WarmPools that name the class.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<String>,
}
