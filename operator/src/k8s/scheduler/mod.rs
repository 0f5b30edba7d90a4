//! The Scheduler controller's `reconcile` and `error_policy`: observe (the
//! Scheduler's pods and Jobs by label, its Secret's database URL, the rows
//! of `orca.schedulers`) → [`decide`] → act (each action, in order) → an
//! Event per step → the status, applied (server-side apply) only when it
//! changed. Every write, and the database read, checks the Lease's fence
//! first.
//!
//! Kept whole, one concept: the controller's wiring, its reconcile and
//! `error_policy`, and its observe.

pub mod act;
mod context;
pub mod deletion;
mod error;
pub mod jobs;
pub mod memory;
pub mod pods;
pub mod refusal;
mod report;
pub mod watched;

use std::{future::Future, sync::Arc, time::Duration};

use futures::StreamExt;
use k8s_openapi::api::{batch::v1::Job, core::v1::Pod, core::v1::Secret};
use kube::{
    api::ListParams,
    core::PartialObjectMeta,
    runtime::{
        controller::{self, Action as Requeue},
        reflector::{self, ObjectRef},
        watcher, Controller, WatchStreamExt,
    },
    Api, Client, ResourceExt,
};
use orca_db::Db;
use tracing::{warn, Instrument};

use self::act::{act, ActError};
pub use self::context::Context;
pub use self::error::{ObserveError, ReconcileError, StatusError};
use self::report::{apply_status, publish};
use super::{
    database, guard,
    names::{self, LABEL_SCHEDULER},
    server::Progress,
    shell::{self, Reconciler},
    watches::{namespaced, FirstListing, Listed, Watches},
};
use crate::backoff::PerObject;
use crate::crd::{Scheduler, SecretKeyRef};
use crate::rollout::{self, decide, Decision, Observed};

/// The Scheduler controller over `scope` (a namespace; `None`: all),
/// following the Schedulers and Secrets of `watches` (shared with the
/// other controllers; see [`super::watches`]) and its own pods and Jobs by
/// label; each pass reads them from the stores (see [`watched`]). The
/// Secrets' metadata (no data kept) tells a pass when to read its Secret
/// again and triggers the Schedulers naming a Secret that changed. The
/// future runs until the watches end.
pub fn run(
    client: Client,
    scope: Option<String>,
    ctx: Arc<Context>,
    watches: &mut Watches,
) -> impl Future<Output = ()> + Send + 'static {
    let (pods, jobs): (Api<Pod>, Api<Job>) =
        (namespaced(&client, &scope), namespaced(&client, &scope));
    let (scheduler_store, _, schedulers) = watches.schedulers.subscribe().stream();
    let (secret_store, secrets_listed, secrets) = watches.secrets.subscribe().stream();
    let urls = watches.urls.clone();
    async move {
        let ours = watcher::Config::default().labels(LABEL_SCHEDULER);
        let (pod_store, writer) = reflector::store::<Pod>();
        let pods = reflector::reflector(writer, watcher(pods, ours.clone()))
            .default_backoff()
            .touched_objects();
        let (job_store, writer) = reflector::store::<Job>();
        let jobs = reflector::reflector(writer, watcher(jobs, ours))
            .default_backoff()
            .touched_objects();
        let listed = vec![
            Listed::of(&pod_store),
            Listed::of(&job_store),
            secrets_listed,
        ];
        ctx.watched.register(
            scope,
            watched::Stores {
                pods: pod_store,
                jobs: job_store,
                secrets: secret_store,
                urls,
                listed: FirstListing::new(listed, names::FIRST_LISTING),
            },
        );
        let named = scheduler_store.clone();
        Controller::for_stream(schedulers.applied_objects(), scheduler_store)
            .with_config(controller::Config::default().concurrency(names::RECONCILE_CONCURRENCY))
            .owns_stream(pods)
            .owns_stream(jobs)
            .watches_stream(
                secrets.touched_objects(),
                move |m: PartialObjectMeta<Secret>| {
                    let ns = m.namespace();
                    named
                        .state()
                        .iter()
                        .filter(|s| {
                            s.namespace() == ns
                                && s.spec.database.url_secret_ref.name == m.name_any()
                        })
                        .map(|s| ObjectRef::from_obj(&**s))
                        .collect::<Vec<_>>()
                },
            )
            .run(reconcile, error_policy, ctx)
            .for_each(|result| async move {
                match result {
                    Ok((object, _)) => tracing::debug!(scheduler = %object.name, "reconciled"),
                    // error_policy said it already: one line per failure.
                    Err(e) => tracing::debug!("scheduler controller: {e}"),
                }
            })
            .await;
    }
}

