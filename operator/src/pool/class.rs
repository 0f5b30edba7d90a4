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
    pub reason: &'static str,
    pub message: String,
}

impl Refusal {
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
/// is rendered from ([`admission_rules`]), so the two cannot differ.
pub struct OwnedField {
    pub path: &'static str,
    set: fn(&WarmPoolSpec) -> bool,
    pub cel: &'static str,
}

impl OwnedField {
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
struct Lifetime {
    field: &'static str,
    value: fn(&WarmPoolSpec) -> i64,
    limit: &'static str,
    max: fn(&PoolLimits) -> Option<i64>,
}

/// Every lifetime a class bounds.
const LIFETIMES: &[Lifetime] = &[
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

/// Whether a pool of `class` may leave its instances running when it is
/// deleted (`onDelete: Orphan`).
pub fn may_orphan(class: &WarmPoolClassSpec) -> bool {
    class.pool_limits.as_ref().is_none_or(|l| l.orphan)
}

/// The chart's admission rules (`charts/orca-operator/files/admission-rules.yaml`
/// holds them; a test keeps the two equal), as YAML: `classOwned`, a
/// `validations` item refusing each field a class owns, from
/// [`CLASS_OWNED`]; `poolLimits`, one refusing each lifetime beyond the
/// class's bound and an orphaning it forbids, from the table the operator
/// checks, over the class as the policy's parameter (`params`); and
/// `deletion`, one refusing each change of where a WarmPool being deleted
/// is torn down.
pub fn admission_rules() -> String {
    let rule = |expression: String, message: String| serde_json::json!({"expression": expression, "message": message, "reason": "Invalid"});
    let class_owned: Vec<_> = CLASS_OWNED
        .iter()
        .map(|f| {
            rule(
                format!("!({})", f.cel),
                format!("{} may not be set: the WarmPoolClass holds it", f.path),
            )
        })
        .collect();
    // Each class is a parameter: a rule judges only the pools naming it.
    let other = "object.spec.classRef.name != params.metadata.name || !has(params.spec.poolLimits)";
    let mut pool_limits: Vec<_> = LIFETIMES
        .iter()
        .map(|l| {
            let bound = format!("params.spec.poolLimits.{}", l.limit);
            serde_json::json!({
                "expression": format!(
                    "{other} || !has({bound}) || object.spec.{} <= {bound}",
                    l.field
                ),
                "messageExpression": format!(
                    "'spec.{}: ' + string(object.spec.{}) + ' is over WarmPoolClass ' + \
                     params.metadata.name + '\\'s poolLimits.{} (' + string({bound}) + ')'",
                    l.field, l.field, l.limit
                ),
                "reason": "Invalid",
            })
        })
        .collect();
    pool_limits.push(serde_json::json!({
        "expression": format!(
            "{other} || !has(params.spec.poolLimits.orphan) || params.spec.poolLimits.orphan \
             || !has(object.spec.onDelete) || object.spec.onDelete != 'Orphan'"
        ),
        "messageExpression": "'spec.onDelete: Orphan is not allowed by WarmPoolClass ' + \
             params.metadata.name + ' (poolLimits.orphan: false): a pool\\'s instances are \
             terminated with it'",
        "reason": "Invalid",
    }));
    let unchanged = |field: &str| {
        format!(
            "(has(object.spec.{field}) ? object.spec.{field} : '') == \
             (has(oldObject.spec.{field}) ? oldObject.spec.{field} : '')"
        )
    };
    let frozen = |field: &str| {
        format!("spec.{field} may not change while the WarmPool is being deleted: its instances are torn down where it ran")
    };
    let deletion = vec![
        rule(unchanged("scheduler"), frozen("scheduler")),
        rule(
            "has(object.spec.classRef) == has(oldObject.spec.classRef) && \
             (!has(object.spec.classRef) || object.spec.classRef.name == oldObject.spec.classRef.name)"
                .into(),
            frozen("classRef"),
        ),
        rule(unchanged("region"), frozen("region")),
        rule(unchanged("endpoint"), frozen("endpoint")),
    ];
    let rules = serde_json::json!({
        "classOwned": class_owned,
        "poolLimits": pool_limits,
        "deletion": deletion,
    });
    let yaml = serde_yaml::to_string(&rules).unwrap_or_default();
    format!(
        "# Generated by `orca-operator admission-rules` from the checks the\n\
         # operator makes of a WarmPool; do not edit.\n{yaml}"
    )
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
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
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
        wanted.clone()
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
mod tests {
    use super::*;
    use crate::crd::{IdleRange, Launch};

    fn class() -> WarmPoolClassSpec {
        serde_yaml::from_str(
            "region: eu-west-1\n\
             endpoint: http://ec2.internal\n\
             launch: {imageId: ami-1, subnetIds: [subnet-1], securityGroupIds: [sg-1], \
                      iamInstanceProfile: orca-pool-runners, runCommand: run}\n\
             instanceTypes: [t3.micro, t3.small]\n\
             capacityTypes: [onDemand, spot]\n\
             namespaces: {matchLabels: {team: a}}\n",
        )
        .expect("the class parses")
    }

    fn pool() -> WarmPoolSpec {
        serde_yaml::from_str(
            "scheduler: orca\nclassRef: {name: shared}\nidle: {min: 1, max: 2}\nmaxInstances: 5\n",
        )
        .expect("the pool parses")
    }

    fn team(t: &str) -> BTreeMap<String, String> {
        BTreeMap::from([("team".to_string(), t.to_string())])
    }

    /// `class` for `p` in namespace `ns` labelled `team=<t>`.
    fn resolve_in(
        class: &WarmPoolClassSpec,
        ns: &str,
        t: &str,
        p: &WarmPoolSpec,
    ) -> Result<WarmPoolSpec, Refusal> {
        let labels = team(t);
        let tenant = Tenant {
            name: ns,
            labels: &labels,
        };
        resolve("shared", class, &tenant, p)
    }

    /// `p` in team a's namespace is denied by the class, the message
    /// beginning with `fields` (the fields it may not set).
    #[track_caller]
    fn denied(p: &WarmPoolSpec, fields: &str) {
        let e = resolve_in(&class(), "team-a", "a", p).unwrap_err();
        assert_eq!(e.reason, "ClassDenied");
        assert!(e.message.starts_with(fields), "{e:?}");
    }

    #[test]
    fn a_pool_runs_on_the_class_launch_with_its_own_idle_range() {
        let spec = resolve_in(&class(), "team-a", "a", &pool()).expect("admitted");
        assert_eq!(spec.region, "eu-west-1");
        assert_eq!(spec.endpoint.as_deref(), Some("http://ec2.internal"));
        assert_eq!(spec.launch.image_id.as_deref(), Some("ami-1"));
        assert_eq!(spec.launch.instance_types, ["t3.micro", "t3.small"]);
        assert_eq!(spec.launch.capacity_type, CapacityType::OnDemand);
        assert_eq!(spec.idle, IdleRange { min: 1, max: 2 });
    }

    #[test]
    fn a_pool_narrows_the_types_and_picks_an_allowed_capacity_type() {
        let mut p = pool();
        p.launch.instance_types = vec!["t3.small".into()];
        p.launch.capacity_type = CapacityType::Spot;
        let spec = resolve_in(&class(), "team-a", "a", &p).expect("admitted");
        assert_eq!(spec.launch.instance_types, ["t3.small"]);
        assert_eq!(spec.launch.capacity_type, CapacityType::Spot);
    }

    #[test]
    fn a_type_or_capacity_type_beyond_the_class_is_denied_naming_the_field() {
        let mut p = pool();
        p.launch.instance_types = vec!["p5.48xlarge".into()];
        denied(&p, "spec.launch.instanceTypes: p5.48xlarge");
        let mut p = pool();
        p.launch.capacity_type = CapacityType::SpotThenOnDemand;
        denied(&p, "spec.launch.capacityType");
    }

    #[test]
    fn every_field_the_class_owns_is_denied_by_name() {
        let mut p = pool();
        p.region = "us-east-1".into();
        p.launch = Launch {
            iam_instance_profile: Some("orca-pool-team-b".into()),
            ..Launch::default()
        };
        denied(&p, "spec.region, spec.launch.iamInstanceProfile");
    }

    #[test]
    fn a_namespace_the_class_does_not_select_is_not_allowed() {
        let e = resolve_in(&class(), "team-b", "b", &pool()).unwrap_err();
        assert_eq!(e.reason, "NamespaceNotAllowed");
        let mut open = class();
        open.namespaces = None;
        assert!(resolve_in(&open, "team-b", "b", &pool()).is_ok());
    }

    #[test]
    fn a_lifetime_beyond_the_class_bound_is_denied_naming_field_and_limit() {
        let mut bounded = class();
        bounded.pool_limits = Some(PoolLimits {
            max_idle_seconds: Some(3600),
            max_boot_timeout_seconds: Some(600),
            max_drain_timeout_seconds: Some(3600),
            orphan: false,
        });
        let within = resolve_in(&bounded, "team-a", "a", &pool());
        assert!(within.is_ok(), "the defaults are within: {within:?}");
        type Case = (fn(&mut WarmPoolSpec), &'static str);
        let cases: [Case; 4] = [
            (
                |p| p.idle_seconds = 31_536_000,
                "spec.idleSeconds: 31536000 is over WarmPoolClass shared's poolLimits.maxIdleSeconds (3600)",
            ),
            (
                |p| p.boot_timeout_seconds = 601,
                "spec.bootTimeoutSeconds: 601 is over WarmPoolClass shared's poolLimits.maxBootTimeoutSeconds (600)",
            ),
            (
                |p| p.drain_timeout_seconds = 7200,
                "spec.drainTimeoutSeconds: 7200 is over WarmPoolClass shared's poolLimits.maxDrainTimeoutSeconds (3600)",
            ),
            (
                |p| p.on_delete = OnDelete::Orphan,
                "spec.onDelete: Orphan is not allowed by WarmPoolClass shared",
            ),
        ];
        for (change, said) in cases {
            let mut p = pool();
            change(&mut p);
            let e = resolve_in(&bounded, "team-a", "a", &p).unwrap_err();
            assert_eq!(e.reason, "ClassDenied");
            assert!(e.message.starts_with(said), "{e:?}");
            // A class without the bound admits it.
            assert!(resolve_in(&class(), "team-a", "a", &p).is_ok(), "{said}");
        }
        assert!(!may_orphan(&bounded));
        assert!(may_orphan(&class()));
    }

    #[test]
    fn each_namespace_launches_with_its_own_profile() {
        let mut per_team = class();
        per_team.launch.iam_instance_profile = Some("orca-pool-{namespace}".into());
        let a = resolve_in(&per_team, "team-a", "a", &pool()).unwrap();
        assert_eq!(
            a.launch.iam_instance_profile.as_deref(),
            Some("orca-pool-team-a")
        );
        let mut open = per_team.clone();
        open.namespaces = None;
        let b = resolve_in(&open, "team-b", "b", &pool()).unwrap();
        assert_eq!(
            b.launch.iam_instance_profile.as_deref(),
            Some("orca-pool-team-b")
        );
        // One profile for all, as written.
        let shared = resolve_in(&class(), "team-a", "a", &pool()).unwrap();
        assert_eq!(
            shared.launch.iam_instance_profile.as_deref(),
            Some("orca-pool-runners")
        );
    }

    #[test]
    fn the_admission_rules_refuse_each_owned_field_and_lifetime_by_name() {
        let rules: serde_json::Value =
            serde_yaml::from_str(&admission_rules()).expect("the rules are YAML");
        let owned = rules["classOwned"].as_array().expect("classOwned");
        assert_eq!(owned.len(), CLASS_OWNED.len());
        for (rule, f) in owned.iter().zip(CLASS_OWNED) {
            assert_eq!(
                rule["message"].as_str(),
                Some(format!("{} may not be set: the WarmPoolClass holds it", f.path).as_str())
            );
        }
        let limits = rules["poolLimits"].as_array().expect("poolLimits");
        assert_eq!(limits.len(), LIFETIMES.len() + 1);
        for l in LIFETIMES {
            assert!(
                limits
                    .iter()
                    .any(|r| r["expression"]
                        .as_str()
                        .is_some_and(|e| e.contains(&format!("object.spec.{}", l.field))
                            && e.contains(l.limit))),
                "{}",
                l.field
            );
        }
        assert_eq!(rules["deletion"].as_array().map(Vec::len), Some(4));
    }

    #[test]
    fn selectors_follow_the_api_servers_operators() {
        let sel: LabelSelector = serde_yaml::from_str(
            "matchExpressions: [{key: team, operator: In, values: [a, b]}, \
             {key: frozen, operator: DoesNotExist}]",
        )
        .unwrap();
        assert!(selects(&sel, &team("b")));
        assert!(!selects(&sel, &team("c")));
        let mut frozen = team("a");
        frozen.insert("frozen".into(), "yes".into());
        assert!(!selects(&sel, &frozen));
        assert!(selects(&LabelSelector::default(), &BTreeMap::new()));
    }
}
