//! The Kubernetes wiring of the pool loop: a kube `Controller` on
//! `WarmPool` keeps one task per pool — its [`PoolLoop`] and the write-back
//! of each pass's status (applied when it changed) and events — on the
//! database of the Scheduler the pool names (the URL from that Scheduler's
//! `spec.database.urlSecretRef`), restarted when the spec (generation),
//! the URL or the object (uid) changes, and stopped when the pool goes or
//! its Scheduler or URL can't be read.
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

use chrono::Utc;
use futures::StreamExt;
use k8s_openapi::{
    api::core::v1::{ObjectReference, Secret},
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
};
use kube::{
    runtime::{
        controller::Action,
        events::{Event, EventType, Recorder, Reporter},
        watcher, Controller,
    },
    Api, Client, Resource, ResourceExt,
};
use sha2::{Digest, Sha256};
use tokio::{
    sync::mpsc,
    task::{AbortHandle, JoinSet},
};

use super::{
    pass::{PassReport, PoolError, PoolEvent, PoolLoop, Tuning},
    PoolMetrics,
};
use crate::{
    crd::{Scheduler, WarmPool, WarmPoolStatus},
    k8s::{
        database::{read_url, SecretError},
        leader::{Fence, Fenced},
        scheduler::{event_action, write_status, StatusWriteError},
    },
};

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
}

struct Running {
    uid: Option<String>,
    generation: Option<i64>,
    url_hash: [u8; 32],
    /// The pool's task: its loop and write-back.
    task: AbortHandle,
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
/// on its Scheduler's database, or stops it when `wp` is being deleted;
/// a missing Scheduler or a bad Secret is a `Degraded` status instead.
pub async fn reconcile(
    wp: Arc<WarmPool>,
    ctx: Arc<PoolContext>,
) -> Result<Action, ControllerError> {
    let ns = wp.namespace().unwrap_or_else(|| "default".into());
    let name = wp.name_any();
    let pool = key(&ns, &name);
    if wp.meta().deletion_timestamp.is_some() {
        stop(&ctx, &pool);
        return Ok(Action::await_change());
    }
    let kube_err = |source| ControllerError::Kube {
        pool: pool.clone(),
        source,
    };
    let schedulers: Api<Scheduler> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(scheduler) = schedulers
        .get_opt(&wp.spec.scheduler)
        .await
        .map_err(kube_err)?
    else {
        // No Scheduler, no database to run the pool on: the loop stops, and
        // starts afresh (clearing `Degraded`) once it is back.
        stop(&ctx, &pool);
        degraded(
            &ctx,
            &wp,
            "SchedulerMissing",
            format!("Scheduler {ns}/{} does not exist", wp.spec.scheduler),
        )
        .await?;
        return Ok(Action::requeue(Duration::from_secs(30)));
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let read = read_url(&secrets, &ns, &scheduler.spec.database.url_secret_ref)
        .await
        .map_err(|source| ControllerError::Secret {
            pool: pool.clone(),
            source,
        })?;
    let (url_text, _) = match read {
        Ok(url) => url,
        Err(problem) => {
            stop(&ctx, &pool);
            degraded(&ctx, &wp, &problem.reason, problem.message).await?;
            return Ok(Action::requeue(Duration::from_secs(30)));
        }
    };
    let url_hash: [u8; 32] = Sha256::digest(url_text.as_bytes()).into();
    let generation = wp.metadata.generation;
    let uid = wp.metadata.uid.clone();
    let current = locked(&ctx.loops).get(&pool).is_some_and(|r| {
        r.uid == uid
            && r.generation == generation
            && r.url_hash == url_hash
            && !r.task.is_finished()
    });
    if current {
        return Ok(Action::requeue(Duration::from_secs(300)));
    }
    stop(&ctx, &pool);
    let mut lp = PoolLoop::new(
        &ns,
        &name,
        wp.spec.clone(),
        &url_text,
        ctx.config.tuning.clone(),
    )
    .await
    .map_err(|source| ControllerError::Start {
        pool: pool.clone(),
        source,
    })?
    .with_fence(ctx.config.fence.clone());
    if let Some(m) = &ctx.config.metrics {
        lp = lp.with_metrics(m.clone());
    }
    let sink = WriteBack {
        client: ctx.client.clone(),
        recorder: ctx.recorder.clone(),
        fence: ctx.config.fence.clone(),
        wp: (*wp).clone(),
        pool: pool.clone(),
    };
    let Some(task) = ctx.spawn(pool_task(lp, sink)) else {
        // The controller is stopping.
        return Ok(Action::await_change());
    };
    tracing::info!(pool = %pool, generation = ?generation, "pool loop started");
    locked(&ctx.loops).insert(
        pool,
        Running {
            uid,
            generation,
            url_hash,
            task,
        },
    );
    Ok(Action::requeue(Duration::from_secs(300)))
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
    /// events, until the WarmPool is found deleted.
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
            // Without a finalizer the controller is not told of a deletion:
            // look now and then whether this WarmPool is still there.
            if checked.elapsed() > Duration::from_secs(10) {
                checked = std::time::Instant::now();
                if let Ok(now) = api.get_opt(&wp.name_any()).await {
                    if now.is_none_or(|p| p.metadata.uid != wp.metadata.uid) {
                        tracing::info!(pool = %self.pool, "WarmPool deleted; its pool loop stops");
                        return;
                    }
                }
            }
            let (mut status, events) = match outcome {
                Outcome::Pass(r) => (r.status, r.events),
                Outcome::Failed(message) => {
                    let mut status = last.clone().unwrap_or_default();
                    set_degraded(&mut status, "PassFailed", &message);
                    let event = PoolEvent {
                        reason: "PassFailed",
                        message,
                        warning: true,
                    };
                    (status, vec![event])
                }
            };
            status.observed_generation = wp.metadata.generation;
            for e in &events {
                publish(&self.recorder, &self.fence, &reference, e).await;
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
    write_status(&api, &wp.name_any(), status, fence).await
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
    let changed = !status
        .conditions
        .iter()
        .any(|c| c.type_ == "Degraded" && c.status == "True" && c.reason == reason);
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
