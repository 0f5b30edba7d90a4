//! The CRDs: `crds/` is what the Rust types generate; the orca-operator-crds
//! chart templates the same file, so that `helm upgrade` upgrades them, and
//! the operator's chart installs that chart as its dependency unless told
//! not to. Both charts version together.

use super::*;

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn the_crds_dir_is_what_the_rust_types_generate() {
    let on_disk = read(&repo().join("crds/orca.dev.yaml"));
    assert!(
        on_disk == orca_operator::crd::crds_yaml(),
        "crds/orca.dev.yaml is stale: run `cargo run -p orca-operator -- crds > crds/orca.dev.yaml` \
         and copy it into the CRD chart (`cp crds/orca.dev.yaml charts/orca-operator-crds/templates/`)"
    );
}

#[test]
fn the_crd_chart_templates_the_crds_of_crds_dir_byte_for_byte() {
    let generated = repo().join("crds/orca.dev.yaml");
    let templated = repo().join("charts/orca-operator-crds/templates/orca.dev.yaml");
    assert!(
        read(&templated) == read(&generated),
        "{} differs from {}: run `cp crds/orca.dev.yaml charts/orca-operator-crds/templates/`",
        templated.display(),
        generated.display()
    );
    // Helm's crds/ directory is installed once and never upgraded: the
    // operator's chart has none.
    assert!(
        !repo().join("charts/orca-operator/crds").exists(),
        "charts/orca-operator/crds/ is back: Helm would never upgrade what it holds"
    );
}

#[test]
fn the_release_installs_the_crds_kept_and_stamped_unless_told_not_to() {
    let docs = render(&[]);
    let crds: Vec<&Value> = docs
        .iter()
        .filter(|d| str_at(d, &["kind"]) == Some("CustomResourceDefinition"))
        .collect();
    let names: Vec<&str> = crds
        .iter()
        .filter_map(|d| str_at(d, &["metadata", "name"]))
        .collect();
    assert_eq!(names, CRDS);
    for crd in &crds {
        assert_eq!(
            str_at(crd, &["metadata", "annotations", "helm.sh/resource-policy"]),
            Some("keep"),
            "uninstalling the release must not delete every Scheduler and WarmPool"
        );
        assert!(
            str_at(crd, &["metadata", "annotations", "orca.dev/schema"])
                .is_some_and(|s| s.starts_with("sha256:")),
            "the operator compares its schema with this stamp at start"
        );
    }
    let without = render(&["crds.install=false"]);
    assert!(
        !without
            .iter()
            .any(|d| str_at(d, &["kind"]) == Some("CustomResourceDefinition")),
        "crds.install=false still renders CRDs"
    );
}

#[test]
fn both_charts_version_together() {
    let chart = |dir: &str| -> Value {
        serde_yaml::from_str(&read(&repo().join(dir).join("Chart.yaml")))
            .unwrap_or_else(|e| panic!("{dir}/Chart.yaml: {e}"))
    };
    let operator = chart("charts/orca-operator");
    let crds = chart("charts/orca-operator-crds");
    for key in ["version", "appVersion"] {
        assert_eq!(
            str_at(&operator, &[key]),
            str_at(&crds, &[key]),
            "the charts' {key}s differ"
        );
    }
    let dependency = at(&operator, &["dependencies", "0"]).expect("the CRD chart as a dependency");
    assert_eq!(str_at(dependency, &["name"]), Some("orca-operator-crds"));
    assert_eq!(
        str_at(dependency, &["version"]),
        str_at(&crds, &["version"])
    );
    assert_eq!(str_at(dependency, &["condition"]), Some("crds.install"));
    let linked = repo().join("charts/orca-operator/charts/orca-operator-crds");
    assert_eq!(
        std::fs::canonicalize(&linked).unwrap_or_else(|e| panic!("{}: {e}", linked.display())),
        std::fs::canonicalize(repo().join("charts/orca-operator-crds")).unwrap(),
        "the operator's chart must carry the CRD chart itself, not a copy"
    );
    let workspace = read(&repo().join("Cargo.toml"));
    let version = workspace
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .expect("the workspace's version");
    assert_eq!(
        str_at(&operator, &["appVersion"]),
        Some(version),
        "the charts' appVersion is the operator's version"
    );
}
