//! The Scheduler rollout (docs/protocol.md#the-operators-rollout): what the
//! operator observed, and the pure [`decide`] that turns it into actions.
//! The Kubernetes mode and the local mode observe and act differently; they
//! share this.

mod decide;
mod draft;
mod finish;
mod revision;
mod snapshot;
mod steps;
mod window;

#[cfg(test)]
mod tests;

pub use decide::decide;
pub use revision::{
    host_name, is_host_of, job_name, pod_name, register_attempt, register_hash, register_job_name,
    revision_fields, revision_of, scheduler_label, Revision,
};
pub use snapshot::*;
pub use window::{deferral, Deferral, ROLLOUT_NOW};
