//! The end of a decision: the conditions (`Progressing`, `Degraded`,
//! `Paused`), the Warning for a `Degraded` no step said, and the finished
//! [`Decision`].

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time as KubeTime;

use super::{rfc3339, to_jiff, StatusDraft, SAID_WHEN_DEGRADED};
use crate::crd::{set_condition, HandoverStatus, Phase, RevisionStatus};
use crate::scheduler::{
    snapshot::*,
    window::{Deferral, ROLLOUT_NOW},
};

impl StatusDraft<'_> {
    pub(in crate::scheduler) fn finish_paused(mut self) -> Decision {
        self.status.phase = Phase::Paused;
        self.conditions(None, Some(("Paused", "spec.paused is true".into())));
        self.decision()
    }

    /// `target` waits for a maintenance window (see [`crate::scheduler::window`]):
    /// nothing is done, the status says until when, and the Scheduler looks
    /// again when the window starts.
    pub(in crate::scheduler) fn finish_deferred(
        mut self,
        target: &str,
        why: &Deferral,
    ) -> Decision {
        let o = self.o;
        let now_hint = format!(
            "the annotation {ROLLOUT_NOW}={target} (kubectl orca rollout now) starts it now"
        );
        let (reason, message) = match (&why.invalid(), why.next()) {
            (Some(invalid), _) => {
                self.degrade("InvalidMaintenanceWindow", invalid.to_string());
                (
                    "InvalidMaintenanceWindow",
                    format!(
                        "revision {target} ({}) waits: a maintenance window cannot be read; {now_hint}",
                        o.spec().image
                    ),
                )
            }
            (None, Some(next)) => {
                self.status.next_window = Some(rfc3339(next));
                let wait = (next - o.now()).to_std().unwrap_or_default();
                self.requeue = self.requeue.min(wait.max(Duration::from_secs(1)));
                (
                    "OutsideMaintenanceWindow",
                    format!(
                        "revision {target} ({}) waits for the next maintenance window, at {}; {now_hint}",
                        o.spec().image,
                        rfc3339(next)
                    ),
                )
            }
            (None, None) => (
                "OutsideMaintenanceWindow",
                format!(
                    "revision {target} ({}) waits: no maintenance window starts again; {now_hint}",
                    o.spec().image
                ),
            ),
        };
        let was = o
            .status()
            .conditions
            .iter()
            .any(|c| c.type_ == "Deferred" && c.status == "True");
        if !was {
            self.event(Event::normal("Deferred", message.clone()));
        }
        self.deferred = Some((reason.into(), message));
        let degraded = self.degraded.clone();
        self.conditions(degraded, None);
        self.decision()
    }

    pub(in crate::scheduler) fn finish_unobserved(mut self, problem: &Problem) -> Decision {
        self.degrade(&problem.reason, problem.message.clone());
        self.status.phase = Phase::Degraded;
        let degraded = self.degraded.clone();
        self.conditions(degraded, None);
        self.requeue = Duration::from_secs(5);
        self.decision()
    }

    /// The last handover is complete, if its new instance leads, its
    /// pipelines are registered and nothing is in motion any more.
    fn handover_complete(&mut self) {
        let o = self.o;
        // A handover is complete once the pipelines are registered too.
        let registered = |h: &HandoverStatus| h.registered.is_some() || o.spec().register.is_none();
        if let Some(h) = self.status.last_handover.as_mut() {
            if h.drained.is_none() && h.led.is_some() && registered(h) {
                h.drained = Some(rfc3339(o.now()));
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

    /// The rollout's start, and `Degraded` past `progress_deadline`
    /// seconds after it. The deadline counts from the rollout's own start
    /// (the target changed, or a settled Scheduler began to move), never
    /// from a pod's age: a pod of the target may be much older (a rollback
    /// to an image whose pod still drains) or younger (a replaced pod).
    fn progress_deadline(&mut self, in_motion: bool, target: &str, progress_deadline: i64) {
        let o = self.o;
        if !in_motion {
            self.status.rollout_started = None;
        } else if self.target_changed || self.status.rollout_started.is_none() {
            self.status.rollout_started = Some(rfc3339(o.now()));
        }
        let started = self
            .status
            .rollout_started
            .as_deref()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&chrono::Utc));
        if let Some(started) = started {
            if o.now() - started > crate::crd::spec_seconds(progress_deadline) {
                self.degrade(
                    "ProgressDeadlineExceeded",
                    format!(
                        "the rollout to {} (revision {target}) has run past {progress_deadline}s since {}",
                        o.spec().image,
                        rfc3339(started)
                    ),
                );
            }
        }
    }

    pub(in crate::scheduler) fn finish(
        mut self,
        rows: &[InstanceView],
        target: &str,
        progress_deadline: i64,
    ) -> Decision {
        let o = self.o;
        self.status.revisions = revisions(o, rows);
        self.status.draining = rows
            .iter()
            .filter(|i| i.live() && i.role() == "draining")
            .count() as i32;
        // With overlap on a leader holds the lock; with it off, only a pod
        // settled in this pass leads (there are no rows to say so).
        let leads = if o.spec().overlap {
            rows.iter().any(|i| i.live() && i.holds_lock())
        } else {
            self.alone
        };
        if !leads {
            self.status.leader = None;
        }
        let in_motion = self.progress.is_some() || !self.actions.is_empty();
        if !in_motion {
            self.handover_complete();
        }
        self.progress_deadline(in_motion, target, progress_deadline);
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
            (reason, format!("rolling out {}", o.spec().image))
        });
        self.conditions(degraded, progressing);
        self.decision()
    }

    /// A `Degraded` condition turning True with a reason of
    /// [`SAID_WHEN_DEGRADED`] is posted as a Warning, once.
    pub(super) fn say_degraded(&mut self) {
        let Some((reason, message)) = self.degraded.clone() else {
            return;
        };
        let already = self
            .o
            .status()
            .conditions
            .iter()
            .any(|c| c.type_ == "Degraded" && c.status == "True" && c.reason == reason);
        if SAID_WHEN_DEGRADED.contains(&reason.as_str()) && !already {
            self.events.push(Event::warning(&reason, message));
        }
    }

    pub(super) fn conditions(
        &mut self,
        degraded: Option<(String, String)>,
        progressing: Option<(&str, String)>,
    ) {
        let leader = self.status.leader.clone();
        let alone = self.alone;
        let now = self.o.now();
        let generation = self.o.generation();
        let previous = self.o.status().conditions.clone();
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
        if !self.o.spec().maintenance_windows.is_empty() {
            let deferred = match self.deferred.clone() {
                Some((reason, message)) => make("Deferred", true, &reason, message),
                None => make(
                    "Deferred",
                    false,
                    "NotWaiting",
                    "no revision waits for a maintenance window".into(),
                ),
            };
            self.status.conditions.push(deferred);
        }
    }

    pub(super) fn decision(self) -> Decision {
        Decision::new(self.actions, self.events, self.status, self.requeue)
    }
}

/// Each pod's revision, with its newest row among `rows`.
fn revisions(o: &Observed, rows: &[InstanceView]) -> Vec<RevisionStatus> {
    o.pods()
        .iter()
        .map(|p| {
            let row = rows
                .iter()
                .filter(|i| i.host() == p.host())
                .max_by_key(|i| i.id());
            RevisionStatus {
                revision: p.revision().to_string(),
                image: p.image().to_string(),
                pod: p.name().to_string(),
                instance: row.map(|i| i.id()),
                role: row.map(|i| {
                    if i.ended().is_some() {
                        "ended".into()
                    } else {
                        i.role().to_string()
                    }
                }),
                runs: row.map(|i| i.runs()).unwrap_or(0),
                // The pod's own creation time, as `kubectl` shows it:
                // moved by a clock offset that differs every pass, it
                // would rewrite the status every pass.
                since: Some(rfc3339(p.created() - o.clock_offset())),
            }
        })
        .collect()
}
