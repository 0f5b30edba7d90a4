//! `decide`: one snapshot in, the next steps of the rollout out
//! (docs/architecture.md#scheduler-controller-decide).
//!
//! With overlap on, a new revision goes: pod created → its instance joined
//! and live (else, past joinTimeout, abort: delete it; the old instance,
//! never asked to drain, keeps leading) → the older live instances asked to
//! drain → `wait_for_lead`, verified in `pg_locks` (else, past leadTimeout,
//! `Degraded`) → the register Job (a failed one retried as a new Job, in
//! `register.rs`) → each old pod deleted once its row has ended and it has
//! exited (or past drainTimeout). Exit 75 from the new pod
//! (overlap refused) → stop-the-world: the old drain and end first, then the
//! new starts. Overlap off → recreate: the old pods go, and once they are
//! gone the new one starts; it writes no row, so it is up (and registers)
//! once it has run `settleSeconds`. Old revisions are never restarted: a
//! restarted old image would be the newest instance and take the lead.
//! Rows of `orca.schedulers` that are not this Scheduler's (another
//! Scheduler on the same database) are never touched: nothing starts while
//! one is live (`DatabaseShared`).

use std::time::Duration;

use super::{
    register::register,
    revision::{is_pod_of, pod_name, revision_of},
    snapshot::*,
    status::StatusDraft,
};

/// The outcome of one [`decide`].
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub actions: Vec<Action>,
    pub events: Vec<Event>,
    pub status: crate::crd::SchedulerStatus,
    /// Look again after this, even if nothing is watched to change.
    pub requeue: Duration,
}

/// How long an old pod may take to exit after its row has ended.
const EXIT_GRACE: i64 = 30;
/// A pod that ran this long before it died was not crash-looping.
const STABLE_SECONDS: i64 = 600;
/// The kubelet's reasons for a container that will not run until someone
/// changes something (the image, a Secret): said at once as `Degraded`.
const CANNOT_RUN: [&str; 4] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
];

