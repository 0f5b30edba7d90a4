//! The Scheduler rollout (SPEC §6): what the operator observed, and the
//! pure [`decide`] that turns it into actions. The Kubernetes mode and the
//! local mode observe and act differently; they share this.

mod decide;
mod instances;
mod revision;
mod snapshot;
mod status;

#[cfg(test)]
mod tests;

pub use decide::{decide, Decision};
pub use instances::{db_problem, observe_instances};
pub use revision::{job_name, pod_name, revision_of, scheduler_label, Revision};
pub use snapshot::*;
