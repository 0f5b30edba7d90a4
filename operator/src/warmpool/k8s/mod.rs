//! The WarmPool controller (docs/architecture.md#the-warmpool-controller):
//! one kube `Controller` over WarmPools, whose reconcile of a pool is one
//! pass of its [`crate::warmpool::PoolLoop`] — observe (EC2 first, then the rows and the
//! demand) → the pure `plan` → act — followed by the write-back of the
//! pass's status (server-side apply, when it changed) and its Events.
//!
//! A pool is reconciled when
//! - its WarmPool changes (the controller's own watch);
//! - its Scheduler changes, or the Secret that Scheduler names for its
//!   database (a watch of Schedulers, and one of Secrets' metadata only,
//!   each mapped to the pools it concerns);
//! - its database notifies `orca_pool` with its name (demand, a hand-out,
//!   an agent's report): one `LISTEN` connection per database, fed to the
//!   controller as a trigger stream;
//! - its requeue falls due: the resync, or a back-off after a failed or
//!   throttled pass.
//!
//! Each pool keeps its loop (the EC2 client, the database connection, what
//! it launched) between reconciles, made again when the WarmPool is
//! another one (uid) or its database URL changed, and given a changed spec
//! in place. What must survive a restart or a failover is in the status
//! and read back when a loop is made
//! ([`crate::warmpool::PoolLoop::remember`]).
//!
//! Everything belongs to [`run`]: when it ends or is dropped (the Lease
//! lost, SIGTERM), the controller's reconciles, the loops and the
//! listeners go with it. Every EC2 call, statement, status write and Event
//! checks the fence first.
//!
//! Before anything is launched the WarmPool gets the finalizer
//! [`FINALIZER`], so that its deletion waits for its instances
//! (`spec.onDelete`): with `Terminate` the pool's loop terminates them (it
//! needs no Scheduler or Secret any more: they may be going too) and the
//! finalizer goes once a pass finds none left in EC2; with `Orphan` it
//! goes at once and the instances are left.
//!
//! Nothing here shows the URL: problems reading it are `Degraded`
//! conditions with a reason (never the password).

// class — the class stage: a pool's WarmPoolClass resolved or refused.
mod class;
// classes — the WarmPoolClasses' controller: their status and books.
pub(crate) mod classes;
// config — what the controller is configured with.
mod config;
// context — what every reconcile shares.
mod context;
// deletion — a WarmPool deleted without its database: its instances by EC2 alone.
mod deletion;
// error — why a reconcile failed, by stage.
mod error;
// finalizer — the WarmPool's finalizer.
mod finalizer;
// listen — the database's notifications as reconcile triggers.
mod listen;
// prepare — the dereference stage: the Secret, the database, the loop.
mod prepare;
// report — the write-back stage: status and Events.
mod report;
// retiring — where a pool ran before: its former places drained.
mod retiring;
// stages — one reconcile, stage by stage.
mod stages;

use std::{future::Future, sync::Arc};

use futures::{channel::mpsc, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    core::PartialObjectMeta,
    runtime::{
        controller::{self, Action},
        predicates,
        reflector::{ObjectRef, Store},
        Controller, WatchStreamExt,
    },
    Client, ResourceExt,
};

pub use config::FINALIZER;
pub use finalizer::FinalizerError;

pub use config::PoolControllerConfig;
pub use context::Context;
use context::{Caches, StopAll};
pub use error::ReconcileError;

use crate::{
    crd::{Scheduler, WarmPool, WarmPoolClass},
    runtime::{
        names, shell,
        watches::{ClusterWatches, FirstListing, NamespaceMeta, Watches},
    },
};