/// One pass of the rollout for `scheduler`: see the module's doc. In the
/// controllers' shell (see [`crate::k8s::shell`]): a panic is this
/// Scheduler's alone, and a call the operator may not make is said on it
/// (`Degraded`, `Forbidden`).
pub async fn reconcile(
    scheduler: Arc<Scheduler>,
    ctx: Arc<Context>,
) -> Result<Requeue, ReconcileError> {
    shell::reconcile(scheduler, ctx).await
}

impl Reconciler for Context {
    const KIND: &'static str = "Scheduler";
    type Object = Scheduler;
    type Error = ReconcileError;

    fn stages(
        ctx: Arc<Self>,
        scheduler: Arc<Scheduler>,
    ) -> impl std::future::Future<Output = Result<Requeue, ReconcileError>> + Send {
        let ns = crate::crd::namespace_of(scheduler.as_ref());
        let name = scheduler.name_any();
        let span = tracing::info_span!("reconcile", scheduler = %name, namespace = %ns);
        run_stages(scheduler, ctx, ns, name).instrument(span)
    }

    fn panicked(&self, scheduler: &Scheduler, panic: guard::Panicked) -> ReconcileError {
        let (ns, name) = (crate::crd::namespace_of(scheduler), scheduler.name_any());
        self.connections.forget(&ns, &name);
        self.memory.forget(&ns, &name);
        self.watched.forget(&ns, &name);
        ReconcileError::Panicked(panic)
    }

    fn panic_of(error: &ReconcileError) -> Option<&guard::Panicked> {
        match error {
            ReconcileError::Panicked(p) => Some(p),
            _ => None,
        }
    }

    fn stage(error: &ReconcileError) -> &'static str {
        error.stage()
    }

    async fn degraded(&self, scheduler: &Scheduler, reason: &'static str, message: String) {
        degraded(scheduler, self, reason, message).await
    }

    fn progress(&self) -> &Progress {
        &self.progress
    }

    fn backoff(&self) -> &PerObject {
        &self.backoff
    }

    fn count_failed(&self, namespace: &str, name: &str, stage: &'static str) {
        self.metrics.failed(namespace, name, stage);
    }
}

/// Says on `scheduler` what only its user can see to: `Degraded` with
/// `reason` and `message`, and a Warning Event when that is news. Best
/// effort — the write itself may be what is forbidden; the log has it all.
async fn degraded(scheduler: &Scheduler, ctx: &Context, reason: &str, message: String) {
    let ns = crate::crd::namespace_of(scheduler);
    let name = scheduler.name_any();
    let before = ctx.memory.status(
        &ns,
        &name,
        scheduler.metadata.resource_version.as_deref(),
        &scheduler.status.clone().unwrap_or_default(),
    );
    let news = !crate::crd::degraded_already(&before.conditions, reason, &message);
    if !news {
        return;
    }
    let mut status = before.clone();
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    refusal::degrade(
        &mut status,
        reason,
        &message,
        now,
        scheduler.metadata.generation,
    );
    warn!(scheduler = %name, namespace = %ns, reason, "{message}");
    let decision = Decision {
        actions: Vec::new(),
        events: vec![rollout::Event::warning(reason, message)],
        status,
        requeue: rollout::BUSY,
    };
    publish(scheduler, ctx, &decision).await;
    if let Err(e) = apply_status(scheduler, ctx, &ns, &decision.status).await {
        warn!(scheduler = %name, namespace = %ns, reason, "cannot say it in the status: {e}");
    } else {
        ctx.metrics.status(&ns, &name, &before, &decision.status);
    }
}

