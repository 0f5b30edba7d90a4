//! The draft of one `decide`: the actions and events it collects, and the
//! status it derives from the snapshot (phase, leader, revisions, the last
//! handover's times, conditions).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time as KubeTime;

use super::{
    revision::{register_attempt, register_backoff},
    snapshot::*,
};
use crate::crd::{
    set_condition, HandoverStatus, LeaderStatus, Phase, RegisterStatus, RevisionStatus,
    SchedulerStatus,
};

/// `Degraded` reasons that no step of their own says: each is posted as a
/// Warning when the condition turns True with it.
const SAID_WHEN_DEGRADED: [&str; 8] = [
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
    requeue: Duration,
}

fn rfc3339(t: Time) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl<'a> StatusDraft<'a> {
    pub(super) fn new(o: &'a Observed) -> Self {
        let mut status = o.status.clone();
        status.observed_generation = o.generation;
        status.target_image = Some(o.spec.image.clone());
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

    fn degrade(&mut self, reason: &str, message: String) {
        if self.degraded.is_none() {
            self.degraded = Some((reason.into(), message));
        }
    }

    fn busy(&mut self, phase: Phase) {
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

    /// The register status of `revision` running the step of `hash`, with
    /// `made` the highest attempt seen: started afresh for another
    /// revision, its failures forgotten for another step.
    pub(super) fn register_memory(&mut self, revision: &str, hash: &str, made: u32) {
        let r = self.status.register.get_or_insert_with(Default::default);
        if r.revision != revision {
            *r = RegisterStatus {
                revision: revision.to_string(),
                hash: hash.to_string(),
                ..Default::default()
            };
        } else if r.hash != hash {
            r.hash = hash.to_string();
            r.failures = 0;
            r.failed_job = None;
        }
        r.attempts = r.attempts.max(made.min(i32::MAX as u32) as i32);
    }

    fn register_status(&mut self) -> &mut RegisterStatus {
        self.status.register.get_or_insert_with(Default::default)
    }

    /// The number of the next register attempt, counted: names are never
    /// reused, even for a Job someone deleted.
    pub(super) fn next_register_attempt(&mut self, made: u32) -> u32 {
        let r = self.register_status();
        let next = (r.attempts.max(0) as u32).max(made).saturating_add(1);
        r.attempts = next.min(i32::MAX as u32) as i32;
        next
    }

    pub(super) fn registering(&mut self, job: &str, command: &[String]) {
        self.event(Event::normal(
            "Registering",
            format!(
                "job {job} registers the new pipelines ({})",
                command.join(" ")
            ),
        ));
        self.busy(Phase::Registering);
        self.still_failing(job);
    }

    /// While the attempt after a failure runs, the failure still stands.
    fn still_failing(&mut self, next: &str) {
        let r = self.register_status();
        let (failures, failed) = (r.failures, r.failed_job.clone());
        if let (true, Some(failed)) = (failures > 0, failed) {
            let message = self
                .o
                .jobs
                .iter()
                .find(|j| j.name == failed)
                .and_then(|j| match &j.state {
                    JobState::Failed { message, .. } => Some(format!(": {}", first_line(message))),
                    _ => None,
                })
                .unwrap_or_default();
            self.degrade(
                "RegisterFailed",
                format!(
                    "job {failed} failed{message} ({failures} in a row); job {next} tries again"
                ),
            );
        }
    }

    pub(super) fn register_running(&mut self, job: &JobView) {
        self.busy(Phase::Registering);
        self.still_failing(&job.name);
    }

    pub(super) fn registered(&mut self, job: &JobView, at: Time) {
        let r = self.register_status();
        r.failures = 0;
        r.failed_job = None;
        if let Some(h) = self.status.last_handover.as_mut() {
            if h.registered.is_none() && h.led.is_some() {
                h.registered = Some(rfc3339(at));
                self.events.push(Event::normal(
                    "Registered",
                    format!("job {} succeeded", job.name),
                ));
            }
        }
    }

    /// `job` failed: counted and said once (a Warning), and `Degraded`
    /// while no attempt after it has succeeded. The failures in a row.
    pub(super) fn register_failed(&mut self, job: &JobView, message: &str) -> i32 {
        let r = self.register_status();
        // An attempt no later than the last one counted was counted with
        // it (the later one was deleted, to run the next at once).
        let attempt = |name: &str| register_attempt(name, &job.revision);
        let counted = r
            .failed_job
            .as_deref()
            .is_some_and(|f| attempt(f) >= attempt(&job.name));
        if !counted {
            r.failures = r.failures.saturating_add(1);
            r.failed_job = Some(job.name.clone());
            let failures = r.failures;
            self.event(Event::warning(
                "RegisterFailed",
                format!(
                    "job {} failed: {} ({failures} in a row); a new job tries again {}s after it failed",
                    job.name,
                    first_line(message),
                    register_backoff(failures).as_secs()
                ),
            ));
        }
        let failures = self.register_status().failures;
        self.degrade(
            "RegisterFailed",
            format!(
                "job {} failed: {} ({failures} in a row); a new job tries again {}s after it failed",
                job.name,
                first_line(message),
                register_backoff(failures).as_secs()
            ),
        );
        failures
    }

    /// A failed register Job's back-off: the next attempt in `wait`.
    pub(super) fn register_waits(&mut self, wait: Duration) {
        self.busy(Phase::Registering);
        self.requeue = self.requeue.min(wait.max(Duration::from_secs(1)));
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

    pub(super) fn finish_paused(mut self) -> Decision {
        self.status.phase = Phase::Paused;
        self.conditions(None, Some(("Paused", "spec.paused is true".into())));
        self.decision()
    }

    pub(super) fn finish_unobserved(mut self, problem: &Problem) -> Decision {
        self.degrade(&problem.reason, problem.message.clone());
        self.status.phase = Phase::Degraded;
        let degraded = self.degraded.clone();
        self.conditions(degraded, None);
        self.requeue = Duration::from_secs(5);
        self.decision()
    }

    pub(super) fn finish(
        mut self,
        rows: &[InstanceView],
        target: &str,
        progress_deadline: i64,
    ) -> Decision {
        let o = self.o;
        self.status.revisions = o
            .pods
            .iter()
            .map(|p| {
                let row = rows
                    .iter()
                    .filter(|i| i.host == p.host)
                    .max_by_key(|i| i.id);
                RevisionStatus {
                    revision: p.revision.clone(),
                    image: p.image.clone(),
                    pod: p.name.clone(),
                    instance: row.map(|i| i.id),
                    role: row.map(|i| {
                        if i.ended.is_some() {
                            "ended".into()
                        } else {
                            i.role.clone()
                        }
                    }),
                    runs: row.map(|i| i.runs).unwrap_or(0),
                    // The pod's own creation time, as `kubectl` shows it:
                    // moved by a clock offset that differs every pass, it
                    // would rewrite the status every pass.
                    since: Some(rfc3339(p.created - o.clock_offset)),
                }
            })
            .collect();
        self.status.draining = rows
            .iter()
            .filter(|i| i.live && i.role == "draining")
            .count() as i32;
        // With overlap on a leader holds the lock; with it off, only a pod
        // settled in this pass leads (there are no rows to say so).
        let leads = if o.spec.overlap {
            rows.iter().any(|i| i.live && i.holds_lock)
        } else {
            self.alone
        };
        if !leads {
            self.status.leader = None;
        }
        let in_motion = self.progress.is_some() || !self.actions.is_empty();
        // A handover is complete once the pipelines are registered too.
        let registered = |h: &HandoverStatus| h.registered.is_some() || o.spec.register.is_none();
        if !in_motion {
            if let Some(h) = self.status.last_handover.as_mut() {
                if h.drained.is_none() && h.led.is_some() && registered(h) {
                    h.drained = Some(rfc3339(o.now));
                    self.events.push(Event::normal(
                        "HandoverComplete",
                        format!(
                            "{} → {}: the old instances have drained and their pods are gone",
                            h.from, h.to
                        ),
                    ));
                }
            }
        }
        // The progress deadline counts from the rollout's own start (the
        // target changed, or a settled Scheduler began to move), never from
        // a pod's age: a pod of the target may be much older (a rollback to
        // an image whose pod still drains) or younger (a replaced pod).
        if !in_motion {
            self.status.rollout_started = None;
        } else if self.target_changed || self.status.rollout_started.is_none() {
            self.status.rollout_started = Some(rfc3339(o.now));
        }
        let started = self
            .status
            .rollout_started
            .as_deref()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&chrono::Utc));
        if let Some(started) = started {
            if o.now - started > crate::crd::spec_seconds(progress_deadline) {
                self.degrade(
                    "ProgressDeadlineExceeded",
                    format!(
                        "the rollout to {} (revision {target}) has run past {progress_deadline}s since {}",
                        o.spec.image,
                        rfc3339(started)
                    ),
                );
            }
        }
        self.say_degraded();
        self.status.phase = match (&self.degraded, self.progress) {
            (Some(_), _) => Phase::Degraded,
            (None, Some(p)) => p,
            (None, None) if self.status.leader.is_some() => Phase::Ready,
            (None, None) => Phase::Starting,
        };
        let degraded = self.degraded.clone();
        let progressing = self.progress.map(|p| {
            let reason = if self.stop_world {
                "StopTheWorld"
            } else {
                p.as_str()
            };
            (reason, format!("rolling out {}", o.spec.image))
        });
        self.conditions(degraded, progressing);
        self.decision()
    }

    /// A `Degraded` condition turning True with a reason of
    /// [`SAID_WHEN_DEGRADED`] is posted as a Warning, once.
    fn say_degraded(&mut self) {
        let Some((reason, message)) = self.degraded.clone() else {
            return;
        };
        let already = self
            .o
            .status
            .conditions
            .iter()
            .any(|c| c.type_ == "Degraded" && c.status == "True" && c.reason == reason);
        if SAID_WHEN_DEGRADED.contains(&reason.as_str()) && !already {
            self.events.push(Event::warning(&reason, message));
        }
    }

    fn conditions(
        &mut self,
        degraded: Option<(String, String)>,
        progressing: Option<(&str, String)>,
    ) {
        let leader = self.status.leader.clone();
        let alone = self.alone;
        let now = self.o.now;
        let generation = self.o.generation;
        let previous = self.o.status.conditions.clone();
        let make = |type_: &str, on: bool, reason: &str, message: String| {
            let mut set = previous.clone();
            let now = KubeTime(to_jiff(now));
            set_condition(&mut set, type_, on, reason, &message, now, generation);
            set.into_iter()
                .find(|c| c.type_ == type_)
                .expect("invariant: set_condition leaves the condition it set")
        };
        let available = match &leader {
            Some(l) if alone => make(
                "Available",
                true,
                "Running",
                format!("pod {} runs (overlap off: no instance row)", l.pod),
            ),
            Some(l) => make(
                "Available",
                true,
                "Leading",
                format!("instance {} ({}) leads", l.instance, l.pod),
            ),
            None => make(
                "Available",
                false,
                "NoLeader",
                "no live instance holds the lead".into(),
            ),
        };
        let progressing = match progressing {
            Some((reason, message)) => make("Progressing", true, reason, message),
            None => make(
                "Progressing",
                false,
                "Settled",
                "nothing to roll out".into(),
            ),
        };
        let degraded = match degraded {
            Some((reason, message)) => make("Degraded", true, &reason, message),
            None => make("Degraded", false, "AsExpected", String::new()),
        };
        self.status.conditions = vec![available, progressing, degraded];
    }

    fn decision(self) -> Decision {
        Decision {
            actions: self.actions,
            events: self.events,
            status: self.status,
            requeue: self.requeue,
        }
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("").trim()
}

pub(crate) fn to_jiff(t: Time) -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::from_second(t.timestamp())
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
}
