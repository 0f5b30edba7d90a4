//! Tenancy: the operator reads WarmPoolClasses and Namespaces; a
//! namespace's editors and viewers reach Schedulers and WarmPools through
//! aggregated roles, never WarmPoolClasses' writes; the admission policy
//! covers the watched namespaces and spares the operator's own writes.

use super::rbac::{expected, grants};
use super::*;

fn named(suffix: &str) -> String {
    format!("{FULLNAME}-{suffix}")
}

#[test]
fn the_operator_reads_classes_namespaces_and_its_crds_and_writes_only_the_classes_status() {
    let docs = render(&[]);
    let role = object(&docs, "ClusterRole", "", &named("classes"));
    assert_eq!(
        grants(role),
        expected(&[
            ("orca.dev", "warmpoolclasses", &["get", "list", "watch"]),
            ("orca.dev", "warmpoolclasses/status", &["patch"]),
            ("", "namespaces", &["get", "list", "watch"]),
            (
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                &["get"]
            ),
        ])
    );
    // The CRDs it reads at start are its own three, by name.
    let rules = at(role, &["rules"]).and_then(Value::as_sequence).unwrap();
    let crds = rules
        .iter()
        .find(|r| str_at(r, &["apiGroups", "0"]) == Some("apiextensions.k8s.io"))
        .expect("the CRD rule");
    let names: Vec<&str> = at(crds, &["resourceNames"])
        .and_then(Value::as_sequence)
        .expect("the CRD rule names its CRDs")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(names, CRDS);
}

#[test]
fn editors_write_pools_and_schedulers_viewers_read_them_and_nobody_gets_classes_writes() {
    let docs = render(&[]);
    let edit = object(&docs, "ClusterRole", "", &named("edit"));
    assert_eq!(
        str_at(
            edit,
            &[
                "metadata",
                "labels",
                "rbac.authorization.k8s.io/aggregate-to-edit"
            ]
        ),
        Some("true")
    );
    for ((_, resource), verbs) in grants(edit) {
        assert!(!resource.starts_with("warmpoolclasses"), "{resource}");
        assert!(verbs.contains("create"), "{resource}: {verbs:?}");
    }
    let view = object(&docs, "ClusterRole", "", &named("view"));
    assert_eq!(
        str_at(
            view,
            &[
                "metadata",
                "labels",
                "rbac.authorization.k8s.io/aggregate-to-view"
            ]
        ),
        Some("true")
    );
    for (_, verbs) in grants(view) {
        assert_eq!(verbs, ["get", "list", "watch"].map(String::from).into());
    }
    let off = render(&["tenancy.aggregateRoles=false"]);
    assert!(!inventory(&off).iter().any(|(_, _, n)| n == &named("edit")));
}

#[test]
fn the_admission_policy_covers_the_watched_namespaces_and_spares_the_operator() {
    let docs = render(&["watchNamespaces={team-a,team-b}"]);
    let policy = object(
        &docs,
        "ValidatingAdmissionPolicy",
        "",
        &named("warmpool-class"),
    );
    let conditions =
        serde_yaml::to_string(at(policy, &["spec", "matchConditions"]).unwrap()).unwrap();
    assert!(
        conditions.contains(&format!(
            "system:serviceaccount:{RELEASE_NAMESPACE}:{FULLNAME}"
        )),
        "{conditions}"
    );
    let validations = serde_yaml::to_string(at(policy, &["spec", "validations"]).unwrap()).unwrap();
    for field in [
        "spec.classRef is required",
        "spec.region",
        "spec.endpoint",
        "spec.launch.imageId",
        "spec.launch.launchTemplate",
        "spec.launch.subnetIds",
        "spec.launch.securityGroupIds",
        "spec.launch.iamInstanceProfile",
    ] {
        assert!(validations.contains(field), "{field} in {validations}");
    }
    let binding = object(
        &docs,
        "ValidatingAdmissionPolicyBinding",
        "",
        &named("warmpool-class"),
    );
    let selector =
        serde_yaml::to_string(at(binding, &["spec", "matchResources"]).unwrap()).unwrap();
    assert!(
        selector.contains("team-a") && selector.contains("team-b"),
        "{selector}"
    );
    let all = render(&["watchAllNamespaces=true"]);
    let binding = object(
        &all,
        "ValidatingAdmissionPolicyBinding",
        "",
        &named("warmpool-class"),
    );
    assert!(at(binding, &["spec", "matchResources"]).is_none());
    let off = render(&["tenancy.requireClass=false"]);
    assert!(!inventory(&off)
        .iter()
        .any(|(k, _, _)| k.starts_with("ValidatingAdmissionPolicy")));
}

/// A release made before `tenancy` existed, upgraded with `--reuse-values`
/// (Helm keeps the old chart's defaults: no `tenancy` key at all): the
/// chart renders, the operator can still read classes, editors get the
/// aggregated roles, and no admission policy appears that would refuse
/// changes to the inline pools such a release runs.
#[test]
fn a_release_without_tenancy_values_renders_with_the_roles_and_without_the_policy() {
    let docs = render(&["tenancy=null"]);
    let names: Vec<(String, String, String)> = inventory(&docs);
    assert!(names
        .iter()
        .any(|(k, _, n)| k == "ClusterRole" && n == &named("classes")));
    assert!(names
        .iter()
        .any(|(k, _, n)| k == "ClusterRole" && n == &named("edit")));
    assert!(
        !names
            .iter()
            .any(|(k, _, _)| k.starts_with("ValidatingAdmissionPolicy")),
        "{names:?}"
    );
}
