//! The draft of one `decide`: the actions the decision makes, and what
//! follows from them — the Events, and the status it derives from the
//! snapshot. Here are what every step records through (an action, an
//! Event, a `Degraded` reason, a phase still busy) and what `decide`
//! shares before any step; what each step says is in its own file of
//! `steps/`, the conditions and the finished decision in `finish.rs`, a
//! child of this module: the only other file that sees the draft's
//! fields. The steps go through its methods.
//!
//! The map, one line a file:

// finish — the end of a decision.
mod finish;

use std::time::Duration;

use crate::crd::{Phase, SchedulerStatus};
use crate::scheduler::snapshot::*;

/// `Degraded` reasons that no step of their own says: each is posted as a
/// Warning when the condition turns True with it.
pub(super) const SAID_WHEN_DEGRADED: [&str; 8] = [
    "LeadTimeout",
    "PodNotGone",
    "ProgressDeadlineExceeded",
    "DatabaseShared",
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
];

pub(super) struct StatusDraft<'a> {
    o: &'a Observed,
    actions: Vec<Action>,
    events: Vec<Event>,
    status: SchedulerStatus,
    /// The first problem found: (reason, message).
    degraded: Option<(String, String)>,
    progress: Option<Phase>,
    stop_world: bool,
    /// The leader is a settled pod with overlap off: it has no row.
    alone: bool,
    /// The target revision is not the one the status was written for: a
    /// new rollout.
    target_changed: bool,
    /// The target revision waits for a maintenance window: the `Deferred`
    /// condition's (reason, message).
    deferred: Option<(String, String)>,
    requeue: Duration,
}

pub(super) fn rfc3339(t: Time) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl<'a> StatusDraft<'a> {
    pub(super) fn new(o: &'a Observed) -> Self {
        let mut status = o.status().clone();
        status.observed_generation = o.generation();
        status.target_image = Some(o.spec().image.clone());
        // Said again by the pass that defers, if one does.
        status.next_window = None;
        StatusDraft {
            o,
            actions: Vec::new(),
            events: Vec::new(),
            status,
            degraded: None,
            progress: None,
            stop_world: false,
            alone: false,
            target_changed: false,
            deferred: None,
            requeue: QUIET,
        }
    }

    /// What the decision is made from.
    pub(super) fn observed(&self) -> &'a Observed {
        self.o
    }

    /// The status as drafted so far.
    pub(super) fn status(&self) -> &SchedulerStatus {
        &self.status
    }

    /// The status, for a step to record what it says there.
    pub(super) fn status_mut(&mut self) -> &mut SchedulerStatus {
        &mut self.status
    }

    /// Look again within `wait` at the latest.
    pub(super) fn requeue_within(&mut self, wait: Duration) {
        self.requeue = self.requeue.min(wait);
    }

    /// The current pod asked for a stop-the-world handover (exit 75): the
    /// phase is `HandingOver`, and the old leader is not waited for.
    pub(super) fn stop_the_world(&mut self) {
        self.progress = Some(Phase::HandingOver);
        self.stop_world = true;
    }

    /// The leader is a settled pod with overlap off: it has no row.
    pub(super) fn alone(&mut self) {
        self.alone = true;
    }

    pub(super) fn act(&mut self, action: Action) {
        self.requeue = BUSY;
        self.actions.push(action);
    }

    pub(super) fn event(&mut self, event: Event) {
        self.events.push(event);
    }

    pub(super) fn degrade(&mut self, reason: &str, message: String) {
        if self.degraded.is_none() {
            self.degraded = Some((reason.into(), message));
        }
    }

    pub(super) fn busy(&mut self, phase: Phase) {
        self.requeue = self.requeue.min(BUSY);
        if self.progress.is_none() {
            self.progress = Some(phase);
        }
    }

    /// Busy while the instance on `host` joins or takes the lead:
    /// handing over while an older one (on another host) is live, else
    /// starting.
    pub(super) fn busy_beside(&mut self, host: &str, rows: &[InstanceView]) {
        let old_leads = rows.iter().any(|i| i.live() && i.host() != host);
        self.busy(if old_leads {
            Phase::HandingOver
        } else {
            Phase::Starting
        });
    }

    pub(super) fn last_sequence(&self) -> u32 {
        self.status.last_sequence.clamp(0, u32::MAX as i64) as u32
    }

    /// The pass rolls out `target`; a revision other than the last one
    /// written starts a new rollout, whose pods owe nothing to the old
    /// one's restarts.
    pub(super) fn begin(&mut self, target: &str) {
        if self.status.target_revision.as_deref() != Some(target) {
            self.target_changed = true;
            self.status.target_revision = Some(target.to_string());
            self.status.recent_restarts = 0;
        }
    }

    pub(super) fn recent_restarts(&self) -> i32 {
        self.status.recent_restarts
    }

    /// Live instances of another Scheduler share this database: none is
    /// touched, and no pod starts.
    pub(super) fn database_shared(&mut self, foreign: &[&InstanceView]) {
        let hosts: Vec<String> = foreign
            .iter()
            .map(|i| format!("{} (instance {}, {})", i.host(), i.id(), i.image()))
            .collect();
        self.degrade(
            "DatabaseShared",
            format!(
                "live instances that are not this Scheduler's share its database: {}; none is asked to drain, and no pod is started while they are live, as its instance would take the lead from theirs",
                hosts.join(", ")
            ),
        );
        // Their rows go stale without a watch noticing: look again soon.
        self.requeue = self.requeue.min(Duration::from_secs(5));
    }

    pub(super) fn aborted_revision(&self) -> Option<&str> {
        self.status.aborted_revision.as_deref()
    }

    pub(super) fn clear_aborted(&mut self) {
        self.status.aborted_revision = None;
    }
}

pub(super) fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("").trim()
}

pub(crate) fn to_jiff(t: Time) -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::from_second(t.timestamp())
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
}
