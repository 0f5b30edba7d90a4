//! The draft of one `decide`: the actions the decision makes, and what
//! follows from them — the Events, and the status it derives from the
//! snapshot (phase, leader, revisions, the last handover's times). The
//! register step's part is in `register_status.rs`; the conditions and
//! the finished decision in `finish.rs`.
//!
//! Kept whole, one concept: what each step of the decision says, one method
//! a step.

use std::time::Duration;

use super::snapshot::*;
use crate::crd::{HandoverStatus, LeaderStatus, Phase, SchedulerStatus};

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
    pub(super) o: &'a Observed,
    pub(super) actions: Vec<Action>,
    pub(super) events: Vec<Event>,
    pub(super) status: SchedulerStatus,
    /// The first problem found: (reason, message).
    pub(super) degraded: Option<(String, String)>,
    pub(super) progress: Option<Phase>,
    pub(super) stop_world: bool,
    /// The leader is a settled pod with overlap off: it has no row.
    pub(super) alone: bool,
    /// The target revision is not the one the status was written for: a
    /// new rollout.
    pub(super) target_changed: bool,
    /// The target revision waits for a maintenance window: the `Deferred`
    /// condition's (reason, message).
    pub(super) deferred: Option<(String, String)>,
    pub(super) requeue: Duration,
}

