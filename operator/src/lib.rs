//! The orca control plane as a library: the binary `orca-operator` wires
//! these modules; the end-to-end tests drive them directly.

pub mod backoff;
pub mod by_object;
pub mod connections;
pub mod crd;
pub mod fence;
pub mod iam_policy;
pub mod k8s;
pub mod local;
pub mod plugin;
pub mod pool;
pub mod preflight;
pub mod rollout;
pub mod scheduler_rows;
pub mod spec_hash;
pub mod window;

#[cfg(test)]
mod iam_policy_tests;
#[cfg(test)]
mod properties;
#[cfg(test)]
mod spec_hash_tests;
