//! The join step: the current pod's instance joins — or, past the join
//! time-out with an older instance to fall back on, the rollout aborts and
//! the pod goes — and what it says (`Joined`, `JoinTimeout`,
//! `InstanceStale`).

use super::start::degraded_keep;
use super::{secs, Steps};
use crate::crd::Phase;
use crate::scheduler::{
    draft::{rfc3339, StatusDraft},
    snapshot::*,
};

/// The current pod's instance has not joined yet.
pub(in crate::scheduler) fn join<'a>(s: &mut Steps<'a>, pod: &'a PodView, d: &mut StatusDraft) {
    let (o, handover) = (s.o, &s.o.spec().handover);
    // The join time-out counts from the container's start: an image
    // pull is no time to join in. A pod not started yet (pulling, or
    // waiting for a node) has not begun it; one running without a known
    // start counts from its creation.
    let since = match (pod.started(), &pod.state()) {
        (Some(t), _) => Some(t),
        (None, PodState::Running) => Some(pod.created()),
        (None, _) => None,
    };
    let fallback = s
        .instances
        .iter()
        .any(|i| i.live() && i.host() != pod.host());
    if since.is_some_and(|t| o.now() - t > secs(handover.join_timeout_seconds)) {
        if fallback {
            s.handled.push(pod.name());
            d.act(Action::DeletePod {
                name: pod.name().to_string(),
            });
            abort_join(d, pod, s.target, handover.join_timeout_seconds);
        } else {
            join_late(d, pod, handover.join_timeout_seconds);
        }
    } else {
        d.busy_beside(pod.host(), &s.instances);
    }
}

pub(in crate::scheduler) fn abort_join(
    d: &mut StatusDraft,
    pod: &PodView,
    revision: &str,
    timeout: i64,
) {
    d.status_mut().aborted_revision = Some(revision.to_string());
    d.event(Event::warning(
        "JoinTimeout",
        format!(
            "pod {} ({}) did not join within {timeout}s; rollout aborted, the old instance keeps leading",
            pod.name(), pod.image()
        ),
    ));
    degraded_keep(d, false);
}

pub(in crate::scheduler) fn join_late(d: &mut StatusDraft, pod: &PodView, timeout: i64) {
    d.degrade(
        "JoinTimeout",
        format!(
            "pod {} ({}) has not joined within {timeout}s",
            pod.name(),
            pod.image()
        ),
    );
    d.busy(Phase::Starting);
}

pub(in crate::scheduler) fn instance_stale(d: &mut StatusDraft, pod: &PodView, me: &InstanceView) {
    d.busy(Phase::HandingOver);
    d.degrade(
        "InstanceStale",
        format!(
            "instance {} of pod {} has not been seen within the stale limit",
            me.id(),
            pod.name()
        ),
    );
}

pub(in crate::scheduler) fn joined(d: &mut StatusDraft, pod: &PodView, me: &InstanceView) {
    if let Some(h) = d.status_mut().last_handover.as_mut() {
        if h.to == pod.image() && h.joined.is_none() {
            h.joined = Some(rfc3339(me.joined()));
            d.event(Event::normal(
                "Joined",
                format!("instance {} of pod {} joined", me.id(), pod.name()),
            ));
        }
    }
}
