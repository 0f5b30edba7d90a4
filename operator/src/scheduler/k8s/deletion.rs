//! Deleting a Scheduler gracefully. Without a finalizer the garbage
//! collector kills its pods at once and a leader dies with runs in hand;
//! with one, the operator first asks each live instance of the Scheduler to
//! drain, waits until none is left (each ends its row once its runs are
//! done) or `handover.drainTimeoutSeconds` has passed since the deletion,
//! and only then lets the pods go. Overlap off (no instance rows): nothing
//! to wait for. See docs/protocol.md#the-operators-rollout.
//!
//! A Scheduler's deletion, its pure `step` and the
//! pass that applies it, with the step's tests.

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::Pod;
use kube::{api::DeleteParams, runtime::controller::Action as Requeue, Api, ResourceExt};
use tracing::info;

use super::act::ActError;
use super::{
    context::Context,
    error::{FinalizerError, ReconcileError},
    report::{apply_status, publish},
};
use crate::crd::{set_condition, Phase, Scheduler, SchedulerStatus};
use crate::runtime::finalizer;
use crate::scheduler::{Action, Decision, Event, Observed, PodView};

/// The finalizer that holds a Scheduler until its instances have drained.
pub const FINALIZER: &str = "orca.dev/scheduler";

/// How often a Scheduler being deleted is looked at.
const POLL: Duration = Duration::from_secs(2);

/// Whether `s` lists [`FINALIZER`]: its deletion still waits on the
/// operator.
pub fn has_finalizer(s: &Scheduler) -> bool {
    s.finalizers().iter().any(|f| f == FINALIZER)
}

/// Adds [`FINALIZER`] unless the Scheduler's finalizers changed since it
/// was read (see [`finalizer::add`]; the next pass reads again): the
/// version the patch made.
pub async fn add_finalizer(
    ctx: &Context,
    s: &Scheduler,
    ns: &str,
) -> Result<Option<String>, ReconcileError> {
    let api = Api::<Scheduler>::namespaced(ctx.client().clone(), ns);
    finalizer::add(&api, ctx.fence(), &s.metadata, FINALIZER)
        .await
        .map_err(|e| finalizer_error(e, "adding", s))
}

/// Removes [`FINALIZER`] from the Scheduler `s` is (its uid; see
/// [`finalizer::remove`]).
async fn remove_finalizer(ctx: &Context, s: &Scheduler, ns: &str) -> Result<(), ReconcileError> {
    let api = Api::<Scheduler>::namespaced(ctx.client().clone(), ns);
    finalizer::remove(&api, ctx.fence(), &s.metadata, FINALIZER)
        .await
        .map(|_| ())
        .map_err(|e| finalizer_error(e, "removing", s))
}

fn finalizer_error(
    e: finalizer::FinalizerError,
    what: &'static str,
    s: &Scheduler,
) -> ReconcileError {
    FinalizerError::new(what, s.name_any(), e).into()
}

/// What deletion does next: decided from the snapshot alone.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Ask these instances (id, pod) to drain.
    AskDrain(Vec<(i64, String)>),
    /// Live instances remain, all asked; their runs.
    Wait { live: usize, runs: i32 },
    /// No database to ask (its Secret, key or URL is wrong, or it cannot be
    /// reached): delete these pods with their own grace instead, which a
    /// scheduler takes as "drain" (SIGTERM), finishing its runs first.
    StopPods(Vec<String>),
    /// Pods asked to stop still run.
    WaitPods(usize),
    /// Nothing is left (or the drain time-out passed): the pods may go.
    Release { timed_out: bool },
}

/// The next step for a Scheduler being deleted `elapsed` ago.
pub fn step(o: &Observed, elapsed: Duration) -> Step {
    let timeout = Duration::from_secs(
        o.spec()
            .handover
            .drain_timeout_seconds
            .clamp(0, crate::crd::MAX_SECONDS) as u64,
    );
    let ours: Vec<_> = match &o.instances() {
        Ok(rows) => rows
            .iter()
            .filter(|i| i.live() && o.pods().iter().any(|p| p.host() == i.host()))
            .collect(),
        // No database to drain through — a Secret deleted before the
        // Scheduler, a database gone: the pods themselves are told to stop,
        // and waited for, up to the time-out. Releasing at once would let
        // the garbage collector end runs the user never meant to lose.
        Err(_) => {
            let running: Vec<&PodView> = o.pods().iter().filter(|p| p.exited().is_none()).collect();
            if running.is_empty() {
                return Step::Release { timed_out: false };
            }
            if elapsed >= timeout {
                return Step::Release { timed_out: true };
            }
            let stop: Vec<String> = running
                .iter()
                .filter(|p| !p.deleting())
                .map(|p| p.name().to_string())
                .collect();
            return if stop.is_empty() {
                Step::WaitPods(running.len())
            } else {
                Step::StopPods(stop)
            };
        }
    };
    if ours.is_empty() {
        return Step::Release { timed_out: false };
    }
    if elapsed >= timeout {
        return Step::Release { timed_out: true };
    }
    let ask: Vec<(i64, String)> = ours
        .iter()
        .filter(|i| i.drain_asked().is_none() && i.role() != "draining")
        .map(|i| (i.id(), i.host().to_string()))
        .collect();
    if ask.is_empty() {
        Step::Wait {
            live: ours.len(),
            runs: ours.iter().map(|i| i.runs()).sum(),
        }
    } else {
        Step::AskDrain(ask)
    }
}

