//! Deleting a Scheduler gracefully. Without a finalizer the garbage
//! collector kills its pods at once and a leader dies with runs in hand;
//! with one, the operator first asks each live instance of the Scheduler to
//! drain, waits until none is left (each ends its row once its runs are
//! done) or `handover.drainTimeoutSeconds` has passed since the deletion,
//! and only then lets the pods go. Overlap off (no instance rows): nothing
//! to wait for. See docs/protocol.md#the-operators-rollout.

use std::{sync::Arc, time::Duration};

use kube::{
    api::{Patch, PatchParams},
    runtime::controller::Action as Requeue,
    Api, ResourceExt,
};
use orca_db::schedulers;
use serde_json::json;
use tracing::info;

use super::act::ActError;
use super::{publish, Context, ObserveError, ReconcileError};
use crate::crd::{set_condition, Phase, Scheduler};
use crate::rollout::{Decision, Event, Observed};

/// The finalizer that holds a Scheduler until its instances have drained.
pub const FINALIZER: &str = "orca.dev/scheduler";

/// How often a Scheduler being deleted is looked at.
const POLL: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
#[error("{what} the finalizer of Scheduler {scheduler}: {source}")]
pub struct FinalizerError {
    what: &'static str,
    scheduler: String,
    #[source]
    source: kube::Error,
}

pub fn has_finalizer(s: &Scheduler) -> bool {
    s.finalizers().iter().any(|f| f == FINALIZER)
}

/// Adds [`FINALIZER`], if the Scheduler has not changed since it was read:
/// a merge patch of the whole list that carries the resourceVersion read
/// (a 409 if anyone wrote since; the next pass reads again).
pub async fn add_finalizer(ctx: &Context, s: &Scheduler, ns: &str) -> Result<(), ReconcileError> {
    let mut finalizers = s.finalizers().to_vec();
    finalizers.push(FINALIZER.into());
    patch(ctx, s, ns, finalizers, "adding").await
}

/// Removes [`FINALIZER`], guarded as [`add_finalizer`].
async fn remove_finalizer(ctx: &Context, s: &Scheduler, ns: &str) -> Result<(), ReconcileError> {
    let finalizers: Vec<String> = s
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    patch(ctx, s, ns, finalizers, "removing").await
}

async fn patch(
    ctx: &Context,
    s: &Scheduler,
    ns: &str,
    finalizers: Vec<String>,
    what: &'static str,
) -> Result<(), ReconcileError> {
    ctx.fence.check().map_err(ObserveError::from)?;
    let body =
        json!({"metadata": {"resourceVersion": s.resource_version(), "finalizers": finalizers}});
    Api::<Scheduler>::namespaced(ctx.client.clone(), ns)
        .patch(&s.name_any(), &PatchParams::default(), &Patch::Merge(&body))
        .await
        .map_err(|source| FinalizerError {
            what,
            scheduler: s.name_any(),
            source,
        })?;
    Ok(())
}

/// What deletion does next: decided from the snapshot alone.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Ask these instances (id, pod) to drain.
    AskDrain(Vec<(i64, String)>),
    /// Live instances remain, all asked; their runs.
    Wait { live: usize, runs: i32 },
    /// Nothing is left (or the drain time-out passed): the pods may go.
    Release { timed_out: bool },
}

/// The next step for a Scheduler being deleted `elapsed` ago.
pub fn step(o: &Observed, elapsed: Duration) -> Step {
    let timeout = Duration::from_secs(o.spec.handover.drain_timeout_seconds.max(0) as u64);
    let ours: Vec<_> = match &o.instances {
        Ok(rows) => rows
            .iter()
            .filter(|i| i.live && o.pods.iter().any(|p| p.name == i.host))
            .collect(),
        // No database to ask (no Secret, no key, a bad URL): there is no
        // instance the operator could drain; holding the Scheduler for the
        // whole time-out would only surprise whoever deletes it.
        Err(p) if p.reason != "DatabaseUnreachable" => return Step::Release { timed_out: false },
        // The database can't be reached just now: wait, up to the time-out.
        Err(_) if elapsed < timeout => return Step::Wait { live: 0, runs: 0 },
        Err(_) => return Step::Release { timed_out: true },
    };
    if ours.is_empty() {
        return Step::Release { timed_out: false };
    }
    if elapsed >= timeout {
        return Step::Release { timed_out: true };
    }
    let ask: Vec<(i64, String)> = ours
        .iter()
        .filter(|i| i.drain_asked.is_none() && i.role != "draining")
        .map(|i| (i.id, i.host.clone()))
        .collect();
    if ask.is_empty() {
        Step::Wait {
            live: ours.len(),
            runs: ours.iter().map(|i| i.runs).sum(),
        }
    } else {
        Step::AskDrain(ask)
    }
}

/// One pass over a Scheduler being deleted that still holds the finalizer.
pub async fn pass(
    scheduler: Arc<Scheduler>,
    ctx: &Context,
    ns: &str,
    observed: Observed,
    db: Option<Arc<orca_db::Db>>,
) -> Result<Requeue, ReconcileError> {
    let name = scheduler.name_any();
    let since = scheduler
        .metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .unwrap_or_default();
    let elapsed = Duration::from_secs((chrono::Utc::now().timestamp() - since).max(0) as u64);
    let mut status = observed.status.clone();
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let mut events = Vec::new();
    let step = step(&observed, elapsed);
    match &step {
        Step::AskDrain(ask) => {
            let db = db.as_deref().ok_or_else(|| ActError::NoDatabase {
                action: "asking the instances of a deleted Scheduler to drain".into(),
            })?;
            let stale = Duration::from_secs(scheduler.spec.handover.stale_seconds.max(1) as u64);
            for (id, pod) in ask {
                ctx.fence.check().map_err(|source| ActError::Fenced {
                    action: format!("asking instance {id} to drain"),
                    source,
                })?;
                schedulers::ask_drain(db, *id, stale)
                    .await
                    .map_err(|source| ActError::AskDrain {
                        instance: *id,
                        source,
                    })?;
                info!(scheduler = %name, instance = id, "asked to drain: the Scheduler is being deleted");
                events.push(Event::normal(
                    "Deleting",
                    format!(
                        "instance {id} of pod {pod} asked to drain: the Scheduler is being deleted"
                    ),
                ));
            }
        }
        Step::Wait { live, runs } => {
            status.draining = *live as i32;
            set_condition(
                &mut status.conditions,
                "Progressing",
                true,
                "Deleting",
                &format!(
                    "waiting for {live} instance(s) to finish {runs} run(s) before the pods go"
                ),
                now.clone(),
                observed.generation,
            );
        }
        Step::Release { timed_out } => {
            events.push(if *timed_out {
                Event::warning(
                    "DrainTimeout",
                    format!(
                        "instances still live {}s after the deletion: the pods go anyway",
                        scheduler.spec.handover.drain_timeout_seconds
                    ),
                )
            } else {
                Event::normal(
                    "Deleted",
                    "every instance has drained: the pods go".to_string(),
                )
            });
        }
    }
    status.phase = Phase::Draining;
    let decision = Decision {
        actions: Vec::new(),
        events,
        status,
        requeue: POLL,
    };
    publish(&scheduler, ctx, &decision).await;
    if let Step::Release { .. } = step {
        remove_finalizer(ctx, &scheduler, ns).await?;
        return Ok(Requeue::await_change());
    }
    if decision.status != observed.status {
        super::apply_status(&scheduler, ctx, ns, &decision.status).await?;
    }
    Ok(Requeue::requeue(POLL))
}
