//! What a pass of the Scheduler controller says: an Event per step, and
//! the status, written whole.

use kube::{Api, Resource, ResourceExt};
use tracing::{info, warn};

use super::{context::Context, error::StatusError};
use crate::{
    crd::{Scheduler, SchedulerStatus},
    runtime::status::{post_event, write_status},
    scheduler::Decision,
};

/// An Event per step, on the Scheduler. An Event that can't be posted is
/// logged: the step happened all the same. Behind the fence, none is.
pub(super) async fn publish(scheduler: &Scheduler, ctx: &Context, decision: &Decision) {
    let reference = scheduler.object_ref(&());
    for e in decision.events() {
        info!(scheduler = %scheduler.name_any(), reason = %e.reason(), "{}", e.message());
        let posted = post_event(
            ctx.recorder(),
            ctx.fence(),
            &reference,
            e.is_warning(),
            e.reason(),
            e.message(),
        )
        .await;
        if let Err(fenced) = posted {
            warn!(scheduler = %scheduler.name_any(), reason = %e.reason(), error = %fenced, "event not posted");
            return;
        }
    }
}

/// Writes `status` whole (see [`write_status`]).
pub(super) async fn apply_status(
    scheduler: &Scheduler,
    ctx: &Context,
    ns: &str,
    status: &SchedulerStatus,
) -> Result<(), StatusError> {
    let name = scheduler.name_any();
    let api = Api::<Scheduler>::namespaced(ctx.client().clone(), ns);
    let version = write_status(&api, &name, status, ctx.fence())
        .await
        .map_err(|source| StatusError::new(name.clone(), source))?;
    ctx.memory().wrote(
        ns,
        &name,
        scheduler.metadata.resource_version.as_deref(),
        version,
        status,
    );
    Ok(())
}
