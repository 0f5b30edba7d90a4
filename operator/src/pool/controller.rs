//! The Kubernetes wiring of the pool loop: a kube `Controller` on
//! `WarmPool` keeps one task per pool — its [`PoolLoop`] and the write-back
//! of each pass's status (applied when it changed) and events — on the
//! database of the Scheduler the pool names (the URL from that Scheduler's
//! `spec.database.urlSecretRef`), restarted when the spec (generation),
//! the URL or the object (uid) changes, and stopped when the pool goes or
//! its Scheduler or URL can't be read.
//!
//! Before anything is launched the WarmPool gets the finalizer
//! [`FINALIZER`], so that its deletion waits for its instances
//! (`spec.onDelete`): with `Terminate` the running loop is told of the
//! deletion (it needs no Scheduler or Secret any more: they may be going
//! too) and terminates the instances; the write-back removes the finalizer
//! once a pass finds none left in EC2. With `Orphan` the finalizer goes at
//! once and the instances are left.
//!
//! Every pool task belongs to [`run`]: they are spawned into the
//! [`PoolContext`]'s task set, which `run` empties when it ends or is
//! dropped (the Lease lost, SIGTERM), so no loop outlives the controller.
//! The tasks hold no reference to the context. Each EC2 call, statement,
//! status write and Event checks the fence first.
//!
//! Nothing here shows the URL: problems reading it are `Degraded`
//! conditions with a reason (never the password), as in the Scheduler
//! controller.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::{
    api::core::v1::{ObjectReference, Secret},
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
};
use kube::{
    api::{Patch, PatchParams},
    runtime::{
        controller::Action,
        events::{Event, EventType, Recorder, Reporter},
        watcher, Controller,
    },
    Api, Client, Resource, ResourceExt,
};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::{
    sync::{mpsc, watch},
    task::{AbortHandle, JoinSet},
};

use super::{
    pass::{Deletion, PassReport, PoolError, PoolEvent, PoolLoop, Tuning},
    PoolMetrics,
};
use crate::{
    crd::{OnDelete, Scheduler, WarmPool, WarmPoolStatus},
    k8s::{
        database::{read_url, SecretError},
        leader::{Fence, Fenced},
        scheduler::{event_action, write_status, StatusWriteError},
        MANAGER,
    },
};

/// The WarmPool controller's finalizer: the WarmPool stays until its
/// instances are terminated (`onDelete: Terminate`) or let go (`Orphan`).
pub const FINALIZER: &str = "orca.dev/warm-pool";

/// What the WarmPool controller needs besides the client.
#[derive(Clone)]
pub struct PoolControllerConfig {
    pub tuning: Tuning,
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
}

impl ControllerError {
    fn finalizer(pool: &str, e: FinalizerError) -> Self {
        let pool = pool.to_string();
        match e {
            FinalizerError::Fenced(source) => ControllerError::Fenced { pool, source },
            source => ControllerError::Finalizer { pool, source },
        }
    }
}