/// One reconcile of a Scheduler being deleted that still holds the
/// finalizer.
pub async fn reconcile(
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
    let step = step(&observed, elapsed);
    let mut decision = decision_of(&step, &scheduler, &observed);
    if let Step::AskDrain(ask) = &step {
        let asked = ask_to_drain(ctx, db.as_deref(), &scheduler, ask).await?;
        decision = decision.saying(asked);
    }
    publish(&scheduler, ctx, &decision).await;
    // Each pod asked to stop gets its own grace (a drain) while the drain
    // time-out runs; past it, the operator's short one.
    let grace = match step {
        Step::StopPods(_) => None,
        _ => Some(super::pods::stop_grace(&scheduler.spec)),
    };
    for action in decision.actions() {
        if let Action::DeletePod { name: pod } = action {
            delete_pod(ctx, ns, &name, pod, grace).await?;
        }
    }
    if let Step::Release { .. } = step {
        remove_finalizer(ctx, &scheduler, ns).await?;
        return Ok(Requeue::await_change());
    }
    if decision.status() != observed.status() {
        apply_status(&scheduler, ctx, ns, decision.status()).await?;
    }
    Ok(Requeue::requeue(POLL))
}

/// Asks each instance of `ask` (its id, and its pod) to drain on `db`:
/// the Events that say so.
async fn ask_to_drain(
    ctx: &Context,
    db: Option<&orca_db::Db>,
    scheduler: &Scheduler,
    ask: &[(i64, String)],
) -> Result<Vec<Event>, ReconcileError> {
    let name = scheduler.name_any();
    let db = db.ok_or_else(|| ActError::NoDatabase {
        action: "asking the instances of a deleted Scheduler to drain".into(),
    })?;
    let mut events = Vec::new();
    for (id, pod) in ask {
        super::act::ask_drain(ctx, db, scheduler, *id).await?;
        info!(scheduler = %name, instance = id, "asked to drain: the Scheduler is being deleted");
        events.push(Event::normal(
            "Deleting",
            format!("instance {id} of pod {pod} asked to drain: the Scheduler is being deleted"),
        ));
    }
    Ok(events)
}

