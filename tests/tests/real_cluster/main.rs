//! End to end on a real Kubernetes control plane (kube-apiserver,
//! kube-controller-manager and etcd from `scripts/build-kube`), the test
//! node running pods as local processes, the chart installed by helm and
//! the operator running as the chart's ServiceAccount: what a user does on
//! a cluster, on one. One control plane serves every test of this binary;
//! each test has a namespace, a release and a database of its own.

mod aws_identity;
mod classes;
mod deletion;
mod handover;
mod hostile_input;
mod hostile_limits;
mod in_cluster;
mod install;
mod kubectl_orca;
mod never_two;
mod pool_deletion;
mod replicas;
mod rollouts;
mod scale;
mod secrets_in_logs;
mod teardown;
mod tenancy;
mod visibility;
mod warm_pool;
mod windows;

use orca_operator::crd::{Phase, Scheduler, SchedulerStatus};
use orca_tests::on_cluster::orca_sim;

/// A Scheduler `name` running the reference scheduler with `image`,
/// quick ticks and time-outs, a register step, and `extra` lines of spec
/// (YAML, indented by two spaces).
pub fn scheduler(name: &str, image: &str, extra_args: &[&str], extra: &str) -> Scheduler {
    let mut args = vec!["scheduler", "--tick-ms", "200", "--stale-seconds", "3"];
    args.extend_from_slice(extra_args);
    let yaml = format!(
        r#"apiVersion: orca.dev/v1alpha1
kind: Scheduler
metadata:
  name: {name}
spec:
  image: {image}
  command: ["{sim}"]
  args: {args:?}
  database:
    urlSecretRef: {{name: orca-db, key: url}}
  register:
    command: ["sh", "-c", "echo registered $ORCA_IMAGE"]
    timeoutSeconds: 60
  handover:
    staleSeconds: 3
    joinTimeoutSeconds: 30
{extra}"#,
        sim = orca_sim(),
    );
    serde_yaml::from_str(&yaml).unwrap_or_else(|e| panic!("a test Scheduler: {e}\n{yaml}"))
}

/// Scheduler `orca` at `v1` applied, once it is Ready with v1 leading.
pub async fn v1_ready(stage: &orca_tests::on_cluster::OnCluster) -> SchedulerStatus {
    stage
        .apply_scheduler(&scheduler("orca", "v1", &[], ""))
        .await;
    stage
        .wait_scheduler(
            "orca",
            "v1 Ready",
            std::time::Duration::from_secs(60),
            ready_with("v1"),
        )
        .await
}

/// Ready with `image` leading, and the handover to it drained.
pub fn handed_over_to(image: &'static str) -> impl Fn(&SchedulerStatus) -> bool {
    move |s| {
        ready_with(image)(s)
            && s.last_handover
                .as_ref()
                .is_some_and(|h| h.drained.is_some())
    }
}

/// Ready, with `image` leading.
pub fn ready_with(image: &'static str) -> impl Fn(&SchedulerStatus) -> bool {
    move |s| s.phase == Phase::Ready && s.leader.as_ref().is_some_and(|l| l.image == image)
}