/// One reconcile of `scheduler`, unguarded: the deletion, or observe →
/// decide → act → Events → status.
async fn run_stages(
    scheduler: Arc<Scheduler>,
    ctx: Arc<Context>,
    ns: String,
    name: String,
) -> Result<Requeue, ReconcileError> {
    ctx.metrics.reconciled(&ns, &name);
    if scheduler.metadata.deletion_timestamp.is_some() {
        if !deletion::has_finalizer(&scheduler) {
            // Its pods and Jobs go with it (owner references).
            ctx.connections.forget(&ns, &name);
            ctx.memory.forget(&ns, &name);
            ctx.watched.forget(&ns, &name);
            return Ok(Requeue::await_change());
        }
        let (observed, db) = observe(&scheduler, &ctx, &ns).await?;
        let requeue = deletion::reconcile(scheduler.clone(), &ctx, &ns, observed, db).await?;
        if !deletion::has_finalizer(&scheduler) {
            ctx.connections.forget(&ns, &name);
        }
        return Ok(requeue);
    }
    if !deletion::has_finalizer(&scheduler) && !scheduler.spec.paused {
        let seen = scheduler.metadata.resource_version.as_deref();
        let version = deletion::add_finalizer(&ctx, &scheduler, &ns).await?;
        // The patch is a write of this replica's too: a later pass whose
        // cache shows the object at its version has not seen the status
        // this pass writes after it, and must start from that.
        let status = scheduler.status.clone().unwrap_or_default();
        let status = ctx.memory.status(&ns, &name, seen, &status);
        ctx.memory.wrote(&ns, &name, seen, version, &status);
    }
    let (observed, db) = observe(&scheduler, &ctx, &ns).await?;
    let decision = decide(&observed);
    if let Err(e) = act(&scheduler, &ctx, &ns, db.as_deref(), &decision).await {
        if matches!(&e, ActError::AskDrain { source, .. } if source.is_connection()) {
            ctx.connections.forget(&ns, &name);
        }
        let Some((reason, message)) = refusal::refusal(&e) else {
            return Err(e.into());
        };
        return refused(&scheduler, &ctx, &observed, decision, reason, message).await;
    }
    publish(&scheduler, &ctx, &decision).await;
    if decision.status != observed.status {
        apply_status(&scheduler, &ctx, &ns, &decision.status).await?;
    }
    // Every pass, not only a changed status: a replica that has just taken
    // the lead exports the phase of Schedulers whose status it left as it
    // was (the alerts on a Degraded one read the leader's series).
    ctx.metrics
        .status(&ns, &name, &observed.status, &decision.status);
    ctx.backoff.succeeded(&ns, &name);
    Ok(Requeue::requeue(decision.requeue))
}

/// The API server refused a write for good: `Degraded` with its message,
/// a Warning Event when that is news, the status written all the same,
/// and a long pause before the next try (see [`refusal`]).
async fn refused(
    scheduler: &Scheduler,
    ctx: &Context,
    observed: &Observed,
    mut decision: Decision,
    reason: &str,
    message: String,
) -> Result<Requeue, ReconcileError> {
    let ns = crate::crd::namespace_of(scheduler);
    let name = scheduler.name_any();
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let news = !crate::crd::degraded_already(&observed.status.conditions, reason, &message);
    // What was decided did not happen: the status stays what it was (the
    // same pod is tried again, under the same name), only Degraded.
    decision.status = observed.status.clone();
    refusal::degrade(
        &mut decision.status,
        reason,
        &message,
        now,
        observed.generation,
    );
    decision.actions.clear();
    decision.events = if news {
        warn!(scheduler = %name, namespace = %ns, reason, "{message}");
        vec![rollout::Event::warning(reason, message)]
    } else {
        Vec::new()
    };
    publish(scheduler, ctx, &decision).await;
    if decision.status != observed.status {
        apply_status(scheduler, ctx, &ns, &decision.status).await?;
    }
    ctx.metrics
        .status(&ns, &name, &observed.status, &decision.status);
    ctx.metrics.failed(&ns, &name, "act");
    Ok(Requeue::requeue(refusal::REFUSED_RETRY))
}

