//! The scheduler Pod of a revision
//! (docs/protocol.md#the-operators-rollout), and what `decide` reads back
//! from a Pod ([`PodView`]).
//!
//! The operator manages these pods itself, as CloudNativePG does: one per
//! revision, `restartPolicy: Never`, owned by the Scheduler. A dead pod is
//! replaced by a new one (a new name, the next sequence), never restarted in
//! place: a restarted old image would be the newest instance and take the
//! lead back.
//!
//! The pod a revision runs as, field by field,
//! with its tests.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, EnvVar, EnvVarSource, Pod, PodSpec, SecretKeySelector,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time as KubeTime};
use kube::{Resource, ResourceExt};

use crate::crd::{Scheduler, SchedulerSpec};
use crate::runtime::names::{LABEL_REVISION, LABEL_SCHEDULER, LABEL_SEQUENCE};
use crate::scheduler::{scheduler_label, PodState, PodView, Time, Waiting};

/// The scheduler container's name in every pod.
pub const CONTAINER: &str = "scheduler";

/// The variables of the image contract
/// (docs/architecture.md#the-reference-scheduler-orca-sim); the operator sets
/// them, `spec.env` can't.
const CONTRACT: [&str; 3] = ["ORCA_DATABASE_URL", "ORCA_OVERLAP", "ORCA_IMAGE"];

/// The image contract's environment for `image`: `ORCA_DATABASE_URL` from the
/// Secret (a `secretKeyRef`, never a literal), `ORCA_OVERLAP`, `ORCA_IMAGE`,
/// then `spec.env` (less any of those three names).
pub fn contract_env(spec: &SchedulerSpec, image: &str) -> Vec<EnvVar> {
    let secret = &spec.database.url_secret_ref;
    let mut env = vec![
        EnvVar {
            name: "ORCA_DATABASE_URL".into(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret.name.clone(),
                    key: secret.key.clone(),
                    optional: Some(false),
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
        literal("ORCA_OVERLAP", if spec.overlap { "on" } else { "off" }),
        literal("ORCA_IMAGE", image),
    ];
    env.extend(
        spec.env
            .iter()
            .filter(|e| !CONTRACT.contains(&e.name.as_str()))
            .cloned(),
    );
    env
}

fn literal(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

/// The labels every object of `scheduler`'s revision carries, over the pod
/// template's own (ours win). `orca.dev/scheduler` is the name, or for a
/// name no label value can hold (over 63 characters) a short form of it.
pub fn labels(scheduler: &Scheduler, revision: &str) -> BTreeMap<String, String> {
    let mut labels = scheduler
        .spec
        .pod_template
        .as_ref()
        .map(|t| t.labels.clone())
        .unwrap_or_default();
    labels.insert(
        LABEL_SCHEDULER.into(),
        scheduler_label(&scheduler.name_any()),
    );
    labels.insert(LABEL_REVISION.into(), revision.into());
    labels
}

/// The Scheduler as the controlling owner: the pod goes when it goes, and
/// the controller's `owns` maps pod events back to it.
pub fn owner(
    scheduler: &Scheduler,
) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    scheduler.controller_owner_ref(&()).into_iter().collect()
}

/// The pod of `Action::CreatePod`: `name`, with `host` as its host name
/// (which the instance row records as `host`), for `revision` and
/// `sequence`, running `image` with the spec's command, args, env and pod
/// template.
pub fn scheduler_pod(
    scheduler: &Scheduler,
    name: &str,
    host: &str,
    revision: &str,
    sequence: u32,
    image: &str,
) -> Pod {
    let spec = &scheduler.spec;
    let template = spec.pod_template.clone().unwrap_or_default();
    let mut labels = labels(scheduler, revision);
    labels.insert(LABEL_SEQUENCE.into(), sequence.to_string());
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: scheduler.namespace(),
            labels: Some(labels),
            annotations: non_empty(template.annotations),
            owner_references: Some(owner(scheduler)),
            ..Default::default()
        },
        spec: Some(PodSpec {
            hostname: Some(host.into()),
            termination_grace_period_seconds: Some(termination_grace(spec)),
            ..pod_spec(spec, CONTAINER, image, &spec.command, &spec.args)
        }),
        status: None,
    }
}

/// How long a scheduler pod deleted by anyone but the operator — by hand,
/// with its namespace, by the garbage collector, by an eviction — has
/// between SIGTERM and SIGKILL: the drain time-out and the [`stop_grace`].
/// A scheduler takes SIGTERM as "drain": it starts nothing more, finishes
/// the runs in hand, ends its row and exits, so a deletion from outside
/// loses no run that ends within the drain time-out.
pub fn termination_grace(spec: &SchedulerSpec) -> i64 {
    spec.handover
        .drain_timeout_seconds
        .clamp(0, crate::crd::MAX_SECONDS)
        + stop_grace(spec)
}

