//! A WarmPool with a class: the spec its loop runs on, made from the
//! class's region, endpoint and launch and the pool's own choices, or why
//! the pool may not run as it is written (`ClassDenied`,
//! `NamespaceNotAllowed`). Pure: the controller reads the class and the
//! namespace's labels, this decides.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use crate::crd::{
    CapacityType, OnDelete, PoolLimits, WarmPoolClassSpec, WarmPoolSpec, DEFAULT_AGENT_PATH,
};

/// Why a pool may not run on its class; `reason` is the `Degraded` reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    reason: &'static str,
    message: String,
}

impl Refusal {
    /// The `Degraded` reason, e.g. `ClassDenied`.
    pub fn reason(&self) -> &'static str {
        self.reason
    }

    /// What the pool's editor is told, naming what is wrong.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Of its parts, as the fields say.
    pub fn new(reason: &'static str, message: String) -> Self {
        Refusal { reason, message }
    }

    fn denied(message: String) -> Self {
        Refusal {
            reason: "ClassDenied",
            message,
        }
    }
}

/// A field a class owns, which a pool with a classRef may not set: its
/// path in the WarmPool, whether a pool's spec sets it, and the same test
/// in CEL over `object` (the WarmPool), which the chart's admission policy
/// is rendered from ([`super::admission::admission_rules`]), so the two
/// cannot differ.
pub struct OwnedField {
    path: &'static str,
    set: fn(&WarmPoolSpec) -> bool,
    cel: &'static str,
}

impl OwnedField {
    /// The field's path in a WarmPool's spec, e.g. `spec.launch.imageId`.
    pub fn path(&self) -> &'static str {
        self.path
    }

    /// The CEL expression, over `object`, that is true when a WarmPool sets it.
    pub fn cel(&self) -> &'static str {
        self.cel
    }

    /// Whether `pool` sets the field.
    pub fn set_in(&self, pool: &WarmPoolSpec) -> bool {
        (self.set)(pool)
    }
}

/// Every field a class owns, in the order the messages name them.
pub const CLASS_OWNED: &[OwnedField] = &[
    OwnedField {
        path: "spec.region",
        set: |p| !p.region.is_empty(),
        cel: "has(object.spec.region) && object.spec.region != ''",
    },
    OwnedField {
        path: "spec.endpoint",
        set: |p| p.endpoint.is_some(),
        cel: "has(object.spec.endpoint)",
    },
    OwnedField {
        path: "spec.ssmEndpoint",
        set: |p| p.ssm_endpoint.is_some(),
        cel: "has(object.spec.ssmEndpoint)",
    },
    OwnedField {
        path: "spec.launch.launchTemplate",
        set: |p| p.launch.launch_template.is_some(),
        cel: "has(object.spec.launch) && has(object.spec.launch.launchTemplate)",
    },
    OwnedField {
        path: "spec.launch.imageId",
        set: |p| p.launch.image_id.is_some(),
        cel: "has(object.spec.launch) && has(object.spec.launch.imageId)",
    },
    OwnedField {
        path: "spec.launch.subnetIds",
        set: |p| !p.launch.subnet_ids.is_empty(),
        cel: "has(object.spec.launch) && has(object.spec.launch.subnetIds) && size(object.spec.launch.subnetIds) > 0",
    },
    OwnedField {
        path: "spec.launch.securityGroupIds",
        set: |p| !p.launch.security_group_ids.is_empty(),
        cel: "has(object.spec.launch) && has(object.spec.launch.securityGroupIds) && size(object.spec.launch.securityGroupIds) > 0",
    },
    OwnedField {
        path: "spec.launch.iamInstanceProfile",
        set: |p| p.launch.iam_instance_profile.is_some(),
        cel: "has(object.spec.launch) && has(object.spec.launch.iamInstanceProfile)",
    },
    OwnedField {
        path: "spec.launch.tags",
        set: |p| !p.launch.tags.is_empty(),
        cel: "has(object.spec.launch) && has(object.spec.launch.tags) && size(object.spec.launch.tags) > 0",
    },
    OwnedField {
        path: "spec.launch.agentPath",
        set: |p| p.launch.agent_path != DEFAULT_AGENT_PATH,
        cel: "has(object.spec.launch) && has(object.spec.launch.agentPath) && object.spec.launch.agentPath != '/usr/local/bin/orca-pool-agent'",
    },
    OwnedField {
        path: "spec.launch.runCommand",
        set: |p| !p.launch.run_command.is_empty(),
        cel: "has(object.spec.launch) && has(object.spec.launch.runCommand) && object.spec.launch.runCommand != ''",
    },
    OwnedField {
        path: "spec.launch.databaseUrlFile",
        set: |p| p.launch.database_url_file.is_some(),
        cel: "has(object.spec.launch) && has(object.spec.launch.databaseUrlFile)",
    },
    OwnedField {
        path: "spec.launch.databaseUrlIn",
        set: |p| p.launch.database_url_in != Default::default(),
        cel: "has(object.spec.launch) && has(object.spec.launch.databaseUrlIn) && object.spec.launch.databaseUrlIn != 'parameter'",
    },
];

