//! RBAC: the Roles or ClusterRole of the watched namespaces, and the Lease's Role.

use std::collections::{BTreeMap, BTreeSet};

use super::*;

pub(super) type Grants = BTreeMap<(String, String), BTreeSet<String>>;

/// Every (apiGroup, resource) a Role or ClusterRole grants, with its verbs;
/// a wildcard anywhere fails the test.
pub(super) fn grants(role: &Value) -> Grants {
    let mut out = Grants::new();
    let rules = at(role, &["rules"])
        .and_then(Value::as_sequence)
        .expect("a role has rules");
    for rule in rules {
        let list = |key: &str| -> Vec<String> {
            at(rule, &[key])
                .and_then(Value::as_sequence)
                .unwrap_or_else(|| panic!("a rule without {key}: {rule:?}"))
                .iter()
                .map(|v| v.as_str().expect("RBAC lists hold strings").to_string())
                .collect()
        };
        let (groups, resources, verbs) = (list("apiGroups"), list("resources"), list("verbs"));
        for word in groups.iter().chain(&resources).chain(&verbs) {
            assert!(!word.contains('*'), "a wildcard in {rule:?}");
        }
        assert!(
            at(rule, &["nonResourceURLs"]).is_none(),
            "a non-resource URL in {rule:?}"
        );
        for group in &groups {
            for resource in &resources {
                out.entry((group.clone(), resource.clone()))
                    .or_default()
                    .extend(verbs.iter().cloned());
            }
        }
    }
    out
}

pub(super) fn expected(items: &[(&str, &str, &[&str])]) -> Grants {
    items
        .iter()
        .map(|(group, resource, verbs)| {
            (
                (group.to_string(), resource.to_string()),
                verbs.iter().map(|v| v.to_string()).collect(),
            )
        })
        .collect()
}

/// What the operator does in a namespace it watches, and nothing more.
fn workload_grants() -> Grants {
    // patch: the finalizers of Schedulers and WarmPools.
    const OWN: &[&str] = &["get", "list", "watch", "patch"];
    const RUN: &[&str] = &["get", "list", "watch", "create", "delete"];
    const RECORD: &[&str] = &["create", "patch"];
    expected(&[
        ("orca.dev", "schedulers", OWN),
        ("orca.dev", "warmpools", OWN),
        ("orca.dev", "schedulers/status", &["patch"]),
        ("orca.dev", "warmpools/status", &["patch"]),
        ("orca.dev", "schedulers/finalizers", &["update"]),
        ("", "pods", RUN),
        ("batch", "jobs", RUN),
        ("", "secrets", &["get", "list", "watch", "patch"]),
        ("events.k8s.io", "events", RECORD),
        ("", "events", RECORD),
    ])
}

/// With `watchNamespaces`, the ClusterRole bound in each namespace grants
/// the workload's rules and, on its own RoleBinding only (`resourceNames`),
/// what keeps the binding while Schedulers or WarmPools are left there
/// (its finalizer).
fn namespace_grants(role: &Value) -> Grants {
    let mut want = workload_grants();
    want.extend(expected(&[(
        "rbac.authorization.k8s.io",
        "rolebindings",
        &["get", "list", "watch", "patch"],
    )]));
    let rules = at(role, &["rules"]).and_then(Value::as_sequence).unwrap();
    for rule in rules {
        let rbac = at(rule, &["apiGroups", "0"]).and_then(Value::as_str)
            == Some("rbac.authorization.k8s.io");
        if rbac {
            let names: Vec<&str> = at(rule, &["resourceNames"])
                .and_then(Value::as_sequence)
                .unwrap_or_else(|| panic!("an RBAC rule with no resourceNames: {rule:?}"))
                .iter()
                .filter_map(Value::as_str)
                .collect();
            assert_eq!(names, [FULLNAME], "only its own: {rule:?}");
        }
    }
    want
}