pub fn decide(o: &Observed) -> Decision {
    let mut d = StatusDraft::new(o);
    if o.spec.paused {
        return d.finish_paused();
    }
    let rows = match &o.instances {
        Ok(rows) => rows.as_slice(),
        Err(problem) => return d.finish_unobserved(problem),
    };
    let target = revision_of(&o.spec);
    d.begin(&target);
    // This Scheduler's rows: of its pods in the snapshot, or named as its
    // pods are (a pod already gone). Any other row is another Scheduler's
    // on the same database: not an old instance to drain or to fall back
    // to, and while one is live no pod starts, as its instance would take
    // the lead from theirs.
    let (own, foreign): (Vec<InstanceView>, Vec<InstanceView>) = rows
        .iter()
        .cloned()
        .partition(|i| o.pods.iter().any(|p| p.name == i.host) || is_pod_of(&o.name, &i.host));
    let shared: Vec<&InstanceView> = foreign.iter().filter(|i| i.live).collect();
    if !shared.is_empty() {
        d.database_shared(&shared);
    }
    let may_start = shared.is_empty();
    let instances = own.as_slice();
    let handover = &o.spec.handover;
    let secs = |n: i64| chrono::Duration::seconds(n);
    let instance_of = |pod: &PodView| {
        instances
            .iter()
            .filter(|i| i.host == pod.name)
            .max_by_key(|i| i.id)
    };
    let newest_live = instances.iter().filter(|i| i.live).map(|i| i.id).max();
    let next_sequence = o
        .pods
        .iter()
        .map(|p| p.sequence)
        .max()
        .unwrap_or(0)
        .max(d.last_sequence())
        + 1;
    if d.aborted_revision().is_some_and(|r| r != target) {
        d.clear_aborted();
    }

    // The current pod: the newest of the target revision that can still
    // lead — not being deleted, and its instance neither draining nor
    // superseded by a newer live one.
    let viable = |p: &&PodView| {
        !p.deleting
            && p.revision == target
            && match instance_of(p) {
                None => true,
                Some(i) => {
                    i.ended.is_none()
                        && i.drain_asked.is_none()
                        && i.role != "draining"
                        && newest_live.is_none_or(|n| n <= i.id)
                }
            }
    };
    let mut current = o.pods.iter().filter(viable).max_by_key(|p| p.sequence);
    // Pods this pass replaces or removes, so the old-pod sweep leaves them.
    let mut handled: Vec<&str> = Vec::new();

    // 1. No current pod: start one (or wait for the way to be clear).
    if current.is_none() && may_start {
        // After an abort the old instance keeps leading; once nothing older
        // is left to lead (its pod died, its row went stale), leaving the
        // aborted revision alone would leave no scheduler at all, and an
        // old revision is never restarted: the target is tried again.
        let older_alive = instances.iter().any(|i| i.live)
            || o.pods
                .iter()
                .any(|p| p.revision != target && !p.deleting && p.exited().is_none());
        let aborted = d.aborted_revision() == Some(target.as_str());
        if aborted && !older_alive {
            d.retry_aborted();
        }
        if aborted && older_alive {
            // A live row whose pod has exited goes stale without a watch
            // noticing: look again soon then.
            let orphaned = instances.iter().any(|i| {
                i.live
                    && !o
                        .pods
                        .iter()
                        .any(|p| p.name == i.host && p.exited().is_none())
            });
            d.degraded_keep(orphaned);
        } else if !o.spec.overlap {
            let others: Vec<&PodView> = o.pods.iter().filter(|p| p.revision != target).collect();
            for p in others.iter().filter(|p| !p.deleting) {
                d.act(Action::DeletePod {
                    name: p.name.clone(),
                });
                d.event(Event::normal(
                    "Recreating",
                    format!(
                        "overlap is off: deleting pod {} ({}) before the new one starts",
                        p.name, p.image
                    ),
                ));
                handled.push(&p.name);
            }
            if others.is_empty() {
                d.create_pod(&o.name, &target, next_sequence, &o.spec.image, instances);
            }
        } else {
            d.create_pod(&o.name, &target, next_sequence, &o.spec.image, instances);
        }
    }

    // 2. The current pod exited: stop-the-world on 75, else recreate it.
    if let Some(pod) = current {
        if let PodState::Exited {
            code,
            message,
            finished,
        } = &pod.state
        {
            handled.push(&pod.name);
            if *code == 75 && o.spec.overlap {
                let live: Vec<&InstanceView> = instances.iter().filter(|i| i.live).collect();
                d.stop_the_world(pod, message);
                for i in live.iter().filter(|i| i.drain_asked.is_none()) {
                    d.ask_drain(
                        i,
                        "stop-the-world: the new image refused to start beside it",
                    );
                }
                if live.is_empty() && may_start {
                    d.act(Action::DeletePod {
                        name: pod.name.clone(),
                    });
                    d.create_pod(&o.name, &target, next_sequence, &o.spec.image, instances);
                }
            } else {
                // The back-off doubles with each pod that died young, and
                // starts again once one ran stably: counted from its
                // container's start, so an image pull is not a run.
                let ran = *finished - pod.started.unwrap_or(pod.created);
                let stable = ran >= secs(STABLE_SECONDS);
                let backoff = if stable {
                    10
                } else {
                    10 * 2i64.pow(d.recent_restarts().clamp(0, 5) as u32)
                };
                let due = *finished + secs(backoff);
                if o.now >= due && may_start {
                    d.act(Action::DeletePod {
                        name: pod.name.clone(),
                    });
                    d.restart_pod(pod, *code, stable, &target, next_sequence);
                } else {
                    d.crash_backoff(
                        pod,
                        *code,
                        message,
                        (due - o.now).to_std().unwrap_or(Duration::from_secs(1)),
                    );
                }
            }
            current = None;
        }
    }

    // 3. The current pod runs: join → drain the older → lead → register;
    // with overlap off, settle → register. A container that cannot start
    // (its image, its config) is said at once, whatever the step.
    if let Some((pod, waiting)) = current.and_then(|p| {
        p.waiting
            .as_ref()
            .filter(|w| CANNOT_RUN.contains(&w.reason.as_str()))
            .map(|w| (p, w))
    }) {
        d.cannot_run(pod, waiting);
    }
    if let Some(pod) = current.filter(|_| !o.spec.overlap) {
        let since = pod.started.unwrap_or(pod.created);
        let settled =
            pod.state == PodState::Running && o.now - since >= secs(handover.settle_seconds);
        if settled {
            d.settled(pod, since, handover.settle_seconds);
            register(&mut d, o, &target);
        } else {
            d.settling(pod);
        }
    } else if let Some(pod) = current {
        match instance_of(pod) {
            // It joined once and looks stale now: a database blip, or a hung
            // process. Never a join time-out: wait for it to beat again.
            Some(me) if !me.live => d.instance_stale(pod, me),
            None => {
                // The join time-out counts from the container's start: an
                // image pull is no time to join in. A pod not started yet
                // (pulling, or waiting for a node) has not begun it; one
                // running without a known start counts from its creation.
                let since = match (pod.started, &pod.state) {
                    (Some(t), _) => Some(t),
                    (None, PodState::Running) => Some(pod.created),
                    (None, _) => None,
                };
                let fallback = instances.iter().any(|i| i.live && i.host != pod.name);
                if since.is_some_and(|t| o.now - t > secs(handover.join_timeout_seconds)) {
                    if fallback {
                        handled.push(&pod.name);
                        d.act(Action::DeletePod {
                            name: pod.name.clone(),
                        });
                        d.abort_join(pod, &target, handover.join_timeout_seconds);
                    } else {
                        d.join_late(pod, handover.join_timeout_seconds);
                    }
                } else {
                    d.waiting_for_join(pod, instances);
                }
            }
            Some(me) => {
                d.joined(pod, me);
                for older in instances
                    .iter()
                    .filter(|i| i.live && i.id < me.id && i.drain_asked.is_none())
                {
                    d.ask_drain(
                        older,
                        &format!("instance {} ({}) has joined", me.id, pod.image),
                    );
                }
                let leads = me.holds_lock && newest_live == Some(me.id);
                if leads {
                    d.leads(pod, me);
                    register(&mut d, o, &target);
                } else {
                    let asked = instances
                        .iter()
                        .filter(|i| i.id < me.id)
                        .filter_map(|i| i.drain_asked)
                        .max()
                        .unwrap_or(me.joined)
                        .max(me.joined);
                    if o.now - asked > secs(handover.lead_timeout_seconds) {
                        d.lead_late(me, handover.lead_timeout_seconds);
                    } else {
                        d.waiting_for_lead(me, instances);
                    }
                }
            }
        }
    }

    // 4. Old pods: gone once their rows have ended and they have exited.
    for pod in &o.pods {
        if pod.deleting
            || handled.contains(&pod.name.as_str())
            || current.is_some_and(|c| c.name == pod.name)
        {
            continue;
        }
        let exited = pod.exited().is_some();
        match instance_of(pod) {
            None => d.remove_old(pod, "it never joined"),
            Some(i) if exited => {
                let why = match i.ended {
                    Some(_) => format!("instance {} has ended", i.id),
                    None => format!("it exited while instance {} had not ended its row", i.id),
                };
                d.remove_old(pod, &why)
            }
            Some(i) if i.ended.is_some() => {
                if i.ended.is_some_and(|e| o.now - e > secs(EXIT_GRACE)) {
                    d.remove_old(pod, &format!("instance {} has ended", i.id));
                } else {
                    d.old_pod_waits(pod, i);
                }
            }
            // Running, its row not ended: it drains in its own time. A row
            // that only looks stale (a blip) is no reason to cut its runs
            // short; the drain time-out bounds the wait, counted from the
            // drain asked or, for one never asked (it was not live then),
            // from the start of the rollout that made it old.
            Some(i) => {
                let superseded = o
                    .pods
                    .iter()
                    .filter(|q| q.sequence > pod.sequence)
                    .map(|q| q.created)
                    .min();
                let since = i.drain_asked.or(superseded);
                match since {
                    Some(t) if o.now - t > secs(handover.drain_timeout_seconds) => {
                        d.drain_timeout(pod, i, handover.drain_timeout_seconds)
                    }
                    _ => d.old_pod_waits(pod, i),
                }
            }
        }
    }

    // 5. Register Jobs of other revisions are superseded.
    for job in o.jobs.iter().filter(|j| j.revision != target) {
        d.act(Action::DeleteJob {
            name: job.name.clone(),
        });
    }

    d.finish(instances, &target, handover.progress_deadline_seconds)
}

/// A new pod, named for its revision and sequence.
pub(super) fn new_pod(scheduler: &str, revision: &str, sequence: u32, image: &str) -> Action {
    Action::CreatePod {
        name: pod_name(scheduler, revision, sequence),
        revision: revision.to_string(),
        sequence,
        image: image.to_string(),
    }
}
