//! The Kubernetes mode (`orca-operator run`,
//! docs/architecture.md#the-scheduler-controller): the Scheduler
//! controller around the pure [`crate::rollout::decide`].
//!
//! - [`pods`], [`jobs`] — the objects the rollout's actions create, and the
//!   views `decide` reads back from them;
//! - [`database`] — the Scheduler's Secret → its database URL → the rows of
//!   `orca.schedulers`, with a connection kept per Scheduler;
//! - [`scheduler`] — `reconcile` (observe → decide → act → events → status)
//!   and `error_policy`; [`act`] — the act stage;
//! - [`metrics`], [`server`] — the Prometheus registry and `/metrics`,
//!   `/healthz`, `/readyz`;
//! - [`leader`] — only the holder of a `Lease` runs the controllers;
//! - [`run`] — wires it all.

pub mod act;
pub mod database;
pub mod deletion;
pub mod jobs;
pub mod leader;
pub mod memory;
pub mod metrics;
pub mod pods;
pub mod refusal;
pub mod run;
pub mod scheduler;
pub mod server;
pub mod warmpool;

pub use metrics::Metrics;
pub use run::{run, RunArgs};
pub use scheduler::{error_policy, reconcile, Context, ReconcileError};

/// Every pod and Job of a Scheduler carries its name.
pub const LABEL_SCHEDULER: &str = "orca.dev/scheduler";
/// The revision: a hash of what goes into the pod
/// (docs/protocol.md#the-operators-rollout).
pub const LABEL_REVISION: &str = "orca.dev/revision";
/// The pod's sequence number: the highest is the newest.
pub const LABEL_SEQUENCE: &str = "orca.dev/sequence";
/// What a register Job's pod is (`register`), to tell it from a scheduler.
pub const LABEL_COMPONENT: &str = "orca.dev/component";
/// The name the operator writes objects and events as.
pub const MANAGER: &str = "orca-operator";
