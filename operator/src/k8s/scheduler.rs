//! The Scheduler controller's `reconcile` and `error_policy`: observe (the
//! Scheduler's pods and Jobs by label, its Secret's database URL, the rows
//! of `orca.schedulers`) → [`decide`] → act (each action, in order) → an
//! Event per step → the status, applied (server-side apply) only when it
//! changed. Every write, and the database read, checks the Lease's fence
//! first.

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
use serde::{de::DeserializeOwned, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tracing::{info, warn, Instrument};

use super::act::{act, ActError};
use super::leader::{Fence, Fenced};
use super::{
    database, deletion, jobs, memory, metrics::Metrics, pods, refusal, LABEL_SCHEDULER, MANAGER,
};
use crate::crd::{Scheduler, SchedulerStatus};
use crate::rollout::{self, decide, Decision, Observed};

/// What every reconcile shares: the client, the event recorder, the
/// metrics, the database connections and the fence.
pub struct Context {
    pub client: Client,
    recorder: Recorder,
    metrics: Metrics,
    connections: database::Connections,
    /// Until when this replica may act (see [`super::leader`]).
    pub(super) fence: Fence,
    backoff: refusal::Backoff,
    memory: memory::StatusMemory,
}

impl Context {
    /// `instance` names this operator replica in the Events it posts (the
    /// pod's name); `fence` is its election's ([`Fence::always`] without
    /// one).
    pub fn new(client: Client, metrics: Metrics, instance: &str, fence: Fence) -> Self {
        let reporter = Reporter {
            controller: MANAGER.into(),
            instance: Some(instance.into()),
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics,
            connections: database::Connections::of_replica(instance),
            fence,
            backoff: refusal::Backoff::default(),
            memory: memory::StatusMemory::default(),
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
    #[error(transparent)]
    Fenced(#[from] Fenced),
}

#[derive(Debug, thiserror::Error)]
#[error("writing the status of Scheduler {scheduler}: {source}")]
pub struct StatusError {
    scheduler: String,
    #[source]
    source: StatusWriteError,
}

/// Why a status could not be written (both controllers).
#[derive(Debug, thiserror::Error)]
pub enum StatusWriteError {
    #[error("applying it: {0}")]
    Apply(#[source] kube::Error),
    #[error("removing the fields an older writer left: {0}")]
    Leftovers(#[source] kube::Error),
    #[error(transparent)]
    Fenced(#[from] Fenced),
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
    #[error("finalizer: {0}")]
    Finalizer(#[from] super::deletion::FinalizerError),
}

impl ReconcileError {
    pub fn stage(&self) -> &'static str {
        match self {
            ReconcileError::Observe(_) => "observe",
            ReconcileError::Act(_) => "act",
            ReconcileError::Status(_) => "status",
            ReconcileError::Finalizer(_) => "finalizer",
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
        if !deletion::has_finalizer(&scheduler) {
            // Its pods and Jobs go with it (owner references).
            ctx.connections.forget(&ns, &name);
            ctx.memory.forget(&ns, &name);
            return Ok(Requeue::await_change());
        }
        let (observed, db) = observe(&scheduler, &ctx, &ns).await?;
        let requeue = deletion::pass(scheduler.clone(), &ctx, &ns, observed, db).await?;
        if !deletion::has_finalizer(&scheduler) {
            ctx.connections.forget(&ns, &name);
        }
        return Ok(requeue);
    }
    if !deletion::has_finalizer(&scheduler) && !scheduler.spec.paused {
        deletion::add_finalizer(&ctx, &scheduler, &ns).await?;
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
        ctx.metrics
            .status(&ns, &name, &observed.status, &decision.status);
    }
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
    let ns = namespace_of(scheduler);
    let name = scheduler.name_any();
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let news = !observed.status.conditions.iter().any(|c| {
        c.type_ == "Degraded" && c.status == "True" && c.reason == reason && c.message == message
    });
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
        ctx.metrics
            .status(&ns, &name, &observed.status, &decision.status);
    }
    ctx.metrics.failed(&ns, &name, "act");
    Ok(Requeue::requeue(refusal::REFUSED_RETRY))
}

/// A failed reconcile is logged, counted and tried again shortly.
pub fn error_policy(
    scheduler: Arc<Scheduler>,
    error: &ReconcileError,
    ctx: Arc<Context>,
) -> Requeue {
    let ns = namespace_of(&scheduler);
    let name = scheduler.name_any();
    let delay = ctx.backoff.failed(&ns, &name);
    warn!(scheduler = %name, namespace = %ns, stage = error.stage(), retry_in = ?delay, "reconcile failed: {error}");
    ctx.metrics.failed(&ns, &name, error.stage());
    Requeue::requeue(delay)
}

async fn observe(
    scheduler: &Scheduler,
    ctx: &Context,
    ns: &str,
) -> Result<(Observed, Option<Arc<Db>>), ObserveError> {
    ctx.fence.check()?;
    let name = scheduler.name_any();
    let mine = ListParams::default().labels(&format!(
        "{LABEL_SCHEDULER}={}",
        rollout::scheduler_label(&name)
    ));
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
                ctx.fence.check()?;
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
        status: ctx.memory.status(
            ns,
            &scheduler.name_any(),
            scheduler.metadata.resource_version.as_deref(),
            &scheduler.status.clone().unwrap_or_default(),
        ),
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
/// logged: the step happened all the same. Behind the fence, none is.
pub(super) async fn publish(scheduler: &Scheduler, ctx: &Context, decision: &Decision) {
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
        if let Err(fenced) = ctx.fence.check() {
            warn!(scheduler = %scheduler.name_any(), reason = %e.reason, error = %fenced, "event not posted");
            return;
        }
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

/// Writes `status` whole (see [`write_status`]).
pub(super) async fn apply_status(
    scheduler: &Scheduler,
    ctx: &Context,
    ns: &str,
    status: &SchedulerStatus,
) -> Result<(), StatusError> {
    let name = scheduler.name_any();
    let api = Api::<Scheduler>::namespaced(ctx.client.clone(), ns);
    let version = write_status(&api, &name, status, &ctx.fence)
        .await
        .map_err(|source| StatusError {
            scheduler: name.clone(),
            source,
        })?;
    ctx.memory.wrote(
        ns,
        &name,
        scheduler.metadata.resource_version.as_deref(),
        version,
        status,
    );
    Ok(())
}

/// Writes `status` whole to the status of `K` `name` by server-side apply
/// as [`MANAGER`], behind `fence`: a field the operator no longer sets (a
/// leader that is gone, capacity errors that are over) is removed by the
/// API server. Unless another field manager owns it too — the merge
/// patches of an operator from before it applied statuses own what they
/// set: what the apply's answer still shows of those is removed by a merge
/// patch, once.
/// Returns the object's resourceVersion after the write.
pub async fn write_status<K, S>(
    api: &Api<K>,
    name: &str,
    status: &S,
    fence: &Fence,
) -> Result<Option<String>, StatusWriteError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
    S: Serialize,
{
    let body = status_apply::<K>(name, status);
    fence.check()?;
    let stored = api
        .patch_status(name, &status_apply_params(), &Patch::Apply(&body))
        .await
        .map_err(StatusWriteError::Apply)?;
    let stored = serde_json::to_value(&stored).unwrap_or(Value::Null);
    let version = stored["metadata"]["resourceVersion"]
        .as_str()
        .map(String::from);
    let Some(left) = leftovers(&stored["status"], &body["status"]) else {
        return Ok(version);
    };
    info!(kind = %K::kind(&()), name = %name, fields = %left, "removing status fields an older writer left");
    let params = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    fence.check()?;
    let stored = api
        .patch_status(name, &params, &Patch::Merge(&json!({ "status": left })))
        .await
        .map_err(StatusWriteError::Leftovers)?;
    Ok(stored.meta().resource_version.clone())
}

/// The merge patch that removes from `stored` each field `desired` does
/// not have, objects field by field (anything else the apply replaced
/// whole); `None` when nothing is left over.
pub fn leftovers(stored: &Value, desired: &Value) -> Option<Value> {
    let (Value::Object(stored), Value::Object(desired)) = (stored, desired) else {
        return None;
    };
    let mut patch = serde_json::Map::new();
    for (key, value) in stored {
        match desired.get(key) {
            None => {
                patch.insert(key.clone(), Value::Null);
            }
            Some(wanted) => {
                if let Some(inner) = leftovers(value, wanted) {
                    patch.insert(key.clone(), inner);
                }
            }
        }
    }
    (!patch.is_empty()).then_some(Value::Object(patch))
}

/// The body of a server-side apply of `status` to the status of `K`
/// `name`: the object's type and name, and the whole status the operator
/// wants. The WarmPool controller's too.
pub fn status_apply<K>(name: &str, status: &impl Serialize) -> Value
where
    K: Resource<DynamicType = ()>,
{
    json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": { "name": name },
        "status": status,
    })
}

/// Apply as [`MANAGER`], taking over any field another manager set.
pub fn status_apply_params() -> PatchParams {
    PatchParams::apply(MANAGER).force()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::Phase;

    #[test]
    fn a_status_is_applied_whole_and_what_is_gone_is_left_out() {
        let status = SchedulerStatus {
            phase: Phase::Degraded,
            leader: None,
            aborted_revision: None,
            ..Default::default()
        };
        let body = status_apply::<Scheduler>("orca", &status);
        assert_eq!(body["apiVersion"], "orca.dev/v1alpha1");
        assert_eq!(body["kind"], "Scheduler");
        assert_eq!(body["metadata"]["name"], "orca");
        assert_eq!(body["status"]["phase"], "Degraded");
        // Not `null`: left out, so server-side apply removes them.
        let fields = body["status"].as_object().unwrap();
        assert!(!fields.contains_key("leader"), "{body}");
        assert!(!fields.contains_key("abortedRevision"), "{body}");
        let params = status_apply_params();
        assert_eq!(params.field_manager.as_deref(), Some(MANAGER));
        assert!(params.force);
    }

    #[test]
    fn what_an_older_writer_left_is_found_field_by_field() {
        let desired = json!({"phase": "Ready", "leader": {"instance": 2, "pod": "p"},
                             "revisions": [{"revision": "b"}]});
        assert_eq!(leftovers(&desired, &desired), None);
        let stored = json!({"phase": "Ready", "leader": {"instance": 2, "pod": "p", "since": "x"},
                            "abortedRevision": "a", "revisions": [{"revision": "a"}]});
        assert_eq!(
            leftovers(&stored, &desired),
            Some(json!({"leader": {"since": null}, "abortedRevision": null}))
        );
    }
}
