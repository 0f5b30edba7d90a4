//! A WarmPool with a class: the spec its loop runs on, made from the
//! class's region, endpoint and launch and the pool's own choices, or why
//! the pool may not run as it is written (`ClassDenied`,
//! `NamespaceNotAllowed`). Pure: the controller reads the class and the
//! namespace's labels, this decides.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use crate::crd::{CapacityType, WarmPoolClassSpec, WarmPoolSpec, DEFAULT_AGENT_PATH};

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

/// The fields a class owns that a pool with a classRef sets: each with its
/// path in the WarmPool. Empty when the pool sets none.
pub fn owned_fields_set(pool: &WarmPoolSpec) -> Vec<&'static str> {
    let l = &pool.launch;
    [
        (!pool.region.is_empty(), "spec.region"),
        (pool.endpoint.is_some(), "spec.endpoint"),
        (l.launch_template.is_some(), "spec.launch.launchTemplate"),
        (l.image_id.is_some(), "spec.launch.imageId"),
        (!l.subnet_ids.is_empty(), "spec.launch.subnetIds"),
        (
            !l.security_group_ids.is_empty(),
            "spec.launch.securityGroupIds",
        ),
        (
            l.iam_instance_profile.is_some(),
            "spec.launch.iamInstanceProfile",
        ),
        (!l.tags.is_empty(), "spec.launch.tags"),
        (l.agent_path != DEFAULT_AGENT_PATH, "spec.launch.agentPath"),
        (!l.run_command.is_empty(), "spec.launch.runCommand"),
        (l.database_url_file.is_some(), "spec.launch.databaseUrlFile"),
        (
            l.database_url_in != Default::default(),
            "spec.launch.databaseUrlIn",
        ),
    ]
    .into_iter()
    .filter_map(|(set, field)| set.then_some(field))
    .collect()
}

/// The spec `pool` (of class `name`, in a namespace labelled `labels`)
/// runs on: the class's region, endpoint and launch, the pool's instance
/// types (a subset of the class's, in the pool's order) and capacity type
/// (the pool's if the class allows it — onDemand, the default, falls back
/// to the class's first — else refused), and everything else the pool's.
pub fn resolve(
    name: &str,
    class: &WarmPoolClassSpec,
    labels: &BTreeMap<String, String>,
    pool: &WarmPoolSpec,
) -> Result<WarmPoolSpec, Refusal> {
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
    launch.instance_types = if wanted.is_empty() {
        class.instance_types.clone()
    } else {
        wanted.clone()
    };
    launch.capacity_type = capacity;
    Ok(WarmPoolSpec {
        region: class.region.clone(),
        endpoint: class.endpoint.clone(),
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

    /// `p` in team a's namespace is denied by the class, the message
    /// beginning with `fields` (the fields it may not set).
    #[track_caller]
    fn denied(p: &WarmPoolSpec, fields: &str) {
        let e = resolve("shared", &class(), &team("a"), p).unwrap_err();
        assert_eq!(e.reason, "ClassDenied");
        assert!(e.message.starts_with(fields), "{e:?}");
    }

    #[test]
    fn a_pool_runs_on_the_class_launch_with_its_own_idle_range() {
        let spec = resolve("shared", &class(), &team("a"), &pool()).expect("admitted");
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
        let spec = resolve("shared", &class(), &team("a"), &p).expect("admitted");
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
        let e = resolve("shared", &class(), &team("b"), &pool()).unwrap_err();
        assert_eq!(e.reason, "NamespaceNotAllowed");
        let mut open = class();
        open.namespaces = None;
        assert!(resolve("shared", &open, &team("b"), &pool()).is_ok());
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
