//! The Scheduler controller's `reconcile` and `error_policy`: observe (the
//! Scheduler's pods and Jobs by label, its Secret's database URL, the rows
//! of `orca.schedulers`) → [`decide`] → act (each action, in order) → an
//! Event per step → the status, patched only when it changed.

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::{batch::v1::Job, core::v1::Pod, core::v1::Secret};
use kube::{
    api::{ListParams, Patch, PatchParams},
    runtime::{
        controller::Action as Requeue,
        events::{Event as KubeEvent, EventType, Recorder, Reporter},
    },
    Api, Client, Resource, ResourceExt,
};
use orca_db::Db;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tracing::{info, warn, Instrument};

use super::act::{act, ActError};
use super::{database, jobs, metrics::Metrics, pods, LABEL_SCHEDULER, MANAGER};
use crate::crd::{Scheduler, SchedulerStatus};
use crate::rollout::{self, decide, Decision, Observed};

/// What every reconcile shares: the client, the event recorder, the
/// metrics and the database connections.
pub struct Context {
    pub client: Client,
    recorder: Recorder,
    metrics: Metrics,
    connections: database::Connections,
}

impl Context {
    /// `instance` names this operator replica in the Events it posts (the
    /// pod's name).
    pub fn new(client: Client, metrics: Metrics, instance: &str) -> Self {
        let reporter = Reporter {
            controller: MANAGER.into(),
            instance: Some(instance.into()),
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics,
            connections: database::Connections::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    #[error("listing the pods of Scheduler {scheduler}: {source}")]
    Pods {
        scheduler: String,
        #[source]
        source: kube::Error,
    },
    #[error("listing the Jobs of Scheduler {scheduler}: {source}")]
    Jobs {
        scheduler: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Secret(#[from] database::SecretError),
}

#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("patching the status of Scheduler {scheduler}: {source}")]
    Patch {
        scheduler: String,
        #[source]
        source: kube::Error,
    },
}

/// Why a reconcile failed, by stage; `error_policy` retries it.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("observe: {0}")]
    Observe(#[from] ObserveError),
    #[error("act: {0}")]
    Act(#[from] ActError),
    #[error("status: {0}")]
    Status(#[from] StatusError),
}

impl ReconcileError {
    pub fn stage(&self) -> &'static str {
        match self {
            ReconcileError::Observe(_) => "observe",
            ReconcileError::Act(_) => "act",
            ReconcileError::Status(_) => "status",
        }
    }
}

/// Where a Scheduler is; namespaced, so it always has one.
fn namespace_of(s: &Scheduler) -> String {
    s.namespace().unwrap_or_else(|| "default".into())
}

/// One pass of the rollout for `scheduler`: see the module's doc.
pub async fn reconcile(
    scheduler: Arc<Scheduler>,
    ctx: Arc<Context>,
) -> Result<Requeue, ReconcileError> {
    let ns = namespace_of(&scheduler);
    let name = scheduler.name_any();
    let span = tracing::info_span!("reconcile", scheduler = %name, namespace = %ns);
    pass(scheduler, ctx, ns, name).instrument(span).await
}

async fn pass(
    scheduler: Arc<Scheduler>,
    ctx: Arc<Context>,
    ns: String,
    name: String,
) -> Result<Requeue, ReconcileError> {
    ctx.metrics.reconciled(&ns, &name);
    if scheduler.metadata.deletion_timestamp.is_some() {
        // Its pods and Jobs go with it (owner references); start nothing.
        ctx.connections.forget(&ns, &name);
        return Ok(Requeue::await_change());
    }
    let (observed, db) = observe(&scheduler, &ctx, &ns).await?;
    let decision = decide(&observed);
    if let Err(e) = act(&scheduler, &ctx, &ns, db.as_deref(), &decision).await {
        if matches!(&e, ActError::AskDrain { source, .. } if source.is_connection()) {
            ctx.connections.forget(&ns, &name);
        }
        return Err(e.into());
    }
    publish(&scheduler, &ctx, &decision).await;
    if decision.status != observed.status {
        patch_status(&scheduler, &ctx, &ns, &observed.status, &decision.status).await?;
        ctx.metrics
            .status(&ns, &name, &observed.status, &decision.status);
    }
    Ok(Requeue::requeue(decision.requeue))
}

/// A failed reconcile is logged, counted and tried again shortly.
pub fn error_policy(
    scheduler: Arc<Scheduler>,
    error: &ReconcileError,
    ctx: Arc<Context>,
) -> Requeue {
    let ns = namespace_of(&scheduler);
    let name = scheduler.name_any();
    warn!(scheduler = %name, namespace = %ns, stage = error.stage(), "reconcile failed: {error}");
    ctx.metrics.failed(&ns, &name, error.stage());
    Requeue::requeue(Duration::from_secs(5))
}

async fn observe(
    scheduler: &Scheduler,
    ctx: &Context,
    ns: &str,
) -> Result<(Observed, Option<Arc<Db>>), ObserveError> {
    let name = scheduler.name_any();
    let mine = ListParams::default().labels(&format!("{LABEL_SCHEDULER}={name}"));
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), ns)
        .list(&mine)
        .await
        .map_err(|source| ObserveError::Pods {
            scheduler: name.clone(),
            source,
        })?;
    let jobs = Api::<Job>::namespaced(ctx.client.clone(), ns)
        .list(&mine)
        .await
        .map_err(|source| ObserveError::Jobs {
            scheduler: name.clone(),
            source,
        })?;
    let spec = &scheduler.spec;
    let mut db = None;
    let mut db_now = None;
    let secrets = Api::<Secret>::namespaced(ctx.client.clone(), ns);
    let instances = match database::read_url(&secrets, ns, &spec.database.url_secret_ref).await? {
        Err(problem) => Err(problem),
        Ok((text, url)) => match ctx.connections.get(ns, &name, &text, &url).await {
            Err(e) => Err(rollout::db_problem(&e)),
            Ok(conn) => {
                let stale = Duration::from_secs(spec.handover.stale_seconds.max(1) as u64);
                match rollout::observe_instances(&conn, stale).await {
                    Ok((rows, now)) => {
                        db = Some(conn);
                        db_now = Some(now);
                        Ok(rows)
                    }
                    Err(e) => {
                        if e.is_connection() {
                            ctx.connections.forget(ns, &name);
                        }
                        Err(rollout::db_problem(&e))
                    }
                }
            }
        },
    };
    if let Err(p) = &instances {
        warn!(scheduler = %name, namespace = %ns, reason = %p.reason, "database not observed: {}", p.message);
    }
    let observed = Observed {
        name,
        generation: scheduler.metadata.generation,
        spec: spec.clone(),
        status: scheduler.status.clone().unwrap_or_default(),
        pods: pods.items.iter().filter_map(pods::pod_view).collect(),
        jobs: jobs.items.iter().filter_map(jobs::job_view).collect(),
        instances,
        now: chrono::Utc::now(),
        clock_offset: chrono::TimeDelta::zero(),
    };
    let observed = match db_now {
        Some(now) => observed.on_database_clock(now),
        None => observed,
    };
    Ok((observed, db))
}

/// An Event per step, on the Scheduler. An Event that can't be posted is
/// logged: the step happened all the same.
async fn publish(scheduler: &Scheduler, ctx: &Context, decision: &Decision) {
    let reference = scheduler.object_ref(&());
    for e in &decision.events {
        let event = KubeEvent {
            type_: if e.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: e.reason.clone(),
            note: Some(e.message.clone()),
            action: event_action(&e.reason, &e.message),
            secondary: None,
        };
        info!(scheduler = %scheduler.name_any(), reason = %e.reason, "{}", e.message);
        if let Err(err) = ctx.recorder.publish(&event, &reference).await {
            warn!(scheduler = %scheduler.name_any(), reason = %e.reason, "posting an event: {err}");
        }
    }
}

/// The Event's `action`. The Recorder folds Events of the same reason and
/// action into one series that keeps the first note, so two different
/// steps of one reason (two revisions' `Registering`, two `Launched` of
/// other instances) need two actions: the reason and a digest of the note.
/// The same step repeated is a series. The WarmPool controller's too.
pub fn event_action(reason: &str, note: &str) -> String {
    let digest = Sha256::digest(note.as_bytes());
    let short: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("{reason}-{short}")
}

async fn patch_status(
    scheduler: &Scheduler,
    ctx: &Context,
    ns: &str,
    before: &SchedulerStatus,
    after: &SchedulerStatus,
) -> Result<(), StatusError> {
    let name = scheduler.name_any();
    let body = serde_json::json!({ "status": status_patch(before, after) });
    let params = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    Api::<Scheduler>::namespaced(ctx.client.clone(), ns)
        .patch_status(&name, &params, &Patch::Merge(&body))
        .await
        .map_err(|source| StatusError::Patch {
            scheduler: name,
            source,
        })?;
    Ok(())
}

/// A JSON merge patch (RFC 7386) that turns `before` into `after`: the whole
/// of `after`, with `null` for each field `after` no longer has (a merge
/// patch would otherwise keep it, a leader that is gone, say). The
/// WarmPool controller's status patches too.
pub fn status_patch<S: serde::Serialize>(before: &S, after: &S) -> Value {
    let as_json = |s: &S| serde_json::to_value(s).unwrap_or(Value::Null);
    with_removals(&as_json(before), as_json(after))
}

fn with_removals(before: &Value, after: Value) -> Value {
    match (before, after) {
        (Value::Object(old), Value::Object(mut new)) => {
            for (key, old_value) in old {
                match new.remove(key) {
                    None => {
                        new.insert(key.clone(), Value::Null);
                    }
                    Some(v) => {
                        new.insert(key.clone(), with_removals(old_value, v));
                    }
                }
            }
            Value::Object(new)
        }
        (_, after) => after,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{LeaderStatus, Phase};

    #[test]
    fn a_status_patch_removes_what_is_gone() {
        let before = SchedulerStatus {
            phase: Phase::Ready,
            leader: Some(LeaderStatus {
                instance: 1,
                pod: "orca-a-1".into(),
                image: "v1".into(),
                since: Some("2026-01-01T00:00:00Z".into()),
            }),
            aborted_revision: Some("abc".into()),
            ..Default::default()
        };
        let mut after = before.clone();
        after.phase = Phase::Degraded;
        after.aborted_revision = None;
        if let Some(l) = after.leader.as_mut() {
            l.since = None;
        }
        let patch = status_patch(&before, &after);
        assert_eq!(patch["phase"], "Degraded");
        assert_eq!(patch["abortedRevision"], Value::Null);
        assert_eq!(patch["leader"]["since"], Value::Null);
        assert_eq!(patch["leader"]["instance"], 1);
        assert!(patch.as_object().unwrap().contains_key("abortedRevision"));
    }
}
