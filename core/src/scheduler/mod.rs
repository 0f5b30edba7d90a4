//! The Scheduler rollout's decision (docs/protocol.md#the-operators-rollout):
//! what the operator observed, and the pure [`decide()`] that turns it into
//! actions. The Kubernetes mode and the local mode observe and act
//! differently (the operator's `scheduler/`); they share this.
//!
//! The map, one line a file:

// decide — the pure `decide`: a snapshot in, the actions out.
mod decide;
// draft — the draft of one `decide`, and its end: the conditions and the decision.
mod draft;
// revision — a revision: the hash of what goes into a scheduler pod.
mod revision;
// snapshot — one snapshot of what a rollout depends on, and the actions that change it.
mod snapshot;
// steps — the steps of a rollout, a file each.
mod steps;
// window — maintenance windows.
mod window;

// tests — `decide` as a table.
#[cfg(test)]
mod tests;

pub use decide::decide;
pub use revision::{
    host_name, is_host_of, job_name, pod_name, register_attempt, register_hash, register_job_name,
    revision_fields, revision_of, scheduler_label, Revision,
};
pub use snapshot::*;
pub use window::{deferral, Deferral, ROLLOUT_NOW};
