//! The Kubernetes mode (`orca-operator run`, docs/architecture.md): the
//! two controllers side by side, and what they share.
//!
//! - [`scheduler`] — the Scheduler controller around the pure
//!   [`crate::rollout::decide`]: `reconcile` (observe → decide → act →
//!   events → status), `error_policy`, and the pods, Jobs, finalizer and
//!   memory of its status it works with;
//! - [`warmpool`] — the WarmPool controller around a pool's pass
//!   ([`crate::pool`]): its watches and triggers, finalizer and write-back;
//! - shared: [`database`] (a Scheduler's Secret → its database URL, a
//!   connection kept per database), [`status`] (status by server-side
//!   apply, the Events), [`names`] (the labels and [`MANAGER`]);
//! - [`metrics`], [`server`] — the Prometheus registry and `/metrics`,
//!   `/healthz`, `/readyz`;
//! - [`leader`] — only the holder of a `Lease` runs the controllers,
//!   behind its [`crate::fence::Fence`];
//! - [`crd_check`] — at start, CRDs older than this build hold the replica
//!   back from the election, saying so;
//! - [`run()`] — wires it all.

pub mod classes;
pub mod crd_check;
pub mod database;
pub mod finalizer;
pub mod guard;
pub mod in_use;
pub mod leader;
pub mod metrics;
pub mod names;
pub mod run;
pub mod scheduler;
pub mod server;
pub mod shell;
pub mod status;
pub mod warmpool;
pub mod watches;

pub use metrics::Metrics;
pub use names::*;
pub use run::{run, RunArgs};
pub use scheduler::{error_policy, reconcile, Context, ReconcileError};