/// The fields a class owns that a pool with a classRef sets: each with its
/// path in the WarmPool. Empty when the pool sets none.
pub fn owned_fields_set(pool: &WarmPoolSpec) -> Vec<&'static str> {
    CLASS_OWNED
        .iter()
        .filter(|f| f.set_in(pool))
        .map(|f| f.path)
        .collect()
}

/// A lifetime a class bounds ([`PoolLimits`]): the pool's field, the
/// class's bound, and each one's name.
pub(super) struct Lifetime {
    field: &'static str,
    value: fn(&WarmPoolSpec) -> i64,
    limit: &'static str,
    max: fn(&PoolLimits) -> Option<i64>,
}

impl Lifetime {
    /// The pool's field (`idleSeconds`).
    pub(super) fn field(&self) -> &'static str {
        self.field
    }

    /// The class's bound of it, under `poolLimits`.
    pub(super) fn limit(&self) -> &'static str {
        self.limit
    }
}

/// Every lifetime a class bounds.
pub(super) const LIFETIMES: &[Lifetime] = &[
    Lifetime {
        field: "idleSeconds",
        value: |p| p.idle_seconds,
        limit: "maxIdleSeconds",
        max: |l| l.max_idle_seconds,
    },
    Lifetime {
        field: "bootTimeoutSeconds",
        value: |p| p.boot_timeout_seconds,
        limit: "maxBootTimeoutSeconds",
        max: |l| l.max_boot_timeout_seconds,
    },
    Lifetime {
        field: "drainTimeoutSeconds",
        value: |p| p.drain_timeout_seconds,
        limit: "maxDrainTimeoutSeconds",
        max: |l| l.max_drain_timeout_seconds,
    },
];

/// Why `pool` asks more of class `name` than its `poolLimits` allow, if
/// it does.
fn beyond_limits(name: &str, limits: &PoolLimits, pool: &WarmPoolSpec) -> Option<String> {
    for l in LIFETIMES {
        if let Some(max) = (l.max)(limits) {
            let value = (l.value)(pool);
            if value > max {
                return Some(format!(
                    "spec.{}: {value} is over WarmPoolClass {name}'s poolLimits.{} ({max})",
                    l.field, l.limit
                ));
            }
        }
    }
    (!limits.orphan && pool.on_delete == OnDelete::Orphan).then(|| {
        format!(
            "spec.onDelete: Orphan is not allowed by WarmPoolClass {name} (poolLimits.orphan: \
             false): a pool's instances are terminated with it"
        )
    })
}

/// How long a busy instance of `pool`, being deleted, may finish its run:
/// its `drainTimeoutSeconds` within `class`'s `poolLimits` as they are now.
/// A pool written under looser limits than its class has now is refused
/// (it runs no loop), but torn down all the same when deleted: by the
/// class's bound, not by the spec it refuses.
pub fn drain_within(class: &WarmPoolClassSpec, pool: &WarmPoolSpec) -> i64 {
    let max = class
        .pool_limits
        .as_ref()
        .and_then(|l| l.max_drain_timeout_seconds);
    max.map_or(pool.drain_timeout_seconds, |max| {
        pool.drain_timeout_seconds.min(max)
    })
}

/// Whether a pool of `class` may leave its instances running when it is
/// deleted (`onDelete: Orphan`).
pub fn may_orphan(class: &WarmPoolClassSpec) -> bool {
    class.pool_limits.as_ref().is_none_or(|l| l.orphan)
}

/// The instance profile a pool of `namespace` launches with: the class's,
/// `{namespace}` in it replaced by the namespace — a role per team, so
/// that one team's instances cannot read another's database URL.
pub fn profile_for(profile: &str, namespace: &str) -> String {
    profile.replace(NAMESPACE_PLACEHOLDER, namespace)
}

