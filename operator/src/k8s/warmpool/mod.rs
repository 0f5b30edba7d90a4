//! The WarmPool controller (docs/architecture.md#the-warmpool-controller):
//! one kube `Controller` over WarmPools, whose reconcile of a pool is one
//! pass of its [`PoolLoop`] — observe (EC2 first, then the rows and the
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
//! and read back when a loop is made ([`PoolLoop::remember`]).
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

mod finalizer;
mod listen;
mod retiring;
mod teardown;

use std::{
    collections::{HashMap, HashSet},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, MutexGuard,
    },
    time::Duration,
};

use chrono::{DateTime, Utc};
use futures::{channel::mpsc, StreamExt};
use k8s_openapi::{
    api::core::v1::{ObjectReference, Secret},
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::{
    core::PartialObjectMeta,
    runtime::{
        controller::{self, Action},
        events::{Recorder, Reporter},
        predicates,
        reflector::{self, ObjectRef, Store},
        watcher, Controller, WatchStreamExt,
    },
    Api, Client, Resource, ResourceExt,
};
use orca_db::DatabaseUrl;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

pub use finalizer::{FinalizerError, FINALIZER};
use listen::{DatabaseKey, Listeners};

use crate::{
    backoff::{Backoff, PerObject},
    crd::{set_condition, OnDelete, Scheduler, SecretKeyRef, WarmPool, WarmPoolStatus},
    k8s::{
        database::{read_url, SecretError},
        guard,
        leader::{Fence, Fenced},
        server::Progress,
        status::{post_event, write_status, StatusWriteError},
    },
    pool::{Deletion, PassReport, PoolError, PoolEvent, PoolLoop, PoolMetrics, Tuning},
};

/// What the WarmPool controller needs besides the client.
#[derive(Clone)]
pub struct PoolControllerConfig {
    pub tuning: Tuning,
    /// The reconciles in flight, for `/healthz`.
    pub progress: Progress,
    /// Registered by the caller into the `/metrics` registry.
    pub metrics: Option<PoolMetrics>,
    /// The controller name in Events.
    pub reporter: String,
    /// Until when this replica may act: its Lease's ([`Fence::always`]
    /// without an election).
    pub fence: Fence,
}

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("WarmPool {pool}: {source}")]
    Kube {
        pool: String,
        #[source]
        source: kube::Error,
    },
    #[error("WarmPool {pool}: {source}")]
    Secret {
        pool: String,
        #[source]
        source: SecretError,
    },
    #[error("WarmPool {pool}: {source}")]
    Start {
        pool: String,
        #[source]
        source: PoolError,
    },
    #[error("WarmPool {pool}: writing its status: {source}")]
    Status {
        pool: String,
        #[source]
        source: StatusWriteError,
    },
    #[error("WarmPool {pool}: {source}")]
    Fenced {
        pool: String,
        #[source]
        source: Fenced,
    },
    #[error("WarmPool {pool}: {source}")]
    Finalizer {
        pool: String,
        #[source]
        source: FinalizerError,
    },
    #[error("WarmPool {pool}: {source}")]
    Ec2 {
        pool: String,
        #[source]
        source: crate::pool::ec2::Ec2Error,
    },
    #[error("WarmPool {pool}: {source}")]
    Panicked {
        pool: String,
        #[source]
        source: guard::Panicked,
    },
}

impl ControllerError {
    /// The stage that failed, for the failure metric's `stage` label.
    pub fn stage(&self) -> &'static str {
        match self {
            ControllerError::Kube { .. } => "api",
            ControllerError::Secret { .. } => "secret",
            ControllerError::Start { .. } => "start",
            ControllerError::Status { .. } => "status",
            ControllerError::Fenced { .. } => "fenced",
            ControllerError::Finalizer { .. } => "finalizer",
            ControllerError::Ec2 { .. } => "ec2",
            ControllerError::Panicked { .. } => "panic",
        }
    }

    fn finalizer(pool: &str, e: FinalizerError) -> Self {
        let pool = pool.to_string();
        match e {
            FinalizerError::Fenced(source) => ControllerError::Fenced { pool, source },
            source => ControllerError::Finalizer { pool, source },
        }
    }

    fn status(pool: &str, e: StatusWriteError) -> Self {
        let pool = pool.to_string();
        match e {
            StatusWriteError::Fenced(source) => ControllerError::Fenced { pool, source },
            source => ControllerError::Status { pool, source },
        }
    }
}

