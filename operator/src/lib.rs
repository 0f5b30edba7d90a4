//! The orca control plane as a library: the binary `orca-operator` wires
//! these modules; the end-to-end tests drive them directly.
//!
//! Only what the binaries, the kubectl plugin and the tests use is public;
//! the rest is `pub(crate)`. Its API docs are for the people who work on
//! it, private items included (`cargo doc --document-private-items`, as
//! `scripts/test` builds them), so a public item's doc may link a private
//! one: the link resolves there.
#![allow(rustdoc::private_intra_doc_links)]

// The pure core (crate orca-core), under the names the operator's modules
// have always used.
pub use orca_core::crd;
pub(crate) use orca_core::{backoff, by_object, window};

// connections — one connection per database, shared by a controller's users of it.
pub(crate) mod connections;
// fence — until when this replica may act; every client and loop takes one.
pub mod fence;
// iam_policy — the least IAM policies of one cluster (`orca-operator iam-policy`).
pub mod iam_policy;
// k8s — the Kubernetes mode: both controllers wired on the runtime.
pub mod k8s;
// local — the local mode: a directory of manifests run on this machine.
pub mod local;
// plugin — `kubectl orca`, the kubectl plugin (binary `kubectl-orca`).
pub mod plugin;
// preflight — `orca-operator preflight`.
pub mod preflight;
// runtime — what both controllers run on: shell, election, watches, status, endpoints.
pub mod runtime;
// scheduler — the Scheduler: its rows, its commands, its Kubernetes stages (its decision is the core's).
pub mod scheduler;
// warmpool — the WarmPool: its pass over EC2 and the database, its Kubernetes stages (its plan is the core's).
pub mod warmpool;
// test_support — the fixtures the unit tests of several modules share (the core's).
#[cfg(test)]
pub(crate) use orca_core::test_support;
