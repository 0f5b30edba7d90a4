//! The steps of a rollout, each in a file of its own with what it says:
//! its decision over the snapshot ([`super::decide()`] composes them in
//! order) and the status fields, conditions' reasons and Events that
//! follow from it. The table tests of each are in `scheduler/tests/`, one
//! file a concern (`start.rs`, `restarts.rs`, `handover.rs`,
//! `registration.rs`, `supersede.rs`, …).

use super::{draft::StatusDraft, revision::is_host_of, snapshot::*};

// drain — the drain step.
pub(super) mod drain;
// exits — the exit step.
pub(super) mod exits;
// join — the join step.
pub(super) mod join;
// lead — the lead step.
pub(super) mod lead;
// register — the register step of a rollout.
pub(super) mod register;
// remove — the remove step.
pub(super) mod remove;
// start — the start step.
pub(super) mod start;

/// `n` seconds of the spec, held to its bounds.
pub(super) fn secs(n: i64) -> chrono::Duration {
    crate::crd::spec_seconds(n)
}

/// What every step of one [`super::decide()`] looks at: the snapshot, the target
/// revision, this Scheduler's instances, the current pod, and the pods a
/// step has already replaced or removed. Each step records what it
/// decided in the [`StatusDraft`]; none does I/O.
pub(super) struct Steps<'a> {
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
    pub(super) fn new(
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
                o.pods().iter().any(|p| p.host() == i.host())
                    || is_host_of(o.namespace(), o.name(), i.host())
            });
        let shared: Vec<&InstanceView> = foreign.iter().filter(|i| i.live()).collect();
        if !shared.is_empty() {
            d.database_shared(&shared);
        }
        let newest_live = own.iter().filter(|i| i.live()).map(|i| i.id()).max();
        let next_sequence = o
            .pods()
            .iter()
            .map(|p| p.sequence())
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
            .pods()
            .iter()
            .filter(|p| {
                !p.deleting()
                    && p.revision() == target
                    && match steps.instance_of(p) {
                        None => true,
                        Some(i) => {
                            i.ended().is_none()
                                && i.drain_asked().is_none()
                                && i.role() != "draining"
                                && newest_live.is_none_or(|n| n <= i.id())
                        }
                    }
            })
            .max_by_key(|p| p.sequence());
        steps
    }

    /// The newest row of `pod`'s instance.
    /// This Scheduler's instances, as the decision's start saw them.
    pub(super) fn instances(&self) -> &[InstanceView] {
        &self.instances
    }

    /// The current pod, if one runs.
    pub(super) fn current(&self) -> Option<&'a PodView> {
        self.current
    }

    pub(super) fn instance_of(&self, pod: &PodView) -> Option<&InstanceView> {
        self.instances
            .iter()
            .filter(|i| i.host() == pod.host())
            .max_by_key(|i| i.id())
    }
}
