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
use crate::scheduler::{Action, Decision};

/// Why the act stage of a reconcile failed: the action that could not be
/// done, and on which pod, Job or instance.
#[derive(Debug, thiserror::Error)]
pub enum ActError {
    /// A pod's or a Job's write (`what`: "creating pod p"); `refused` is
    /// the `Degraded` reason should the API server refuse it for good.
    #[error("{what}: {source}")]
    Write {
        what: String,
        refused: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("asking instance {instance} to drain: {source}")]
    AskDrain {
        instance: i64,
        #[source]
        source: DbError,
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
    for action in decision.actions() {
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
    ctx.fence()
        .check()
        .map_err(|source| ActError::Fenced { action, source })
}

/// The `Degraded` reasons of a pod's and of a Job's write that the API
/// server refuses for good (see [`super::refusal`]).
const POD_REFUSED: &str = "PodRefused";
const JOB_REFUSED: &str = "JobRefused";

/// Creates or deletes one of `scheduler`'s pods, as `action` says.
async fn pod_action(
    scheduler: &Scheduler,
    ctx: &Context,
    ns: &str,
    action: &Action,
) -> Result<(), ActError> {
    let name = scheduler.name_any();
    let api = Api::<Pod>::namespaced(ctx.client().clone(), ns);
    // The pod's own grace is for deletions from outside (it covers the
    // drain); when the operator deletes a pod there is nothing left to
    // drain for.
    let stopped = DeleteParams {
        grace_period_seconds: u32::try_from(pods::stop_grace(&scheduler.spec)).ok(),
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    };
    let write = Write::new(ctx, ns, &name, POD_REFUSED);
    match action {
        Action::CreatePod {
            name: pod,
            host,
            revision,
            sequence,
            image,
        } => {
            let object = pods::scheduler_pod(scheduler, pod, host, revision, *sequence, image);
            let what = format!("creating pod {pod} (revision {revision}, image {image})");
            write
                .create(&api, &object, what, Expect::PodCreated(pod.clone()))
                .await
        }
        Action::DeletePod { name: pod } => {
            let what = format!("deleting pod {pod}");
            write
                .delete(&api, pod, &stopped, what, Expect::PodDeleted(pod.clone()))
                .await
        }
        _ => Ok(()),
    }
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
    let api = Api::<Job>::namespaced(ctx.client().clone(), ns);
    let gone = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    };
    let write = Write::new(ctx, ns, &name, JOB_REFUSED);
    match action {
        Action::CreateRegisterJob {
            name: job,
            revision,
            image,
        } => {
            let register = scheduler.spec.register.as_ref();
            let register = register.ok_or_else(|| ActError::NoRegister { job: job.clone() })?;
            let object = jobs::register_job(scheduler, register, job, revision, image);
            let what = format!("creating register Job {job} (revision {revision}, image {image})");
            write
                .create(&api, &object, what, Expect::JobCreated(job.clone()))
                .await
        }
        Action::DeleteJob { name: job } => {
            let what = format!("deleting superseded register Job {job}");
            write
                .delete(&api, job, &gone, what, Expect::JobDeleted(job.clone()))
                .await
        }
        _ => Ok(()),
    }
}

/// One of a Scheduler's writes of its pods or Jobs, each done the same
/// way: behind the fence, logged, the API's answer that it is done
/// already taken as done (every action is idempotent), a failure said as
/// what it was doing, and the watch told what to expect of it.
struct Write<'a> {
    ctx: &'a Context,
    ns: &'a str,
    scheduler: &'a str,
    /// The `Degraded` reason should the API server refuse it for good.
    refused: &'static str,
}

impl<'a> Write<'a> {
    fn new(ctx: &'a Context, ns: &'a str, scheduler: &'a str, refused: &'static str) -> Self {
        Write {
            ctx,
            ns,
            scheduler,
            refused,
        }
    }

    /// Creates `object` (`what`: "creating pod p"), already there as done.
    async fn create<K>(
        &self,
        api: &Api<K>,
        object: &K,
        what: String,
        expect: Expect,
    ) -> Result<(), ActError>
    where
        K: Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
    {
        let call = async { api.create(&PostParams::default(), object).await.map(drop) };
        self.call(what, call, 409, expect).await
    }

    /// Deletes `name` with `params` (`what`: "deleting pod p"), already
    /// gone as done.
    async fn delete<K>(
        &self,
        api: &Api<K>,
        name: &str,
        params: &DeleteParams,
        what: String,
        expect: Expect,
    ) -> Result<(), ActError>
    where
        K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let call = async { api.delete(name, params).await.map(drop) };
        self.call(what, call, 404, expect).await
    }

    /// Makes `call` (`what`, as the log and a failure say it: "creating
    /// pod p"), with the API's `done` code as done, then `expect`s its
    /// change.
    async fn call(
        &self,
        what: String,
        call: impl std::future::Future<Output = Result<(), kube::Error>>,
        done: u16,
        expect: Expect,
    ) -> Result<(), ActError> {
        fence(self.ctx, what.clone())?;
        info!(scheduler = %self.scheduler, namespace = %self.ns, "{what}");
        let refused = self.refused;
        ignore(call.await, done).map_err(|source| ActError::Write {
            what,
            refused,
            source,
        })?;
        self.ctx.watched().expect(self.ns, self.scheduler, expect);
        Ok(())
    }
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
    ctx.fence().check().map_err(|source| ActError::Fenced {
        action: format!("asking instance {instance} to drain"),
        source,
    })?;
    schedulers::ask_drain(db, instance, stale)
        .await
        .map_err(|source| ActError::AskDrain { instance, source })
}
