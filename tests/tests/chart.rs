//! The Helm chart as `helm template` renders it (helm from `ORCA_HELM`,
//! which `ensure_helm` in scripts/lib/setup.sh provides): the objects it
//! makes, RBAC that grants exactly the verbs the operator uses, a locked-down
//! Deployment, and CRDs that are the ones the Rust types generate.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::{Command, Output},
};

use serde::Deserialize;
use serde_yaml::Value;

const RELEASE: &str = "orca";
const RELEASE_NAMESPACE: &str = "orca-system";
/// The release's full name: "<release>-<chart>" unless one holds the other.
const FULLNAME: &str = "orca-orca-operator";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("invariant: the tests crate sits in the workspace root")
        .to_path_buf()
}

fn helm() -> PathBuf {
    let Some(path) = std::env::var_os("ORCA_HELM") else {
        panic!(
            "ORCA_HELM is not set: these tests render the chart with helm; run \
             `source scripts/lib/setup.sh && ensure_helm` first (scripts/test does)"
        );
    };
    let path = repo().join(path);
    assert!(
        path.is_file(),
        "ORCA_HELM={} is not a file: run `source scripts/lib/setup.sh && ensure_helm` again",
        path.display()
    );
    path
}

fn helm_template(sets: &[&str]) -> Output {
    let mut cmd = Command::new(helm());
    cmd.current_dir(repo()).args([
        "template",
        RELEASE,
        "charts/orca-operator",
        "--namespace",
        RELEASE_NAMESPACE,
    ]);
    for set in sets {
        cmd.args(["--set", set]);
    }
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", helm().display()))
}

/// The objects `helm template` renders with these `--set` values.
fn render(sets: &[&str]) -> Vec<Value> {
    let out = helm_template(sets);
    assert!(
        out.status.success(),
        "helm template {sets:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("helm prints UTF-8");
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).expect("helm template prints valid YAML"))
        .filter(|doc| !doc.is_null())
        .collect()
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(v, path).and_then(Value::as_str)
}

fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(v, |v, key| match key.parse::<usize>() {
            Ok(i) => v.get(i),
            Err(_) => v.get(*key),
        })
}

/// (kind, namespace, name) of every object, sorted.
fn inventory(docs: &[Value]) -> Vec<(String, String, String)> {
    let mut all: Vec<_> = docs
        .iter()
        .map(|d| {
            (
                str_at(d, &["kind"]).unwrap_or("?").to_string(),
                str_at(d, &["metadata", "namespace"])
                    .unwrap_or("")
                    .to_string(),
                str_at(d, &["metadata", "name"]).unwrap_or("?").to_string(),
            )
        })
        .collect();
    all.sort();
    all
}

fn object<'a>(docs: &'a [Value], kind: &str, namespace: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| {
            str_at(d, &["kind"]) == Some(kind)
                && str_at(d, &["metadata", "namespace"]).unwrap_or("") == namespace
                && str_at(d, &["metadata", "name"]) == Some(name)
        })
        .unwrap_or_else(|| panic!("no {kind} {namespace}/{name} among {:#?}", inventory(docs)))
}

fn owned(items: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    let mut all: Vec<_> = items
        .iter()
        .map(|(k, ns, n)| (k.to_string(), ns.to_string(), n.to_string()))
        .collect();
    all.sort();
    all
}

type Grants = BTreeMap<(String, String), BTreeSet<String>>;

/// Every (apiGroup, resource) a Role or ClusterRole grants, with its verbs;
/// a wildcard anywhere fails the test.
fn grants(role: &Value) -> Grants {
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

fn expected(items: &[(&str, &str, &[&str])]) -> Grants {
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
        ("", "secrets", &["get", "list", "watch"]),
        ("events.k8s.io", "events", RECORD),
        ("", "events", RECORD),
    ])
}

