//! `kubectl orca` against the real API server, run by kubectl itself as a
//! plugin found on PATH: `status` of a Scheduler mid-handover and of a
//! WarmPool with capacity holds, compared with golden files
//! (`tests/golden/kubectl-orca/`); `-o json`; `--watch`; `drain`, `pause`, `resume` and
//! `rollout restart` as patches of the objects; one-line errors.
//!
//! The statuses are written by the test (the status subresource, validated
//! by the CRDs' schema), with times relative to now, so the output is the
//! same on every run; the operator writes the same fields.

use std::{path::PathBuf, process::Command};

use chrono::{Duration as Span, SecondsFormat, Utc};
use kube::api::{Patch, PatchParams};
use orca_operator::crd::{Scheduler, WarmPool};
use orca_tests::{bins, on_cluster::OnCluster, warm};

use super::scheduler;

fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("golden/kubectl-orca")
        .join(name)
}

/// The status fixture `name` with its `{{ago:S}}` / `{{in:S}}` times made
/// concrete, and those times, to be put back in the output.
fn fixture(name: &str) -> (serde_json::Value, Vec<(String, String)>) {
    let mut text = std::fs::read_to_string(golden(name)).unwrap();
    let now = Utc::now();
    let mut times = Vec::new();
    while let Some(start) = text.find("{{") {
        let end = start + text[start..].find("}}").expect("a closed placeholder") + 2;
        let placeholder = text[start..end].to_string();
        let (sign, secs) = placeholder[2..placeholder.len() - 2]
            .split_once(':')
            .expect("{{ago:S}} or {{in:S}}");
        let secs: i64 = secs.parse().unwrap();
        let at = match sign {
            "ago" => now - Span::seconds(secs),
            _ => now + Span::seconds(secs),
        };
        let concrete = at.to_rfc3339_opts(SecondsFormat::Secs, true);
        text = text.replace(&placeholder, &concrete);
        times.push((concrete, placeholder));
    }
    (serde_json::from_str(&text).unwrap(), times)
}

/// Writes status fixture `file` on object `name` of `api` (the status
/// subresource, as the operator writes it); its times, as [`fixture`].
async fn write_status<K>(api: &kube::Api<K>, name: &str, file: &str) -> Vec<(String, String)>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let (status, times) = fixture(file);
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": status })),
    )
    .await
    .unwrap_or_else(|e| panic!("{file} on {name}: {e}"));
    times
}

