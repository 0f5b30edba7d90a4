//! The chart and the CRDs as a user meets them: `helm install`, every
//! example applied with `kubectl apply`, bad specs refused by the API
//! server itself (OpenAPI schema and CEL rules evaluated) naming the field.

use std::{io::Write, process::Stdio};

use orca_tests::on_cluster::{example, kubectl, OnCluster};

/// `kubectl apply -f -` of `yaml` in the stage's namespace, as the admin;
/// (success, stdout + stderr).
fn kubectl_apply(stage: &OnCluster, yaml: &str, dry_run: bool) -> (bool, String) {
    let mut cmd = std::process::Command::new(kubectl());
    cmd.arg("--kubeconfig")
        .arg(stage.cp().admin_kubeconfig())
        .args(["apply", "-n", stage.ns(), "-f", "-"]);
    if dry_run {
        cmd.arg("--dry-run=server");
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("kubectl could not run: {e}"));
    child
        .stdin
        .take()
        .expect("invariant: stdin is piped")
        .write_all(yaml.as_bytes())
        .expect("writing to kubectl");
    let out = child.wait_with_output().expect("kubectl ran");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_applies_with_kubectl_after_helm_install() {
    let stage = OnCluster::without_operator("examples").await;
    for file in [
        "secret.yaml",
        "scheduler.yaml",
        "warmpool.yaml",
        "warmpoolclass.yaml",
    ] {
        let yaml = std::fs::read_to_string(example(file)).expect("reading an example");
        let (ok, out) = kubectl_apply(&stage, &yaml, false);
        assert!(ok, "kubectl apply -f examples/{file}: {out}");
        assert!(out.contains("created"), "examples/{file}: {out}");
    }
    let scheduler = stage
        .schedulers()
        .get("orca")
        .await
        .expect("the example Scheduler");
    assert_eq!(scheduler.spec.handover.join_timeout_seconds, 120);
    let pool = stage
        .pools()
        .get("runners")
        .await
        .expect("the example WarmPool");
    assert_eq!((pool.spec.idle.min, pool.spec.idle.max), (2, 4));
    // The class is cluster-scoped: it goes with the test, not its namespace.
    let classes: kube::Api<orca_operator::crd::WarmPoolClass> =
        kube::Api::all(stage.client().clone());
    let class = classes
        .get("shared")
        .await
        .expect("the example WarmPoolClass");
    assert_eq!(
        class.spec.namespace_limits.and_then(|l| l.instances),
        Some(20)
    );
    classes
        .delete("shared", &Default::default())
        .await
        .expect("deleting the example class");
}

/// `pool` (examples/warmpool.yaml) with one schedule.
fn with_schedule(pool: &str, cron: &str, timezone: &str, max: i32) -> String {
    with_period(pool, cron, timezone, "10h", max)
}

/// `pool` with one schedule of `duration`.
fn with_period(pool: &str, cron: &str, timezone: &str, duration: &str, max: i32) -> String {
    pool.replace(
        "  maxInstances: 10\n",
        &format!(
            "  maxInstances: 10\n  schedules:\n    - cron: \"{cron}\"\n      timezone: \"{timezone}\"\n      duration: {duration}\n      idle: {{min: 1, max: {max}}}\n"
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_specs_are_refused_by_the_api_server_naming_the_field() {
    let stage = OnCluster::without_operator("refused").await;
    let scheduler = std::fs::read_to_string(example("scheduler.yaml")).unwrap();
    let pool = std::fs::read_to_string(example("warmpool.yaml")).unwrap();
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "a Scheduler without an image",
            scheduler.replace("  image: registry.example.com/morca/orca:v1\n", ""),
            "spec.image: Required value",
        ),
        (
            "an empty image (CEL)",
            scheduler.replace("registry.example.com/morca/orca:v1", "\"\""),
            "image must not be empty",
        ),
        (
            "a negative join timeout",
            scheduler.replace("joinTimeoutSeconds: 120", "joinTimeoutSeconds: -30"),
            "spec.handover.joinTimeoutSeconds",
        ),
        (
            "a register timeout of zero",
            scheduler.replace("timeoutSeconds: 300", "timeoutSeconds: 0"),
            "spec.register.timeoutSeconds",
        ),
        (
            "an unknown field in the spec",
            scheduler.replace(
                "  image: registry.example.com/morca/orca:v1\n",
                "  image: registry.example.com/morca/orca:v1\n  imagePullPolicy: Always\n",
            ),
            "imagePullPolicy",
        ),
        (
            "a Scheduler without a database",
            scheduler.replace(
                "  database:\n    urlSecretRef:\n      name: orca-db\n      key: url\n",
                "",
            ),
            "spec.database: Required value",
        ),
        (
            "a WarmPool without maxInstances",
            pool.replace("  maxInstances: 10\n", ""),
            "spec.maxInstances: Required value",
        ),
        (
            "an unknown field in handover",
            scheduler.replace("joinTimeoutSeconds: 120", "joinTimeout: 120"),
            "joinTimeout",
        ),
        (
            "an empty Secret name (CEL)",
            scheduler.replace("name: orca-db", "name: \"\""),
            "the Secret's name must not be empty",
        ),
        (
            "idle.min above idle.max (CEL)",
            pool.replace("min: 2", "min: 5"),
            "spec.idle",
        ),
        (
            "idle.max above maxInstances (CEL)",
            pool.replace("maxInstances: 10", "maxInstances: 3"),
            "maxInstances",
        ),
        (
            "a negative idle.min",
            pool.replace("min: 2", "min: -1"),
            "spec.idle.min",
        ),
        (
            "a misspelt launch field",
            pool.replace("imageId:", "amiId:"),
            "amiId",
        ),
        (
            "a schedule whose cron is not five fields (CEL)",
            with_schedule(&pool, "every day", "UTC", 4),
            "cron must be a cron expression of five fields",
        ),
        (
            "a schedule whose minute is out of range (CEL)",
            with_schedule(&pool, "99 8 * * *", "UTC", 4),
            "cron's minute field must be",
        ),
        (
            "a schedule whose month is out of range (CEL)",
            with_schedule(&pool, "0 8 * 13 *", "UTC", 4),
            "cron's month field must be",
        ),
        (
            "a schedule whose day of week is no day (CEL)",
            with_schedule(&pool, "0 8 * * funday", "UTC", 4),
            "cron's day of week field must be",
        ),
        (
            "a schedule whose time zone is no zone's name (CEL)",
            with_schedule(&pool, "0 8 * * 1-5", "Europe Berlin", 4),
            "timezone must be an IANA time zone name",
        ),
        (
            "a schedule in a time zone there is none of (CEL)",
            with_schedule(&pool, "0 8 * * 1-5", "Mars/Olympus_Mons", 4),
            "spec.schedules[0].timezone: Invalid value: \"string\": unknown time zone Mars/Olympus_Mons",
        ),
        // Once admitted, and a panic in the operator that stopped it for
        // every object of the cluster: now refused, naming the field.
        (
            "a period of 300000 years (CEL)",
            with_period(&pool, "* * * * *", "UTC", "300000y", 4),
            "spec.schedules[0].duration: Invalid value: \"300000y\": duration must be a duration in weeks, days, hours, minutes or seconds",
        ),
        (
            "a period over a year (CEL)",
            with_period(&pool, "* * * * *", "UTC", "400d", 4),
            "spec.schedules[0].duration: Invalid value: \"400d\": duration must be at most 366 days",
        ),
        (
            "a period of a year in hours and days (CEL)",
            with_period(&pool, "0 8 * * *", "UTC", "366d 1h", 4),
            "duration must be at most 366 days",
        ),
        (
            "a drain time-out of thousands of years",
            scheduler.replace("drainTimeoutSeconds: 3600", "drainTimeoutSeconds: 9000000000000"),
            "spec.handover.drainTimeoutSeconds",
        ),
        (
            "a million instances",
            pool.replace("maxInstances: 10", "maxInstances: 1000000"),
            "spec.maxInstances",
        ),
        (
            "a schedule's idle.max above maxInstances (CEL)",
            with_schedule(&pool, "0 8 * * 1-5", "Europe/Berlin", 12),
            "schedules[].idle.max must not exceed maxInstances",
        ),
        (
            "a stopped reserve whose min is above its max (CEL)",
            pool.replace(
                "  maxInstances: 10\n",
                "  maxInstances: 10\n  stopped: {min: 3, max: 2}\n",
            ),
            "stopped.min must not exceed stopped.max",
        ),
        (
            "a stopped reserve above maxInstances (CEL)",
            pool.replace(
                "  maxInstances: 10\n",
                "  maxInstances: 10\n  stopped: {min: 11}\n",
            ),
            "stopped.min must not exceed maxInstances",
        ),
        (
            "a stopped reserve of spot instances (CEL)",
            pool.replace(
                "  maxInstances: 10\n",
                "  maxInstances: 10\n  stopped: {min: 1}\n",
            )
            .replace("  launch:\n", "  launch:\n    capacityType: spot\n"),
            "stopped needs launch.capacityType onDemand",
        ),
        (
            "an unknown capacity type",
            pool.replace("  launch:\n", "  launch:\n    capacityType: cheap\n"),
            "spec.launch.capacityType",
        ),
    ];
    for (what, yaml, naming) in cases {
        let (ok, out) = kubectl_apply(&stage, &yaml, true);
        assert!(!ok, "{what}: the API server accepted it: {out}");
        assert!(
            out.contains(naming),
            "{what}: the refusal should name {naming:?}: {out}"
        );
    }
    let good = with_schedule(&pool, "30 7 * * mon-fri", "America/New_York", 4).replace(
        "  maxInstances: 10\n",
        "  maxInstances: 10\n  stopped: {min: 2}\n",
    );
    let (ok, out) = kubectl_apply(&stage, &good, true);
    assert!(ok, "a good schedule and reserve were refused: {out}");
    for cron in [
        "*/15 * * * *",
        "0 9 * * MON-FRI",
        "0 0 1,15 * *",
        "0 0 L * *",
        "5 4 * * 5L",
        "0 8 ? * 1#2",
        "0 0 1-31/2 jan-jun *",
    ] {
        let (ok, out) = kubectl_apply(&stage, &with_schedule(&pool, cron, "UTC", 4), true);
        assert!(ok, "{cron:?} was refused: {out}");
    }
    for duration in ["366d", "8784h", "1h30m", "2 weeks", "90min", "52w 2d"] {
        let yaml = with_period(&pool, "* * * * *", "UTC", duration, 4);
        let (ok, out) = kubectl_apply(&stage, &yaml, true);
        assert!(ok, "{duration:?} was refused: {out}");
    }
}
