//! The Scheduler controller (docs/architecture.md#the-scheduler-controller):
//! its wiring ([`run`]), its `reconcile` and `error_policy` in the
//! controllers' shell ([`crate::runtime::shell`]). A reconcile's stages are in
//! `stages.rs` — observe (`observe.rs`: the pods and Jobs by label, the
//! Secret's database URL, the rows of `orca.schedulers`) → the pure
//! [`crate::scheduler::decide()`] → act (`act.rs`, each action in order) → an
//! Event per step and the status, applied (server-side apply) only when it
//! changed (`report.rs`). Every write, and the database read, checks the
//! Lease's fence first.

// act — the act stage: pods, Jobs and rows changed.
pub(crate) mod act;
// context — what every reconcile shares.
mod context;
// deletion — deleting a Scheduler gracefully.
pub mod deletion;
// error — why a reconcile failed, by stage.
mod error;
// jobs — the register Job of a revision.
pub(crate) mod jobs;
// memory — what this replica last wrote into each status.
pub(crate) mod memory;
// metrics — the controller's Prometheus metrics.
mod metrics;
// observe — the observe stage: what a reconcile reads.
mod observe;
// pods — the scheduler Pod of a revision, and what `decide` reads back from one.
pub(crate) mod pods;
// refusal — a write the API server refuses for good.
pub(crate) mod refusal;
// report — the report stage: status and Events.
mod report;
// stages — one reconcile, stage by stage.
mod stages;
// watched — what a pass reads from the watches rather than from the API.
pub(crate) mod watched;

use std::{future::Future, sync::Arc};

use futures::StreamExt;
use k8s_openapi::api::{batch::v1::Job, core::v1::Pod, core::v1::Secret};
use kube::{
    core::PartialObjectMeta,
    runtime::{
        controller::{self, Action as Requeue},
        reflector::{self, ObjectRef},
        watcher, Controller, WatchStreamExt,
    },
    Api, Client, ResourceExt,
};

pub use self::context::Context;
pub use self::error::{ObserveError, ReconcileError, StatusError};
pub use self::metrics::Metrics;
use crate::crd::Scheduler;
use crate::runtime::{
    names::{self, LABEL_SCHEDULER},
    shell,
    watches::{namespaced, FirstListing, Listed, Watches},
};

/// The Scheduler controller over `scope` (a namespace; `None`: all),
/// following the Schedulers and Secrets of `watches` (shared with the
/// other controllers; see [`crate::runtime::watches`]) and its own pods and Jobs by
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
    let (scheduler_store, _, schedulers) = watches.schedulers().subscribe().stream();
    let (secret_store, secrets_listed, secrets) = watches.secrets().subscribe().stream();
    let urls = watches.urls().clone();
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
        ctx.watched().register(
            scope,
            watched::Stores::new(
                pod_store,
                job_store,
                secret_store,
                urls,
                FirstListing::new(listed, names::FIRST_LISTING),
            ),
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
/// controllers' shell (see [`crate::runtime::shell`]): a panic is this
/// Scheduler's alone, and a call the operator may not make is said on it
/// (`Degraded`, `Forbidden`).
pub async fn reconcile(
    scheduler: Arc<Scheduler>,
    ctx: Arc<Context>,
) -> Result<Requeue, ReconcileError> {
    shell::reconcile(scheduler, ctx).await
}

/// A failed reconcile is logged, counted and tried again after the
/// Scheduler's back-off; a fenced one is no failure (see
/// [`crate::runtime::shell`]).
pub fn error_policy(
    scheduler: Arc<Scheduler>,
    error: &ReconcileError,
    ctx: Arc<Context>,
) -> Requeue {
    shell::error_policy(scheduler, error, ctx)
}