/// A failed reconcile is logged, counted and tried again after the
/// Scheduler's back-off; a fenced one is no failure (see
/// [`crate::k8s::shell`]).
pub fn error_policy(
    scheduler: Arc<Scheduler>,
    error: &ReconcileError,
    ctx: Arc<Context>,
) -> Requeue {
    shell::error_policy(scheduler, error, ctx)
}

async fn observe(
    scheduler: &Scheduler,
    ctx: &Context,
    ns: &str,
) -> Result<(Observed, Option<Arc<Db>>), ObserveError> {
    ctx.fence.check()?;
    let name = scheduler.name_any();
    let (pods, jobs) = match ctx.watched.owned(ns, &name).await {
        Some(owned) => owned,
        None => list_owned(ctx, ns, &name).await?,
    };
    let spec = &scheduler.spec;
    let mut db = None;
    let mut db_now = None;
    let instances = match database_url(ctx, ns, &spec.database.url_secret_ref).await? {
        Err(problem) => Err(problem),
        Ok((text, url)) => match ctx.connections.get(ns, &name, &text, &url).await {
            Err(e) => Err(crate::scheduler_rows::db_problem(&e)),
            Ok(conn) => {
                let stale = Duration::from_secs(spec.handover.stale_seconds.max(1) as u64);
                ctx.fence.check()?;
                match crate::scheduler_rows::observe_instances(&conn, stale).await {
                    Ok((rows, now)) => {
                        db = Some(conn);
                        db_now = Some(now);
                        Ok(rows)
                    }
                    Err(e) => {
                        if e.is_connection() {
                            ctx.connections.forget(ns, &name);
                        }
                        Err(crate::scheduler_rows::db_problem(&e))
                    }
                }
            }
        },
    };
    if let Err(p) = &instances {
        warn!(scheduler = %name, namespace = %ns, reason = %p.reason, "database not observed: {}", p.message);
    }
    let observed = Observed {
        namespace: ns.to_string(),
        name,
        generation: scheduler.metadata.generation,
        spec: spec.clone(),
        status: ctx.memory.status(
            ns,
            &scheduler.name_any(),
            scheduler.metadata.resource_version.as_deref(),
            &scheduler.status.clone().unwrap_or_default(),
        ),
        pods: pods.iter().filter_map(pods::pod_view).collect(),
        jobs: jobs.iter().filter_map(jobs::job_view).collect(),
        instances,
        now: chrono::Utc::now(),
        clock_offset: chrono::TimeDelta::zero(),
        rollout_now: scheduler.annotations().get(rollout::ROLLOUT_NOW).cloned(),
    };
    let observed = match db_now {
        Some(now) => observed.on_database_clock(now),
        None => observed,
    };
    Ok((observed, db))
}

/// The pods and Jobs of Scheduler `name`, listed from the API (by its
/// label), when the watches' stores cannot be believed.
async fn list_owned(
    ctx: &Context,
    ns: &str,
    name: &str,
) -> Result<(Vec<Pod>, Vec<Job>), ObserveError> {
    let mine = ListParams::default().labels(&format!(
        "{LABEL_SCHEDULER}={}",
        rollout::scheduler_label(name)
    ));
    let (pod_api, job_api) = (
        Api::<Pod>::namespaced(ctx.client.clone(), ns),
        Api::<Job>::namespaced(ctx.client.clone(), ns),
    );
    let scheduler = || name.to_string();
    // Both at once: a pass waits for the slower only.
    let (pods, jobs) = futures::join!(pod_api.list(&mine), job_api.list(&mine));
    let pods = pods.map_err(|source| ObserveError::Pods {
        scheduler: scheduler(),
        source,
    })?;
    let jobs = jobs.map_err(|source| ObserveError::Jobs {
        scheduler: scheduler(),
        source,
    })?;
    Ok((pods.items, jobs.items))
}

/// The database URL in Scheduler `name`'s Secret (see
/// [`watched::Watched::read_url`]).
async fn database_url(
    ctx: &Context,
    ns: &str,
    secret_ref: &SecretKeyRef,
) -> Result<database::ReadUrl, database::SecretError> {
    let secrets = Api::<Secret>::namespaced(ctx.client.clone(), ns);
    ctx.watched.read_url(&secrets, ns, secret_ref).await
}