/// The operator's election gets the Lease, creates it once, and takes,
/// renews and releases it with PATCH; it never updates (PUT) it.
/// And posts Events on it (a replica held back at start says why there).
fn lease_grants() -> Grants {
    expected(&[
        ("coordination.k8s.io", "leases", &["get", "create", "patch"]),
        ("events.k8s.io", "events", &["create", "patch"]),
    ])
}

fn assert_binds_operator(binding: &Value, role_kind: &str, role_name: &str) {
    assert_eq!(str_at(binding, &["roleRef", "kind"]), Some(role_kind));
    assert_eq!(str_at(binding, &["roleRef", "name"]), Some(role_name));
    let subjects = at(binding, &["subjects"])
        .and_then(Value::as_sequence)
        .expect("a binding has subjects");
    assert_eq!(subjects.len(), 1, "{subjects:?}");
    assert_eq!(str_at(&subjects[0], &["kind"]), Some("ServiceAccount"));
    assert_eq!(str_at(&subjects[0], &["name"]), Some(FULLNAME));
    assert_eq!(
        str_at(&subjects[0], &["namespace"]),
        Some(RELEASE_NAMESPACE)
    );
}

/// `objects` and what `tenancy` adds with its defaults: the classes'
/// reader and its binding, the aggregated roles, the admission policies and
/// their bindings (tests/tests/chart/tenancy.rs looks into each); and the
/// CRDs (tests/tests/chart/crds.rs).
fn with_tenancy(mut objects: Vec<(String, String, String)>) -> Vec<(String, String, String)> {
    let named = |kind: &str, suffix: &str| {
        (
            kind.to_string(),
            String::new(),
            format!("{FULLNAME}-{suffix}"),
        )
    };
    objects.extend([
        named("ClusterRole", "classes"),
        named("ClusterRoleBinding", "classes"),
        named("ClusterRole", "edit"),
        named("ClusterRole", "view"),
    ]);
    for policy in [
        "warmpool-class",
        "warmpool-limits",
        "warmpool-deletion",
        "warmpool-finalizer",
    ] {
        objects.push(named("ValidatingAdmissionPolicy", policy));
        objects.push(named("ValidatingAdmissionPolicyBinding", policy));
    }
    for crd in CRDS {
        objects.push(("CustomResourceDefinition".into(), String::new(), crd.into()));
    }
    objects.sort();
    objects
}

fn lease_role_name() -> String {
    format!("{FULLNAME}-leader-election")
}

fn assert_lease_rbac(docs: &[Value]) {
    let lease = lease_role_name();
    let role = object(docs, "Role", RELEASE_NAMESPACE, &lease);
    assert_eq!(grants(role), lease_grants(), "the leader-election Role");
    let binding = object(docs, "RoleBinding", RELEASE_NAMESPACE, &lease);
    assert_binds_operator(binding, "Role", &lease);
}

#[test]
fn default_values_grant_the_rules_in_the_release_namespace_only() {
    let docs = render(&[]);
    let lease = lease_role_name();
    let metrics = format!("{FULLNAME}-metrics");
    assert_eq!(
        inventory(&docs),
        with_tenancy(owned(&[
            ("ServiceAccount", RELEASE_NAMESPACE, FULLNAME),
            ("ClusterRole", "", FULLNAME),
            ("RoleBinding", RELEASE_NAMESPACE, FULLNAME),
            ("Role", RELEASE_NAMESPACE, &lease),
            ("RoleBinding", RELEASE_NAMESPACE, &lease),
            ("Service", RELEASE_NAMESPACE, &metrics),
            ("Deployment", RELEASE_NAMESPACE, FULLNAME),
            ("PodDisruptionBudget", RELEASE_NAMESPACE, FULLNAME),
            ("NetworkPolicy", RELEASE_NAMESPACE, FULLNAME),
        ]))
    );
    let role = object(&docs, "ClusterRole", "", FULLNAME);
    let granted = grants(role);
    // Secrets: read the one a Scheduler names, watch their metadata, and
    // patch it (the in-use finalizer); never create, replace or delete one.
    assert_eq!(
        granted.get(&(String::new(), "secrets".to_string())),
        Some(&BTreeSet::from(
            ["get", "list", "watch", "patch"].map(String::from)
        ))
    );
    assert_eq!(granted, namespace_grants(role));
    let binding = object(&docs, "RoleBinding", RELEASE_NAMESPACE, FULLNAME);
    assert_binds_operator(binding, "ClusterRole", FULLNAME);
    assert_lease_rbac(&docs);
    assert!(
        args(&docs)
            .windows(2)
            .any(|w| w == ["--namespace", RELEASE_NAMESPACE]),
        "the operator watches the release namespace: {:?}",
        args(&docs)
    );
}

