//! What the orca operator decides with, free of every client: the custom
//! resources' types and their CRDs, the hashes of their specs, periods of
//! the day and week, back-off, the Scheduler rollout's decision and the
//! WarmPool's plan, with the database rows the plan reads. It depends on
//! serde, schemars, chrono, k8s-openapi and kube's derive — no Kubernetes
//! client or runtime, no tokio, no AWS SDK, no database driver, not even
//! a logger: what is worth saying it returns — so what is here cannot
//! reach the outside world, by Cargo's rule rather than by a comment. The operator re-exports each
//! module under its own name (`orca_operator::crd` is this `crd`).
//!
//! The map, one line a file:

// backoff — back-off, one formula for the whole operator.
pub mod backoff;
// by_object — what a controller keeps of each object between its reconciles.
pub mod by_object;
// crd — the custom resources, `orca.dev/v1alpha1` `Scheduler`, `WarmPool` and `WarmPoolClass`.
pub mod crd;
// rows — the rows of `orca.instances` the pool's plan reads, as plain values.
pub mod rows;
// scheduler — the Scheduler rollout's pure decision: a snapshot in, the actions out.
pub mod scheduler;
// spec_hash — the hashes that name what a user wrote and must mean the same across releases.
pub mod spec_hash;
// test_support — what the tests of several modules start from (here and in the operator's).
#[doc(hidden)]
pub mod test_support;
// warmpool — the WarmPool's plan: a snapshot in, the launches and retirements out.
pub mod warmpool;
// window — periods of the day and week, read and matched.
pub mod window;

// tests — no object can stop the operator for the others: properties over both decisions.
#[cfg(test)]
#[path = "lib_tests.rs"]
mod tests;
