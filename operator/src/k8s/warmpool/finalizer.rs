//! The WarmPool's finalizer [`FINALIZER`], through the shared
//! [`crate::k8s::finalizer`] (JSON patches that test what they change).

use kube::{runtime::controller::Action, Client};

use super::{
    config::{pools_api, FINALIZER},
    context::PoolContext,
    error::ControllerError,
};
pub use crate::k8s::finalizer::FinalizerError;
use crate::{
    crd::WarmPool,
    k8s::{finalizer, leader::Fence},
    pool::PoolEvent,
};

pub(super) fn has(wp: &WarmPool) -> bool {
    finalizer::has(&wp.metadata, FINALIZER)
}

/// Adds [`FINALIZER`] to `wp`; a conflict is retried by the next
/// reconcile.
pub(super) async fn add(
    client: &Client,
    fence: &Fence,
    wp: &WarmPool,
) -> Result<(), FinalizerError> {
    finalizer::add(&pools_api(client, wp), fence, &wp.metadata, FINALIZER)
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
    finalizer::remove(&pools_api(client, wp), fence, &wp.metadata, FINALIZER).await
}

/// `wp` is being deleted with `onDelete: Orphan`: its loop goes and the
/// finalizer is removed at once.
pub(super) async fn orphan(
    wp: &WarmPool,
    ctx: &PoolContext,
    pool: &str,
) -> Result<Action, ControllerError> {
    let_go(
        wp,
        ctx,
        pool,
        "onDelete Orphan: the instances are left running; their agents power them off \
         once idle for idleSeconds and a minute",
    )
    .await
}

/// Drops `wp`'s loop and removes the finalizer; if this call removed it,
/// says so in a `Deleted` Event with `message`.
pub(super) async fn let_go(
    wp: &WarmPool,
    ctx: &PoolContext,
    pool: &str,
    message: &str,
) -> Result<Action, ControllerError> {
    ctx.forget(pool);
    let removed = remove(&ctx.client, &ctx.config.fence, wp)
        .await
        .map_err(|e| ControllerError::finalizer(pool, e))?;
    if removed {
        tracing::info!(pool = %pool, on_delete = ?wp.spec.on_delete, "finalizer removed");
        let event = PoolEvent {
            reason: "Deleted",
            message: message.into(),
            warning: false,
        };
        ctx.say(wp, &event).await;
    }
    Ok(Action::await_change())
}