/// The operator's election gets the Lease, creates it once, and takes,
/// renews and releases it with PATCH; it never updates (PUT) it.
fn lease_grants() -> Grants {
    expected(&[("coordination.k8s.io", "leases", &["get", "create", "patch"])])
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

fn deployment(docs: &[Value]) -> &Value {
    object(docs, "Deployment", RELEASE_NAMESPACE, FULLNAME)
}

fn container(docs: &[Value]) -> &Value {
    let containers = at(
        deployment(docs),
        &["spec", "template", "spec", "containers"],
    )
    .and_then(Value::as_sequence)
    .expect("the Deployment has containers");
    assert_eq!(containers.len(), 1, "one container: the operator");
    &containers[0]
}

fn args(docs: &[Value]) -> Vec<String> {
    at(container(docs), &["args"])
        .and_then(Value::as_sequence)
        .expect("the container has args")
        .iter()
        .map(|a| a.as_str().expect("args are strings").to_string())
        .collect()
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn default_values_grant_a_role_in_the_release_namespace_only() {
    let docs = render(&[]);
    let lease = lease_role_name();
    let metrics = format!("{FULLNAME}-metrics");
    assert_eq!(
        inventory(&docs),
        owned(&[
            ("ServiceAccount", RELEASE_NAMESPACE, FULLNAME),
            ("Role", RELEASE_NAMESPACE, FULLNAME),
            ("RoleBinding", RELEASE_NAMESPACE, FULLNAME),
            ("Role", RELEASE_NAMESPACE, &lease),
            ("RoleBinding", RELEASE_NAMESPACE, &lease),
            ("Service", RELEASE_NAMESPACE, &metrics),
            ("Deployment", RELEASE_NAMESPACE, FULLNAME),
        ])
    );
    let role = object(&docs, "Role", RELEASE_NAMESPACE, FULLNAME);
    let granted = grants(role);
    // Secrets: read the one a Scheduler names, watch their metadata;
    // never create, change or delete one.
    assert_eq!(
        granted.get(&(String::new(), "secrets".to_string())),
        Some(&BTreeSet::from(["get", "list", "watch"].map(String::from)))
    );
    assert_eq!(granted, workload_grants());
    let binding = object(&docs, "RoleBinding", RELEASE_NAMESPACE, FULLNAME);
    assert_binds_operator(binding, "Role", FULLNAME);
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
        owned(&[
            ("ServiceAccount", RELEASE_NAMESPACE, FULLNAME),
            ("Role", "team-a", FULLNAME),
            ("RoleBinding", "team-a", FULLNAME),
            ("Role", "team-b", FULLNAME),
            ("RoleBinding", "team-b", FULLNAME),
            ("Role", RELEASE_NAMESPACE, &lease),
            ("RoleBinding", RELEASE_NAMESPACE, &lease),
            ("Service", RELEASE_NAMESPACE, &metrics),
            ("Deployment", RELEASE_NAMESPACE, FULLNAME),
        ]),
        "no workload Role in the release namespace, which is not watched"
    );
    for ns in ["team-a", "team-b"] {
        assert_eq!(
            grants(object(&docs, "Role", ns, FULLNAME)),
            workload_grants(),
            "the Role in {ns}"
        );
        assert_binds_operator(object(&docs, "RoleBinding", ns, FULLNAME), "Role", FULLNAME);
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
        owned(&[
            ("ServiceAccount", RELEASE_NAMESPACE, FULLNAME),
            ("ClusterRole", "", FULLNAME),
            ("ClusterRoleBinding", "", FULLNAME),
            ("Role", RELEASE_NAMESPACE, &lease),
            ("RoleBinding", RELEASE_NAMESPACE, &lease),
            ("Service", RELEASE_NAMESPACE, &metrics),
            ("Deployment", RELEASE_NAMESPACE, FULLNAME),
        ])
    );
    let role = object(&docs, "ClusterRole", "", FULLNAME);
    assert_eq!(grants(role), workload_grants());
    let binding = object(&docs, "ClusterRoleBinding", "", FULLNAME);
    assert_binds_operator(binding, "ClusterRole", FULLNAME);
    // Leases stay namespaced even then: no cluster-wide lease rights.
    assert_lease_rbac(&docs);
    assert!(
        !args(&docs).iter().any(|a| a == "--namespace"),
        "no --namespace: every namespace is watched: {:?}",
        args(&docs)
    );
}

#[test]
fn a_watch_list_beside_watch_all_is_refused() {
    let out = helm_template(&["watchAllNamespaces=true", "watchNamespaces={team-a}"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "helm template accepted both");
    assert!(stderr.contains("watchNamespaces"), "{stderr}");
}

#[test]
fn the_deployment_runs_two_locked_down_replicas_with_leader_election() {
    let docs = render(&[]);
    let deploy = deployment(&docs);
    assert_eq!(at(deploy, &["spec", "replicas"]), Some(&Value::from(2)));
    assert_eq!(
        args(&docs),
        strings(&[
            "--log-json",
            "run",
            "--namespace",
            RELEASE_NAMESPACE,
            "--listen",
            "0.0.0.0:8080",
            "--lease-name",
            FULLNAME,
            "--lease-namespace",
            RELEASE_NAMESPACE,
        ])
    );
    let c = container(&docs);
    assert_eq!(str_at(c, &["image"]), Some("orca-operator:0.1.0"));

    let pod = at(deploy, &["spec", "template", "spec"]).expect("a pod spec");
    assert_eq!(str_at(pod, &["serviceAccountName"]), Some(FULLNAME));
    assert_eq!(
        at(pod, &["securityContext", "runAsNonRoot"]),
        Some(&Value::from(true))
    );
    assert_eq!(
        str_at(pod, &["securityContext", "seccompProfile", "type"]),
        Some("RuntimeDefault")
    );
    let sc = at(c, &["securityContext"]).expect("a container securityContext");
    assert_eq!(at(sc, &["runAsNonRoot"]), Some(&Value::from(true)));
    assert_eq!(
        at(sc, &["readOnlyRootFilesystem"]),
        Some(&Value::from(true))
    );
    assert_eq!(
        at(sc, &["allowPrivilegeEscalation"]),
        Some(&Value::from(false))
    );
    assert_eq!(
        at(sc, &["capabilities", "drop"]),
        Some(&Value::Sequence(vec![Value::from("ALL")]))
    );
    assert!(at(sc, &["capabilities", "add"]).is_none(), "{sc:?}");
    assert!(at(sc, &["privileged"]).is_none(), "{sc:?}");
    assert_eq!(
        str_at(sc, &["seccompProfile", "type"]),
        Some("RuntimeDefault")
    );

    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        assert_eq!(
            str_at(c, &[probe, "httpGet", "path"]),
            Some(path),
            "{probe}"
        );
        assert_eq!(
            str_at(c, &[probe, "httpGet", "port"]),
            Some("http"),
            "{probe}"
        );
    }
    assert_eq!(str_at(c, &["ports", "0", "name"]), Some("http"));
    assert_eq!(
        at(c, &["ports", "0", "containerPort"]),
        Some(&Value::from(8080))
    );

    // Leader election needs each replica's identity from the downward API.
    let env = at(c, &["env"])
        .and_then(Value::as_sequence)
        .expect("the container has env");
    for (name, field) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        let var = env
            .iter()
            .find(|e| str_at(e, &["name"]) == Some(name))
            .unwrap_or_else(|| panic!("no {name} in {env:?}"));
        assert_eq!(
            str_at(var, &["valueFrom", "fieldRef", "fieldPath"]),
            Some(field),
            "{name}"
        );
    }
    assert!(
        at(c, &["resources", "requests"]).is_some(),
        "resource requests by default"
    );
}

