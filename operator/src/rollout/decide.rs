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
//!
//! Kept whole, one concept: the steps of one decision in the order they run
//! (start, exits, join → lead → drain, settle, remove old pods), read top to
//! bottom.

use std::time::Duration;

use super::{
    register::register,
    revision::{is_host_of, new_pod, revision_of},
    snapshot::*,
    status::StatusDraft,
    window,
};
use crate::backoff::doubling;

/// How long an old pod may take to exit after its row has ended.
const EXIT_GRACE: i64 = 30;
/// A pod that ran this long before it died was not crash-looping.
const STABLE_SECONDS: i64 = 600;
/// How long past its deletion's grace a pod may still run before the
/// Scheduler is `Degraded` (`PodNotGone`): its node may be unreachable.
const GONE_GRACE: i64 = 60;
/// The kubelet's reasons for a container that will not run until someone
/// changes something (the image, a Secret): said at once as `Degraded`.
const CANNOT_RUN: [&str; 4] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
];

/// The pure decision of one Scheduler reconcile: from the snapshot `o`, the
/// actions to take, the events to post, the status that follows from them
/// and when to look again. No I/O, no clock but `o.now`: the same snapshot
/// gives the same decision.
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
    if let Some(deferral) = window::deferral(o, &target) {
        return d.finish_deferred(&target, &deferral);
    }
    d.begin(&target);
    let mut steps = Steps::new(o, rows, &target, &mut d);
    steps.start(&mut d);
    steps.current_exited(&mut d);
    steps.cannot_run(&mut d);
    if o.spec.overlap {
        steps.join_drain_lead(&mut d);
    } else {
        steps.settle(&mut d);
    }
    steps.remove_old(&mut d);
    steps.supersede_jobs(&mut d);
    d.finish(
        &steps.instances,
        &target,
        o.spec.handover.progress_deadline_seconds,
    )
}

fn secs(n: i64) -> chrono::Duration {
    crate::crd::spec_seconds(n)
}

/// What every step of one [`decide`] looks at: the snapshot, the target
/// revision, this Scheduler's instances, the current pod, and the pods a
/// step has already replaced or removed. Each step records what it
/// decided in the [`StatusDraft`]; none does I/O.
struct Steps<'a> {
    o: &'a Observed,
    target: &'a str,
    /// This Scheduler's rows: of its pods in the snapshot, or named as its
    /// pods are (a pod already gone).
    instances: Vec<InstanceView>,
    newest_live: Option<i64>,
    next_sequence: u32,
    /// No other Scheduler's instance is live on the database.
    may_start: bool,
    /// The newest pod of the target revision that can still lead.
    current: Option<&'a PodView>,
    /// Pods a step replaces or removes, so the old-pod sweep leaves them.
    handled: Vec<&'a str>,
}

