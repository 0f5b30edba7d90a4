//! What the register step says in the Scheduler's status: the attempts
//! made for a revision, the running, succeeded or failed Job, the failures
//! in a row and when the next attempt is due.

use std::time::Duration;

use super::{
    revision::{register_attempt, register_backoff},
    snapshot::*,
    status::{first_line, rfc3339, StatusDraft},
};
use crate::crd::{Phase, RegisterStatus};

impl StatusDraft<'_> {
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

    pub(super) fn register_status(&mut self) -> &mut RegisterStatus {
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
    pub(super) fn still_failing(&mut self, next: &str) {
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
        }
        let failures = self.register_status().failures;
        let said = format!(
            "job {} failed: {} ({failures} in a row); a new job tries again {}s after it failed",
            job.name,
            first_line(message),
            register_backoff(failures).as_secs()
        );
        if !counted {
            self.event(Event::warning("RegisterFailed", said.clone()));
        }
        self.degrade("RegisterFailed", said);
        failures
    }

    /// A failed register Job's back-off: the next attempt in `wait`.
    pub(super) fn register_waits(&mut self, wait: Duration) {
        self.busy(Phase::Registering);
        self.requeue = self.requeue.min(wait.max(Duration::from_secs(1)));
    }
}