/// The grace the operator's own deletions give (`gracePeriodSeconds`):
/// by then there is nothing left to wait for — the row ended, the drain
/// time-out passed, the rollout was aborted — but a leader still needs a
/// few of its stale limits to step down and be seen gone, rather than
/// Kubernetes' 30 s default.
pub fn stop_grace(spec: &SchedulerSpec) -> i64 {
    (spec
        .handover
        .stale_seconds
        .clamp(1, crate::crd::MAX_SECONDS)
        * 3)
    .max(60)
}

/// What a scheduler pod and a register Job's pod share: container
/// `container` running `image` with `command`/`args`, the image contract's
/// environment and the pod template, never restarted in place.
pub fn pod_spec(
    spec: &SchedulerSpec,
    container: &str,
    image: &str,
    command: &[String],
    args: &[String],
) -> PodSpec {
    let template = spec.pod_template.clone().unwrap_or_default();
    PodSpec {
        restart_policy: Some("Never".into()),
        containers: vec![Container {
            name: container.into(),
            image: Some(image.into()),
            command: non_empty_vec(command.to_vec()),
            args: non_empty_vec(args.to_vec()),
            env: Some(contract_env(spec, image)),
            resources: spec.resources.clone(),
            termination_message_policy: Some("FallbackToLogsOnError".into()),
            security_context: template.container_security_context,
            ..Default::default()
        }],
        node_selector: non_empty(template.node_selector),
        tolerations: non_empty_vec(template.tolerations),
        affinity: template.affinity,
        service_account_name: template.service_account_name,
        image_pull_secrets: non_empty_vec(template.image_pull_secrets),
        security_context: template.security_context,
        priority_class_name: template.priority_class_name,
        ..Default::default()
    }
}

pub(super) fn non_empty<K, V>(map: BTreeMap<K, V>) -> Option<BTreeMap<K, V>> {
    (!map.is_empty()).then_some(map)
}

pub(super) fn non_empty_vec<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

pub(super) fn chrono_of(t: &KubeTime) -> Time {
    chrono::DateTime::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond().max(0) as u32)
        .unwrap_or_default()
}

/// What `decide` sees of a scheduler pod; `None` for a pod without the
/// revision and sequence labels (not one the operator made).
pub fn pod_view(pod: &Pod) -> Option<PodView> {
    let labels = pod.metadata.labels.as_ref()?;
    let revision = labels.get(LABEL_REVISION)?.clone();
    let sequence = labels.get(LABEL_SEQUENCE)?.parse().ok()?;
    let created = pod
        .metadata
        .creation_timestamp
        .as_ref()
        .map(chrono_of)
        .unwrap_or_default();
    let spec_container = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == CONTAINER));
    let image = spec_container
        .and_then(|c| c.image.clone())
        .unwrap_or_default();
    let state = container_status(pod).and_then(|c| c.state.as_ref());
    // A container that ended keeps its start: how long it ran decides
    // whether it was crash-looping.
    let started = state
        .and_then(|s| {
            s.running
                .as_ref()
                .and_then(|r| r.started_at.as_ref())
                .or(s.terminated.as_ref().and_then(|t| t.started_at.as_ref()))
        })
        .map(chrono_of);
    let waiting = state.and_then(|s| s.waiting.as_ref()).and_then(|w| {
        Some(Waiting::new(
            w.reason.clone()?,
            w.message.clone().unwrap_or_default(),
        ))
    });
    Some(
        PodView::new(
            pod.name_any(),
            pod.spec
                .as_ref()
                .and_then(|s| s.hostname.clone())
                .unwrap_or_else(|| pod.name_any()),
            revision,
            sequence,
            image,
            created,
            pod_state(pod, created),
        )
        .with_started(started)
        .with_waiting(waiting)
        .with_deleting(pod.metadata.deletion_timestamp.is_some())
        .with_deletion_due(pod.metadata.deletion_timestamp.as_ref().map(chrono_of)),
    )
}

/// The scheduler container's status, once the kubelet has reported one.
fn container_status(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == CONTAINER))
}