impl<'a> Steps<'a> {
    fn new(
        o: &'a Observed,
        rows: &[InstanceView],
        target: &'a str,
        d: &mut StatusDraft,
    ) -> Steps<'a> {
        // Any row not this Scheduler's is another Scheduler's on the same
        // database: not an old instance to drain or to fall back to, and
        // while one is live no pod starts, as its instance would take the
        // lead from theirs.
        let (own, foreign): (Vec<InstanceView>, Vec<InstanceView>) =
            rows.iter().cloned().partition(|i| {
                o.pods.iter().any(|p| p.host == i.host)
                    || is_host_of(&o.namespace, &o.name, &i.host)
            });
        let shared: Vec<&InstanceView> = foreign.iter().filter(|i| i.live).collect();
        if !shared.is_empty() {
            d.database_shared(&shared);
        }
        let newest_live = own.iter().filter(|i| i.live).map(|i| i.id).max();
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
        let mut steps = Steps {
            o,
            target,
            instances: own,
            newest_live,
            next_sequence,
            may_start: shared.is_empty(),
            current: None,
            handled: Vec::new(),
        };
        // The current pod: the newest of the target revision that can still
        // lead — not being deleted, and its instance neither draining nor
        // superseded by a newer live one.
        steps.current = o
            .pods
            .iter()
            .filter(|p| {
                !p.deleting
                    && p.revision == target
                    && match steps.instance_of(p) {
                        None => true,
                        Some(i) => {
                            i.ended.is_none()
                                && i.drain_asked.is_none()
                                && i.role != "draining"
                                && newest_live.is_none_or(|n| n <= i.id)
                        }
                    }
            })
            .max_by_key(|p| p.sequence);
        steps
    }

    /// The newest row of `pod`'s instance.
    fn instance_of(&self, pod: &PodView) -> Option<&InstanceView> {
        self.instances
            .iter()
            .filter(|i| i.host == pod.host)
            .max_by_key(|i| i.id)
    }

    /// The next pod of the target revision, with the spec's image.
    fn create_pod(&self, d: &mut StatusDraft) {
        let o = self.o;
        let pod = new_pod(o, self.target, self.next_sequence, &o.spec.image);
        d.pod_created(&pod, &self.instances);
        d.act(pod);
    }

    /// Asks `instance` to drain, saying `why`.
    fn ask_drain(d: &mut StatusDraft, instance: &InstanceView, why: &str) {
        d.act(Action::AskDrain {
            instance: instance.id,
        });
        d.drain_asked(instance, why);
    }

    /// Deletes the old `pod`, saying `why`.
    fn delete_old(d: &mut StatusDraft, pod: &PodView, why: &str) {
        d.act(Action::DeletePod {
            name: pod.name.clone(),
        });
        d.old_removed(pod, why);
    }

    /// Start: no current pod, so start one — or wait for the way to be
    /// clear (an aborted revision while the old one still leads; with
    /// overlap off, the old pods gone first).
    fn start(&mut self, d: &mut StatusDraft) {
        let o = self.o;
        if self.current.is_some() || !self.may_start {
            return;
        }
        // After an abort the old instance keeps leading; once nothing older
        // is left to lead (its pod died, its row went stale), leaving the
        // aborted revision alone would leave no scheduler at all, and an
        // old revision is never restarted: the target is tried again.
        let older_alive = self.instances.iter().any(|i| i.live)
            || o.pods
                .iter()
                .any(|p| p.revision != self.target && !p.deleting && p.exited().is_none());
        let aborted = d.aborted_revision() == Some(self.target);
        if aborted && !older_alive {
            d.retry_aborted();
        }
        if aborted && older_alive {
            // A live row whose pod has exited goes stale without a watch
            // noticing: look again soon then.
            let orphaned = self.instances.iter().any(|i| {
                i.live
                    && !o
                        .pods
                        .iter()
                        .any(|p| p.host == i.host && p.exited().is_none())
            });
            d.degraded_keep(orphaned);
        } else if !o.spec.overlap {
            let others: Vec<&PodView> = o
                .pods
                .iter()
                .filter(|p| p.revision != self.target)
                .collect();
            // A pod being deleted (by hand, say) still runs its scheduler
            // until its processes end: the next waits for that, so that
            // two schedulers of one Scheduler never run at once.
            let going: Vec<&PodView> = o
                .pods
                .iter()
                .filter(|p| p.deleting && p.exited().is_none())
                .collect();
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
                self.handled.push(&p.name);
            }
            if !going.is_empty() {
                let overdue: Vec<&PodView> = going
                    .iter()
                    .copied()
                    .filter(|p| {
                        p.deletion_due
                            .is_some_and(|due| o.now - due > secs(GONE_GRACE))
                    })
                    .collect();
                d.waiting_for_gone(&overdue);
            } else if others.is_empty() {
                self.create_pod(d);
            }
        } else {
            self.create_pod(d);
        }
    }

    /// The current pod exited: stop-the-world on 75 (overlap refused),
    /// else recreate it after a back-off. Either way it is current no more.
    fn current_exited(&mut self, d: &mut StatusDraft) {
        let o = self.o;
        let Some(pod) = self.current else {
            return;
        };
        let PodState::Exited {
            code,
            message,
            finished,
        } = &pod.state
        else {
            return;
        };
        self.handled.push(&pod.name);
        self.current = None;
        if *code == 75 && o.spec.overlap {
            let live: Vec<&InstanceView> = self.instances.iter().filter(|i| i.live).collect();
            d.stop_the_world(pod, message);
            for i in live.iter().filter(|i| i.drain_asked.is_none()) {
                Self::ask_drain(
                    d,
                    i,
                    "stop-the-world: the new image refused to start beside it",
                );
            }
            if live.is_empty() && self.may_start {
                d.act(Action::DeletePod {
                    name: pod.name.clone(),
                });
                self.create_pod(d);
            }
            return;
        }
        // The back-off doubles with each pod that died young, and starts
        // again once one ran stably: counted from its container's start, so
        // an image pull is not a run.
        let ran = *finished - pod.started.unwrap_or(pod.created);
        let stable = ran >= secs(STABLE_SECONDS);
        let restarts = if stable {
            0
        } else {
            d.recent_restarts().clamp(0, 5) as u32
        };
        let backoff = doubling(Duration::from_secs(10), restarts, Duration::from_secs(320));
        let due = *finished + secs(backoff.as_secs() as i64);
        if o.now >= due && self.may_start {
            d.act(Action::DeletePod {
                name: pod.name.clone(),
            });
            d.pod_restarted(pod, *code, stable, self.next_sequence);
            d.act(new_pod(o, self.target, self.next_sequence, &o.spec.image));
        } else {
            d.crash_backoff(
                pod,
                *code,
                message,
                (due - o.now).to_std().unwrap_or(Duration::from_secs(1)),
            );
        }
    }

    /// A current container that cannot start (its image, its config) is
    /// said at once, whatever the phase.
    fn cannot_run(&self, d: &mut StatusDraft) {
        let Some(pod) = self.current else {
            return;
        };
        if let Some(waiting) = pod
            .waiting
            .as_ref()
            .filter(|w| CANNOT_RUN.contains(&w.reason.as_str()))
        {
            d.cannot_run(pod, waiting);
        }
    }

    /// Overlap off: the current pod is up once it has run `settleSeconds`
    /// (it writes no row); then it registers.
    fn settle(&self, d: &mut StatusDraft) {
        let (o, handover) = (self.o, &self.o.spec.handover);
        let Some(pod) = self.current else {
            return;
        };
        let since = pod.started.unwrap_or(pod.created);
        let settled =
            pod.state == PodState::Running && o.now - since >= secs(handover.settle_seconds);
        if settled {
            d.settled(pod, since, handover.settle_seconds);
            register(d, o, self.target);
        } else {
            d.settling(pod);
        }
    }

    /// Overlap on, the current pod runs: its instance joins (else, past
    /// the join time-out, the rollout aborts), the older live instances are
    /// asked to drain, it leads (else, past the lead time-out, `Degraded`),
    /// then it registers.
    fn join_drain_lead(&mut self, d: &mut StatusDraft) {
        let Some(pod) = self.current else {
            return;
        };
        match self.instance_of(pod) {
            // It joined once and looks stale now: a database blip, or a hung
            // process. Never a join time-out: wait for it to beat again.
            Some(me) if !me.live => d.instance_stale(pod, me),
            None => self.join(pod, d),
            Some(me) => {
                let me = me.clone();
                self.drain_and_lead(pod, &me, d);
            }
        }
    }

    /// The current pod's instance has not joined yet.
    fn join(&mut self, pod: &'a PodView, d: &mut StatusDraft) {
        let (o, handover) = (self.o, &self.o.spec.handover);
        // The join time-out counts from the container's start: an image
        // pull is no time to join in. A pod not started yet (pulling, or
        // waiting for a node) has not begun it; one running without a known
        // start counts from its creation.
        let since = match (pod.started, &pod.state) {
            (Some(t), _) => Some(t),
            (None, PodState::Running) => Some(pod.created),
            (None, _) => None,
        };
        let fallback = self.instances.iter().any(|i| i.live && i.host != pod.host);
        if since.is_some_and(|t| o.now - t > secs(handover.join_timeout_seconds)) {
            if fallback {
                self.handled.push(&pod.name);
                d.act(Action::DeletePod {
                    name: pod.name.clone(),
                });
                d.abort_join(pod, self.target, handover.join_timeout_seconds);
            } else {
                d.join_late(pod, handover.join_timeout_seconds);
            }
        } else {
            d.waiting_for_join(pod, &self.instances);
        }
    }

    /// The current pod's instance `me` joined: the older are asked to
    /// drain, and once it leads it registers.
    fn drain_and_lead(&self, pod: &PodView, me: &InstanceView, d: &mut StatusDraft) {
        let (o, handover) = (self.o, &self.o.spec.handover);
        d.joined(pod, me);
        for older in self
            .instances
            .iter()
            .filter(|i| i.live && i.id < me.id && i.drain_asked.is_none())
        {
            Self::ask_drain(
                d,
                older,
                &format!("instance {} ({}) has joined", me.id, pod.image),
            );
        }
        if me.holds_lock && self.newest_live == Some(me.id) {
            d.leads(pod, me);
            register(d, o, self.target);
            return;
        }
        let asked = self
            .instances
            .iter()
            .filter(|i| i.id < me.id)
            .filter_map(|i| i.drain_asked)
            .max()
            .unwrap_or(me.joined)
            .max(me.joined);
        if o.now - asked > secs(handover.lead_timeout_seconds) {
            d.lead_late(me, handover.lead_timeout_seconds);
        } else {
            d.waiting_for_lead(me, &self.instances);
        }
    }

    /// Old pods go once their rows have ended and they have exited; one
    /// that drains in its own time waits, up to the drain time-out.
    fn remove_old(&self, d: &mut StatusDraft) {
        let (o, handover) = (self.o, &self.o.spec.handover);
        for pod in &o.pods {
            if pod.deleting
                || self.handled.contains(&pod.name.as_str())
                || self.current.is_some_and(|c| c.name == pod.name)
            {
                continue;
            }
            let exited = pod.exited().is_some();
            match self.instance_of(pod) {
                None => Self::delete_old(d, pod, "it never joined"),
                Some(i) if exited => {
                    let why = match i.ended {
                        Some(_) => format!("instance {} has ended", i.id),
                        None => format!("it exited while instance {} had not ended its row", i.id),
                    };
                    Self::delete_old(d, pod, &why)
                }
                Some(i) if i.ended.is_some() => {
                    if i.ended.is_some_and(|e| o.now - e > secs(EXIT_GRACE)) {
                        Self::delete_old(d, pod, &format!("instance {} has ended", i.id));
                    } else {
                        d.old_pod_waits(pod, i);
                    }
                }
                // Running, its row not ended: it drains in its own time. A
                // row that only looks stale (a blip) is no reason to cut its
                // runs short; the drain time-out bounds the wait, counted
                // from the drain asked or, for one never asked (it was not
                // live then), from the start of the rollout that made it old.
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
                            d.act(Action::DeletePod {
                                name: pod.name.clone(),
                            });
                            d.drain_timed_out(pod, i, handover.drain_timeout_seconds)
                        }
                        _ => d.old_pod_waits(pod, i),
                    }
                }
            }
        }
    }

    /// Register Jobs of other revisions are superseded.
    fn supersede_jobs(&self, d: &mut StatusDraft) {
        for job in self.o.jobs.iter().filter(|j| j.revision != self.target) {
            d.act(Action::DeleteJob {
                name: job.name.clone(),
            });
        }
    }
}