pub(super) fn rfc3339(t: Time) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl<'a> StatusDraft<'a> {
    pub(super) fn new(o: &'a Observed) -> Self {
        let mut status = o.status.clone();
        status.observed_generation = o.generation;
        status.target_image = Some(o.spec.image.clone());
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
            .map(|i| format!("{} (instance {}, {})", i.host, i.id, i.image))
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

    /// `pod`'s container cannot start until something is changed (its
    /// image, a Secret), as the kubelet says.
    pub(super) fn cannot_run(&mut self, pod: &PodView, waiting: &Waiting) {
        let why = if waiting.message.is_empty() {
            String::new()
        } else {
            format!(": {}", first_line(&waiting.message))
        };
        self.degrade(
            &waiting.reason,
            format!(
                "pod {} ({}) cannot start its container ({}){why}",
                pod.name, pod.image, waiting.reason
            ),
        );
    }

    pub(super) fn aborted_revision(&self) -> Option<&str> {
        self.status.aborted_revision.as_deref()
    }

    pub(super) fn clear_aborted(&mut self) {
        self.status.aborted_revision = None;
    }

    pub(super) fn retry_aborted(&mut self) {
        self.status.aborted_revision = None;
        self.event(Event::warning(
            "RetryingAborted",
            format!(
                "no older instance is left to lead; trying the aborted revision ({}) again",
                self.o.spec.image
            ),
        ));
    }

    pub(super) fn degraded_keep(&mut self, look_soon: bool) {
        if look_soon {
            self.requeue = self.requeue.min(BUSY);
        }
        let revision = self.status.aborted_revision.clone().unwrap_or_default();
        self.degrade(
            "JoinTimeout",
            format!(
                "the rollout of revision {revision} ({}) was aborted: it never joined; change the spec to try again",
                self.o.spec.image
            ),
        );
    }

    /// Overlap off: pods being deleted whose schedulers still run must end
    /// before the next pod starts; `overdue` ones among them were due to be
    /// gone a while ago, which their node alone can explain.
    pub(super) fn waiting_for_gone(&mut self, overdue: &[&PodView]) {
        if let Some(pod) = overdue.first() {
            let due = pod.deletion_due.map(rfc3339).unwrap_or_default();
            self.degrade(
                "PodNotGone",
                format!(
                    "overlap is off and pod {} still runs, though its deletion was due by {due}; \
                     no new pod starts beside it. If its node is gone, make sure the scheduler \
                     no longer runs there, then delete the pod with --force --grace-period=0",
                    pod.name
                ),
            );
        }
        self.busy(Phase::Starting);
    }

    /// Pod `pod` (a [`Action::CreatePod`]) is made: a handover starts if
    /// another image leads, else a pod is simply created.
    pub(super) fn pod_created(&mut self, pod: &Action, rows: &[InstanceView]) {
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
        let leader = rows.iter().find(|i| i.live && i.holds_lock);
        match leader {
            Some(l) if l.image != *image || !l.host.contains(revision.as_str()) => {
                self.event(Event::normal(
                    "HandoverStarted",
                    format!(
                        "pod {name} starts image {image} beside instance {} ({})",
                        l.id, l.image
                    ),
                ));
                self.status.last_handover = Some(HandoverStatus {
                    from: l.image.clone(),
                    to: image.to_string(),
                    started: Some(rfc3339(self.o.now)),
                    ..Default::default()
                });
            }
            _ => self.event(Event::normal(
                "Creating",
                format!("pod {name} starts image {image}"),
            )),
        }
        self.status.last_sequence = *sequence as i64;
        self.busy(Phase::Starting);
    }

    /// The dead current `pod` is replaced by pod `sequence` of its revision;
    /// one that ran `stable` starts the back-off again.
    pub(super) fn pod_restarted(&mut self, pod: &PodView, code: i32, stable: bool, sequence: u32) {
        self.status.restarts += 1;
        self.status.recent_restarts = if stable {
            1
        } else {
            self.status.recent_restarts.saturating_add(1)
        };
        self.event(Event::warning(
            "PodRestarted",
            format!(
                "pod {} exited with code {code}; starting its revision again (restart {})",
                pod.name, self.status.restarts
            ),
        ));
        self.status.last_sequence = sequence as i64;
        self.busy(Phase::Starting);
    }

    pub(super) fn crash_backoff(
        &mut self,
        pod: &PodView,
        code: i32,
        message: &str,
        wait: Duration,
    ) {
        let why = if message.is_empty() {
            String::new()
        } else {
            format!(": {}", first_line(message))
        };
        self.degrade(
            "PodFailed",
            format!(
                "pod {} exited with code {code}{why}; starting it again in {}s",
                pod.name,
                wait.as_secs().max(1)
            ),
        );
        self.requeue = self.requeue.min(wait.max(Duration::from_secs(1)));
    }

    pub(super) fn stop_the_world(&mut self, pod: &PodView, message: &str) {
        self.busy(Phase::HandingOver);
        let already = self
            .o
            .status
            .conditions
            .iter()
            .any(|c| c.type_ == "Progressing" && c.reason == "StopTheWorld");
        if !already {
            self.event(Event::warning(
                "OverlapRefused",
                format!(
                    "pod {} refused to start beside the running scheduler ({}); stop-the-world: the old instances drain and end first",
                    pod.name,
                    first_line(message)
                ),
            ));
        }
        self.progress = Some(Phase::HandingOver);
        self.stop_world = true;
    }

    /// `instance` was asked to drain, for `why`.
    pub(super) fn drain_asked(&mut self, instance: &InstanceView, why: &str) {
        self.event(Event::normal(
            "AskedDrain",
            format!(
                "asked instance {} ({}, {}) to drain: {why}",
                instance.id, instance.host, instance.image
            ),
        ));
    }

    pub(super) fn abort_join(&mut self, pod: &PodView, revision: &str, timeout: i64) {
        self.status.aborted_revision = Some(revision.to_string());
        self.event(Event::warning(
            "JoinTimeout",
            format!(
                "pod {} ({}) did not join within {timeout}s; rollout aborted, the old instance keeps leading",
                pod.name, pod.image
            ),
        ));
        self.degraded_keep(false);
    }

    pub(super) fn join_late(&mut self, pod: &PodView, timeout: i64) {
        self.degrade(
            "JoinTimeout",
            format!(
                "pod {} ({}) has not joined within {timeout}s",
                pod.name, pod.image
            ),
        );
        self.busy(Phase::Starting);
    }

    pub(super) fn waiting_for_join(&mut self, pod: &PodView, rows: &[InstanceView]) {
        let old_leads = rows.iter().any(|i| i.live && i.host != pod.host);
        self.busy(if old_leads {
            Phase::HandingOver
        } else {
            Phase::Starting
        });
    }

    pub(super) fn instance_stale(&mut self, pod: &PodView, me: &InstanceView) {
        self.busy(Phase::HandingOver);
        self.degrade(
            "InstanceStale",
            format!(
                "instance {} of pod {} has not been seen within the stale limit",
                me.id, pod.name
            ),
        );
    }

    pub(super) fn joined(&mut self, pod: &PodView, me: &InstanceView) {
        if let Some(h) = self.status.last_handover.as_mut() {
            if h.to == pod.image && h.joined.is_none() {
                h.joined = Some(rfc3339(me.joined));
                self.events.push(Event::normal(
                    "Joined",
                    format!("instance {} of pod {} joined", me.id, pod.name),
                ));
            }
        }
    }

    pub(super) fn leads(&mut self, pod: &PodView, me: &InstanceView) {
        let since = me.led.map(rfc3339);
        self.status.current_image = Some(pod.image.clone());
        self.status.leader = Some(LeaderStatus {
            instance: me.id,
            pod: pod.name.clone(),
            image: pod.image.clone(),
            since: since.clone(),
        });
        if let Some(h) = self.status.last_handover.as_mut() {
            if h.to == pod.image && h.led.is_none() {
                h.led = since.or(Some(rfc3339(self.o.now)));
                self.events.push(Event::normal(
                    "Leading",
                    format!(
                        "instance {} of pod {} leads (verified in pg_locks)",
                        me.id, pod.name
                    ),
                ));
            }
        }
    }

    /// Overlap off: `pod` has run since `since` for the settle time, so it
    /// is up and leads (alone: it has no row, and nothing else runs).
    pub(super) fn settled(&mut self, pod: &PodView, since: Time, settle: i64) {
        self.alone = true;
        self.status.current_image = Some(pod.image.clone());
        let known = self
            .o
            .status
            .leader
            .as_ref()
            .is_some_and(|l| l.pod == pod.name);
        if !known {
            self.events.push(Event::normal(
                "Running",
                format!(
                    "pod {} ({}) has run {settle}s: up (overlap is off, so there is no instance row to wait for)",
                    pod.name, pod.image
                ),
            ));
        }
        self.status.leader = Some(LeaderStatus {
            instance: 0,
            pod: pod.name.clone(),
            image: pod.image.clone(),
            // Its own time, as for a revision: not moved by the clock
            // offset, which differs every pass.
            since: Some(rfc3339(since - self.o.clock_offset)),
        });
    }

    /// Overlap off: `pod` is not up yet (pending, or not settled).
    pub(super) fn settling(&mut self, _pod: &PodView) {
        self.busy(Phase::Starting);
    }

    pub(super) fn lead_late(&mut self, me: &InstanceView, timeout: i64) {
        self.degrade(
            "LeadTimeout",
            format!(
                "instance {} ({}) does not lead {timeout}s after the drain was asked; waiting",
                me.id, me.host
            ),
        );
        self.busy(Phase::HandingOver);
    }

    pub(super) fn waiting_for_lead(&mut self, me: &InstanceView, rows: &[InstanceView]) {
        let old_leads = rows.iter().any(|i| i.live && i.host != me.host);
        self.busy(if old_leads {
            Phase::HandingOver
        } else {
            Phase::Starting
        });
    }

    /// The old `pod` was deleted, for `why`.
    pub(super) fn old_removed(&mut self, pod: &PodView, why: &str) {
        self.event(Event::normal(
            "Removed",
            format!("deleted pod {} ({}): {why}", pod.name, pod.image),
        ));
        self.busy(Phase::Draining);
    }

    pub(super) fn old_pod_waits(&mut self, _pod: &PodView, _instance: &InstanceView) {
        self.busy(Phase::Draining);
    }

    /// The old `pod` was deleted: its `instance` still had runs `timeout`
    /// seconds after the drain was asked.
    pub(super) fn drain_timed_out(&mut self, pod: &PodView, instance: &InstanceView, timeout: i64) {
        self.event(Event::warning(
            "DrainTimeout",
            format!(
                "instance {} of pod {} still had {} runs {timeout}s after the drain was asked; deleting the pod",
                instance.id, pod.name, instance.runs
            ),
        ));
    }
}

pub(super) fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("").trim()
}

pub(crate) fn to_jiff(t: Time) -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::from_second(t.timestamp())
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
}
