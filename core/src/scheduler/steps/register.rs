//! The register step of a rollout (docs/protocol.md#the-operators-rollout):
//! once the target revision's pod leads, a Job of its image registers its
//! pipelines. A failed Job is never run again: the next attempt is a new
//! Job with a name of its own, after a back-off that doubles with each
//! failure in a row. A change of `spec.register` registers again.
//!
//! What the step says in the status: the attempts made for a revision,
//! the running, succeeded or failed Job, the failures in a row and when
//! the next attempt is due.

use std::time::Duration;

use crate::crd::{Phase, RegisterStatus};
use crate::scheduler::{
    draft::{first_line, rfc3339, StatusDraft},
    revision::{register_attempt, register_backoff, register_hash, register_job_name},
    snapshot::*,
};

/// The register Jobs of the `target` revision, once its pod leads: the
/// first created if the spec has a register step, a failed one followed by
/// a new attempt once its back-off is over, another step's replaced.
pub(in crate::scheduler) fn register(d: &mut StatusDraft, o: &Observed, target: &str) {
    let Some(register) = &o.spec().register else {
        return;
    };
    let hash = register_hash(register);
    let jobs: Vec<&JobView> = o.jobs().iter().filter(|j| j.revision() == target).collect();
    let attempt = |j: &JobView| register_attempt(j.name(), target);
    // A Job without the hash was made before Jobs carried it: it counts as
    // the current step's, so an operator upgrade registers nothing again.
    let current = |j: &JobView| j.register().is_none_or(|h| h == hash);
    let newest = jobs
        .iter()
        .copied()
        .filter(|j| current(j))
        .max_by_key(|j| attempt(j));
    let newest_attempt = newest.map(attempt).unwrap_or(0);
    let made = jobs.iter().map(|j| attempt(j)).max().unwrap_or(0);
    register_memory(d, target, &hash, made);
    // Another step's Jobs are superseded; of this step's the newest is
    // kept, and the one before it, whose logs say why the newest was made.
    for job in &jobs {
        if !current(job) || attempt(job) + 1 < newest_attempt {
            d.act(Action::DeleteJob {
                name: job.name().to_string(),
            });
        }
    }
    let Some(job) = newest else {
        next_job(d, o, target, made);
        return;
    };
    match &job.state() {
        JobState::Running => register_running(d, job),
        JobState::Succeeded { at } => registered(d, job, *at),
        JobState::Failed { message, at } => {
            let failures = register_failed(d, job, message);
            let wait = register_backoff(failures);
            let due = *at + chrono::Duration::seconds(wait.as_secs() as i64);
            if o.now() >= due {
                next_job(d, o, target, made);
            } else {
                register_waits(
                    d,
                    (due - o.now()).to_std().unwrap_or(Duration::from_secs(1)),
                );
            }
        }
    }
}

/// The next register Job of `target` (`made` attempts seen), with the
/// spec's register step.
fn next_job(d: &mut StatusDraft, o: &Observed, target: &str, made: u32) {
    let Some(register) = &o.spec().register else {
        return;
    };
    let name = register_job_name(o.name(), target, next_register_attempt(d, made));
    d.act(Action::CreateRegisterJob {
        name: name.clone(),
        revision: target.to_string(),
        image: o.spec().image.clone(),
    });
    registering(d, &name, &register.command);
}

/// The register status of `revision` running the step of `hash`, with
/// `made` the highest attempt seen: started afresh for another
/// revision, its failures forgotten for another step.
pub(in crate::scheduler) fn register_memory(
    d: &mut StatusDraft,
    revision: &str,
    hash: &str,
    made: u32,
) {
    let r = d.status_mut().register.get_or_insert_with(Default::default);
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

pub(in crate::scheduler) fn register_status<'d>(
    d: &'d mut StatusDraft<'_>,
) -> &'d mut RegisterStatus {
    d.status_mut().register.get_or_insert_with(Default::default)
}

/// The number of the next register attempt, counted: names are never
/// reused, even for a Job someone deleted.
pub(in crate::scheduler) fn next_register_attempt(d: &mut StatusDraft, made: u32) -> u32 {
    let r = register_status(d);
    let next = (r.attempts.max(0) as u32).max(made).saturating_add(1);
    r.attempts = next.min(i32::MAX as u32) as i32;
    next
}

pub(in crate::scheduler) fn registering(d: &mut StatusDraft, job: &str, command: &[String]) {
    d.event(Event::normal(
        "Registering",
        format!(
            "job {job} registers the new pipelines ({})",
            command.join(" ")
        ),
    ));
    d.busy(Phase::Registering);
    still_failing(d, job);
}

/// While the attempt after a failure runs, the failure still stands.
pub(in crate::scheduler) fn still_failing(d: &mut StatusDraft, next: &str) {
    let r = register_status(d);
    let (failures, failed) = (r.failures, r.failed_job.clone());
    if let (true, Some(failed)) = (failures > 0, failed) {
        let message = d
            .observed()
            .jobs()
            .iter()
            .find(|j| j.name() == failed)
            .and_then(|j| match &j.state() {
                JobState::Failed { message, .. } => Some(format!(": {}", first_line(message))),
                _ => None,
            })
            .unwrap_or_default();
        d.degrade(
            "RegisterFailed",
            format!("job {failed} failed{message} ({failures} in a row); job {next} tries again"),
        );
    }
}

pub(in crate::scheduler) fn register_running(d: &mut StatusDraft, job: &JobView) {
    d.busy(Phase::Registering);
    still_failing(d, job.name());
}

pub(in crate::scheduler) fn registered(d: &mut StatusDraft, job: &JobView, at: Time) {
    let r = register_status(d);
    r.failures = 0;
    r.failed_job = None;
    if let Some(h) = d.status_mut().last_handover.as_mut() {
        if h.registered.is_none() && h.led.is_some() {
            h.registered = Some(rfc3339(at));
            d.event(Event::normal(
                "Registered",
                format!("job {} succeeded", job.name()),
            ));
        }
    }
}

/// `job` failed: counted and said once (a Warning), and `Degraded`
/// while no attempt after it has succeeded. The failures in a row.
pub(in crate::scheduler) fn register_failed(
    d: &mut StatusDraft,
    job: &JobView,
    message: &str,
) -> i32 {
    let r = register_status(d);
    // An attempt no later than the last one counted was counted with
    // it (the later one was deleted, to run the next at once).
    let attempt = |name: &str| register_attempt(name, job.revision());
    let counted = r
        .failed_job
        .as_deref()
        .is_some_and(|f| attempt(f) >= attempt(job.name()));
    if !counted {
        r.failures = r.failures.saturating_add(1);
        r.failed_job = Some(job.name().to_string());
    }
    let failures = register_status(d).failures;
    let said = format!(
        "job {} failed: {} ({failures} in a row); a new job tries again {}s after it failed",
        job.name(),
        first_line(message),
        register_backoff(failures).as_secs()
    );
    if !counted {
        d.event(Event::warning("RegisterFailed", said.clone()));
    }
    d.degrade("RegisterFailed", said);
    failures
}

/// A failed register Job's back-off: the next attempt in `wait`.
pub(in crate::scheduler) fn register_waits(d: &mut StatusDraft, wait: Duration) {
    d.busy(Phase::Registering);
    d.requeue_within(wait.max(Duration::from_secs(1)));
}
