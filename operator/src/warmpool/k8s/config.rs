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
    tuning: Tuning,
    /// The reconciles in flight, for `/healthz`.
    progress: Progress,
    /// Registered by the caller into the `/metrics` registry.
    metrics: Option<PoolMetrics>,
    /// The controller name in Events.
    reporter: String,
    /// Until when this replica may act: its Lease's ([`Fence::always`]
    /// without an election).
    fence: Fence,
    /// The pools' EC2 listings, one per region and endpoint, shared
    /// between them (see [`crate::warmpool::listings`]).
    listings: Listings,
    /// What the pools of each WarmPoolClass hold, and the grants of their
    /// launches: one for the whole operator, every scope's pools together.
    budgets: Arc<Budgets>,
}

impl PoolControllerConfig {
    /// A controller of `tuning`, acting within `fence`: Events by
    /// `orca-operator`, no metrics, nothing in flight, its own listings
    /// and class books.
    pub fn new(tuning: Tuning, fence: Fence) -> Self {
        PoolControllerConfig {
            tuning,
            progress: Progress::default(),
            metrics: None,
            reporter: crate::runtime::names::MANAGER.into(),
            fence,
            listings: Listings::default(),
            budgets: Arc::default(),
        }
    }

    /// This, its reconciles counted in `progress` (for `/healthz`).
    pub fn with_progress(self, progress: Progress) -> Self {
        PoolControllerConfig { progress, ..self }
    }

    /// This, counting into `metrics`.
    pub fn with_metrics(self, metrics: PoolMetrics) -> Self {
        PoolControllerConfig {
            metrics: Some(metrics),
            ..self
        }
    }

    /// This, with another `tuning`.
    pub fn with_tuning(self, tuning: Tuning) -> Self {
        PoolControllerConfig { tuning, ..self }
    }

    /// The loops' tuning.
    pub fn tuning(&self) -> &Tuning {
        &self.tuning
    }

    /// The reconciles in flight, for `/healthz`.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// Registered by the caller into the `/metrics` registry.
    pub fn metrics(&self) -> &Option<PoolMetrics> {
        &self.metrics
    }

    /// The controller name in Events.
    pub fn reporter(&self) -> &String {
        &self.reporter
    }

    /// Until when this replica may act: its Lease's ([`Fence::always`]
    /// without an election).
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// The pools' EC2 listings, one per region and endpoint, shared
    /// between them (see [`crate::warmpool::listings`]).
    pub fn listings(&self) -> &Listings {
        &self.listings
    }

    /// What the pools of each WarmPoolClass hold, and the grants of their
    /// launches: one for the whole operator, every scope's pools together.
    pub fn budgets(&self) -> &Arc<Budgets> {
        &self.budgets
    }
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
