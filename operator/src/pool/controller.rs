//! The Kubernetes wiring of the pool loop: a kube `Controller` on
//! `WarmPool` keeps one [`PoolLoop`] task per pool, on the database of the
//! Scheduler the pool names (the URL from that Scheduler's
//! `spec.database.urlSecretRef`), restarted when the spec (generation),
//! the URL or the object (uid) changes, and stopped when the pool goes or
//! its Scheduler or URL can't be read. Each pass's status is patched onto
//! the WarmPool (when it changed) and its events published.
//!
//! Nothing here shows the URL: problems reading it are `Degraded`
//! conditions with a reason (never the password), as in the Scheduler
//! controller.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use chrono::Utc;
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
use sha2::{Digest, Sha256};
use tokio::{
    sync::{mpsc, oneshot},
    task::AbortHandle,
};

use super::{
    pass::{PassReport, PoolEvent, PoolLoop, Tuning},
    PoolMetrics,
};
use crate::{
    crd::{Scheduler, WarmPool, WarmPoolStatus},
    k8s::{
        database::read_url,
        scheduler::{event_action, status_patch},
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
}

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("WarmPool {pool}: {source}")]
    Kube {
        pool: String,
        #[source]
        source: kube::Error,
    },
    #[error("WarmPool {pool}: {message}")]
    Secret { pool: String, message: String },
    #[error("WarmPool {pool}: {message}")]
    Start { pool: String, message: String },
}

struct Running {
    uid: Option<String>,
    generation: Option<i64>,
    url_hash: [u8; 32],
    _stop: oneshot::Sender<()>,
    write_back: AbortHandle,
}

impl Drop for Running {
    /// A stopped loop's last pass must not be written back: it would undo
    /// the `Degraded` that stopped it, or put back the previous generation
    /// over its successor's status.
    fn drop(&mut self) {
        self.write_back.abort();
    }
}

/// What every reconcile of the WarmPool controller shares: the client,
/// the event recorder and the pool loops running, by `namespace/name`.
pub struct PoolContext {
    client: Client,
    config: PoolControllerConfig,
    recorder: Recorder,
    loops: Mutex<HashMap<String, Running>>,
}

impl PoolContext {
    pub fn new(client: Client, config: PoolControllerConfig) -> Self {
        PoolContext {
            recorder: Recorder::new(client.clone(), Reporter::from(config.reporter.as_str())),
            client,
            config,
            loops: Mutex::new(HashMap::new()),
        }
    }
}

