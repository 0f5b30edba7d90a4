//! The Scheduler rollout (docs/protocol.md#the-operators-rollout): what the
//! operator observed, and the pure [`decide()`] that turns it into actions.
//! The Kubernetes mode and the local mode observe and act differently; they
//! share this.

// commands — `orca-operator instances`, `drain` and `wait-for-lead`, by hand.
pub mod commands;
// decide — the pure `decide`: a snapshot in, the actions out.
mod decide;
// draft — the draft of one `decide`.
mod draft;
// finish — the end of a decision.
mod finish;
// k8s — the Scheduler controller: observe → decide → act → report.
pub mod k8s;
// revision — a revision: the hash of what goes into a scheduler pod.
mod revision;
// rows — the database half of a rollout's snapshot.
pub(crate) mod rows;
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
