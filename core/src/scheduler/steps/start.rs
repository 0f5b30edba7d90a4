//! The start step: the target revision's pod is made — at once with
//! overlap on, after the old pods are gone with it off — unless an
//! aborted revision waits while the old one still leads; and what it says
//! (`HandoverStarted` or `Creating`, `RetryingAborted`, `JoinTimeout`
//! kept, `PodNotGone`).

use super::{secs, Steps};
use crate::crd::{HandoverStatus, Phase};
use crate::scheduler::{
    draft::{rfc3339, StatusDraft},
    revision::new_pod,
    snapshot::*,
};

/// Start: no current pod, so start one — or wait for the way to be
/// clear (an aborted revision while the old one still leads; with
/// overlap off, the old pods gone first).
pub(in crate::scheduler) fn start(s: &mut Steps<'_>, d: &mut StatusDraft) {
    let o = s.o;
    if s.current.is_some() || !s.may_start {
        return;
    }
    // After an abort the old instance keeps leading; once nothing older
    // is left to lead (its pod died, its row went stale), leaving the
    // aborted revision alone would leave no scheduler at all, and an
    // old revision is never restarted: the target is tried again.
    let older_alive = s.instances.iter().any(|i| i.live())
        || o.pods()
            .iter()
            .any(|p| p.revision() != s.target && !p.deleting() && p.exited().is_none());
    let aborted = d.aborted_revision() == Some(s.target);
    if aborted && !older_alive {
        retry_aborted(d);
    }
    if aborted && older_alive {
        // A live row whose pod has exited goes stale without a watch
        // noticing: look again soon then.
        let orphaned = s.instances.iter().any(|i| {
            i.live()
                && !o
                    .pods()
                    .iter()
                    .any(|p| p.host() == i.host() && p.exited().is_none())
        });
        degraded_keep(d, orphaned);
    } else if !o.spec().overlap {
        let others: Vec<&PodView> = o
            .pods()
            .iter()
            .filter(|p| p.revision() != s.target)
            .collect();
        // A pod being deleted (by hand, say) still runs its scheduler
        // until its processes end: the next waits for that, so that
        // two schedulers of one Scheduler never run at once.
        let going: Vec<&PodView> = o
            .pods()
            .iter()
            .filter(|p| p.deleting() && p.exited().is_none())
            .collect();
        for p in others.iter().filter(|p| !p.deleting()) {
            d.act(Action::DeletePod {
                name: p.name().to_string(),
            });
            d.event(Event::normal(
                "Recreating",
                format!(
                    "overlap is off: deleting pod {} ({}) before the new one starts",
                    p.name(),
                    p.image()
                ),
            ));
            s.handled.push(p.name());
        }
        if !going.is_empty() {
            let overdue: Vec<&PodView> = going
                .iter()
                .copied()
                .filter(|p| {
                    p.deletion_due()
                        .is_some_and(|due| o.now() - due > secs(GONE_GRACE))
                })
                .collect();
            waiting_for_gone(d, &overdue);
        } else if others.is_empty() {
            create_pod(s, d);
        }
    } else {
        create_pod(s, d);
    }
}

/// The next pod of the target revision, with the spec's image.
pub(in crate::scheduler) fn create_pod(s: &Steps<'_>, d: &mut StatusDraft) {
    let o = s.o;
    let pod = new_pod(o, s.target, s.next_sequence, &o.spec().image);
    pod_created(d, &pod, &s.instances);
    d.act(pod);
}

/// How long past its deletion's grace a pod may still run before the
/// Scheduler is `Degraded` (`PodNotGone`): its node may be unreachable.
const GONE_GRACE: i64 = 60;

pub(in crate::scheduler) fn retry_aborted(d: &mut StatusDraft) {
    d.status_mut().aborted_revision = None;
    d.event(Event::warning(
        "RetryingAborted",
        format!(
            "no older instance is left to lead; trying the aborted revision ({}) again",
            d.observed().spec().image
        ),
    ));
}

pub(in crate::scheduler) fn degraded_keep(d: &mut StatusDraft, look_soon: bool) {
    if look_soon {
        d.requeue_within(BUSY);
    }
    let revision = d.status().aborted_revision.clone().unwrap_or_default();
    d.degrade(
        "JoinTimeout",
        format!(
            "the rollout of revision {revision} ({}) was aborted: it never joined; change the spec to try again",
            d.observed().spec().image
        ),
    );
}

/// Overlap off: pods being deleted whose schedulers still run must end
/// before the next pod starts; `overdue` ones among them were due to be
/// gone a while ago, which their node alone can explain.
pub(in crate::scheduler) fn waiting_for_gone(d: &mut StatusDraft, overdue: &[&PodView]) {
    if let Some(pod) = overdue.first() {
        let due = pod.deletion_due().map(rfc3339).unwrap_or_default();
        d.degrade(
            "PodNotGone",
            format!(
                "overlap is off and pod {} still runs, though its deletion was due by {due}; \
                 no new pod starts beside it. If its node is gone, make sure the scheduler \
                 no longer runs there, then delete the pod with --force --grace-period=0",
                pod.name()
            ),
        );
    }
    d.busy(Phase::Starting);
}

/// Pod `pod` (a [`Action::CreatePod`]) is made: a handover starts if
/// another image leads, else a pod is simply created.
pub(in crate::scheduler) fn pod_created(d: &mut StatusDraft, pod: &Action, rows: &[InstanceView]) {
    let Action::CreatePod {
        name,
        revision,
        sequence,
        image,
        ..
    } = pod
    else {
        return;
    };
    let leader = rows.iter().find(|i| i.live() && i.holds_lock());
    match leader {
        Some(l) if l.image() != *image || !l.host().contains(revision.as_str()) => {
            d.event(Event::normal(
                "HandoverStarted",
                format!(
                    "pod {name} starts image {image} beside instance {} ({})",
                    l.id(),
                    l.image()
                ),
            ));
            d.status_mut().last_handover = Some(HandoverStatus {
                from: l.image().to_string(),
                to: image.to_string(),
                started: Some(rfc3339(d.observed().now())),
                ..Default::default()
            });
        }
        _ => d.event(Event::normal(
            "Creating",
            format!("pod {name} starts image {image}"),
        )),
    }
    d.status_mut().last_sequence = *sequence as i64;
    d.busy(Phase::Starting);
}
