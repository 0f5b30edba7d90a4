//! A WarmPool deleted with `onDelete: Terminate` whose database cannot be
//! had — its Secret was removed by hand from under the finalizer that keeps
//! it, its database is gone for good: busy instances cannot be told from
//! idle ones without the rows, so nothing is terminated before
//! `drainTimeoutSeconds` after the deletion (runs that end by then are not
//! lost), and then every instance EC2 lists with the pool's tags is, by EC2
//! alone. The finalizer goes once EC2 lists none: the WarmPool is never
//! stuck for good, and no instance is left behind. Until then it is
//! `Degraded`, saying when that will be and what would let the runs finish.

use std::time::Duration;

use chrono::Utc;
use kube::{runtime::controller::Action, ResourceExt};

use super::{
    context::Context,
    error::ReconcileError,
    finalizer::{let_go, release_parameter},
    report::degraded,
};
use crate::{
    crd::{spec_seconds, Problem, WarmPool},
    warmpool::{
        ec2::{Ec2, Ec2Config, Ownership},
        Deletion, PoolEvent,
    },
};

/// One pass of the teardown without the pool's database; see the module.
pub(super) async fn without_database(
    wp: &WarmPool,
    ctx: &Context,
    pool: &str,
    deletion: Deletion,
    problem: Problem,
) -> Result<Action, ReconcileError> {
    let ns = crate::crd::namespace_of(wp);
    let tuning = &ctx.config().tuning;
    let owner = Ownership::new(
        &ns,
        &wp.name_any(),
        &wp.spec.scheduler,
        &tuning.operator,
        &tuning.cluster,
    );
    let ec2 = Ec2::new(
        &Ec2Config::new(&wp.spec.region, wp.spec.endpoint.as_deref()),
        ctx.config().fence.clone(),
    )
    .await;
    let ec2_error = |source| ReconcileError::Ec2 {
        pool: pool.to_string(),
        source,
    };
    let present: Vec<String> = ec2
        .describe(&owner)
        .await
        .map_err(ec2_error)?
        .into_iter()
        .filter(|i| i.state.is_present())
        .map(|i| i.id)
        .collect();
    if present.is_empty() {
        release_parameter(wp, ctx, pool).await;
        return let_go(
            wp,
            ctx,
            pool,
            "onDelete Terminate: EC2 lists none of the pool's instances pending, running, \
             stopping or stopped; the finalizer is removed",
        )
        .await;
    }
    let due = deletion.since + spec_seconds(deletion.drain_timeout_seconds);
    let now = Utc::now();
    if now >= due {
        ec2.terminate(&present).await.map_err(ec2_error)?;
        tracing::warn!(pool = %pool, instances = ?present, reason = %problem.reason,
            "terminated without the pool's database");
        let event = PoolEvent {
            reason: "Terminated",
            message: format!(
                "{} instance(s) terminated without the pool's database ({}), \
                 drainTimeoutSeconds after the deletion: {}",
                present.len(),
                problem.message,
                present.join(", ")
            ),
            warning: true,
        };
        ctx.say(wp, &event).await;
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let message = format!(
        "{}; without the pool's database its {} instance(s) are terminated at {} \
         (drainTimeoutSeconds after the deletion), busy or not: restore the Secret \
         to let their runs finish first, or set spec.onDelete to Orphan to leave them",
        problem.message,
        present.len(),
        due.to_rfc3339()
    );
    degraded(ctx, wp, &problem.reason, message).await?;
    let wait = (due - now).to_std().unwrap_or(Duration::ZERO);
    Ok(Action::requeue(
        wait.clamp(Duration::from_secs(1), Duration::from_secs(30)),
    ))
}