/// The scheduler container's state: its exit code and termination message
/// once terminated; a pod that failed without one (evicted, say) has exited
/// too, with the pod's own reason.
fn pod_state(pod: &Pod, created: Time) -> PodState {
    let status = pod.status.as_ref();
    let state = container_status(pod).and_then(|c| c.state.as_ref());
    if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
        let message = t
            .message
            .clone()
            .or_else(|| t.reason.clone())
            .unwrap_or_default();
        return PodState::Exited {
            code: t.exit_code,
            message,
            finished: t.finished_at.as_ref().map(chrono_of).unwrap_or(created),
        };
    }
    if state.and_then(|s| s.running.as_ref()).is_some() {
        return PodState::Running;
    }
    match status.and_then(|s| s.phase.as_deref()) {
        Some("Failed") | Some("Succeeded") => {
            let s = status.cloned().unwrap_or_default();
            let message = [s.reason, s.message]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(": ");
            PodState::Exited {
                code: -1,
                message,
                finished: created,
            }
        }
        _ => PodState::Pending,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
        PodStatus,
    };

    use super::*;
    use crate::test_support::scheduler;

    #[test]
    fn the_pod_follows_the_image_contract() {
        let pod = scheduler_pod(
            &scheduler(),
            "orca-abc-3",
            "ns-orca-1a2b3c-abc-3",
            "abc",
            3,
            "orca:v2",
        );
        let meta = &pod.metadata;
        assert_eq!(meta.namespace.as_deref(), Some("jobs"));
        let labels = meta.labels.clone().unwrap();
        assert_eq!(labels["orca.dev/scheduler"], "orca");
        assert_eq!(labels["orca.dev/revision"], "abc");
        assert_eq!(labels["orca.dev/sequence"], "3");
        assert_eq!(labels["team"], "data");
        assert_eq!(meta.annotations.clone().unwrap()["note"], "hi");
        let owner = &meta.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Scheduler", "orca", "uid-1")
        );
        assert_eq!(owner.controller, Some(true));

        let spec = pod.spec.unwrap();
        assert_eq!(
            spec.hostname.as_deref(),
            Some("ns-orca-1a2b3c-abc-3"),
            "the host name names the namespace"
        );
        assert_eq!(
            spec.termination_grace_period_seconds,
            Some(3600 + 60),
            "a deletion from outside drains: the drain time-out and the stop grace"
        );
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.service_account_name.as_deref(), Some("orca"));
        assert_eq!(spec.node_selector.unwrap()["pool"], "ops");
        assert_eq!(spec.tolerations.unwrap().len(), 1);
        assert_eq!(spec.security_context.unwrap().run_as_non_root, Some(true));
        assert_eq!(spec.priority_class_name.as_deref(), Some("orca-critical"));
        let c = &spec.containers[0];
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(c.image.as_deref(), Some("orca:v2"));
        assert_eq!(c.command.clone().unwrap(), ["orca", "scheduler"]);
        assert_eq!(c.args.clone().unwrap(), ["--tick", "1"]);
        assert_eq!(
            c.termination_message_policy.as_deref(),
            Some("FallbackToLogsOnError")
        );
    }

    /// A dotted or long name (valid for a Scheduler) gives a pod whose name
    /// and host name are one DNS label, and a label value within 63.
    #[test]
    fn any_scheduler_name_gives_a_pod_the_api_server_takes() {
        for name in [
            "team.pipelines",
            &format!("{}.{}", "a".repeat(100), "b".repeat(100)),
        ] {
            let mut s = scheduler();
            s.metadata.name = Some(name.to_string());
            let pod_name = crate::scheduler::pod_name(name, "0123456789", 3);
            let pod = scheduler_pod(&s, &pod_name, &pod_name, "0123456789", 3, "orca:v2");
            let host = pod.spec.as_ref().and_then(|p| p.hostname.clone());
            assert_eq!(host.as_deref(), Some(pod_name.as_str()), "host = pod name");
            assert!(
                pod_name.len() <= 63 && !pod_name.contains('.'),
                "{pod_name}"
            );
            let label = &pod.metadata.labels.clone().unwrap()["orca.dev/scheduler"];
            assert_eq!(label, &scheduler_label(name));
            assert!(label.len() <= 63, "{label}");
        }
    }

    #[test]
    fn the_database_url_is_a_secret_reference_and_the_contract_wins() {
        let env = contract_env(&scheduler().spec, "orca:v2");
        let names: Vec<&str> = env.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            ["ORCA_DATABASE_URL", "ORCA_OVERLAP", "ORCA_IMAGE", "TZ"]
        );
        assert_eq!(env[0].value, None);
        let r = env[0]
            .value_from
            .as_ref()
            .unwrap()
            .secret_key_ref
            .as_ref()
            .unwrap();
        assert_eq!((r.name.as_str(), r.key.as_str()), ("orca-db", "url"));
        assert_eq!(env[1].value.as_deref(), Some("on"));
        assert_eq!(env[2].value.as_deref(), Some("orca:v2"));
        assert!(!serde_json::to_string(&env).unwrap().contains("hunter2"));

        let mut off = scheduler().spec;
        off.overlap = false;
        assert_eq!(contract_env(&off, "x")[1].value.as_deref(), Some("off"));
    }

    fn with_state(state: ContainerState, phase: &str) -> Pod {
        let mut pod = scheduler_pod(
            &scheduler(),
            "orca-abc-3",
            "ns-orca-1a2b3c-abc-3",
            "abc",
            3,
            "orca:v2",
        );
        pod.metadata.creation_timestamp = Some(KubeTime("2026-01-01T00:00:00Z".parse().unwrap()));
        pod.status = Some(PodStatus {
            phase: Some(phase.into()),
            container_statuses: Some(vec![ContainerStatus {
                name: CONTAINER.into(),
                state: Some(state),
                ..Default::default()
            }]),
            ..Default::default()
        });
        pod
    }

    #[test]
    fn a_pod_reads_back_as_its_view() {
        let running = ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..Default::default()
        };
        let view = pod_view(&with_state(running, "Running")).unwrap();
        assert_eq!((view.revision(), view.sequence()), ("abc", 3));
        assert_eq!(view.image(), "orca:v2");
        assert_eq!(*view.state(), PodState::Running);
        assert_eq!(view.created().to_rfc3339(), "2026-01-01T00:00:00+00:00");
        assert_eq!(view.started(), None, "no startedAt reported yet");
        assert!(!view.deleting());

        let started = ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(KubeTime("2026-01-01T00:00:40Z".parse().unwrap())),
            }),
            ..Default::default()
        };
        let view = pod_view(&with_state(started, "Running")).unwrap();
        assert_eq!(
            view.started().map(|t| t.to_rfc3339()).as_deref(),
            Some("2026-01-01T00:00:40+00:00"),
            "running since the container started, not since the pod was created"
        );

        let refused = ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 75,
                message: Some("overlap refused: instance 1 knows 3\n".into()),
                finished_at: Some(KubeTime("2026-01-01T00:01:00Z".parse().unwrap())),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut pod = with_state(refused, "Failed");
        pod.metadata.deletion_timestamp = Some(KubeTime("2026-01-01T00:02:00Z".parse().unwrap()));
        let view = pod_view(&pod).unwrap();
        match view.state() {
            PodState::Exited {
                code,
                message,
                finished,
            } => {
                assert_eq!(*code, 75);
                assert!(message.starts_with("overlap refused"));
                assert_eq!(finished.to_rfc3339(), "2026-01-01T00:01:00+00:00");
            }
            other => panic!("{other:?}"),
        }
        assert!(view.deleting());
    }

    /// The kubelet's reason for a container that does not run yet (an image
    /// it cannot pull) reaches `decide`, and an ended container keeps its
    /// start, so its run time is known.
    #[test]
    fn a_waiting_container_says_why_and_an_ended_one_keeps_its_start() {
        let pulling = ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("ErrImagePull".into()),
                message: Some("rpc error: manifest for orca:v9 not found".into()),
            }),
            ..Default::default()
        };
        let view = pod_view(&with_state(pulling, "Pending")).unwrap();
        assert_eq!(*view.state(), PodState::Pending);
        assert_eq!(
            view.waiting(),
            Some(&Waiting::new(
                "ErrImagePull".into(),
                "rpc error: manifest for orca:v9 not found".into()
            ))
        );
        assert_eq!(view.started(), None);

        let ended = ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 1,
                started_at: Some(KubeTime("2026-01-01T00:00:30Z".parse().unwrap())),
                finished_at: Some(KubeTime("2026-01-01T00:01:00Z".parse().unwrap())),
                ..Default::default()
            }),
            ..Default::default()
        };
        let view = pod_view(&with_state(ended, "Failed")).unwrap();
        assert_eq!(view.waiting(), None);
        assert_eq!(
            view.started().map(|t| t.to_rfc3339()).as_deref(),
            Some("2026-01-01T00:00:30+00:00")
        );
    }

    #[test]
    fn an_evicted_pod_has_exited_and_a_foreign_pod_is_not_seen() {
        let mut pod = with_state(ContainerState::default(), "Failed");
        if let Some(s) = pod.status.as_mut() {
            s.reason = Some("Evicted".into());
        }
        assert!(
            matches!(pod_view(&pod).unwrap().state(), PodState::Exited { code: -1, ref message, .. } if message == "Evicted")
        );
        assert_eq!(
            *pod_view(&with_state(ContainerState::default(), "Pending"))
                .unwrap()
                .state(),
            PodState::Pending
        );
        pod.metadata.labels = None;
        assert_eq!(pod_view(&pod), None);
    }
}