/// Runs the WarmPool controller over `namespace` (all when `None`) until its
/// watch ends.
pub async fn run(client: Client, namespace: Option<String>, config: PoolControllerConfig) {
    let pools: Api<WarmPool> = match &namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let ctx = Arc::new(PoolContext::new(client, config));
    Controller::new(pools, watcher::Config::default())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => tracing::debug!(pool = %object.name, "reconciled"),
                Err(e) => tracing::warn!("warm pool controller: {e}"),
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
        .map_err(|e| ControllerError::Secret {
            pool: pool.clone(),
            message: e.to_string(),
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
    let current = {
        let loops = ctx.loops.lock().unwrap_or_else(|p| p.into_inner());
        loops
            .get(&pool)
            .is_some_and(|r| r.uid == uid && r.generation == generation && r.url_hash == url_hash)
    };
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
    .map_err(|e| ControllerError::Start {
        pool: pool.clone(),
        message: e.to_string(),
    })?;
    if let Some(m) = &ctx.config.metrics {
        lp = lp.with_metrics(m.clone());
    }
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let (tx, rx) = mpsc::unbounded_channel::<Outcome>();
    let writer = tokio::spawn(write_back(ctx.clone(), (*wp).clone(), rx));
    tokio::spawn(lp.run(
        move |r| {
            let _ = tx.send(match r {
                Ok(report) => Outcome::Pass(Box::new(report.clone())),
                Err(e) => Outcome::Failed(e.to_string()),
            });
        },
        async move {
            let _ = stop_rx.await;
        },
    ));
    tracing::info!(pool = %pool, generation = ?generation, "pool loop started");
    ctx.loops.lock().unwrap_or_else(|p| p.into_inner()).insert(
        pool,
        Running {
            uid,
            generation,
            url_hash,
            _stop: stop_tx,
            write_back: writer.abort_handle(),
        },
    );
    Ok(Action::requeue(Duration::from_secs(300)))
}

fn stop(ctx: &PoolContext, pool: &str) {
    // Dropping the sender ends the loop's `stop` future.
    ctx.loops
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(pool);
}

enum Outcome {
    Pass(Box<PassReport>),
    Failed(String),
}

/// Patches each pass's status (when it changed) and publishes its events.
async fn write_back(ctx: Arc<PoolContext>, wp: WarmPool, mut rx: mpsc::UnboundedReceiver<Outcome>) {
    let reference = wp.object_ref(&());
    let pool = key(
        &wp.namespace().unwrap_or_else(|| "default".into()),
        &wp.name_any(),
    );
    let api: Api<WarmPool> = Api::namespaced(
        ctx.client.clone(),
        &wp.namespace().unwrap_or_else(|| "default".into()),
    );
    // What the API server holds: `wp`'s status, then each one patched.
    let mut written = wp.status.clone().unwrap_or_default();
    let mut last: Option<WarmPoolStatus> = None;
    let mut checked = std::time::Instant::now();
    while let Some(outcome) = rx.recv().await {
        // Without a finalizer the controller is not told of a deletion:
        // look now and then whether this WarmPool is still there.
        if checked.elapsed() > Duration::from_secs(10) {
            checked = std::time::Instant::now();
            if let Ok(now) = api.get_opt(&wp.name_any()).await {
                if now.is_none_or(|p| p.metadata.uid != wp.metadata.uid) {
                    tracing::info!(pool = %pool, "WarmPool deleted; its pool loop stops");
                    stop(&ctx, &pool);
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
            publish(&ctx.recorder, &reference, e).await;
        }
        if last.as_ref() != Some(&status) {
            match patch_status(&ctx.client, &wp, &written, &status).await {
                Ok(()) => {
                    written = status.clone();
                    last = Some(status);
                }
                // Not `last`: the next pass tries again.
                Err(e) => {
                    tracing::warn!(pool = %wp.name_any(), error = %e, "cannot patch the WarmPool's status")
                }
            }
        }
    }
}

async fn publish(recorder: &Recorder, reference: &ObjectReference, e: &PoolEvent) {
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
    if let Err(err) = recorder.publish(&event, reference).await {
        tracing::warn!(reason = e.reason, error = %err, "cannot publish an event");
    }
}

/// Patches `before` (what the API server holds) into `status`; a field
/// `status` no longer has (capacity errors that are over) is removed.
async fn patch_status(
    client: &Client,
    wp: &WarmPool,
    before: &WarmPoolStatus,
    status: &WarmPoolStatus,
) -> Result<(), kube::Error> {
    let api: Api<WarmPool> = Api::namespaced(
        client.clone(),
        &wp.namespace().unwrap_or_else(|| "default".into()),
    );
    let patch = serde_json::json!({ "status": status_patch(before, status) });
    api.patch_status(
        &wp.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
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
    let before = wp.status.clone().unwrap_or_default();
    let mut status = before.clone();
    status.observed_generation = wp.metadata.generation;
    let changed = !status
        .conditions
        .iter()
        .any(|c| c.type_ == "Degraded" && c.status == "True" && c.reason == reason);
    if changed {
        set_degraded(&mut status, reason, &message);
        patch_status(&ctx.client, wp, &before, &status)
            .await
            .map_err(|source| ControllerError::Kube {
                pool: key(&wp.namespace().unwrap_or_default(), &wp.name_any()),
                source,
            })?;
        let event = PoolEvent {
            reason: "Degraded",
            message,
            warning: true,
        };
        publish(&ctx.recorder, &wp.object_ref(&()), &event).await;
    }
    Ok(())
}