#[test]
fn the_metrics_service_and_the_optional_service_monitor_select_the_operator() {
    let docs = render(&[]);
    assert!(
        !inventory(&docs)
            .iter()
            .any(|(k, _, _)| k == "ServiceMonitor"),
        "no ServiceMonitor unless enabled"
    );

    let docs = render(&["serviceMonitor.enabled=true"]);
    let metrics = format!("{FULLNAME}-metrics");
    let service = object(&docs, "Service", RELEASE_NAMESPACE, &metrics);
    assert_eq!(
        str_at(service, &["spec", "ports", "0", "name"]),
        Some("http")
    );
    assert_eq!(
        str_at(service, &["spec", "ports", "0", "targetPort"]),
        Some("http")
    );
    let pod_labels = at(
        deployment(&docs),
        &["spec", "template", "metadata", "labels"],
    )
    .and_then(Value::as_mapping)
    .expect("pod labels");
    let selector = at(service, &["spec", "selector"])
        .and_then(Value::as_mapping)
        .expect("a Service selector");
    for (k, v) in selector {
        assert_eq!(pod_labels.get(k), Some(v), "the Service selects {k:?}");
    }

    let monitor = object(&docs, "ServiceMonitor", RELEASE_NAMESPACE, FULLNAME);
    let service_labels = at(service, &["metadata", "labels"])
        .and_then(Value::as_mapping)
        .expect("Service labels");
    let wanted = at(monitor, &["spec", "selector", "matchLabels"])
        .and_then(Value::as_mapping)
        .expect("a ServiceMonitor selector");
    for (k, v) in wanted {
        assert_eq!(service_labels.get(k), Some(v), "the monitor selects {k:?}");
    }
    assert_eq!(
        str_at(monitor, &["spec", "endpoints", "0", "port"]),
        Some("http")
    );
    assert_eq!(
        str_at(monitor, &["spec", "endpoints", "0", "path"]),
        Some("/metrics")
    );
}

