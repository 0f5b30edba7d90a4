//! The write-back stage: a pass's Events and status, and `Degraded` when
//! no pass could run.

use chrono::Utc;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{runtime::controller::Action, Client, ResourceExt};

use super::{
    config::{key, pools_api},
    context::{Context, PoolState},
    error::ReconcileError,
    finalizer::{let_go, release_parameter},
};
use crate::fence::MaybeFenced;
use crate::{
    crd::{set_degraded, WarmPool, WarmPoolStatus},
    fence::Fence,
    runtime::status::{write_status, StatusWriteError},
    warmpool::{PassReport, PoolError, PoolEvent},
};

/// Writes a pass back: its Events, its status (when it changed), and the
/// finalizer's removal once a deleted pool's instances are all gone; when
/// to look again.
pub(super) async fn write_back(
    wp: &WarmPool,
    ctx: &Context,
    pool: &str,
    state: &mut PoolState,
    outcome: Result<PassReport, PoolError>,
) -> Result<Action, ReconcileError> {
    let fence = &ctx.config().fence();
    let (mut status, events, wait) = match outcome {
        Ok(report) => {
            let wait = if report.throttled() {
                state.backed_off()
            } else {
                state.went_through();
                ctx.config().tuning().resync()
            };
            if report.deleted() && state.former().is_empty() {
                for e in report.events() {
                    ctx.say(wp, e).await;
                }
                // None of its instances left: the finalizer goes.
                release_parameter(wp, ctx, pool).await;
                return let_go(
                    wp,
                    ctx,
                    pool,
                    "onDelete Terminate: EC2 lists none of the pool's instances pending, \
                     running, stopping or stopped; the finalizer is removed",
                )
                .await;
            }
            let (status, events) = report.into_status_and_events();
            (status, events, wait)
        }
        Err(e) if e.is_fenced() => {
            // Not a failure to show: this replica may not write either.
            return Err(ReconcileError::Start {
                pool: pool.to_string(),
                source: e,
            });
        }
        Err(e) => {
            tracing::warn!(pool = %pool, error = %e, "pool pass failed");
            let message = e.to_string();
            let reason = e.degraded_reason();
            let mut status = state.last().cloned().unwrap_or_default();
            mark_degraded(&mut status, reason, &message);
            let event = PoolEvent::new(reason, message, true);
            (status, vec![event], state.backed_off())
        }
    };
    status.observed_generation = wp.metadata.generation;
    let secret = state.source().secret().clone();
    let before = state.last().and_then(|s| s.place.as_ref());
    status.place = Some(super::retiring::here(
        state.pool_loop().spec(),
        secret.clone(),
        before,
    ));
    status.database_secret = Some(secret);
    status.retiring = state.former().places();
    // The spec here is the class's: where the instances are.
    if wp.spec.class_ref.is_some() {
        status.class_region = Some(wp.spec.region.clone());
        status.class_endpoint = wp.spec.endpoint.clone();
    }
    for e in &events {
        ctx.say(wp, e).await;
    }
    note_degraded(ctx, pool, &status);
    if let (Some(m), Some(o), Some(st)) = (
        &ctx.config().metrics(),
        &wp.spec.objective,
        &status.objective,
    ) {
        let share = |p: Option<f64>| p.map(|p| p / 100.0);
        m.objective(
            pool,
            share(st.attained_percent),
            share(st.day_attained_percent),
            o.goal(),
        );
    }
    if state.last() != Some(&status) {
        apply_status(ctx.client(), fence, wp, &status)
            .await
            .map_err(|e| ReconcileError::status(pool, e))?;
        state.wrote(status);
    }
    Ok(Action::requeue(wait))
}

/// Records where the loop runs (`status.place`, with the places it left,
/// `status.retiring`) before its first pass there. Whatever a pass
/// launches is then where the status says the pool runs or ran, and a
/// replica that takes over after the pool moved again drains it; a status
/// that cannot be written (the operator's RBAC lost `warmpools/status`, the
/// API server down) stops the pass, and nothing is launched where no
/// status says.
pub(super) async fn record_place(
    wp: &WarmPool,
    ctx: &Context,
    pool: &str,
    state: &mut PoolState,
) -> Result<(), ReconcileError> {
    let known = state.last().or(wp.status.as_ref());
    let before = known.and_then(|s| s.place.as_ref());
    let secret = state.source().secret().clone();
    let here = super::retiring::here(state.pool_loop().spec(), secret.clone(), before);
    if before == Some(&here) {
        return Ok(());
    }
    let mut status = known.cloned().unwrap_or_default();
    status.place = Some(here);
    status.database_secret = Some(secret);
    status.retiring = state.former().places();
    if wp.spec.class_ref.is_some() {
        status.class_region = Some(wp.spec.region.clone());
        status.class_endpoint = wp.spec.endpoint.clone();
    }
    apply_status(ctx.client(), ctx.config().fence(), wp, &status)
        .await
        .map_err(|e| ReconcileError::status(pool, e))?;
    tracing::info!(pool = %pool, "where the pool runs is recorded before its first pass there");
    state.wrote(status);
    Ok(())
}

/// Writes `status` whole (server-side apply, see [`write_status`]): a
/// field it no longer has (capacity errors that are over) is removed.
pub(super) async fn apply_status(
    client: &Client,
    fence: &Fence,
    wp: &WarmPool,
    status: &WarmPoolStatus,
) -> Result<(), StatusWriteError> {
    write_status(&pools_api(client, wp), &wp.name_any(), status, fence)
        .await
        .map(|_| ())
}

/// `orca_pool_degraded` as `status` says.
fn note_degraded(ctx: &Context, pool: &str, status: &WarmPoolStatus) {
    if let Some(m) = &ctx.config().metrics() {
        let degraded = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Degraded" && c.status == "True");
        m.degraded(pool, degraded);
    }
}

/// `Degraded` True for `reason`; its transition time stays while it was
/// True already (a pass failing again does not move it).
pub(super) fn mark_degraded(status: &mut WarmPoolStatus, reason: &str, message: &str) {
    let now = Time(
        k8s_openapi::jiff::Timestamp::from_second(Utc::now().timestamp())
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    );
    set_degraded(&mut status.conditions, reason, message, now, None);
}

/// A problem before any pass (no Scheduler, no Secret): `Degraded`.
pub(super) async fn degraded(
    ctx: &Context,
    wp: &WarmPool,
    reason: &str,
    message: String,
) -> Result<(), ReconcileError> {
    let mut status = wp.status.clone().unwrap_or_default();
    status.observed_generation = wp.metadata.generation;
    // The message too: a deletion adds what to do about it.
    let changed = !crate::crd::degraded_already(&status.conditions, reason, &message);
    let pool = key(&crate::crd::namespace_of(wp), &wp.name_any());
    if changed {
        mark_degraded(&mut status, reason, &message);
    }
    note_degraded(ctx, &pool, &status);
    if changed {
        let fence = &ctx.config().fence();
        apply_status(ctx.client(), fence, wp, &status)
            .await
            .map_err(|e| ReconcileError::status(&pool, e))?;
        let event = PoolEvent::new("Degraded", message, true);
        ctx.say(wp, &event).await;
    }
    Ok(())
}
