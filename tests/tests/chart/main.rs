//! The Helm chart as `helm template` renders it (helm from `ORCA_HELM`,
//! which `ensure_helm` in scripts/lib/setup.sh provides): the objects it
//! makes, RBAC that grants exactly the verbs the operator uses, a locked-down
//! Deployment, CRDs that are the ones the Rust types generate, and the notes
//! an install prints.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use serde::Deserialize;
use serde_yaml::Value;

const RELEASE: &str = "orca";
const RELEASE_NAMESPACE: &str = "orca-system";
/// The release's full name: "<release>-<chart>" unless one holds the other.
const FULLNAME: &str = "orca-orca-operator";
/// The CRDs, in the order they are rendered.
const CRDS: [&str; 3] = [
    "schedulers.orca.dev",
    "warmpools.orca.dev",
    "warmpoolclasses.orca.dev",
];

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
        // Required; a test that leaves it out sets it empty.
        "--set",
        "clusterName=chart-test",
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

mod alerts;
mod crds;
mod deployment;
mod notes;
mod rbac;
mod tenancy;
mod values;
