//! What the orca operator decides with, free of every client: the custom
//! resources' types and their CRDs, periods of the day and week, and
//! back-off. It depends on serde, schemars, chrono, k8s-openapi and kube's
//! derive — no Kubernetes client or runtime, no tokio, no AWS SDK, no
//! database driver — so what is here cannot reach the outside world, by
//! Cargo's rule rather than by a comment. The operator re-exports each
//! module under its own name (`orca_operator::crd` is this `crd`).
//!
//! The map, one line a file:

// backoff — back-off, one formula for the whole operator.
pub mod backoff;
// by_object — what a controller keeps of each object between its reconciles.
pub mod by_object;
// crd — the custom resources, `orca.dev/v1alpha1` `Scheduler`, `WarmPool` and `WarmPoolClass`.
pub mod crd;
// window — periods of the day and week, read and matched.
pub mod window;
