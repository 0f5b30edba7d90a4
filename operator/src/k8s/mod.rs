//! The Kubernetes mode (`orca-operator run`, docs/architecture.md): the
//! wiring above both controllers — the Scheduler's
//! ([`crate::scheduler::k8s`], around the pure [`crate::scheduler::decide`])
//! and the WarmPool's ([`crate::warmpool::k8s`], around a pool's pass), with
//! the WarmPoolClasses' beside it — on the runtime they share
//! ([`crate::runtime`]: the shell, the election, the watches, the status
//! writes, the endpoints).
//!
//! The map, one line a file:

// metrics — every metric the mode exports, registered in one registry.
pub mod metrics;
// run — `orca-operator run`: the client, the election, the controllers and the server, wired.
pub(crate) mod run;

pub use crate::runtime::names::*;
pub use crate::scheduler::k8s::Metrics;
pub use crate::scheduler::k8s::{error_policy, reconcile, Context, ReconcileError};
pub use run::{run, RunArgs};
