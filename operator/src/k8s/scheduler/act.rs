//! The act stage of a Scheduler's reconcile: each action of the decision,
//! in order, through the Kubernetes API (pods, Jobs) or the database
//! (`ask_drain`). Every action is idempotent: a pod or Job already there,
//! or already gone, is done. Each checks the Lease's fence just before it
//! goes out: a replica that may no longer lead does nothing. Each write
//! done is an expectation the watches' stores must meet before a later
//! pass reads them (see [`super::watched`]).

use std::time::Duration;

use k8s_openapi::api::{batch::v1::Job, core::v1::Pod};
use kube::{
    api::{DeleteParams, PostParams, PropagationPolicy},
    Api, ResourceExt,
};
use orca_db::{schedulers, Db, DbError};
use tracing::info;

use super::{context::Context, jobs, pods, watched::Expect};
use crate::crd::Scheduler;
use crate::fence::Fenced;
use crate::rollout::{Action, Decision};

/// Why the act stage of a reconcile failed: the action that could not be
/// done, and on which pod, Job or instance.
#[derive(Debug, thiserror::Error)]
pub enum ActError {
    #[error("creating pod {pod}: {source}")]
    CreatePod {
        pod: String,
        #[source]
        source: kube::Error,
    },
    #[error("deleting pod {pod}: {source}")]
    DeletePod {
        pod: String,
        #[source]
        source: kube::Error,
    },
    #[error("asking instance {instance} to drain: {source}")]
    AskDrain {
        instance: i64,
        #[source]
        source: DbError,
    },
    #[error("creating Job {job}: {source}")]
    CreateJob {
        job: String,
        #[source]
        source: kube::Error,
    },
    #[error("deleting Job {job}: {source}")]
    DeleteJob {
        job: String,
        #[source]
        source: kube::Error,
    },
    #[error("{action}: no database connection to act with")]
    NoDatabase { action: String },
    #[error("Job {job}: the spec has no register step")]
    NoRegister { job: String },
    #[error("{action}: {source}")]
    Fenced {
        action: String,
        #[source]
        source: Fenced,
    },
}

pub(super) async fn act(
    scheduler: &Scheduler,
    ctx: &Context,
    ns: &str,
    db: Option<&Db>,
    decision: &Decision,
) -> Result<(), ActError> {
    let name = scheduler.name_any();
    for action in &decision.actions {
        match action {
            Action::CreatePod { .. } | Action::DeletePod { .. } => {
                pod_action(scheduler, ctx, ns, action).await?
            }
            Action::CreateRegisterJob { .. } | Action::DeleteJob { .. } => {
                job_action(scheduler, ctx, ns, action).await?
            }
            Action::AskDrain { instance } => {
                let db = db.ok_or_else(|| ActError::NoDatabase {
                    action: format!("asking instance {instance} to drain"),
                })?;
                let asked = ask_drain(ctx, db, scheduler, *instance).await?;
                info!(scheduler = %name, instance = instance, asked, "asked to drain");
            }
        }
    }
    Ok(())
}

/// Fences the act stage's call `action`.
fn fence(ctx: &Context, action: String) -> Result<(), ActError> {
    ctx.fence
        .check()
        .map_err(|source| ActError::Fenced { action, source })
}

/// Creates or deletes one of `scheduler`'s pods, as `action` says.
async fn pod_action(
    scheduler: &Scheduler,
    ctx: &Context,
    ns: &str,
    action: &Action,
) -> Result<(), ActError> {
    let name = scheduler.name_any();
    let pod_api = Api::<Pod>::namespaced(ctx.client.clone(), ns);
    // The pod's own grace is for deletions from outside (it covers the
    // drain); when the operator deletes a pod there is nothing left to
    // drain for.
    let stopped = DeleteParams {
        grace_period_seconds: u32::try_from(pods::stop_grace(&scheduler.spec)).ok(),
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    };
    match action {
        Action::CreatePod {
            name: pod,
            host,
            revision,
            sequence,
            image,
        } => {
            let object = pods::scheduler_pod(scheduler, pod, host, revision, *sequence, image);
            fence(ctx, format!("creating pod {pod}"))?;
            info!(scheduler = %name, revision = %revision, pod = %pod, image = %image, "creating pod");
            ignore(pod_api.create(&PostParams::default(), &object).await, 409).map_err(
                |source| ActError::CreatePod {
                    pod: pod.clone(),
                    source,
                },
            )?;
            ctx.watched
                .expect(ns, &name, Expect::PodCreated(pod.clone()));
        }
        Action::DeletePod { name: pod } => {
            fence(ctx, format!("deleting pod {pod}"))?;
            info!(scheduler = %name, pod = %pod, "deleting pod");
            ignore(pod_api.delete(pod, &stopped).await.map(|_| ()), 404).map_err(|source| {
                ActError::DeletePod {
                    pod: pod.clone(),
                    source,
                }
            })?;
            ctx.watched
                .expect(ns, &name, Expect::PodDeleted(pod.clone()));
        }
        _ => {}
    }
    Ok(())
}

/// Creates or deletes one of `scheduler`'s register Jobs, as `action`
/// says.
async fn job_action(
    scheduler: &Scheduler,
    ctx: &Context,
    ns: &str,
    action: &Action,
) -> Result<(), ActError> {
    let name = scheduler.name_any();
    let job_api = Api::<Job>::namespaced(ctx.client.clone(), ns);
    let gone = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    };
    match action {
        Action::CreateRegisterJob {
            name: job,
            revision,
            image,
        } => {
            let register = scheduler
                .spec
                .register
                .as_ref()
                .ok_or_else(|| ActError::NoRegister { job: job.clone() })?;
            let object = jobs::register_job(scheduler, register, job, revision, image);
            fence(ctx, format!("creating Job {job}"))?;
            info!(scheduler = %name, revision = %revision, job = %job, image = %image, "creating register job");
            ignore(job_api.create(&PostParams::default(), &object).await, 409).map_err(
                |source| ActError::CreateJob {
                    job: job.clone(),
                    source,
                },
            )?;
            ctx.watched
                .expect(ns, &name, Expect::JobCreated(job.clone()));
        }
        Action::DeleteJob { name: job } => {
            fence(ctx, format!("deleting Job {job}"))?;
            info!(scheduler = %name, job = %job, "deleting superseded register job");
            ignore(job_api.delete(job, &gone).await.map(|_| ()), 404).map_err(|source| {
                ActError::DeleteJob {
                    job: job.clone(),
                    source,
                }
            })?;
            ctx.watched
                .expect(ns, &name, Expect::JobDeleted(job.clone()));
        }
        _ => {}
    }
    Ok(())
}

/// `result`, with the API's `code` (already there, already gone) as done:
/// every action is idempotent.
fn ignore<T>(result: Result<T, kube::Error>, code: u16) -> Result<(), kube::Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == code => Ok(()),
        Err(e) => Err(e),
    }
}

/// Asks `instance` of `scheduler` to drain on `db`, behind the fence:
/// whether this call asked it (it may have been asked already).
pub(super) async fn ask_drain(
    ctx: &Context,
    db: &Db,
    scheduler: &Scheduler,
    instance: i64,
) -> Result<bool, ActError> {
    let stale = Duration::from_secs(scheduler.spec.handover.stale_seconds.max(1) as u64);
    ctx.fence.check().map_err(|source| ActError::Fenced {
        action: format!("asking instance {instance} to drain"),
        source,
    })?;
    schedulers::ask_drain(db, instance, stale)
        .await
        .map_err(|source| ActError::AskDrain { instance, source })
}
