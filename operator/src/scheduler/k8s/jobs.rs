//! The register Job of a revision (`spec.register.command` run with the new
//! image, only once `wait_for_lead` is true;
//! docs/protocol.md#rollout-with-overlap-on), and what `decide` reads back
//! from a Job ([`JobView`]).

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::pods::{chrono_of, labels, non_empty, owner, pod_spec};
use crate::crd::{Register, Scheduler};
use crate::runtime::names::{LABEL_COMPONENT, LABEL_REVISION};
use crate::scheduler::{register_hash, JobState, JobView};

/// The register container's name.
pub const CONTAINER: &str = "register";
/// The label holding the hash of the register step a Job runs
/// ([`register_hash`]): a change of `spec.register` registers again.
pub const LABEL_REGISTER: &str = "orca.dev/register";
/// Retries of a failed register pod before the Job fails.
const BACKOFF_LIMIT: i32 = 2;

/// The Job of `Action::CreateRegisterJob`: `register.command`/`args` with
/// `image` and the scheduler's environment, bounded by
/// `register.timeoutSeconds`, labelled with the register step's hash. It is
/// kept once finished (no TTL): `decide` finds the revision's Job to know
/// it has registered.
pub fn register_job(
    scheduler: &Scheduler,
    register: &Register,
    name: &str,
    revision: &str,
    image: &str,
) -> Job {
    let spec = &scheduler.spec;
    let template = spec.pod_template.clone().unwrap_or_default();
    let mut labels = labels(scheduler, revision);
    labels.insert(LABEL_COMPONENT.into(), "register".into());
    labels.insert(LABEL_REGISTER.into(), register_hash(register));
    Job {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: scheduler.namespace(),
            labels: Some(labels.clone()),
            owner_references: Some(owner(scheduler)),
            ..Default::default()
        },
        spec: Some(JobSpec {
            active_deadline_seconds: Some(register.timeout_seconds),
            backoff_limit: Some(BACKOFF_LIMIT),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    annotations: non_empty(template.annotations),
                    ..Default::default()
                }),
                spec: Some(pod_spec(
                    spec,
                    CONTAINER,
                    image,
                    &register.command,
                    &register.args,
                )),
            },
            ..Default::default()
        }),
        status: None,
    }
}

/// What `decide` sees of a register Job; `None` without the revision label.
pub fn job_view(job: &Job) -> Option<JobView> {
    let labels = job.metadata.labels.as_ref()?;
    let revision = labels.get(LABEL_REVISION)?.clone();
    let register = labels.get(LABEL_REGISTER).cloned();
    let created = job
        .metadata
        .creation_timestamp
        .as_ref()
        .map(chrono_of)
        .unwrap_or_default();
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let holds = |type_: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == "True")
    };
    let state = if let Some(done) = holds("Complete") {
        let at = job
            .status
            .as_ref()
            .and_then(|s| s.completion_time.as_ref())
            .or(done.last_transition_time.as_ref())
            .map(chrono_of)
            .unwrap_or(created);
        JobState::Succeeded { at }
    } else if let Some(failed) = holds("Failed") {
        let why = [failed.reason.clone(), failed.message.clone()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(": ");
        let at = failed
            .last_transition_time
            .as_ref()
            .map(chrono_of)
            .unwrap_or(created);
        JobState::Failed { message: why, at }
    } else {
        JobState::Running
    };
    Some(JobView::new(
        job.name_any(),
        revision,
        register,
        created,
        state,
    ))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time as KubeTime;

    use super::*;
    use crate::test_support::scheduler;

    fn register() -> Register {
        Register {
            command: vec!["orca".into(), "register".into()],
            args: vec!["--all".into()],
            timeout_seconds: 300,
        }
    }

    #[test]
    fn the_register_job_runs_the_new_image_with_the_scheduler_env() {
        let job = register_job(
            &scheduler(),
            &register(),
            "orca-register-abc",
            "abc",
            "orca:v2",
        );
        let labels = job.metadata.labels.clone().unwrap();
        assert_eq!(labels["orca.dev/scheduler"], "orca");
        assert_eq!(labels["orca.dev/revision"], "abc");
        assert_eq!(labels["orca.dev/component"], "register");
        assert_eq!(labels["orca.dev/register"], register_hash(&register()));
        let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("Scheduler", Some(true))
        );
        let spec = job.spec.unwrap();
        assert_eq!(spec.active_deadline_seconds, Some(300));
        assert_eq!(spec.backoff_limit, Some(2));
        let pod = spec.template.spec.unwrap();
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        assert_eq!(pod.service_account_name.as_deref(), Some("orca"));
        let c = &pod.containers[0];
        assert_eq!(c.image.as_deref(), Some("orca:v2"));
        assert_eq!(c.command.clone().unwrap(), ["orca", "register"]);
        assert_eq!(c.args.clone().unwrap(), ["--all"]);
        let env = c.env.clone().unwrap();
        let url = env.iter().find(|e| e.name == "ORCA_DATABASE_URL").unwrap();
        assert!(url.value.is_none() && url.value_from.as_ref().unwrap().secret_key_ref.is_some());
        assert!(env
            .iter()
            .any(|e| e.name == "ORCA_IMAGE" && e.value.as_deref() == Some("orca:v2")));
    }

    fn with(condition: &str, reason: Option<&str>) -> Job {
        let mut job = register_job(
            &scheduler(),
            &register(),
            "orca-register-abc",
            "abc",
            "orca:v2",
        );
        job.status = Some(JobStatus {
            conditions: Some(vec![JobCondition {
                type_: condition.into(),
                status: "True".into(),
                reason: reason.map(String::from),
                message: reason.map(|_| "Job was active longer than specified deadline".into()),
                last_transition_time: Some(KubeTime("2026-01-01T00:03:00Z".parse().unwrap())),
                ..Default::default()
            }]),
            ..Default::default()
        });
        job
    }

    #[test]
    fn a_job_reads_back_as_its_state() {
        let done = job_view(&with("Complete", None)).unwrap();
        assert_eq!(done.revision(), "abc");
        assert!(
            matches!(done.state(), JobState::Succeeded { at } if at.to_rfc3339() == "2026-01-01T00:03:00+00:00")
        );
        assert_eq!(done.register(), Some(register_hash(&register()).as_str()));
        let failed = job_view(&with("Failed", Some("DeadlineExceeded"))).unwrap();
        assert!(
            matches!(failed.state(), JobState::Failed { ref message, at } if message.starts_with("DeadlineExceeded: Job was active") && at.to_rfc3339() == "2026-01-01T00:03:00+00:00"),
            "{:?}",
            failed.state()
        );
        let mut legacy = with("Complete", None);
        if let Some(labels) = legacy.metadata.labels.as_mut() {
            labels.remove(LABEL_REGISTER);
        }
        assert_eq!(job_view(&legacy).unwrap().register(), None);
        assert_eq!(
            *job_view(&with("SuccessCriteriaMet", None)).unwrap().state(),
            JobState::Running
        );
    }
}
