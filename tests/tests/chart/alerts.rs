//! The optional PrometheusRule, tested with `promtool test rules`
//! (Debian's prometheus package) on made-up series
//! (tests/alerts/alerts.test.yml), and the optional Grafana dashboard.

use super::*;

/// `promtool` on PATH, or a failure saying how to get it.
fn promtool() -> PathBuf {
    orca_tests::bins::host_program("promtool").unwrap_or_else(|_| {
        panic!(
            "promtool is missing: the alert rules are tested with it; install Debian's \
             prometheus package (scripts/test does: ensure_promtool in scripts/lib/setup.sh)"
        )
    })
}

#[test]
fn the_alert_rules_fire_on_the_leaders_series_as_the_promtool_tests_expect() {
    let docs = render(&["prometheusRule.enabled=true"]);
    let rule = object(&docs, "PrometheusRule", RELEASE_NAMESPACE, FULLNAME);
    let groups = at(rule, &["spec", "groups"]).expect("rule groups");
    let dir = std::env::temp_dir().join(format!(
        "orca-alerts-{}",
        orca_tests::cluster::random_hex(8)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rules = serde_yaml::Mapping::new();
    rules.insert("groups".into(), groups.clone());
    std::fs::write(
        dir.join("rules.yml"),
        serde_yaml::to_string(&rules).unwrap(),
    )
    .unwrap();
    std::fs::copy(
        repo().join("tests/alerts/alerts.test.yml"),
        dir.join("alerts.test.yml"),
    )
    .unwrap();
    let out = Command::new(promtool())
        .args(["test", "rules"])
        .arg(dir.join("alerts.test.yml"))
        .output()
        .unwrap_or_else(|e| panic!("promtool could not run: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "promtool test rules failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let alerts: Vec<&str> = at(rule, &["spec", "groups", "0", "rules"])
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .filter_map(|r| str_at(r, &["alert"]))
        .collect();
    let test = std::fs::read_to_string(repo().join("tests/alerts/alerts.test.yml")).unwrap();
    for alert in &alerts {
        assert!(
            test.contains(&format!("alertname: {alert}")),
            "{alert} has no promtool test"
        );
    }

    // A healthy install must not page anyone: the steady-state case
    // evaluates every alert, a new one included, and expects none.
    let test: Value = serde_yaml::from_str(&test).expect("the promtool tests are YAML");
    let steady = at(&test, &["tests"])
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .find(|t| str_at(t, &["name"]) == Some("the steady state raises no alert"))
        .expect("a steady-state case");
    let silent: Vec<&str> = at(steady, &["alert_rule_test"])
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .filter(|t| at(t, &["exp_alerts"]).and_then(Value::as_sequence) == Some(&vec![]))
        .filter_map(|t| str_at(t, &["alertname"]))
        .collect();
    for alert in &alerts {
        assert!(
            silent.contains(alert),
            "the steady-state case does not expect {alert} silent"
        );
    }
}

#[test]
fn the_dashboard_is_a_configmap_the_grafana_sidecar_loads() {
    let docs = render(&[]);
    assert!(!inventory(&docs).iter().any(|(k, _, _)| k == "ConfigMap"));
    let docs = render(&["dashboard.enabled=true"]);
    let name = format!("{FULLNAME}-dashboard");
    let map = object(&docs, "ConfigMap", RELEASE_NAMESPACE, &name);
    assert_eq!(
        str_at(map, &["metadata", "labels", "grafana_dashboard"]),
        Some("1")
    );
    let json = str_at(map, &["data", "orca-operator.json"]).expect("the dashboard's JSON");
    let dashboard: serde_json::Value = serde_json::from_str(json).expect("valid JSON");
    let titles: Vec<&str> = dashboard["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["title"].as_str())
        .collect();
    for wanted in ["Handovers", "Time to start", "Pool sizes", "Cost"] {
        assert!(
            titles.iter().any(|t| t.starts_with(wanted)),
            "no {wanted} panel: {titles:?}"
        );
    }
}

/// What the operator's `/metrics` shows once every family it registers has
/// a sample, as a busy operator's does (an empty family is not shown):
/// the same registration as `orca-operator run`'s.
fn every_family() -> String {
    use orca_operator::{
        crd::{HandoverStatus, Phase, SchedulerStatus},
        k8s::metrics::register_all,
        warmpool::{cost::Use, Counts},
    };
    let mut registry = prometheus_client::registry::Registry::default();
    let (scheduler, pool, leader) = register_all(&mut registry);
    scheduler.reconciled("ns", "s");
    scheduler.failed("ns", "s", "act");
    let handover = HandoverStatus {
        started: Some("2026-01-01T00:00:00Z".into()),
        drained: Some("2026-01-01T00:05:00Z".into()),
        ..HandoverStatus::default()
    };
    let after = SchedulerStatus {
        phase: Phase::Ready,
        last_handover: Some(handover),
        ..SchedulerStatus::default()
    };
    scheduler.status("ns", "s", &SchedulerStatus::default(), &after);
    let p = "ns/p";
    pool.launched(p, 1);
    pool.terminated(p, "Leaked", 1);
    pool.counts(p, Counts::default());
    pool.instance_seconds(p, "t3.micro", false, Use::Idle, 1.0);
    pool.served(p, orca_db::pool::Served::new(1, 1, 1));
    pool.started(p, 1);
    pool.stopped(p, 1);
    pool.time_to_start(p, orca_db::pool::Source::Cold, 1.0);
    pool.capacity_error(p, "t3.micro", "subnet-1", "InsufficientInstanceCapacity");
    pool.throttle(p);
    pool.reconcile_failed(p, "api");
    pool.degraded(p, true);
    pool.objective(p, Some(0.9), Some(0.93), 0.95);
    leader.set(1);
    let mut page = String::new();
    prometheus_client::encoding::text::encode(&mut page, &registry).unwrap();
    page
}

#[test]
fn every_metric_the_rules_and_the_dashboard_use_is_one_the_operator_registers() {
    let page = every_family();
    let families = orca_tests::observability::families(&page);
    let used = orca_tests::observability::metric_names_used();
    assert!(used.len() > 10, "{used:?}");
    let missing: Vec<&String> = used
        .iter()
        .filter(|name| !orca_tests::observability::exported(name, &families))
        .collect();
    assert!(
        missing.is_empty(),
        "the chart's alerts or dashboard use metrics the operator does not export: {missing:?}\n{page}"
    );
}
