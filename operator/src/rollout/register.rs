//! The register step of a rollout (docs/protocol.md#the-operators-rollout):
//! once the target revision's pod leads, a Job of its image registers its
//! pipelines. A failed Job is never run again: the next attempt is a new
//! Job with a name of its own, after a back-off that doubles with each
//! failure in a row. A change of `spec.register` registers again.

use std::time::Duration;

use super::{
    revision::{register_attempt, register_backoff, register_hash, register_job_name},
    snapshot::*,
    status::StatusDraft,
};

/// The register Jobs of the `target` revision, once its pod leads: the
/// first created if the spec has a register step, a failed one followed by
/// a new attempt once its back-off is over, another step's replaced.
pub(super) fn register(d: &mut StatusDraft, o: &Observed, target: &str) {
    let Some(register) = &o.spec.register else {
        return;
    };
    let hash = register_hash(register);
    let jobs: Vec<&JobView> = o.jobs.iter().filter(|j| j.revision == target).collect();
    let attempt = |j: &JobView| register_attempt(&j.name, target);
    // A Job without the hash was made before Jobs carried it: it counts as
    // the current step's, so an operator upgrade registers nothing again.
    let current = |j: &JobView| j.register.as_deref().is_none_or(|h| h == hash);
    let newest = jobs
        .iter()
        .copied()
        .filter(|j| current(j))
        .max_by_key(|j| attempt(j));
    let newest_attempt = newest.map(attempt).unwrap_or(0);
    let made = jobs.iter().map(|j| attempt(j)).max().unwrap_or(0);
    d.register_memory(target, &hash, made);
    // Another step's Jobs are superseded; of this step's the newest is
    // kept, and the one before it, whose logs say why the newest was made.
    for job in &jobs {
        if !current(job) || attempt(job) + 1 < newest_attempt {
            d.act(Action::DeleteJob {
                name: job.name.clone(),
            });
        }
    }
    let Some(job) = newest else {
        let name = register_job_name(&o.name, target, d.next_register_attempt(made));
        d.act(Action::CreateRegisterJob {
            name: name.clone(),
            revision: target.to_string(),
            image: o.spec.image.clone(),
        });
        d.registering(&name, &register.command);
        return;
    };
    match &job.state {
        JobState::Running => d.register_running(job),
        JobState::Succeeded { at } => d.registered(job, *at),
        JobState::Failed { message, at } => {
            let failures = d.register_failed(job, message);
            let wait = register_backoff(failures);
            let due = *at + chrono::Duration::seconds(wait.as_secs() as i64);
            if o.now >= due {
                let name = register_job_name(&o.name, target, d.next_register_attempt(made));
                d.act(Action::CreateRegisterJob {
                    name: name.clone(),
                    revision: target.to_string(),
                    image: o.spec.image.clone(),
                });
                d.registering(&name, &register.command);
            } else {
                d.register_waits((due - o.now).to_std().unwrap_or(Duration::from_secs(1)));
            }
        }
    }
}