/// The WarmPool controller, following the WarmPools, Schedulers and
/// Secrets of `watches` (shared with the other controllers; see
/// [`crate::runtime::watches`]); the future runs until the watches end, and its
/// pools' loops and listeners end with it.
pub fn run(
    client: Client,
    config: PoolControllerConfig,
    watches: &mut Watches,
    cluster: &mut ClusterWatches,
) -> impl Future<Output = ()> + Send + 'static {
    let (scheduler_store, scheduler_listed, schedulers) = watches.schedulers().subscribe().stream();
    let (secret_store, secret_listed, secrets) = watches.secrets().subscribe().stream();
    let (pool_store, _, pools) = watches.pools().subscribe().stream();
    let (class_store, class_listed, classes) = cluster.classes().subscribe().stream();
    let (namespace_store, namespace_listed, namespaces) = cluster.namespaces().subscribe().stream();
    let urls = watches.urls().clone();
    async move {
        // The store keeps every change; a pool cares only for a new spec
        // (its Secret, say), not for the Scheduler controller's status
        // writes.
        let schedulers = schedulers
            .touched_objects()
            .predicate_filter(predicates::generation, Default::default());
        let secrets = secrets.touched_objects();
        let classes = classes
            .touched_objects()
            .predicate_filter(predicates::generation, Default::default());
        let namespaces = namespaces
            .touched_objects()
            .predicate_filter(predicates::labels, Default::default());
        let (triggers, notified) = mpsc::unbounded();
        // A new generation (a spec change, or the deletion: the API server
        // bumps it with deletionTimestamp) is reconciled; the controller's
        // own status writes and finalizer patches are not, or each pass
        // would call for another.
        let changed = pools
            .applied_objects()
            .predicate_filter(predicates::generation, Default::default());
        let controller = Controller::for_stream(changed, pool_store).with_config(
            controller::Config::default()
                .debounce(config.tuning().min_gap())
                .concurrency(names::RECONCILE_CONCURRENCY),
        );
        let caches = Caches::new(
            (scheduler_store.clone(), secret_store, controller.store()),
            urls,
            FirstListing::new(vec![scheduler_listed, secret_listed], names::FIRST_LISTING),
            (class_store, namespace_store),
            FirstListing::new(vec![class_listed, namespace_listed], names::FIRST_LISTING),
        );
        let ctx = Arc::new(Context::with(
            client,
            config,
            Some(caches.clone()),
            triggers,
        ));
        let _stop = StopAll(ctx.clone());
        let by_scheduler = caches.pools().clone();
        let (by_secret, secret_schedulers) = (caches.pools().clone(), scheduler_store);
        let (by_class, by_namespace) = (caches.pools().clone(), caches.pools().clone());
        controller
            .watches_stream(schedulers, move |s: Scheduler| {
                pools_of(&by_scheduler, s.namespace(), |name| name == s.name_any())
            })
            .watches_stream(secrets, move |m: PartialObjectMeta<Secret>| {
                pools_on_secret(&by_secret, &secret_schedulers, &m)
            })
            .watches_stream(classes, move |c: WarmPoolClass| {
                let class = Some(c.name_any());
                of_class(&by_class, |p| {
                    p.spec.class_ref.as_ref().map(|r| &r.name) == class.as_ref()
                })
            })
            .watches_stream(namespaces, move |n: NamespaceMeta| {
                let ns = Some(n.name_any());
                of_class(&by_namespace, |p| {
                    p.namespace() == ns && p.spec.class_ref.is_some()
                })
            })
            .reconcile_on(notified)
            .run(reconcile, error_policy, ctx)
            .for_each(|result| async move {
                match result {
                    Ok((object, _)) => tracing::debug!(pool = %object.name, "reconciled"),
                    Err(controller::Error::ReconcilerFailed(e, _)) => {
                        tracing::debug!(error = %e, "warm pool reconcile failed")
                    }
                    Err(e) => tracing::warn!(error = %e, "warm pool controller"),
                }
            })
            .await;
    }
}

/// The WarmPools of `namespace` whose `spec.scheduler` passes `named`.
fn pools_of(
    pools: &Store<WarmPool>,
    namespace: Option<String>,
    named: impl Fn(&str) -> bool,
) -> Vec<ObjectRef<WarmPool>> {
    pools
        .state()
        .iter()
        .filter(|p| p.namespace() == namespace && named(&p.spec.scheduler))
        .map(|p| ObjectRef::from_obj(p.as_ref()))
        .collect()
}

/// The WarmPools whose Scheduler's database URL is in the Secret `m`.
fn pools_on_secret(
    pools: &Store<WarmPool>,
    schedulers: &Store<Scheduler>,
    m: &PartialObjectMeta<Secret>,
) -> Vec<ObjectRef<WarmPool>> {
    let ns = m.namespace();
    let names: Vec<String> = schedulers
        .state()
        .iter()
        .filter(|s| s.namespace() == ns && s.spec.database.url_secret_ref.name == m.name_any())
        .map(|s| s.name_any())
        .collect();
    pools_of(pools, ns, |name| names.iter().any(|n| n == name))
}

/// The WarmPools that pass `chosen`.
fn of_class(
    pools: &Store<WarmPool>,
    chosen: impl Fn(&WarmPool) -> bool,
) -> Vec<ObjectRef<WarmPool>> {
    pools
        .state()
        .iter()
        .filter(|p| chosen(p))
        .map(|p| ObjectRef::from_obj(p.as_ref()))
        .collect()
}

/// A failed reconcile is logged, counted and tried again after a back-off
/// of its own that grows with each failure of that WarmPool in a row (5 s
/// … 5 min) and starts over after a success. A fenced one is no failure
/// of the pool: this replica may not act (see [`crate::runtime::shell`]).
fn error_policy(wp: Arc<WarmPool>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    shell::error_policy(wp, error, ctx)
}

/// One pass of `wp`'s pool on its Scheduler's database, once `wp` has the
/// finalizer; a missing Scheduler or a bad Secret is a `Degraded` status
/// instead. A WarmPool being deleted is dealt with as its `spec.onDelete`
/// says. In the controllers' shell (see [`crate::runtime::shell`]): a panic is
/// this pool's alone, and a call the operator may not make is said on it
/// (`Degraded`, `Forbidden`).
pub async fn reconcile(wp: Arc<WarmPool>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    shell::reconcile(wp, ctx).await
}