/// What a class's `launch.iamInstanceProfile` may say in place of the
/// pool's namespace.
pub const NAMESPACE_PLACEHOLDER: &str = "{namespace}";

/// The namespace a pool is in, with its labels.
pub struct Tenant<'a> {
    name: &'a str,
    labels: &'a BTreeMap<String, String>,
}

impl<'a> Tenant<'a> {
    /// Of its parts, as the fields say.
    pub fn new(name: &'a str, labels: &'a BTreeMap<String, String>) -> Self {
        Tenant { name, labels }
    }
}

/// The spec `pool` (of class `name`, in namespace `tenant`) runs on: the
/// class's region, endpoint and launch (its instance profile made the
/// namespace's, [`profile_for`]), the pool's instance types (a subset of
/// the class's, in the pool's order) and capacity type (the pool's if the
/// class allows it — onDemand, the default, falls back to the class's
/// first — else refused), and everything else the pool's, within the
/// class's `poolLimits`.
pub fn resolve(
    name: &str,
    class: &WarmPoolClassSpec,
    tenant: &Tenant<'_>,
    pool: &WarmPoolSpec,
) -> Result<WarmPoolSpec, Refusal> {
    let labels = tenant.labels;
    if let Some(selector) = &class.namespaces {
        if !selects(selector, labels) {
            return Err(Refusal {
                reason: "NamespaceNotAllowed",
                message: format!(
                    "WarmPoolClass {name} does not admit this namespace (its spec.namespaces)"
                ),
            });
        }
    }
    let owned = owned_fields_set(pool);
    if !owned.is_empty() {
        return Err(Refusal::denied(format!(
            "{} may not be set with classRef: WarmPoolClass {name} holds it",
            owned.join(", ")
        )));
    }
    if let Some(why) = class
        .pool_limits
        .as_ref()
        .and_then(|l| beyond_limits(name, l, pool))
    {
        return Err(Refusal::denied(why));
    }
    let wanted = &pool.launch.instance_types;
    if let Some(other) = wanted.iter().find(|t| !class.instance_types.contains(t)) {
        return Err(Refusal::denied(format!(
            "spec.launch.instanceTypes: {other} is not one of WarmPoolClass {name}'s instanceTypes ({})",
            list(&class.instance_types)
        )));
    }
    let capacity = pool.launch.capacity_type;
    let capacity = if class.capacity_types.contains(&capacity) {
        capacity
    } else if capacity == CapacityType::OnDemand {
        *class
            .capacity_types
            .first()
            .unwrap_or(&CapacityType::OnDemand)
    } else {
        return Err(Refusal::denied(format!(
            "spec.launch.capacityType: {} is not one of WarmPoolClass {name}'s capacityTypes ({})",
            capacity.as_str(),
            class
                .capacity_types
                .iter()
                .map(|c| c.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    if pool.stopped.is_some() && capacity != CapacityType::OnDemand {
        return Err(Refusal::denied(format!(
            "spec.stopped needs capacity type onDemand; WarmPoolClass {name} gives {}",
            capacity.as_str()
        )));
    }
    let mut launch = class.launch.clone();
    launch.iam_instance_profile = launch
        .iam_instance_profile
        .map(|p| profile_for(&p, tenant.name));
    launch.instance_types = if wanted.is_empty() {
        class.instance_types.clone()
    } else {
        // Each once, in the pool's order: a type listed again adds no
        // offering, only work to every pass (the class's book, which every
        // pool of the operator shares, is asked once per entry).
        let mut once = std::collections::HashSet::new();
        wanted
            .iter()
            .filter(|t| once.insert(t.as_str()))
            .cloned()
            .collect()
    };
    launch.capacity_type = capacity;
    Ok(WarmPoolSpec {
        region: class.region.clone(),
        endpoint: class.endpoint.clone(),
        ssm_endpoint: class.ssm_endpoint.clone(),
        launch,
        ..pool.clone()
    })
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "none: the launch template's".into()
    } else {
        items.join(", ")
    }
}

/// Whether `selector` selects an object labelled `labels`, as the API
/// server's label selectors do.
pub fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_match = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    labels_match
        && selector
            .match_expressions
            .iter()
            .flatten()
            .all(|e| expression(e, labels))
}

fn expression(e: &LabelSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&e.key);
    let values = e.values.as_deref().unwrap_or_default();
    match e.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        // The API server refuses any other operator; select nothing.
        _ => false,
    }
}

#[cfg(test)]
#[path = "class_tests.rs"]
mod tests;