#[test]
fn a_watch_namespaces_list_gets_a_role_and_binding_in_each() {
    let docs = render(&["watchNamespaces={team-a,team-b}"]);
    let lease = lease_role_name();
    let metrics = format!("{FULLNAME}-metrics");
    assert_eq!(
        inventory(&docs),
        with_tenancy(owned(&[
            ("ServiceAccount", RELEASE_NAMESPACE, FULLNAME),
            ("ClusterRole", "", FULLNAME),
            ("RoleBinding", "team-a", FULLNAME),
            ("RoleBinding", "team-b", FULLNAME),
            ("Role", RELEASE_NAMESPACE, &lease),
            ("RoleBinding", RELEASE_NAMESPACE, &lease),
            ("Service", RELEASE_NAMESPACE, &metrics),
            ("Deployment", RELEASE_NAMESPACE, FULLNAME),
            ("PodDisruptionBudget", RELEASE_NAMESPACE, FULLNAME),
            ("NetworkPolicy", RELEASE_NAMESPACE, FULLNAME),
        ])),
        "no workload RoleBinding in the release namespace, which is not watched"
    );
    let role = object(&docs, "ClusterRole", "", FULLNAME);
    assert_eq!(grants(role), namespace_grants(role));
    for ns in ["team-a", "team-b"] {
        assert_binds_operator(
            object(&docs, "RoleBinding", ns, FULLNAME),
            "ClusterRole",
            FULLNAME,
        );
    }
    assert_lease_rbac(&docs);
    let args = args(&docs);
    let namespaces: Vec<_> = args
        .windows(2)
        .filter(|w| w[0] == "--namespace")
        .map(|w| w[1].as_str())
        .collect();
    assert_eq!(namespaces, ["team-a", "team-b"], "{args:?}");
}

#[test]
fn watching_all_namespaces_uses_a_cluster_role() {
    let docs = render(&["watchAllNamespaces=true"]);
    let lease = lease_role_name();
    let metrics = format!("{FULLNAME}-metrics");
    assert_eq!(
        inventory(&docs),
        with_tenancy(owned(&[
            ("ServiceAccount", RELEASE_NAMESPACE, FULLNAME),
            ("ClusterRole", "", FULLNAME),
            ("ClusterRoleBinding", "", FULLNAME),
            ("Role", RELEASE_NAMESPACE, &lease),
            ("RoleBinding", RELEASE_NAMESPACE, &lease),
            ("Service", RELEASE_NAMESPACE, &metrics),
            ("Deployment", RELEASE_NAMESPACE, FULLNAME),
            ("PodDisruptionBudget", RELEASE_NAMESPACE, FULLNAME),
            ("NetworkPolicy", RELEASE_NAMESPACE, FULLNAME),
        ]))
    );
    let role = object(&docs, "ClusterRole", "", FULLNAME);
    assert_eq!(grants(role), workload_grants());
    let binding = object(&docs, "ClusterRoleBinding", "", FULLNAME);
    assert_binds_operator(binding, "ClusterRole", FULLNAME);
    // Leases stay namespaced even then: no cluster-wide lease rights.
    assert_lease_rbac(&docs);
    assert!(
        !args(&docs)
            .iter()
            .any(|a| a == "--namespace" || a == "--role-binding"),
        "no --namespace: every namespace is watched: {:?}",
        args(&docs)
    );
}
