//! The WarmPool's finalizer [`FINALIZER`], through the shared
//! [`crate::runtime::finalizer`] (JSON patches that test what they change).

use kube::{runtime::controller::Action, Client, ResourceExt};

use super::{
    config::{pools_api, FINALIZER},
    context::Context,
    error::ReconcileError,
};
pub use crate::runtime::finalizer::FinalizerError;
use crate::{
    crd::{DatabaseUrlIn, WarmPool},
    fence::{Fence, MaybeFenced},
    runtime::finalizer,
    warmpool::{
        ec2::Ec2Config,
        ssm::{self, Ssm},
        PoolEvent,
    },
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
    ctx: &Context,
    pool: &str,
) -> Result<Action, ReconcileError> {
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
    ctx: &Context,
    pool: &str,
    message: &str,
) -> Result<Action, ReconcileError> {
    ctx.forget(pool);
    let removed = remove(ctx.client(), ctx.config().fence(), wp)
        .await
        .map_err(|e| ReconcileError::finalizer(pool, e))?;
    if removed {
        tracing::info!(pool = %pool, on_delete = ?wp.spec.on_delete, "finalizer removed");
        let event = PoolEvent::new("Deleted", message.into(), false);
        ctx.say(wp, &event).await;
    }
    Ok(Action::await_change())
}

/// The last of `wp`'s instances is gone (`onDelete: Terminate`): its
/// Scheduler's database URL parameter in its region is deleted, unless
/// another WarmPool of that Scheduler may still launch with it there (one
/// whose region is not known yet counts as one). A parameter that cannot
/// be deleted is said in a Warning Event, and holds nothing up.
pub(super) async fn release_parameter(wp: &WarmPool, ctx: &Context, pool: &str) {
    let launch = &wp.spec.launch;
    if launch.database_url_file.is_some() || launch.database_url_in != DatabaseUrlIn::Parameter {
        return;
    }
    // Without the watches' store nothing says who else uses it: kept.
    let Some(caches) = &ctx.caches() else {
        return;
    };
    let namespace = crate::crd::namespace_of(wp);
    // Another pool of the same Scheduler in the same region (or in one not
    // known) may read the parameter: it is kept.
    let shared = caches.pools().state().iter().any(|other| {
        let status = other.status.as_ref();
        let region = Some(other.spec.region.as_str())
            .filter(|r| !r.is_empty())
            .or(status.and_then(|s| s.class_region.as_deref()));
        other.uid() != wp.uid()
            && other.namespace().as_deref() == Some(namespace.as_str())
            && other.spec.scheduler == wp.spec.scheduler
            && region.is_none_or(|r| r == wp.spec.region)
    });
    if shared {
        return;
    }
    let name = ssm::parameter_name(
        ctx.config().tuning().cluster(),
        &namespace,
        &wp.spec.scheduler,
    );
    let ssm = Ssm::new(
        &Ec2Config::new(&wp.spec.region, wp.spec.ssm_endpoint.as_deref()),
        ctx.config().fence().clone(),
    )
    .await;
    match ssm.delete(&name).await {
        Ok(()) => {}
        Err(e) if e.is_fenced() => {}
        Err(e) => {
            tracing::warn!(pool = %pool, error = %e, "the database URL parameter was not deleted");
            let event = PoolEvent::new(
                "DatabaseUrlParameter",
                format!("the database URL parameter was left: {e}; delete it by hand"),
                true,
            );
            ctx.say(wp, &event).await;
        }
    }
}
