//! The remove step: old pods go once their rows have ended and they have
//! exited (or past the drain time-out), and register Jobs of other
//! revisions are superseded; and what it says (`Removed`,
//! `DrainTimeout`).

use super::{secs, Steps};
use crate::crd::Phase;
use crate::scheduler::{draft::StatusDraft, snapshot::*};

/// Old pods go once their rows have ended and they have exited; one
/// that drains in its own time waits, up to the drain time-out.
pub(in crate::scheduler) fn remove_old(s: &Steps<'_>, d: &mut StatusDraft) {
    let (o, handover) = (s.o, &s.o.spec().handover);
    for pod in o.pods() {
        if pod.deleting()
            || s.handled.contains(&pod.name())
            || s.current.is_some_and(|c| c.name() == pod.name())
        {
            continue;
        }
        let exited = pod.exited().is_some();
        match s.instance_of(pod) {
            None => delete_old(d, pod, "it never joined"),
            Some(i) if exited => {
                let why = match i.ended() {
                    Some(_) => format!("instance {} has ended", i.id()),
                    None => format!("it exited while instance {} had not ended its row", i.id()),
                };
                delete_old(d, pod, &why)
            }
            Some(i) if i.ended().is_some() => {
                if i.ended().is_some_and(|e| o.now() - e > secs(EXIT_GRACE)) {
                    delete_old(d, pod, &format!("instance {} has ended", i.id()));
                } else {
                    old_pod_waits(d, pod, i);
                }
            }
            // Running, its row not ended: it drains in its own time. A
            // row that only looks stale (a blip) is no reason to cut its
            // runs short; the drain time-out bounds the wait, counted
            // from the drain asked or, for one never asked (it was not
            // live then), from the start of the rollout that made it old.
            Some(i) => {
                let superseded = o
                    .pods()
                    .iter()
                    .filter(|q| q.sequence() > pod.sequence())
                    .map(|q| q.created())
                    .min();
                let since = i.drain_asked().or(superseded);
                match since {
                    Some(t) if o.now() - t > secs(handover.drain_timeout_seconds) => {
                        d.act(Action::DeletePod {
                            name: pod.name().to_string(),
                        });
                        drain_timed_out(d, pod, i, handover.drain_timeout_seconds)
                    }
                    _ => old_pod_waits(d, pod, i),
                }
            }
        }
    }
}

/// Deletes the old `pod`, saying `why`.
pub(in crate::scheduler) fn delete_old(d: &mut StatusDraft, pod: &PodView, why: &str) {
    d.act(Action::DeletePod {
        name: pod.name().to_string(),
    });
    old_removed(d, pod, why);
}

/// Register Jobs of other revisions are superseded.
pub(in crate::scheduler) fn supersede_jobs(s: &Steps<'_>, d: &mut StatusDraft) {
    for job in s.o.jobs().iter().filter(|j| j.revision() != s.target) {
        d.act(Action::DeleteJob {
            name: job.name().to_string(),
        });
    }
}

/// The old `pod` was deleted, for `why`.
pub(in crate::scheduler) fn old_removed(d: &mut StatusDraft, pod: &PodView, why: &str) {
    d.event(Event::normal(
        "Removed",
        format!("deleted pod {} ({}): {why}", pod.name(), pod.image()),
    ));
    d.busy(Phase::Draining);
}

/// How long an old pod may take to exit after its row has ended.
const EXIT_GRACE: i64 = 30;

pub(in crate::scheduler) fn old_pod_waits(
    d: &mut StatusDraft,
    _pod: &PodView,
    _instance: &InstanceView,
) {
    d.busy(Phase::Draining);
}

/// The old `pod` was deleted: its `instance` still had runs `timeout`
/// seconds after the drain was asked.
pub(in crate::scheduler) fn drain_timed_out(
    d: &mut StatusDraft,
    pod: &PodView,
    instance: &InstanceView,
    timeout: i64,
) {
    d.event(Event::warning(
        "DrainTimeout",
        format!(
            "instance {} of pod {} still had {} runs {timeout}s after the drain was asked; deleting the pod",
            instance.id(), pod.name(), instance.runs()
        ),
    ));
}
