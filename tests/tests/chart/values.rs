//! Values the chart refuses: outside its schema, or at odds with each other.

use super::*;

#[test]
fn a_missing_cluster_name_is_refused_saying_why() {
    let out = helm_template(&["clusterName="]);
    assert!(!out.status.success(), "rendered without a cluster name");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("clusterName is required"), "{err}");
    let out = helm_template(&["clusterName=two words"]);
    assert!(
        !out.status.success(),
        "rendered with a cluster name EC2 tags refuse"
    );
}

/// An install that pinned the image's tag, upgraded with its values kept:
/// the earlier release's operator does not take this chart's arguments
/// (it exits at once on `--database-ca-dir`), and the upgrade would hang
/// on pods that never start. The chart refuses it, naming the tag to set.
#[test]
fn an_image_of_an_earlier_release_is_refused_naming_this_ones() {
    let version = env!("CARGO_PKG_VERSION");
    let out = helm_template(&["image.tag=0.1.0"]);
    assert!(!out.status.success(), "rendered with the image of 0.1.0");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("image.tag 0.1.0 is an earlier release")
            && err.contains(&format!("set image.tag={version}")),
        "{err}"
    );
    for tag in [version, "v99.0.0", "0.2.0-rc.1", "sha-1234abc", "latest"] {
        let set = format!("image.tag={tag}");
        let out = helm_template(&[set.as_str()]);
        assert!(
            out.status.success(),
            "{tag}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_watch_list_beside_watch_all_is_refused() {
    let out = helm_template(&["watchAllNamespaces=true", "watchNamespaces={team-a}"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "helm template accepted both");
    assert!(stderr.contains("watchNamespaces"), "{stderr}");
}

#[test]
fn values_outside_the_schema_are_refused() {
    for (set, field) in [
        ("replicaCount=-1", "replicaCount"),
        ("watchNamespaces={Not_A_Namespace}", "watchNamespaces"),
        ("image.pullPolicy=Sometimes", "pullPolicy"),
        ("serviceMontor.enabled=true", "serviceMontor"),
        ("extraVolumeMounts[0].name=db-ca", "mountPath"),
        ("envFrom[0].prefix=AWS_", "envFrom"),
        (
            "topologySpreadConstraints[0].whenUnsatisfiable=Sometimes",
            "whenUnsatisfiable",
        ),
    ] {
        let out = helm_template(&[set]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "helm template accepted {set}");
        assert!(stderr.contains(field), "{set}: {stderr}");
    }
}

#[test]
fn a_list_value_given_a_string_is_refused_by_the_schema() {
    for value in ["extraArgs", "extraVolumes", "extraVolumeMounts", "envFrom"] {
        let out = helm_template(&[&format!("{value}=x")]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "helm template accepted {value}: x");
        // helm's schema error, naming the value and the type it wants.
        assert!(
            stderr.contains("values don't meet the specifications of the schema"),
            "{value}: {stderr}"
        );
        assert!(stderr.contains(value), "{value}: {stderr}");
        assert!(stderr.contains("array"), "{value}: {stderr}");
    }
}

/// The chart's admission policies are `admissionregistration.k8s.io/v1`,
/// served from Kubernetes 1.30: an older cluster is refused before
/// anything is installed, saying so.
#[test]
fn a_cluster_older_than_1_30_is_refused_before_anything_is_installed() {
    let template = |version: &str| {
        std::process::Command::new(helm())
            .current_dir(repo())
            .args([
                "template",
                RELEASE,
                "charts/orca-operator",
                "--set",
                "clusterName=chart-test",
                "--kube-version",
                version,
            ])
            .output()
            .expect("helm runs")
    };
    let old = template("1.29.9");
    assert!(!old.status.success());
    let said = String::from_utf8_lossy(&old.stderr);
    assert!(said.contains(">=1.30.0-0"), "{said}");
    assert!(template("1.30.0").status.success());
}

/// A release of the previous chart upgraded with `--reuse-values`: Helm
/// renders this chart with the values the old release was made with (the
/// old chart's defaults, which lack what this chart added, and the
/// user's), not with this chart's defaults. The chart renders, its notes
/// too, and what it added reads as its defaults say: the CRDs are this
/// release's, the operator reads CA files from /etc/orca/db-ca (without
/// it every `sslrootcert` a URL names is refused), the network policy
/// lets it reach its credential sources. Once, the notes failed on the
/// missing `crds` (a nil pointer), and the upgrade stopped there.
#[test]
fn an_upgrade_reusing_the_previous_releases_values_renders_as_this_charts_defaults() {
    let previous = std::fs::read_to_string(repo().join("tests/fixtures/releases/PREVIOUS"))
        .expect("tests/fixtures/releases/PREVIOUS names the previous release");
    let old_values = repo().join(format!(
        "tests/fixtures/releases/{}/chart/values.yaml",
        previous.trim()
    ));
    // This chart with the old values as its own: what Helm renders.
    let chart = std::env::temp_dir().join(format!("orca-chart-reused-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&chart);
    let copied = Command::new("cp")
        .arg("-rL")
        .arg(repo().join("charts/orca-operator"))
        .arg(&chart)
        .status()
        .expect("cp runs");
    assert!(
        copied.success(),
        "cannot copy the chart to {}",
        chart.display()
    );
    std::fs::copy(&old_values, chart.join("values.yaml"))
        .unwrap_or_else(|e| panic!("{}: {e}", old_values.display()));
    let out = Command::new(helm())
        .args(["install", RELEASE])
        .arg(&chart)
        .args(["--namespace", RELEASE_NAMESPACE, "--dry-run=client"])
        .args(["--set", "clusterName=chart-test", "--set"])
        .arg(format!("image.tag={}", env!("CARGO_PKG_VERSION")))
        .args(["--set", "networkPolicy.enabled=true"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", helm().display()));
    let _ = std::fs::remove_dir_all(&chart);
    assert!(
        out.status.success(),
        "the upgrade with the old values reused does not render: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("helm prints UTF-8");
    let (manifest, notes) = text
        .split_once("\nMANIFEST:\n")
        .and_then(|(_, rest)| rest.split_once("\nNOTES:\n"))
        .unwrap_or_else(|| panic!("no MANIFEST and NOTES in {text}"));
    assert!(notes.contains("The CRDs are this release's"), "{notes}");
    let docs: Vec<Value> = serde_yaml::Deserializer::from_str(manifest)
        .map(|doc| Value::deserialize(doc).expect("helm prints valid YAML"))
        .filter(|doc| !doc.is_null())
        .collect();
    let crds = inventory(&docs)
        .iter()
        .filter(|(k, _, _)| k == "CustomResourceDefinition")
        .count();
    assert_eq!(crds, 3);
    let args = args(&docs);
    assert!(
        args.windows(2)
            .any(|w| w[0] == "--database-ca-dir" && w[1] == "/etc/orca/db-ca"),
        "{args:?}"
    );
    let policy = object(&docs, "NetworkPolicy", RELEASE_NAMESPACE, FULLNAME);
    assert!(serde_yaml::to_string(policy)
        .unwrap()
        .contains("169.254.169.254"));
}