/// `kubectl orca <args>` in the stage's namespace, kubectl finding the
/// plugin on PATH, not run yet.
fn command(stage: &OnCluster, args: &[&str]) -> Command {
    let plugin_dir = bins::path("kubectl-orca")
        .parent()
        .expect("a binary has a directory")
        .to_path_buf();
    let path = std::env::join_paths(std::iter::once(plugin_dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    let mut cmd = Command::new(orca_tests::on_cluster::kubectl());
    cmd.arg("orca")
        .args([
            "--kubeconfig",
            &stage.cp().admin_kubeconfig().to_string_lossy(),
        ])
        .args(["-n", stage.ns()])
        .args(args)
        .env("PATH", path);
    cmd
}

/// `kubectl orca <args>` run to its end: (exit success, stdout, stderr).
pub(super) fn kubectl_orca(stage: &OnCluster, args: &[&str]) -> (bool, String, String) {
    let out = command(stage, args).output().expect("kubectl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The lines `watching` prints until one `until` is true (10 s at most).
async fn lines_until(
    watching: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    until: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut seen = Vec::new();
    let read = async {
        while let Some(line) = watching.next_line().await.expect("stdout reads") {
            let done = until(&line);
            seen.push(line);
            if done {
                return true;
            }
        }
        false
    };
    let found = tokio::time::timeout(std::time::Duration::from_secs(10), read)
        .await
        .unwrap_or(false);
    assert!(found, "not printed within 10 s; printed: {seen:?}");
    seen
}

/// `actual` with the fixture's times and the namespace put back as
/// placeholders, equal to golden file `name` (`ORCA_UPDATE_GOLDEN=1`
/// writes it instead).
fn compare(stage: &OnCluster, name: &str, actual: &str, times: &[(String, String)]) {
    let mut text = actual.replace(stage.ns(), "NAMESPACE");
    for (concrete, placeholder) in times {
        text = text.replace(concrete, placeholder);
    }
    let path = golden(name);
    if std::env::var_os("ORCA_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (ORCA_UPDATE_GOLDEN=1 writes it)", path.display()));
    assert_eq!(
        text,
        expected,
        "kubectl orca's output differs from {}",
        path.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_pause_resume_and_restart_through_kubectl() {
    let stage = OnCluster::without_operator("plugin").await;
    let schedulers = stage.schedulers();
    stage
        .apply_scheduler(&scheduler("orca", "registry.example/orca:v2", &[], ""))
        .await;
    let scheduler_times = write_status(&schedulers, "orca", "scheduler.status.json").await;
    let pools = stage.pools();
    let subnets = vec!["subnet-0a1b".to_string()];
    let mut spec = warm::spec("http://127.0.0.1:9", &["m7i.large"], &subnets, 2, 4, 8);
    spec.scheduler = "orca".into();
    spec.objective = Some(orca_operator::crd::Objective {
        time_to_start: orca_operator::crd::StartTarget {
            percentile: 95,
            seconds: 20,
        },
        stopped_cost_ratio: None,
        prices: Default::default(),
    });
    stage.create_pool(&WarmPool::new("pool", spec)).await;
    let pool_times = write_status(&pools, "pool", "warmpool.status.json").await;

    // What it is doing and why, in one command each.
    let (ok, out, err) = kubectl_orca(&stage, &["status", "scheduler", "orca"]);
    assert!(ok, "{err}");
    compare(&stage, "scheduler.txt", &out, &scheduler_times);
    let (ok, out, err) = kubectl_orca(&stage, &["status", "wp", "pool"]);
    assert!(ok, "{err}");
    compare(&stage, "warmpool.txt", &out, &pool_times);
    // Not a terminal: no colour codes.
    assert!(!out.contains('\x1b'), "{out}");

    // The object as the API has it.
    let (ok, out, err) = kubectl_orca(&stage, &["status", "scheduler", "orca", "-o", "json"]);
    assert!(ok, "{err}");
    let object: Scheduler = serde_json::from_str(&out).expect("-o json is the object");
    assert_eq!(object.status.unwrap().leader.unwrap().instance, 7);
    assert!(object.metadata.managed_fields.is_none());
    let (ok, out, _) = kubectl_orca(&stage, &["status", "wp", "pool", "-o", "yaml"]);
    assert!(ok);
    let object: WarmPool = serde_yaml::from_str(&out).expect("-o yaml is the object");
    assert_eq!(object.status.unwrap().idle, 2);

    // --watch: printed again when the object changes, until interrupted.
    let mut child =
        tokio::process::Command::from(command(&stage, &["status", "wp", "pool", "--watch"]))
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("kubectl runs");
    let mut watching =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(child.stdout.take().unwrap()));
    lines_until(&mut watching, |l| l.starts_with("Instances: 2 idle")).await;
    pools
        .patch_status(
            "pool",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"idle": 5}})),
        )
        .await
        .unwrap();
    let again = lines_until(&mut watching, |l| l.starts_with("Instances: 5 idle")).await;
    assert!(again.iter().any(|l| l == "---"), "{again:?}");
    child.kill().await.unwrap();

    // Steering: each a change of the resource the operator acts on.
    let (ok, out, err) = kubectl_orca(&stage, &["pause", "scheduler", "orca"]);
    assert!(ok, "{err}");
    assert_eq!(out, format!("scheduler {}/orca: paused\n", stage.ns()));
    assert!(schedulers.get("orca").await.unwrap().spec.paused);
    let (ok, out, _) = kubectl_orca(&stage, &["status", "scheduler", "orca"]);
    assert!(ok && out.contains("paused: spec.paused is true"), "{out}");
    let (ok, _, err) = kubectl_orca(&stage, &["resume", "scheduler", "orca"]);
    assert!(ok, "{err}");
    assert!(!schedulers.get("orca").await.unwrap().spec.paused);
    let (ok, _, err) = kubectl_orca(&stage, &["pause", "warmpool", "pool"]);
    assert!(ok, "{err}");
    assert!(pools.get("pool").await.unwrap().spec.paused);

    let before = orca_operator::scheduler::revision_of(&schedulers.get("orca").await.unwrap().spec);
    let (ok, out, err) = kubectl_orca(&stage, &["rollout", "restart", "scheduler", "orca"]);
    assert!(ok, "{err}");
    assert!(out.contains("restarted at"), "{out}");
    let restarted = schedulers.get("orca").await.unwrap().spec;
    let annotations = restarted.pod_template.as_ref().unwrap().annotations.clone();
    assert!(
        annotations.contains_key("orca.dev/restartedAt"),
        "{annotations:?}"
    );
    assert_eq!(restarted.image, "registry.example/orca:v2");
    assert_ne!(
        orca_operator::scheduler::revision_of(&restarted),
        before,
        "a restart is a new revision of the same image"
    );

    // Drain: the annotation the operator retires instances by, added to.
    let drain_of = |p: &orca_operator::crd::WarmPool| {
        p.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("orca.dev/drain").cloned())
    };
    let (ok, out, err) = kubectl_orca(&stage, &["drain", "wp", "pool", "i-0b2"]);
    assert!(ok, "{err}");
    assert_eq!(
        out,
        format!(
            "warmpool {}/pool: draining i-0b2 (each retired once it is not in a run)\n",
            stage.ns()
        )
    );
    let (ok, _, err) = kubectl_orca(&stage, &["drain", "wp", "pool", "i-0a1"]);
    assert!(ok, "{err}");
    assert_eq!(
        drain_of(&pools.get("pool").await.unwrap()).as_deref(),
        Some("i-0a1,i-0b2")
    );
    // An id the status does not list is a typo, refused; nothing changed.
    let (ok, _, err) = kubectl_orca(&stage, &["drain", "wp", "pool", "i-typo"]);
    assert!(!ok);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("\"i-typo\" is not an instance of warmpool"),
        "{err}"
    );
    assert_eq!(
        drain_of(&pools.get("pool").await.unwrap()).as_deref(),
        Some("i-0a1,i-0b2")
    );
    let (ok, _, err) = kubectl_orca(&stage, &["drain", "scheduler", "orca", "i-0a1"]);
    assert!(
        !ok && err.contains("drain is for a warmpool's instances"),
        "{err}"
    );

    // Errors: one line, naming what was wrong; nothing changed.
    let (ok, out, err) = kubectl_orca(&stage, &["status", "scheduler", "nope"]);
    assert!(!ok && out.is_empty());
    assert_eq!(
        err,
        format!("kubectl orca: scheduler {}/nope not found\n", stage.ns())
    );
    let (ok, _, err) = kubectl_orca(&stage, &["pause", "warmpool", "nope"]);
    assert!(!ok);
    assert_eq!(
        err,
        format!("kubectl orca: warmpool {}/nope not found\n", stage.ns())
    );
    let (ok, _, err) = kubectl_orca(&stage, &["rollout", "restart", "warmpool", "pool"]);
    assert!(!ok);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("a warmpool has no rollouts"), "{err}");
    let (ok, _, err) = kubectl_orca(&stage, &["pause", "deployment", "x"]);
    assert!(!ok && err.contains("deployment"), "{err}");
}