/// Where a pool's database URL was read from: the Secret, its key and the
/// Secret's `resourceVersion` (unknown without the watch of Secrets).
#[derive(Clone, Debug, PartialEq)]
struct UrlSource {
    secret: String,
    key: String,
    version: Option<String>,
}

/// A pool between reconciles.
struct PoolState {
    uid: Option<String>,
    generation: Option<i64>,
    source: UrlSource,
    database: DatabaseKey,
    lp: PoolLoop,
    /// Tells the loop of the WarmPool's deletion.
    deletion: watch::Sender<Option<Deletion>>,
    /// The status this replica last wrote (or found written): only a change
    /// is written.
    last: Option<WarmPoolStatus>,
    /// Between failed or throttled passes.
    backoff: Backoff,
    /// Where the pool ran before, while instances are left there.
    retiring: Vec<retiring::Retiring>,
}

/// One pool's state; the controller never reconciles one pool twice at
/// once, the lock only makes that plain.
type Slot = Arc<tokio::sync::Mutex<Option<PoolState>>>;

/// The Schedulers, the Secrets' metadata and the WarmPools, as the
/// controller's watches keep them.
#[derive(Clone)]
struct Caches {
    schedulers: Store<Scheduler>,
    secrets: Store<PartialObjectMeta<Secret>>,
    pools: Store<WarmPool>,
}

