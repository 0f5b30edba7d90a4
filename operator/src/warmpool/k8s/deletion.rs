//! A WarmPool deleted with `onDelete: Terminate` whose database cannot be
//! had — its Secret was removed by hand from under the finalizer that keeps
//! it, its database is gone for good: busy instances cannot be told from
//! idle ones without the rows, so nothing is terminated before
//! `drainTimeoutSeconds` after the deletion (runs that end by then are not
//! lost), and then every instance EC2 lists with the pool's tags is, by EC2
//! alone, where it runs, where its status says it ran last
//! (`status.place`: moved while its loop could not run) and in every
//! former place it was still draining (`status.retiring`). The finalizer goes once EC2 lists none in any of
//! them: the WarmPool is never stuck for good while EC2 answers (a place
//! that does not answer keeps it, as a leak would be worse), and no
//! instance is left behind. Until then it is `Degraded`, saying when that
//! will be and what would let the runs finish.

use std::time::Duration;

use chrono::Utc;
use kube::runtime::controller::Action;

use super::{
    context::Context,
    error::ReconcileError,
    finalizer::{let_go, release_parameter},
    report::degraded,
    retiring::{present_in, recorded_places},
};
use crate::{
    crd::{spec_seconds, Problem, WarmPool},
    warmpool::{Deletion, PoolEvent},
};

/// One pass of the teardown without the pool's database; see the module.
pub(super) async fn without_database(
    wp: &WarmPool,
    ctx: &Context,
    pool: &str,
    deletion: Deletion,
    problem: Problem,
) -> Result<Action, ReconcileError> {
    let ec2_error = |source| ReconcileError::Ec2 {
        pool: pool.to_string(),
        source,
    };
    // Where it runs now, and each former place it was still draining,
    // whose loops went with the database.
    let mut places = Vec::new();
    for at in places_of(wp) {
        let (ec2, ids) = present_in(ctx.config(), wp, at).await.map_err(ec2_error)?;
        if !ids.is_empty() {
            places.push((ec2, ids));
        }
    }
    let present: Vec<String> = places.iter().flat_map(|(_, ids)| ids.clone()).collect();
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
    let due = deletion.since() + spec_seconds(deletion.drain_timeout_seconds());
    let now = Utc::now();
    if now >= due {
        for (ec2, ids) in &places {
            ec2.terminate(ids).await.map_err(ec2_error)?;
        }
        tracing::warn!(pool = %pool, instances = ?present, reason = %problem.reason,
            "terminated without the pool's database");
        let event = PoolEvent::new(
            "Terminated",
            format!(
                "{} instance(s) terminated without the pool's database ({}), \
                 drainTimeoutSeconds after the deletion: {}",
                present.len(),
                problem.message,
                present.join(", ")
            ),
            true,
        );
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

/// The places of `wp`'s instances: its Scheduler, region and endpoint now,
/// where its status says it ran last (a pool moved while its loop could
/// not run: its old place was never drained), then those of
/// `status.retiring`.
fn places_of(wp: &WarmPool) -> Vec<(&str, &str, Option<&str>)> {
    let now = (
        wp.spec.scheduler.as_str(),
        wp.spec.region.as_str(),
        wp.spec.endpoint.as_deref(),
    );
    recorded_places(wp, vec![now])
}
