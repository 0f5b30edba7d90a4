//! What the chart's PrometheusRule and Grafana dashboard ask of the
//! operator's metrics: the metric names their expressions use, read from
//! the chart as `helm template` renders it.

use std::{collections::BTreeSet, process::Command};

use crate::release::{helm, repo};

/// Every `orca_…` metric name in the rendered PrometheusRule's expressions
/// and the dashboard's queries.
pub fn metric_names_used() -> BTreeSet<String> {
    let out = Command::new(helm())
        .current_dir(repo())
        .args([
            "template",
            "orca",
            "charts/orca-operator",
            "--set",
            "clusterName=names",
            "--set",
            "prometheusRule.enabled=true",
            "--set",
            "dashboard.enabled=true",
        ])
        .output()
        .unwrap_or_else(|e| panic!("helm could not run: {e}"));
    assert!(
        out.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // Only expressions: `expr:` lines of the rules, `"expr":` of the panels.
    let exprs = text.lines().filter(|l| {
        let l = l.trim_start();
        l.starts_with("expr:") || l.starts_with("\"expr\":")
    });
    let mut names = BTreeSet::new();
    for line in exprs {
        let mut rest = line;
        while let Some(at) = rest.find("orca_") {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[at + name.len()..];
            names.insert(name);
        }
    }
    names
}

/// The metric families a `/metrics` page declares (`# TYPE name kind`).
pub fn families(page: &str) -> BTreeSet<String> {
    page.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Whether a series name `name` belongs to one of `families` (a counter's
/// `_total`, a histogram's `_bucket`, `_sum` and `_count`).
pub fn exported(name: &str, families: &BTreeSet<String>) -> bool {
    families.contains(name)
        || ["_total", "_bucket", "_sum", "_count", "_created"]
            .iter()
            .any(|suffix| {
                name.strip_suffix(suffix)
                    .is_some_and(|family| families.contains(family))
            })
}