/// What every reconcile of the WarmPool controller shares.
pub struct PoolContext {
    client: Client,
    config: PoolControllerConfig,
    recorder: Recorder,
    /// `None` outside [`run`] (a reconcile called on its own, in tests):
    /// then the Scheduler and the Secret are read from the API.
    caches: Option<Caches>,
    pools: Mutex<HashMap<String, Slot>>,
    /// The database each pool's loop runs on, for the listeners.
    databases: Mutex<HashMap<String, DatabaseKey>>,
    listeners: Listeners,
    /// The uids of the WarmPools this replica put the finalizer on.
    finalized: Mutex<HashSet<String>>,
    /// Whether a reconcile waited for the watches to list, and whether it
    /// said that they had not.
    waited: AtomicBool,
    warned: AtomicBool,
    /// Failed reconciles in a row, per WarmPool.
    backoff: PerObject,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding these locks leaves a map still whole.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl PoolContext {
    /// A context whose reconciles read Schedulers and Secrets from the API,
    /// and whose listeners' notifications go nowhere.
    pub fn new(client: Client, config: PoolControllerConfig) -> Self {
        let (triggers, _) = mpsc::unbounded();
        Self::with(client, config, None, triggers)
    }

    fn with(
        client: Client,
        config: PoolControllerConfig,
        caches: Option<Caches>,
        triggers: mpsc::UnboundedSender<ObjectRef<WarmPool>>,
    ) -> Self {
        PoolContext {
            recorder: Recorder::new(client.clone(), Reporter::from(config.reporter.as_str())),
            listeners: Listeners::new(
                triggers,
                config.fence.clone(),
                config.tuning.application_name("listen"),
            ),
            client,
            config,
            caches,
            pools: Mutex::new(HashMap::new()),
            databases: Mutex::new(HashMap::new()),
            finalized: Mutex::new(HashSet::new()),
            waited: AtomicBool::new(false),
            warned: AtomicBool::new(false),
            backoff: PerObject::default(),
        }
    }

    /// Publishes `event` on `wp`, unless the fence is closed.
    async fn say(&self, wp: &WarmPool, event: &PoolEvent) {
        publish(
            &self.recorder,
            &self.config.fence,
            &wp.object_ref(&()),
            event,
        )
        .await;
    }

    /// Drops every pool's loop and stops every listener; none starts after.
    pub fn stop_all(&self) {
        self.listeners.stop();
        locked(&self.pools).clear();
        locked(&self.databases).clear();
    }

    /// The watches' stores once they have listed, waiting a few seconds
    /// for that; `None` if they have not (a watch refused — say, RBAC
    /// without `list` on Secrets): then the Scheduler and the Secret are
    /// read from the API, as without the watches.
    async fn ready_caches(&self) -> Option<&Caches> {
        let caches = self.caches.as_ref()?;
        let ready = async {
            let _ = caches.schedulers.wait_until_ready().await;
            let _ = caches.secrets.wait_until_ready().await;
        };
        // Waited once already: look, but do not hold the pass up again.
        let wait = if self.waited.swap(true, Ordering::Relaxed) {
            Duration::ZERO
        } else {
            Duration::from_secs(5)
        };
        match tokio::time::timeout(wait, ready).await {
            Ok(()) => Some(caches),
            Err(_) => {
                if !self.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "the watches of Schedulers and Secrets have not listed yet; \
                         reading them from the API until they have (check the \
                         operator's RBAC: list and watch on secrets)"
                    );
                }
                None
            }
        }
    }

    /// Whether `wp` has the finalizer: on it, or added by this replica
    /// already (the watch may not have brought that change back yet).
    fn has_finalizer(&self, wp: &WarmPool) -> bool {
        finalizer::has(wp)
            || wp
                .metadata
                .uid
                .as_ref()
                .is_some_and(|uid| locked(&self.finalized).contains(uid))
    }

    fn slot(&self, pool: &str) -> Slot {
        locked(&self.pools)
            .entry(pool.to_string())
            .or_default()
            .clone()
    }

    /// Forgets `pool`: its loop and connection go, and the listener of its
    /// database if no other pool uses it.
    fn forget(&self, pool: &str) {
        locked(&self.pools).remove(pool);
        self.set_database(pool, None);
    }

    fn set_database(&self, pool: &str, database: Option<(DatabaseKey, &DatabaseUrl)>) {
        let mut databases = locked(&self.databases);
        match database {
            Some((key, url)) => {
                databases.insert(pool.to_string(), key);
                self.listeners.ensure(key, url);
            }
            None => {
                databases.remove(pool);
            }
        }
        let used: Vec<DatabaseKey> = databases.values().copied().collect();
        self.listeners.retain(&used);
    }

    /// Forgets the pools whose WarmPool the watch no longer holds (deleted
    /// with its finalizer removed by hand, say).
    fn forget_gone(&self) {
        let Some(caches) = &self.caches else {
            return;
        };
        let keys: Vec<String> = locked(&self.pools).keys().cloned().collect();
        for pool in keys {
            let (ns, name) = pool.split_once('/').unwrap_or(("", &pool));
            if caches.pools.get(&ObjectRef::new(name).within(ns)).is_none() {
                tracing::info!(pool = %pool, "WarmPool gone; its loop stops");
                self.forget(&pool);
            }
        }
    }
}

/// Stops the pools and listeners when [`run`] ends, or is dropped.
struct StopAll(Arc<PoolContext>);

impl Drop for StopAll {
    fn drop(&mut self) {
        self.0.stop_all();
    }
}