/// What `step` of the deletion of `scheduler` says and deletes, but for
/// the drains it asks (see [`ask_to_drain`]).
fn decision_of(step: &Step, scheduler: &Scheduler, observed: &Observed) -> Decision {
    let mut status = observed.status().clone();
    let progressing = |status: &mut SchedulerStatus, message: String| {
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        );
        let generation = observed.generation();
        set_condition(
            &mut status.conditions,
            "Progressing",
            true,
            "Deleting",
            &message,
            now,
            generation,
        )
    };
    let mut events = Vec::new();
    let mut actions = Vec::new();
    match step {
        Step::AskDrain(_) => {}
        Step::Wait { live, runs } => {
            progressing(
                &mut status,
                format!(
                    "waiting for {live} instance(s) to finish {runs} run(s) before the pods go"
                ),
            );
            status.draining = *live as i32;
        }
        Step::StopPods(pods) => {
            let why = observed
                .instances()
                .as_ref()
                .err()
                .map(|p| p.message.clone())
                .unwrap_or_default();
            for pod in pods {
                events.push(Event::normal(
                    "Deleting",
                    format!(
                        "pod {pod} asked to stop, which drains its scheduler: there is no \
                         database to ask ({why})"
                    ),
                ));
            }
            actions.extend(pods.iter().map(|p| Action::DeletePod { name: p.clone() }));
        }
        Step::WaitPods(n) => {
            progressing(
                &mut status,
                format!("waiting for {n} pod(s) to finish their runs and exit"),
            );
        }
        Step::Release { timed_out } => {
            if *timed_out {
                // Past the drain time-out: what still runs is stopped now,
                // not given its whole grace again by the garbage collector.
                actions.extend(
                    observed
                        .pods()
                        .iter()
                        .filter(|p| p.exited().is_none())
                        .map(|p| Action::DeletePod {
                            name: p.name().to_string(),
                        }),
                );
            }
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
    Decision::new(actions, events, status, POLL)
}

/// Deletes pod `pod` of Scheduler `scheduler`, with `grace` seconds or, for
/// `None`, the pod's own; one already gone is done.
async fn delete_pod(
    ctx: &Context,
    ns: &str,
    scheduler: &str,
    pod: &str,
    grace: Option<i64>,
) -> Result<(), ReconcileError> {
    ctx.fence().check().map_err(|source| ActError::Fenced {
        action: format!("deleting pod {pod}"),
        source,
    })?;
    let params = DeleteParams {
        grace_period_seconds: grace.and_then(|g| u32::try_from(g).ok()),
        ..Default::default()
    };
    info!(scheduler = %scheduler, pod = %pod, grace = ?grace, "deleting pod: the Scheduler is being deleted");
    match Api::<Pod>::namespaced(ctx.client().clone(), ns)
        .delete(pod, &params)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(ActError::Write {
            what: format!("deleting pod {pod}"),
            refused: "PodRefused",
            source,
        }
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;
    use crate::crd::SchedulerSpec;
    use crate::scheduler::{InstanceView, PodState, Problem};

    fn observed(pods: Vec<PodView>, instances: Result<Vec<InstanceView>, Problem>) -> Observed {
        let spec: SchedulerSpec = serde_json::from_value(serde_json::json!({
            "image": "orca:v1",
            "database": {"urlSecretRef": {"name": "db", "key": "url"}},
            "handover": {"drainTimeoutSeconds": 100}
        }))
        .unwrap();
        Observed::new(
            "ns".into(),
            "orca".into(),
            spec,
            Default::default(),
            Utc.timestamp_opt(1_800_000_000, 0).unwrap(),
        )
        .with_generation(Some(1))
        .with_pods(pods)
        .with_instances(instances)
    }

    fn pod(name: &str, deleting: bool, exited: bool) -> PodView {
        let t = Utc.timestamp_opt(1_800_000_000, 0).unwrap();
        PodView::new(
            name.into(),
            format!("ns-orca-{name}"),
            "0123456789".into(),
            1,
            "orca:v1".into(),
            t,
            if exited {
                PodState::Exited {
                    code: 0,
                    message: String::new(),
                    finished: t,
                }
            } else {
                PodState::Running
            },
        )
        .with_started(Some(t))
        .with_deleting(deleting)
    }

    fn row(id: i64, host: &str, runs: i32) -> InstanceView {
        let t = Utc.timestamp_opt(1_800_000_000, 0).unwrap();
        InstanceView::new(
            id,
            format!("ns-orca-{host}"),
            "orca:v1".into(),
            "leading".into(),
            t,
        )
        .with_holds_lock(true)
        .with_led(Some(t))
        .with_runs(runs)
    }

    fn gone(reason: &str) -> Result<Vec<InstanceView>, Problem> {
        Err(Problem {
            reason: reason.into(),
            message: "Secret ns/db does not exist".into(),
        })
    }

    #[test]
    fn each_step_of_a_deletion() {
        let s = Duration::from_secs;
        let cases: Vec<(&str, Observed, Duration, Step)> = vec![
            (
                "a live instance is asked to drain",
                observed(vec![pod("a", false, false)], Ok(vec![row(7, "a", 2)])),
                s(1),
                Step::AskDrain(vec![(7, "ns-orca-a".into())]),
            ),
            (
                "nothing live: the pods go",
                observed(vec![pod("a", false, true)], Ok(vec![])),
                s(1),
                Step::Release { timed_out: false },
            ),
            (
                "past the drain time-out: the pods go anyway",
                observed(vec![pod("a", false, false)], Ok(vec![row(7, "a", 2)])),
                s(100),
                Step::Release { timed_out: true },
            ),
            // The Secret went first (`kubectl delete -f` of a directory):
            // once this released the pods at once, and their runs died.
            (
                "no database: the running pods are asked to stop (a drain)",
                observed(
                    vec![pod("a", false, false), pod("b", false, true)],
                    gone("SecretMissing"),
                ),
                s(1),
                Step::StopPods(vec!["a".into()]),
            ),
            (
                "no database, the pod stopping: wait for it",
                observed(vec![pod("a", true, false)], gone("DatabaseUnreachable")),
                s(50),
                Step::WaitPods(1),
            ),
            (
                "no database, every pod has exited: the pods go",
                observed(vec![pod("a", true, true)], gone("SecretMissing")),
                s(50),
                Step::Release { timed_out: false },
            ),
            (
                "no database, past the drain time-out: the pods go anyway",
                observed(vec![pod("a", true, false)], gone("SecretKeyMissing")),
                s(100),
                Step::Release { timed_out: true },
            ),
        ];
        for (what, o, elapsed, want) in cases {
            assert_eq!(step(&o, elapsed), want, "{what}");
        }
    }
}
