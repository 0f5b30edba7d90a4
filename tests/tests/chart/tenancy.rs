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
        .any(|(_, _, n)| n == &named("warmpool-class")));
}

/// The fields the policy refuses are those the operator refuses:
/// `files/admission-rules.yaml` is what `orca-operator admission-rules`
/// renders from the operator's own list, and the policies carry it.
#[test]
fn the_policies_carry_the_rules_the_operator_renders() {
    let path = repo().join("charts/orca-operator/files/admission-rules.yaml");
    let on_disk =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        on_disk == orca_operator::warmpool::admission::admission_rules(),
        "{} is stale: run `cargo run -p orca-operator -- admission-rules > {}`",
        path.display(),
        "charts/orca-operator/files/admission-rules.yaml"
    );
    let rules: Value = serde_yaml::from_str(&on_disk).unwrap();
    let docs = render(&[]);
    for (policy, key) in [
        ("warmpool-class", "classOwned"),
        ("warmpool-limits", "poolLimits"),
        ("warmpool-deletion", "deletion"),
    ] {
        let validations = at(
            object(&docs, "ValidatingAdmissionPolicy", "", &named(policy)),
            &["spec", "validations"],
        )
        .and_then(Value::as_sequence)
        .unwrap_or_else(|| panic!("{policy} has validations"));
        for rule in rules[key].as_sequence().expect("a list of rules") {
            assert!(validations.contains(rule), "{policy} lacks {rule:?}");
        }
    }
    for field in orca_operator::warmpool::class::CLASS_OWNED {
        assert!(on_disk.contains(&format!("{} may not be set", field.path())));
    }
}

/// The limits, the deletion's place and the operator's finalizer hold
/// whatever `requireClass` says; each class is a parameter of the limits'
/// policy, judging its own pools.
#[test]
fn the_limits_and_deletion_policies_hold_with_or_without_require_class() {
    for values in [&[][..], &["tenancy.requireClass=false"][..]] {
        let docs = render(values);
        let limits = object(
            &docs,
            "ValidatingAdmissionPolicy",
            "",
            &named("warmpool-limits"),
        );
        assert_eq!(
            str_at(limits, &["spec", "paramKind", "kind"]),
            Some("WarmPoolClass")
        );
        let binding = object(
            &docs,
            "ValidatingAdmissionPolicyBinding",
            "",
            &named("warmpool-limits"),
        );
        assert_eq!(
            str_at(binding, &["spec", "paramRef", "parameterNotFoundAction"]),
            Some("Allow")
        );
        for policy in ["warmpool-deletion", "warmpool-finalizer"] {
            object(&docs, "ValidatingAdmissionPolicy", "", &named(policy));
        }
    }
}

/// Off is closed: without `requireClass`, editors write WarmPools only if
/// the platform team says it trusts every editor with the operator's AWS
/// identity; Schedulers either way.
#[test]
fn editors_write_inline_pools_only_when_every_editor_is_trusted() {
    let resources = |values: &[&str]| -> Vec<String> {
        let docs = render(values);
        let edit = object(&docs, "ClusterRole", "", &named("edit"));
        let mut resources: Vec<String> = grants(edit).into_keys().map(|(_, r)| r).collect();
        resources.sort();
        resources.dedup();
        resources
    };
    assert_eq!(resources(&[]), ["schedulers", "warmpools"]);
    assert_eq!(resources(&["tenancy.requireClass=false"]), ["schedulers"]);
    assert_eq!(
        resources(&[
            "tenancy.requireClass=false",
            "tenancy.trustEveryEditor=true"
        ]),
        ["schedulers", "warmpools"]
    );
}

/// The policies exempt the operator's own ServiceAccount in every shape of
/// the chart, never a namespace's `default`.
#[test]
fn the_exemption_is_the_operators_own_account_in_every_shape() {
    let account = |values: &[&str]| -> String {
        let docs = render(values);
        let policy = object(
            &docs,
            "ValidatingAdmissionPolicy",
            "",
            &named("warmpool-limits"),
        );
        serde_yaml::to_string(at(policy, &["spec", "matchConditions"]).unwrap()).unwrap()
    };
    assert!(account(&[]).contains(&format!(
        "system:serviceaccount:{RELEASE_NAMESPACE}:{FULLNAME}'"
    )));
    assert!(account(&["serviceAccount.name=mine"])
        .contains(&format!("system:serviceaccount:{RELEASE_NAMESPACE}:mine'")));
    assert!(
        account(&["serviceAccount.create=false", "serviceAccount.name=given"])
            .contains(&format!("system:serviceaccount:{RELEASE_NAMESPACE}:given'"))
    );
    let out = helm_template(&["serviceAccount.create=false"]);
    assert!(!out.status.success(), "rendered with the default account");
    let refused = String::from_utf8_lossy(&out.stderr);
    assert!(
        refused.contains("serviceAccount.name is required when serviceAccount.create is false"),
        "{refused}"
    );
}

/// Every namespace the operator watches is bound by the policies, the
/// same list its `--namespace` arguments give.
#[test]
fn the_policies_bind_every_watched_namespace() {
    for (values, namespaces) in [
        (&[][..], vec![RELEASE_NAMESPACE]),
        (
            &["watchNamespaces={team-a,team-b}"][..],
            vec!["team-a", "team-b"],
        ),
    ] {
        let docs = render(values);
        for policy in [
            "warmpool-class",
            "warmpool-limits",
            "warmpool-deletion",
            "warmpool-finalizer",
        ] {
            let binding = object(
                &docs,
                "ValidatingAdmissionPolicyBinding",
                "",
                &named(policy),
            );
            let bound: Vec<&str> = at(
                binding,
                &[
                    "spec",
                    "matchResources",
                    "namespaceSelector",
                    "matchExpressions",
                    "0",
                    "values",
                ],
            )
            .and_then(Value::as_sequence)
            .unwrap_or_else(|| panic!("{policy}: bound to namespaces"))
            .iter()
            .filter_map(Value::as_str)
            .collect();
            assert_eq!(bound, namespaces, "{policy} {values:?}");
        }
    }
}

/// A release made before `tenancy` existed, upgraded with `--reuse-values`
/// (Helm keeps the old chart's defaults: no `tenancy` key at all): the
/// chart renders, the operator can still read classes, editors get the
/// aggregated roles (Schedulers: nobody said every editor is trusted with
/// inline pools), and no admission policy appears that would refuse
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
        !names.iter().any(|(_, _, n)| n == &named("warmpool-class")),
        "{names:?}"
    );
}