fn namespaced<K>(client: &Client, namespace: &Option<String>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Runs the WarmPool controller over `namespace` (all when `None`) until its
/// watch ends; its pools' loops and listeners end with it.
pub async fn run(client: Client, namespace: Option<String>, config: PoolControllerConfig) {
    let pools: Api<WarmPool> = namespaced(&client, &namespace);
    let (scheduler_store, writer) = reflector::store::<Scheduler>();
    // The store keeps every change; a pool cares only for a new spec (its
    // Secret, say), not for the Scheduler controller's status writes.
    let schedulers = reflector::reflector(
        writer,
        watcher(namespaced(&client, &namespace), watcher::Config::default()),
    )
    .default_backoff()
    .touched_objects()
    .predicate_filter(predicates::generation, Default::default());
    let (secret_store, writer) = reflector::store::<PartialObjectMeta<Secret>>();
    let secrets = reflector::reflector(
        writer,
        // Metadata only: the operator keeps no Secret's data.
        watcher(
            namespaced::<PartialObjectMeta<Secret>>(&client, &namespace),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .touched_objects();
    let (triggers, notified) = mpsc::unbounded();
    // A new generation (a spec change, or the deletion: the API server
    // bumps it with deletionTimestamp) is reconciled; the controller's own
    // status writes and finalizer patches are not, or each pass would call
    // for another.
    let (pool_store, writer) = reflector::store::<WarmPool>();
    let changed = reflector::reflector(writer, watcher(pools, watcher::Config::default()))
        .default_backoff()
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default());
    let controller = Controller::for_stream(changed, pool_store)
        .with_config(controller::Config::default().debounce(config.tuning.min_gap));
    let caches = Caches {
        schedulers: scheduler_store.clone(),
        secrets: secret_store,
        pools: controller.store(),
    };
    let ctx = Arc::new(PoolContext::with(
        client,
        config,
        Some(caches.clone()),
        triggers,
    ));
    let _stop = StopAll(ctx.clone());
    let by_scheduler = caches.pools.clone();
    let (by_secret, secret_schedulers) = (caches.pools.clone(), scheduler_store);
    controller
        .watches_stream(schedulers, move |s: Scheduler| {
            pools_of(&by_scheduler, s.namespace(), |name| name == s.name_any())
        })
        .watches_stream(secrets, move |m: PartialObjectMeta<Secret>| {
            let ns = m.namespace();
            let names: Vec<String> = secret_schedulers
                .state()
                .iter()
                .filter(|s| {
                    s.namespace() == ns && s.spec.database.url_secret_ref.name == m.name_any()
                })
                .map(|s| s.name_any())
                .collect();
            pools_of(&by_secret, ns, |name| names.iter().any(|n| n == name))
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

/// A failed reconcile is logged, counted and tried again after a back-off
/// of its own that grows with each failure of that WarmPool in a row (5 s
/// … 5 min) and starts over after a success. A fenced one is no failure
/// of the pool: this replica may not act.
fn error_policy(wp: Arc<WarmPool>, error: &ControllerError, ctx: Arc<PoolContext>) -> Action {
    if let ControllerError::Fenced { .. } = error {
        tracing::debug!(error = %error, "fenced");
        return Action::requeue(Duration::from_secs(15));
    }
    let ns = wp.namespace().unwrap_or_else(|| "default".into());
    let name = wp.name_any();
    let delay = ctx.backoff.failed(&ns, &name);
    tracing::warn!(pool = %key(&ns, &name), stage = error.stage(), retry_in = ?delay,
        "warm pool reconcile failed: {error}");
    if let Some(m) = &ctx.config.metrics {
        m.reconcile_failed(&key(&ns, &name), error.stage());
    }
    Action::requeue(delay)
}

fn key(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

pub(super) fn pools_api(client: &Client, wp: &WarmPool) -> Api<WarmPool> {
    Api::namespaced(
        client.clone(),
        &wp.namespace().unwrap_or_else(|| "default".into()),
    )
}

/// One pass of `wp`'s pool on its Scheduler's database, once `wp` has the
/// finalizer; a missing Scheduler or a bad Secret is a `Degraded` status
/// instead. A WarmPool being deleted is dealt with as its `spec.onDelete`
/// says. Guarded (see [`guard`]): a panic is this pool's alone, and a call
/// the operator may not make is said on it (`Degraded`, `Forbidden`).
pub async fn reconcile(
    wp: Arc<WarmPool>,
    ctx: Arc<PoolContext>,
) -> Result<Action, ControllerError> {
    let ns = wp.namespace().unwrap_or_else(|| "default".into());
    let pool = key(&ns, &wp.name_any());
    let passed = guard::guarded(
        &ctx.config.progress,
        format!("WarmPool {pool}"),
        pass(wp.clone(), ctx.clone()),
    )
    .await;
    let failed = match passed {
        Ok(Ok(action)) => {
            ctx.backoff.succeeded(&ns, &wp.name_any());
            return Ok(action);
        }
        Ok(Err(e)) => e,
        Err(panicked) => {
            // Its loop may be half-changed: the next pass makes a new one
            // from the status.
            ctx.forget(&pool);
            ControllerError::Panicked {
                pool: pool.clone(),
                source: panicked,
            }
        }
    };
    let said = match &failed {
        ControllerError::Panicked { source, .. } => {
            Some((guard::INTERNAL_ERROR, source.to_string()))
        }
        ControllerError::Fenced { .. } => None,
        e => guard::forbidden(e).map(|m| (guard::FORBIDDEN, m)),
    };
    if let Some((reason, message)) = said {
        if let Err(e) = degraded(&ctx, &wp, reason, message).await {
            tracing::warn!(pool = %pool, reason, error = %e, "cannot say it in the status");
        }
    }
    Err(failed)
}

async fn pass(wp: Arc<WarmPool>, ctx: Arc<PoolContext>) -> Result<Action, ControllerError> {
    let ns = wp.namespace().unwrap_or_else(|| "default".into());
    let pool = key(&ns, &wp.name_any());
    ctx.config
        .fence
        .check()
        .map_err(|source| ControllerError::Fenced {
            pool: pool.clone(),
            source,
        })?;
    ctx.forget_gone();
    let deletion = match &wp.meta().deletion_timestamp {
        None => None,
        Some(_) if !finalizer::has(&wp) => {
            // Nothing of this operator's left to hold it.
            ctx.forget(&pool);
            return Ok(Action::await_change());
        }
        Some(_) if wp.spec.on_delete == OnDelete::Orphan => {
            return orphan(&wp, &ctx, &pool).await;
        }
        Some(since) => Some(Deletion {
            since: DateTime::from_timestamp(since.0.as_second(), 0).unwrap_or_else(Utc::now),
            drain_timeout_seconds: wp.spec.drain_timeout_seconds,
        }),
    };
    if deletion.is_none() && !ctx.has_finalizer(&wp) {
        // Before anything is launched: a deletion then waits for the
        // instances.
        finalizer::add(&ctx.client, &ctx.config.fence, &wp)
            .await
            .map_err(|e| ControllerError::finalizer(&pool, e))?;
        if let Some(uid) = &wp.metadata.uid {
            locked(&ctx.finalized).insert(uid.clone());
        }
        tracing::info!(pool = %pool, finalizer = FINALIZER, "finalizer added");
    }
    let slot = ctx.slot(&pool);
    let mut guard = slot.lock().await;
    if let Some(problem) = prepare(&wp, &ctx, &pool, &mut guard, deletion.is_some()).await? {
        *guard = None;
        drop(guard);
        ctx.forget(&pool);
        if let Some(deletion) = deletion {
            return teardown::without_database(&wp, &ctx, &pool, deletion, problem).await;
        }
        degraded(&ctx, &wp, &problem.reason, problem.message).await?;
        return Ok(Action::requeue(Duration::from_secs(30)));
    }
    let Some(state) = guard.as_mut() else {
        return Ok(Action::requeue(Duration::from_secs(30)));
    };
    state.deletion.send_replace(deletion);
    let outcome = state.lp.pass(Utc::now()).await;
    retiring::pass_all(&ctx, &wp, &mut state.retiring).await;
    write_back(&wp, &ctx, &pool, state, outcome).await
}

/// `wp` is being deleted with `onDelete: Orphan`: its loop goes and the
/// finalizer is removed at once.
async fn orphan(wp: &WarmPool, ctx: &PoolContext, pool: &str) -> Result<Action, ControllerError> {
    let_go(
        wp,
        ctx,
        pool,
        "onDelete Orphan: the instances are left running; their agents power them off \
         once idle for idleSeconds and a minute",
    )
    .await
}

/// Drops `wp`'s loop and removes the finalizer; if this call removed it,
/// says so in a `Deleted` Event with `message`.
pub(super) async fn let_go(
    wp: &WarmPool,
    ctx: &PoolContext,
    pool: &str,
    message: &str,
) -> Result<Action, ControllerError> {
    ctx.forget(pool);
    let removed = finalizer::remove(&ctx.client, &ctx.config.fence, wp)
        .await
        .map_err(|e| ControllerError::finalizer(pool, e))?;
    if removed {
        tracing::info!(pool = %pool, on_delete = ?wp.spec.on_delete, "finalizer removed");
        let event = PoolEvent {
            reason: "Deleted",
            message: message.into(),
            warning: false,
        };
        ctx.say(wp, &event).await;
    }
    Ok(Action::await_change())
}

/// Why the database URL of a pool cannot be had: a `Degraded` reason and
/// message (never the password).
pub(super) struct UrlProblem {
    pub(super) reason: String,
    pub(super) message: String,
}

/// Makes `slot` hold a loop for `wp` on its current database: kept when
/// the WarmPool is the same (uid) and its URL's Secret unchanged (a new
/// generation's spec is given to it), made afresh otherwise. A WarmPool
/// being deleted keeps its loop without looking at the Scheduler or the
/// Secret. What stops the pool from running, if anything.
async fn prepare(
    wp: &WarmPool,
    ctx: &PoolContext,
    pool: &str,
    slot: &mut Option<PoolState>,
    deleting: bool,
) -> Result<Option<UrlProblem>, ControllerError> {
    let same = slot.as_ref().is_some_and(|s| s.uid == wp.metadata.uid);
    if same && deleting {
        return Ok(None);
    }
    let ns = wp.namespace().unwrap_or_else(|| "default".into());
    let recorded = wp.status.as_ref().and_then(|s| s.database_secret.clone());
    // The Scheduler's stale limit judges whether a busy instance's run
    // still beats (the `Hung` check): its runs' heartbeats are its.
    let mut run_stale = None;
    let secret_ref = match (scheduler_of(wp, ctx, pool).await?, recorded) {
        (Some(s), _) => {
            run_stale = Some(Duration::from_secs(
                s.spec
                    .handover
                    .stale_seconds
                    .clamp(1, crate::crd::MAX_SECONDS) as u64,
            ));
            s.spec.database.url_secret_ref.clone()
        }
        // Deleted after its Scheduler: the database it last ran on (kept,
        // with its Secret, for this) ends its rows before its instances go.
        (None, Some(recorded)) if deleting => recorded,
        (None, _) => {
            // No Scheduler, no database to run the pool on: the loop stops,
            // and starts afresh (clearing `Degraded`) once it is back.
            return Ok(Some(UrlProblem {
                reason: "SchedulerMissing".into(),
                message: format!("Scheduler {ns}/{} does not exist", wp.spec.scheduler),
            }));
        }
    };
    let secret_ref = &secret_ref;
    let version = ctx.ready_caches().await.and_then(|c| {
        c.secrets
            .get(&ObjectRef::new(&secret_ref.name).within(&ns))
            .and_then(|m| m.resource_version())
    });
    let source = UrlSource {
        secret: secret_ref.name.clone(),
        key: secret_ref.key.clone(),
        version,
    };
    if let (Some(state), Some(stale)) = (slot.as_mut().filter(|_| same), run_stale) {
        state.lp.set_run_stale(stale);
    }
    // A new spec that moves the pool (another Scheduler, region or
    // endpoint) gets a loop of its own; the old one drains the old place.
    let moving = slot.as_ref().is_some_and(|s| {
        same && s.generation != wp.metadata.generation
            && crate::pool::drift::moved(s.lp.spec(), &wp.spec)
    });
    if same && !moving {
        let state = slot.as_mut().expect("invariant: `same` holds a state");
        let unchanged = state.source == source && source.version.is_some();
        if unchanged {
            if state.generation != wp.metadata.generation {
                state.lp.set_spec(wp.spec.clone()).await;
                state.generation = wp.metadata.generation;
                tracing::info!(pool = %pool, generation = ?wp.metadata.generation, "new spec");
            }
            return Ok(None);
        }
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let read = read_url(&secrets, &ns, secret_ref)
        .await
        .map_err(|source| ControllerError::Secret {
            pool: pool.to_string(),
            source,
        })?;
    let (url_text, url) = match read {
        Ok(read) => read,
        Err(problem) => {
            return Ok(Some(UrlProblem {
                reason: problem.reason,
                message: problem.message,
            }))
        }
    };
    let database: DatabaseKey = Sha256::digest(url_text.as_bytes()).into();
    if same && !moving {
        let state = slot.as_mut().expect("invariant: `same` holds a state");
        if state.database == database {
            state.source = source;
            if state.generation != wp.metadata.generation {
                state.lp.set_spec(wp.spec.clone()).await;
                state.generation = wp.metadata.generation;
                tracing::info!(pool = %pool, generation = ?wp.metadata.generation, "new spec");
            }
            return Ok(None);
        }
        tracing::info!(pool = %pool, "the database URL changed; the pool's loop starts again on it");
    }
    // What the last writer knew: this replica's last status, or the one
    // read back from the WarmPool.
    let remembered = slot
        .as_ref()
        .filter(|_| same)
        .and_then(|s| s.last.clone())
        .or_else(|| wp.status.clone())
        .unwrap_or_default();
    let (deletion, told) = watch::channel(None);
    let mut lp = PoolLoop::new(
        &ns,
        &wp.name_any(),
        wp.spec.clone(),
        &url_text,
        ctx.config.tuning.clone(),
    )
    .await
    .map_err(|source| ControllerError::Start {
        pool: pool.to_string(),
        source,
    })?
    .not_listening()
    .with_fence(ctx.config.fence.clone())
    .with_deletion(told)
    .remember(wp.metadata.uid.as_deref().unwrap_or_default(), &remembered);
    if let Some(m) = &ctx.config.metrics {
        lp = lp.with_metrics(m.clone());
    }
    if let Some(stale) = run_stale {
        lp.set_run_stale(stale);
    }
    // The loop it replaces drains where the pool ran (another database,
    // Scheduler, region or endpoint); a new replica takes up the places
    // its status names.
    let retiring = match slot.take().filter(|_| same) {
        Some(old) => {
            let mut retiring = old.retiring;
            let secret = SecretKeyRef {
                name: old.source.secret.clone(),
                key: old.source.key.clone(),
            };
            let place = retiring::place_of(old.lp.spec(), secret, Utc::now());
            tracing::info!(pool = %pool, place = ?place, "the pool moved: the old place's loop terminates what it launched there");
            retiring.push(retiring::retire(ctx, old.lp, place));
            retiring
        }
        None => retiring::restore(ctx, wp, &remembered.retiring).await,
    };
    tracing::info!(pool = %pool, generation = ?wp.metadata.generation, "pool loop made");
    *slot = Some(PoolState {
        uid: wp.metadata.uid.clone(),
        generation: wp.metadata.generation,
        source,
        database,
        lp,
        deletion,
        last: wp.status.clone(),
        backoff: Backoff::new(
            ctx.config.tuning.backoff_base,
            ctx.config.tuning.backoff_cap,
        ),
        retiring,
    });
    ctx.set_database(pool, Some((database, &url)));
    Ok(None)
}

/// `wp`'s Scheduler: from the watch's store in [`run`], else from the API.
async fn scheduler_of(
    wp: &WarmPool,
    ctx: &PoolContext,
    pool: &str,
) -> Result<Option<Arc<Scheduler>>, ControllerError> {
    let ns = wp.namespace().unwrap_or_else(|| "default".into());
    if let Some(caches) = ctx.ready_caches().await {
        return Ok(caches
            .schedulers
            .get(&ObjectRef::new(&wp.spec.scheduler).within(&ns)));
    }
    let schedulers: Api<Scheduler> = Api::namespaced(ctx.client.clone(), &ns);
    ctx.config
        .fence
        .check()
        .map_err(|source| ControllerError::Fenced {
            pool: pool.to_string(),
            source,
        })?;
    schedulers
        .get_opt(&wp.spec.scheduler)
        .await
        .map(|s| s.map(Arc::new))
        .map_err(|source| ControllerError::Kube {
            pool: pool.to_string(),
            source,
        })
}

/// Writes a pass back: its Events, its status (when it changed), and the
/// finalizer's removal once a deleted pool's instances are all gone; when
/// to look again.
async fn write_back(
    wp: &WarmPool,
    ctx: &PoolContext,
    pool: &str,
    state: &mut PoolState,
    outcome: Result<PassReport, PoolError>,
) -> Result<Action, ControllerError> {
    let fence = &ctx.config.fence;
    let reference = wp.object_ref(&());
    let (mut status, events, wait) = match outcome {
        Ok(report) => {
            let wait = if report.throttled {
                state.backoff.next_wait()
            } else {
                state.backoff.reset();
                ctx.config.tuning.resync
            };
            if report.deleted && state.retiring.is_empty() {
                for e in &report.events {
                    publish(&ctx.recorder, fence, &reference, e).await;
                }
                // None of its instances left: the finalizer goes.
                return let_go(
                    wp,
                    ctx,
                    pool,
                    "onDelete Terminate: EC2 lists none of the pool's instances pending, \
                     running, stopping or stopped; the finalizer is removed",
                )
                .await;
            }
            (report.status, report.events, wait)
        }
        Err(e) if e.is_fenced() => {
            // Not a failure to show: this replica may not write either.
            return Err(match e {
                PoolError::Fenced { pool, source } => ControllerError::Fenced { pool, source },
                other => ControllerError::Start {
                    pool: pool.to_string(),
                    source: other,
                },
            });
        }
        Err(e) => {
            tracing::warn!(pool = %pool, error = %e, "pool pass failed");
            let message = e.to_string();
            let mut status = state.last.clone().unwrap_or_default();
            set_degraded(&mut status, "PassFailed", &message);
            let event = PoolEvent {
                reason: "PassFailed",
                message,
                warning: true,
            };
            (status, vec![event], state.backoff.next_wait())
        }
    };
    status.observed_generation = wp.metadata.generation;
    status.database_secret = Some(SecretKeyRef {
        name: state.source.secret.clone(),
        key: state.source.key.clone(),
    });
    status.retiring = state.retiring.iter().map(|r| r.place.clone()).collect();
    for e in &events {
        publish(&ctx.recorder, fence, &reference, e).await;
    }
    if state.last.as_ref() != Some(&status) {
        apply_status(&ctx.client, fence, wp, &status)
            .await
            .map_err(|e| ControllerError::status(pool, e))?;
        state.last = Some(status);
    }
    Ok(Action::requeue(wait))
}

/// Publishes `e` on the WarmPool, unless the fence is closed.
pub(super) async fn publish(
    recorder: &Recorder,
    fence: &Fence,
    reference: &ObjectReference,
    e: &PoolEvent,
) {
    let posted = post_event(recorder, fence, reference, e.warning, e.reason, &e.message).await;
    if let Err(fenced) = posted {
        tracing::debug!(reason = e.reason, error = %fenced, "event not posted");
    }
}

/// Writes `status` whole (server-side apply, see [`write_status`]): a
/// field it no longer has (capacity errors that are over) is removed.
async fn apply_status(
    client: &Client,
    fence: &Fence,
    wp: &WarmPool,
    status: &WarmPoolStatus,
) -> Result<(), StatusWriteError> {
    write_status(&pools_api(client, wp), &wp.name_any(), status, fence)
        .await
        .map(|_| ())
}

/// `Degraded` True for `reason`; its transition time stays while it was
/// True already (a pass failing again does not move it).
fn set_degraded(status: &mut WarmPoolStatus, reason: &str, message: &str) {
    let now = Time(
        k8s_openapi::jiff::Timestamp::from_second(Utc::now().timestamp())
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    );
    set_condition(
        &mut status.conditions,
        "Degraded",
        true,
        reason,
        message,
        now,
        None,
    );
}

/// A problem before any pass (no Scheduler, no Secret): `Degraded`.
pub(super) async fn degraded(
    ctx: &PoolContext,
    wp: &WarmPool,
    reason: &str,
    message: String,
) -> Result<(), ControllerError> {
    let mut status = wp.status.clone().unwrap_or_default();
    status.observed_generation = wp.metadata.generation;
    // The message too: a deletion adds what to do about it.
    let changed = !crate::crd::degraded_already(&status.conditions, reason, &message);
    if changed {
        set_degraded(&mut status, reason, &message);
        let pool = key(&wp.namespace().unwrap_or_default(), &wp.name_any());
        let fence = &ctx.config.fence;
        apply_status(&ctx.client, fence, wp, &status)
            .await
            .map_err(|e| ControllerError::status(&pool, e))?;
        let event = PoolEvent {
            reason: "Degraded",
            message,
            warning: true,
        };
        ctx.say(wp, &event).await;
    }
    Ok(())
}