/// Why the finalizer could not be added or removed.
#[derive(Debug, thiserror::Error)]
pub enum FinalizerError {
    #[error("reading it before removing its finalizer: {0}")]
    Read(#[source] kube::Error),
    #[error("patching its finalizers: {0}")]
    Patch(#[source] kube::Error),
    #[error("building the JSON patch of its finalizers: {0}")]
    Build(#[source] serde_json::Error),
    #[error(transparent)]
    Fenced(#[from] Fenced),
}

struct Running {
    uid: Option<String>,
    generation: Option<i64>,
    url_hash: [u8; 32],
    /// The pool's task: its loop and write-back.
    task: AbortHandle,
    /// Tells the loop of the WarmPool's deletion.
    deletion: watch::Sender<Option<Deletion>>,
}

impl Drop for Running {
    /// A stopped loop's last pass must not be written back either (it
    /// would undo the `Degraded` that stopped it, or put back the previous
    /// generation over its successor's status): the loop and its write-back
    /// are one task, aborted together.
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What every reconcile of the WarmPool controller shares: the client,
/// the event recorder, the pool tasks and which pool each one runs.
pub struct PoolContext {
    client: Client,
    config: PoolControllerConfig,
    recorder: Recorder,
    loops: Mutex<HashMap<String, Running>>,
    /// Every pool task; `None` once stopped, and then nothing more starts.
    /// Dropping the set aborts them all.
    tasks: Mutex<Option<JoinSet<()>>>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding these locks leaves a map or set still whole.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl PoolContext {
    pub fn new(client: Client, config: PoolControllerConfig) -> Self {
        PoolContext {
            recorder: Recorder::new(client.clone(), Reporter::from(config.reporter.as_str())),
            client,
            config,
            loops: Mutex::new(HashMap::new()),
            tasks: Mutex::new(Some(JoinSet::new())),
        }
    }

    /// Stops every pool task (each at its next await) and starts none
    /// after.
    pub fn stop_all(&self) {
        let set = locked(&self.tasks).take();
        locked(&self.loops).clear();
        drop(set);
    }

    /// Spawns `task` into the set; `None` once stopped.
    fn spawn(
        &self,
        task: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Option<AbortHandle> {
        let mut tasks = locked(&self.tasks);
        let set = tasks.as_mut()?;
        while set.try_join_next().is_some() {}
        Some(set.spawn(task))
    }
}

/// Stops the pool tasks when [`run`] ends, or is dropped.
struct StopAll(Arc<PoolContext>);

impl Drop for StopAll {
    fn drop(&mut self) {
        self.0.stop_all();
    }
}

/// Runs the WarmPool controller over `namespace` (all when `None`) until its
/// watch ends; its pool tasks end with it.
pub async fn run(client: Client, namespace: Option<String>, config: PoolControllerConfig) {
    let pools: Api<WarmPool> = match &namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let ctx = Arc::new(PoolContext::new(client, config));
    let _stop = StopAll(ctx.clone());
    Controller::new(pools, watcher::Config::default())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => tracing::debug!(pool = %object.name, "reconciled"),
                Err(e) => tracing::warn!(error = %e, "warm pool controller"),
            }
        })
        .await;
}

fn error_policy(_pool: Arc<WarmPool>, error: &ControllerError, _ctx: Arc<PoolContext>) -> Action {
    tracing::warn!(error = %error, "warm pool reconcile failed");
    Action::requeue(Duration::from_secs(15))
}

fn key(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

/// Starts (or restarts, on a new generation or URL) the pool loop of `wp`
/// on its Scheduler's database, once `wp` has the finalizer; a missing
/// Scheduler or a bad Secret is a `Degraded` status instead. A WarmPool
/// being deleted is dealt with as its `spec.onDelete` says.
pub async fn reconcile(
    wp: Arc<WarmPool>,
    ctx: Arc<PoolContext>,
) -> Result<Action, ControllerError> {
    let ns = wp.namespace().unwrap_or_else(|| "default".into());
    let name = wp.name_any();
    let pool = key(&ns, &name);
    if let Some(since) = &wp.meta().deletion_timestamp {
        return deleting(&wp, &ctx, &pool, since).await;
    }
    if !wp.finalizers().iter().any(|f| f == FINALIZER) {
        // Before anything is launched: a deletion then waits for the
        // instances.
        add_finalizer(&ctx.client, &ctx.config.fence, &wp)
            .await
            .map_err(|e| ControllerError::finalizer(&pool, e))?;
        tracing::info!(pool = %pool, finalizer = FINALIZER, "finalizer added");
    }
    let url_text = match database_url(&wp, &ctx, &pool).await? {
        Ok(url) => url,
        Err(problem) => {
            stop(&ctx, &pool);
            degraded(&ctx, &wp, &problem.reason, problem.message).await?;
            return Ok(Action::requeue(Duration::from_secs(30)));
        }
    };
    let url_hash: [u8; 32] = Sha256::digest(url_text.as_bytes()).into();
    let current = locked(&ctx.loops).get(&pool).is_some_and(|r| {
        r.uid == wp.metadata.uid
            && r.generation == wp.metadata.generation
            && r.url_hash == url_hash
            && !r.task.is_finished()
    });
    if current {
        return Ok(Action::requeue(Duration::from_secs(300)));
    }
    start(&ctx, &wp, &pool, &url_text, None).await
}

/// `wp` is being deleted: with the finalizer still on it, `Orphan` removes
/// it at once; `Terminate` tells the running loop, or starts one that
/// terminates from its first pass (an operator that restarted meanwhile).
async fn deleting(
    wp: &WarmPool,
    ctx: &PoolContext,
    pool: &str,
    since: &Time,
) -> Result<Action, ControllerError> {
    if !wp.finalizers().iter().any(|f| f == FINALIZER) {
        // Nothing of this operator's left to hold it.
        stop(ctx, pool);
        return Ok(Action::await_change());
    }
    if wp.spec.on_delete == OnDelete::Orphan {
        stop(ctx, pool);
        let removed = remove_finalizer(&ctx.client, &ctx.config.fence, wp)
            .await
            .map_err(|e| ControllerError::finalizer(pool, e))?;
        if removed {
            tracing::info!(pool = %pool, "WarmPool deleted with onDelete Orphan: its instances are left");
            let event = PoolEvent {
                reason: "Deleted",
                message: "onDelete Orphan: the instances are left running; their agents power \
                          them off once idle for idleSeconds and a minute"
                    .into(),
                warning: false,
            };
            publish(
                &ctx.recorder,
                &ctx.config.fence,
                &wp.object_ref(&()),
                &event,
            )
            .await;
        }
        return Ok(Action::await_change());
    }
    let deletion = Deletion {
        since: DateTime::from_timestamp(since.0.as_second(), 0).unwrap_or_else(Utc::now),
        drain_timeout_seconds: wp.spec.drain_timeout_seconds,
    };
    let told = locked(&ctx.loops).get(pool).is_some_and(|r| {
        let running = r.uid == wp.metadata.uid && !r.task.is_finished();
        if running {
            // No restart: the loop needs neither the Scheduler nor its
            // Secret any more, and they may be going too (a namespace
            // deleted whole).
            r.deletion.send_if_modified(|d| {
                let changed = *d != Some(deletion);
                *d = Some(deletion);
                changed
            });
        }
        running
    });
    if told {
        return Ok(Action::requeue(Duration::from_secs(60)));
    }
    match database_url(wp, ctx, pool).await? {
        Ok(url) => start(ctx, wp, pool, &url, Some(deletion)).await,
        Err(problem) => {
            let message = format!(
                "{}; the instances cannot be terminated without the pool's database: \
                 set spec.onDelete to Orphan to delete the WarmPool without them",
                problem.message
            );
            degraded(ctx, wp, &problem.reason, message).await?;
            Ok(Action::requeue(Duration::from_secs(30)))
        }
    }
}

/// Why the database URL of a pool cannot be had: a `Degraded` reason and
/// message (never the password).
struct UrlProblem {
    reason: String,
    message: String,
}

/// The database URL of `wp`'s Scheduler, from its Secret.
async fn database_url(
    wp: &WarmPool,
    ctx: &PoolContext,
    pool: &str,
) -> Result<Result<String, UrlProblem>, ControllerError> {
    let ns = wp.namespace().unwrap_or_else(|| "default".into());
    let schedulers: Api<Scheduler> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(scheduler) = schedulers
        .get_opt(&wp.spec.scheduler)
        .await
        .map_err(|source| ControllerError::Kube {
            pool: pool.to_string(),
            source,
        })?
    else {
        // No Scheduler, no database to run the pool on: the loop stops, and
        // starts afresh (clearing `Degraded`) once it is back.
        return Ok(Err(UrlProblem {
            reason: "SchedulerMissing".into(),
            message: format!("Scheduler {ns}/{} does not exist", wp.spec.scheduler),
        }));
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let read = read_url(&secrets, &ns, &scheduler.spec.database.url_secret_ref)
        .await
        .map_err(|source| ControllerError::Secret {
            pool: pool.to_string(),
            source,
        })?;
    Ok(match read {
        Ok((url, _)) => Ok(url),
        Err(problem) => Err(UrlProblem {
            reason: problem.reason,
            message: problem.message,
        }),
    })
}

/// (Re)starts the pool task of `wp` on the database at `url_text`; told of
/// its deletion from the start when `deletion` is set.
async fn start(
    ctx: &PoolContext,
    wp: &WarmPool,
    pool: &str,
    url_text: &str,
    deletion: Option<Deletion>,
) -> Result<Action, ControllerError> {
    stop(ctx, pool);
    let ns = wp.namespace().unwrap_or_else(|| "default".into());
    let (deletion, told) = watch::channel(deletion);
    let mut lp = PoolLoop::new(
        &ns,
        &wp.name_any(),
        wp.spec.clone(),
        url_text,
        ctx.config.tuning.clone(),
    )
    .await
    .map_err(|source| ControllerError::Start {
        pool: pool.to_string(),
        source,
    })?
    .with_fence(ctx.config.fence.clone())
    .with_deletion(told)
    .remember(
        wp.metadata.uid.as_deref().unwrap_or_default(),
        &wp.status.clone().unwrap_or_default(),
    );
    if let Some(m) = &ctx.config.metrics {
        lp = lp.with_metrics(m.clone());
    }
    let sink = WriteBack {
        client: ctx.client.clone(),
        recorder: ctx.recorder.clone(),
        fence: ctx.config.fence.clone(),
        wp: wp.clone(),
        pool: pool.to_string(),
    };
    let Some(task) = ctx.spawn(pool_task(lp, sink)) else {
        // The controller is stopping.
        return Ok(Action::await_change());
    };
    let generation = wp.metadata.generation;
    tracing::info!(pool = %pool, generation = ?generation, deleting = deletion.borrow().is_some(),
        "pool loop started");
    let mut loops = locked(&ctx.loops);
    // The entries of pools whose task ended (deleted WarmPools) go.
    loops.retain(|_, r| !r.task.is_finished());
    loops.insert(
        pool.to_string(),
        Running {
            uid: wp.metadata.uid.clone(),
            generation,
            url_hash: Sha256::digest(url_text.as_bytes()).into(),
            task,
            deletion,
        },
    );
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// Adds [`FINALIZER`] to `wp`, as kube's finalizer helper does: a JSON
/// patch that tests the list it read (and the uid), so another writer's
/// finalizer added meanwhile is not lost; a conflict is retried by the
/// next reconcile.
async fn add_finalizer(
    client: &Client,
    fence: &Fence,
    wp: &WarmPool,
) -> Result<(), FinalizerError> {
    let finalizers = wp.finalizers();
    let add = if finalizers.is_empty() {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        ])
    } else {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
            {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
        ])
    };
    patch_finalizers(client, fence, wp, add).await
}

/// Removes [`FINALIZER`] from the WarmPool `wp` is (its uid): read afresh,
/// then a JSON patch that tests the entry it removes. Whether this call
/// removed it (not when the WarmPool or its finalizer is gone already).
async fn remove_finalizer(
    client: &Client,
    fence: &Fence,
    wp: &WarmPool,
) -> Result<bool, FinalizerError> {
    let api = pools_api(client, wp);
    fence.check()?;
    let Some(now) = api
        .get_opt(&wp.name_any())
        .await
        .map_err(FinalizerError::Read)?
    else {
        return Ok(false);
    };
    let Some(at) = now.finalizers().iter().position(|f| f == FINALIZER) else {
        return Ok(false);
    };
    if now.metadata.uid != wp.metadata.uid {
        return Ok(false);
    }
    let remove = json!([
        {"op": "test", "path": format!("/metadata/finalizers/{at}"), "value": FINALIZER},
        {"op": "remove", "path": format!("/metadata/finalizers/{at}")},
    ]);
    match patch_finalizers(client, fence, wp, remove).await {
        Err(FinalizerError::Patch(kube::Error::Api(e))) if e.code == 404 => Ok(false),
        other => other.map(|()| true),
    }
}

/// Applies the JSON patch `ops` of `metadata.finalizers` to `wp`, testing
/// its uid first (a WarmPool of the same name made since is another one).
async fn patch_finalizers(
    client: &Client,
    fence: &Fence,
    wp: &WarmPool,
    ops: Value,
) -> Result<(), FinalizerError> {
    let mut all = vec![json!({"op": "test", "path": "/metadata/uid", "value": wp.metadata.uid})];
    all.extend(ops.as_array().into_iter().flatten().cloned());
    let patch = serde_json::from_value(Value::Array(all)).map_err(FinalizerError::Build)?;
    let params = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..PatchParams::default()
    };
    fence.check()?;
    pools_api(client, wp)
        .patch(&wp.name_any(), &params, &Patch::<()>::Json(patch))
        .await
        .map_err(FinalizerError::Patch)?;
    Ok(())
}

fn pools_api(client: &Client, wp: &WarmPool) -> Api<WarmPool> {
    Api::namespaced(
        client.clone(),
        &wp.namespace().unwrap_or_else(|| "default".into()),
    )
}

fn stop(ctx: &PoolContext, pool: &str) {
    // Dropping `Running` aborts the pool's task.
    locked(&ctx.loops).remove(pool);
}

enum Outcome {
    Pass(Box<PassReport>),
    Failed(String),
}

/// One pool: its loop, and the write-back of each pass, in one task; it
/// ends when the write-back finds the WarmPool gone.
async fn pool_task(lp: PoolLoop, sink: WriteBack) {
    let (tx, rx) = mpsc::unbounded_channel::<Outcome>();
    let report = move |r: Result<&PassReport, &PoolError>| {
        let outcome = match r {
            Ok(report) => Outcome::Pass(Box::new(report.clone())),
            // Not a failure to show: this replica may not write either.
            Err(e) if e.is_fenced() => return,
            Err(e) => Outcome::Failed(e.to_string()),
        };
        let _ = tx.send(outcome);
    };
    tokio::select! {
        _ = lp.run(report, std::future::pending()) => {}
        _ = sink.run(rx) => {}
    }
}

/// Where a pool's passes are written back: its WarmPool's status and
/// Events.
struct WriteBack {
    client: Client,
    recorder: Recorder,
    fence: Fence,
    wp: WarmPool,
    /// `namespace/name`.
    pool: String,
}

impl WriteBack {
    /// Applies each pass's status (when it changed) and publishes its
    /// events, until the WarmPool is found gone, or a pass of its deletion
    /// found none of its instances left and the finalizer is removed.
    async fn run(self, mut rx: mpsc::UnboundedReceiver<Outcome>) {
        let wp = &self.wp;
        let reference = wp.object_ref(&());
        let api: Api<WarmPool> = Api::namespaced(
            self.client.clone(),
            &wp.namespace().unwrap_or_else(|| "default".into()),
        );
        // What this task last wrote: only a change is written again.
        let mut last: Option<WarmPoolStatus> = None;
        let mut checked = std::time::Instant::now();
        while let Some(outcome) = rx.recv().await {
            // A WarmPool whose finalizer was removed by hand, or replaced
            // under the same name, is gone without this task being told:
            // look now and then whether it is still there.
            if checked.elapsed() > Duration::from_secs(10) {
                checked = std::time::Instant::now();
                if let Ok(now) = api.get_opt(&wp.name_any()).await {
                    if now.is_none_or(|p| p.metadata.uid != wp.metadata.uid) {
                        tracing::info!(pool = %self.pool, "WarmPool deleted; its pool loop stops");
                        return;
                    }
                }
            }
            let (mut status, events, deleted) = match outcome {
                Outcome::Pass(r) => (r.status, r.events, r.deleted),
                Outcome::Failed(message) => {
                    let mut status = last.clone().unwrap_or_default();
                    set_degraded(&mut status, "PassFailed", &message);
                    let event = PoolEvent {
                        reason: "PassFailed",
                        message,
                        warning: true,
                    };
                    (status, vec![event], false)
                }
            };
            status.observed_generation = wp.metadata.generation;
            for e in &events {
                publish(&self.recorder, &self.fence, &reference, e).await;
            }
            if deleted {
                match remove_finalizer(&self.client, &self.fence, wp).await {
                    Ok(removed) => {
                        if removed {
                            tracing::info!(pool = %self.pool, "every instance terminated; finalizer removed");
                            let event = PoolEvent {
                                reason: "Deleted",
                                message: "onDelete Terminate: EC2 lists none of the pool's \
                                          instances pending, running, stopping or stopped; the \
                                          finalizer is removed"
                                    .into(),
                                warning: false,
                            };
                            publish(&self.recorder, &self.fence, &reference, &event).await;
                        }
                        return;
                    }
                    // The status still shows the deletion; the next pass
                    // tries again.
                    Err(e) => {
                        tracing::warn!(pool = %self.pool, error = %e, "cannot remove the WarmPool's finalizer")
                    }
                }
            }
            if last.as_ref() != Some(&status) {
                match apply_status(&self.client, &self.fence, wp, &status).await {
                    Ok(()) => last = Some(status),
                    // Not `last`: the next pass tries again.
                    Err(e) => {
                        tracing::warn!(pool = %self.pool, error = %e, "cannot write the WarmPool's status")
                    }
                }
            }
        }
    }
}

/// Publishes `e` on the WarmPool, unless the fence is closed.
async fn publish(recorder: &Recorder, fence: &Fence, reference: &ObjectReference, e: &PoolEvent) {
    let event = Event {
        type_: if e.warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: e.reason.into(),
        note: Some(e.message.chars().take(1000).collect()),
        action: event_action(e.reason, &e.message),
        secondary: None,
    };
    if let Err(fenced) = fence.check() {
        tracing::warn!(reason = e.reason, error = %fenced, "event not published");
        return;
    }
    if let Err(err) = recorder.publish(&event, reference).await {
        tracing::warn!(reason = e.reason, error = %err, "cannot publish an event");
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
    let api: Api<WarmPool> = Api::namespaced(
        client.clone(),
        &wp.namespace().unwrap_or_else(|| "default".into()),
    );
    write_status(&api, &wp.name_any(), status, fence)
        .await
        .map(|_| ())
}

/// `Degraded` True for `reason`; its transition time stays while it was
/// True already (a pass failing again does not move it).
fn set_degraded(status: &mut WarmPoolStatus, reason: &str, message: &str) {
    let since = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded" && c.status == "True")
        .map(|c| c.last_transition_time.clone());
    status.conditions.retain(|c| c.type_ != "Degraded");
    status.conditions.push(Condition {
        type_: "Degraded".into(),
        status: "True".into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: since.unwrap_or_else(|| {
            Time(
                k8s_openapi::jiff::Timestamp::from_second(Utc::now().timestamp())
                    .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            )
        }),
        observed_generation: None,
    });
}

/// A problem before any pass (no Scheduler, no Secret): `Degraded`.
async fn degraded(
    ctx: &PoolContext,
    wp: &WarmPool,
    reason: &str,
    message: String,
) -> Result<(), ControllerError> {
    let mut status = wp.status.clone().unwrap_or_default();
    status.observed_generation = wp.metadata.generation;
    // The message too: a deletion adds what to do about it.
    let changed = !status.conditions.iter().any(|c| {
        c.type_ == "Degraded" && c.status == "True" && c.reason == reason && c.message == message
    });
    if changed {
        set_degraded(&mut status, reason, &message);
        let pool = key(&wp.namespace().unwrap_or_default(), &wp.name_any());
        let fence = &ctx.config.fence;
        apply_status(&ctx.client, fence, wp, &status)
            .await
            .map_err(|e| match e {
                StatusWriteError::Fenced(source) => ControllerError::Fenced { pool, source },
                source => ControllerError::Status { pool, source },
            })?;
        let event = PoolEvent {
            reason: "Degraded",
            message,
            warning: true,
        };
        publish(&ctx.recorder, fence, &wp.object_ref(&()), &event).await;
    }
    Ok(())
}
