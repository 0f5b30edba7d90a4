//! The WarmPool's finalizer [`FINALIZER`], through the shared
//! [`crate::k8s::finalizer`] (JSON patches that test what they change).

use kube::{Client, ResourceExt};

pub use crate::k8s::finalizer::FinalizerError;
use crate::{
    crd::WarmPool,
    k8s::{finalizer, leader::Fence},
};

/// The WarmPool controller's finalizer: the WarmPool stays until its
/// instances are terminated (`onDelete: Terminate`) or let go (`Orphan`).
pub const FINALIZER: &str = "orca.dev/warm-pool";

pub(super) fn has(wp: &WarmPool) -> bool {
    wp.finalizers().iter().any(|f| f == FINALIZER)
}

/// Adds [`FINALIZER`] to `wp`; a conflict is retried by the next
/// reconcile.
pub(super) async fn add(
    client: &Client,
    fence: &Fence,
    wp: &WarmPool,
) -> Result<(), FinalizerError> {
    finalizer::add(
        &super::pools_api(client, wp),
        fence,
        &wp.metadata,
        FINALIZER,
    )
    .await
    .map(|_| ())
}

/// Removes [`FINALIZER`] from the WarmPool `wp` is (its uid); whether this
/// call removed it.
pub(super) async fn remove(
    client: &Client,
    fence: &Fence,
    wp: &WarmPool,
) -> Result<bool, FinalizerError> {
    finalizer::remove(
        &super::pools_api(client, wp),
        fence,
        &wp.metadata,
        FINALIZER,
    )
    .await
}