#[test]
fn the_service_account_carries_the_iam_role_annotation() {
    let arn = "arn:aws:iam::111122223333:role/orca-operator";
    let set = format!("serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn={arn}");
    let docs = render(&[&set]);
    let sa = object(&docs, "ServiceAccount", RELEASE_NAMESPACE, FULLNAME);
    assert_eq!(
        str_at(
            sa,
            &["metadata", "annotations", "eks.amazonaws.com/role-arn"]
        ),
        Some(arn)
    );
}

#[test]
fn values_outside_the_schema_are_refused() {
    for (set, field) in [
        ("replicaCount=-1", "replicaCount"),
        ("watchNamespaces={Not_A_Namespace}", "watchNamespaces"),
        ("image.pullPolicy=Sometimes", "pullPolicy"),
        ("serviceMontor.enabled=true", "serviceMontor"),
    ] {
        let out = helm_template(&[set]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "helm template accepted {set}");
        assert!(stderr.contains(field), "{set}: {stderr}");
    }
}

#[test]
fn the_chart_ships_the_crds_of_crds_dir_byte_for_byte() {
    let generated = repo().join("crds/orca.dev.yaml");
    let shipped = repo().join("charts/orca-operator/crds/orca.dev.yaml");
    let read = |p: &Path| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    assert!(
        read(&shipped) == read(&generated),
        "{} differs from {}: run `cp crds/orca.dev.yaml charts/orca-operator/crds/`",
        shipped.display(),
        generated.display()
    );
}

#[test]
fn the_crds_dir_is_what_the_rust_types_generate() {
    let path = repo().join("crds/orca.dev.yaml");
    let on_disk =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        on_disk == orca_operator::crd::crds_yaml(),
        "crds/orca.dev.yaml is stale: run `cargo run -p orca-operator -- crds > crds/orca.dev.yaml` \
         and copy it into the chart (`cp crds/orca.dev.yaml charts/orca-operator/crds/`)"
    );
}
