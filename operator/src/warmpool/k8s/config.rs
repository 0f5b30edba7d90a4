//! What the WarmPool controller is configured with, and the names every
//! stage uses: a pool's key, its WarmPools' `Api`, the locks' rule.

use std::sync::Arc;

use kube::{Api, Client};

use crate::{
    crd::WarmPool,
    fence::Fence,
    runtime::server::Progress,
    warmpool::{budget::Budgets, Listings, PoolMetrics, Tuning},
};

/// What the WarmPool controller needs besides the client.
#[derive(Clone)]
pub struct PoolControllerConfig {
    pub tuning: Tuning,
    /// The reconciles in flight, for `/healthz`.
    pub progress: Progress,
    /// Registered by the caller into the `/metrics` registry.
    pub metrics: Option<PoolMetrics>,
    /// The controller name in Events.
    pub reporter: String,
    /// Until when this replica may act: its Lease's ([`Fence::always`]
    /// without an election).
    pub fence: Fence,
    /// The pools' EC2 listings, one per region and endpoint, shared
    /// between them (see [`crate::warmpool::listings`]).
    pub listings: Listings,
    /// What the pools of each WarmPoolClass hold, and the grants of their
    /// launches: one for the whole operator, every scope's pools together.
    pub budgets: Arc<Budgets>,
}

/// A pool's name in logs, locks and metrics: `namespace/name`.
pub(super) fn key(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

/// The WarmPools of `wp`'s namespace.
pub(super) fn pools_api(client: &Client, wp: &WarmPool) -> Api<WarmPool> {
    Api::namespaced(client.clone(), &crate::crd::namespace_of(wp))
}

/// The WarmPool controller's finalizer: the WarmPool stays until its
/// instances are terminated (`onDelete: Terminate`) or let go (`Orphan`).
pub const FINALIZER: &str = "orca.dev/warm-pool";
