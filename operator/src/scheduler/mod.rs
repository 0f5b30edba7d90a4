//! The Scheduler controller: its pure decision is the core's
//! (`orca_core::scheduler`, re-exported here under the names it always had);
//! here are what reads and drives the world for it — the database rows
//! both modes observe, the Kubernetes stages, and the commands a person
//! runs by hand.

// commands — `orca-operator instances`, `drain` and `wait-for-lead`, by hand.
pub mod commands;
// k8s — the Scheduler controller: observe → decide → act → report.
pub mod k8s;
// rows — the database half of a rollout's snapshot.
pub(crate) mod rows;

pub use orca_core::scheduler::*;
