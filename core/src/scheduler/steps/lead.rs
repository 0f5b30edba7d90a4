//! The lead step: once its instance joined, the older are asked to drain
//! and the new one leads (verified in `pg_locks`), then it registers; with
//! overlap off, the pod is up once it has run `settleSeconds`. And what it
//! says (`Leading`, `Running`, `LeadTimeout`).

use super::{drain::ask_drain, join::joined, register::register};
use super::{secs, Steps};
use crate::crd::{LeaderStatus, Phase};
use crate::scheduler::{
    draft::{rfc3339, StatusDraft},
    snapshot::*,
};

/// The current pod's instance `me` joined: the older are asked to
/// drain, and once it leads it registers.
pub(in crate::scheduler) fn drain_and_lead(
    s: &Steps<'_>,
    pod: &PodView,
    me: &InstanceView,
    d: &mut StatusDraft,
) {
    let (o, handover) = (s.o, &s.o.spec().handover);
    joined(d, pod, me);
    for older in s
        .instances
        .iter()
        .filter(|i| i.live() && i.id() < me.id() && i.drain_asked().is_none())
    {
        ask_drain(
            d,
            older,
            &format!("instance {} ({}) has joined", me.id(), pod.image()),
        );
    }
    if me.holds_lock() && s.newest_live == Some(me.id()) {
        leads(d, pod, me);
        register(d, o, s.target);
        return;
    }
    let asked = s
        .instances
        .iter()
        .filter(|i| i.id() < me.id())
        .filter_map(|i| i.drain_asked())
        .max()
        .unwrap_or(me.joined())
        .max(me.joined());
    if o.now() - asked > secs(handover.lead_timeout_seconds) {
        lead_late(d, me, handover.lead_timeout_seconds);
    } else {
        d.busy_beside(me.host(), &s.instances);
    }
}

/// Overlap off: the current pod is up once it has run `settleSeconds`
/// (it writes no row); then it registers.
pub(in crate::scheduler) fn settle(s: &Steps<'_>, d: &mut StatusDraft) {
    let (o, handover) = (s.o, &s.o.spec().handover);
    let Some(pod) = s.current else {
        return;
    };
    let since = pod.started().unwrap_or(pod.created());
    let up = *pod.state() == PodState::Running && o.now() - since >= secs(handover.settle_seconds);
    if up {
        settled(d, pod, since, handover.settle_seconds);
        register(d, o, s.target);
    } else {
        settling(d, pod);
    }
}

pub(in crate::scheduler) fn leads(d: &mut StatusDraft, pod: &PodView, me: &InstanceView) {
    let since = me.led().map(rfc3339);
    let now = d.observed().now();
    d.status_mut().current_image = Some(pod.image().to_string());
    d.status_mut().leader = Some(LeaderStatus {
        instance: me.id(),
        pod: pod.name().to_string(),
        image: pod.image().to_string(),
        since: since.clone(),
    });
    if let Some(h) = d.status_mut().last_handover.as_mut() {
        if h.to == pod.image() && h.led.is_none() {
            h.led = since.or(Some(rfc3339(now)));
            d.event(Event::normal(
                "Leading",
                format!(
                    "instance {} of pod {} leads (verified in pg_locks)",
                    me.id(),
                    pod.name()
                ),
            ));
        }
    }
}

pub(in crate::scheduler) fn lead_late(d: &mut StatusDraft, me: &InstanceView, timeout: i64) {
    d.degrade(
        "LeadTimeout",
        format!(
            "instance {} ({}) does not lead {timeout}s after the drain was asked; waiting",
            me.id(),
            me.host()
        ),
    );
    d.busy(Phase::HandingOver);
}

/// Overlap off: `pod` has run since `since` for the settle time, so it
/// is up and leads (alone: it has no row, and nothing else runs).
pub(in crate::scheduler) fn settled(d: &mut StatusDraft, pod: &PodView, since: Time, settle: i64) {
    d.alone();
    d.status_mut().current_image = Some(pod.image().to_string());
    let known = d
        .observed()
        .status()
        .leader
        .as_ref()
        .is_some_and(|l| l.pod == pod.name());
    if !known {
        d.event(Event::normal(
            "Running",
            format!(
                "pod {} ({}) has run {settle}s: up (overlap is off, so there is no instance row to wait for)",
                pod.name(), pod.image()
            ),
        ));
    }
    d.status_mut().leader = Some(LeaderStatus {
        instance: 0,
        pod: pod.name().to_string(),
        image: pod.image().to_string(),
        // Its own time, as for a revision: not moved by the clock
        // offset, which differs every pass.
        since: Some(rfc3339(since - d.observed().clock_offset())),
    });
}

/// Overlap off: `pod` is not up yet (pending, or not settled).
pub(in crate::scheduler) fn settling(d: &mut StatusDraft, _pod: &PodView) {
    d.busy(Phase::Starting);
}
