//! One reconcile of a WarmPool, stage by stage: the fence and the
//! finalizer → dereference the Scheduler and its Secret into a loop
//! ([`super::prepare`]) → one pass of the loop (observe → plan → act) →
//! the places it ran before → write back ([`super::report`]).

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use kube::{runtime::controller::Action, Resource, ResourceExt};

use super::{
    class,
    config::{key, FINALIZER},
    context::{Context, PoolState},
    deletion,
    error::ReconcileError,
    finalizer::{self, orphan},
    prepare::prepare,
    report::{degraded, record_place, write_back},
};
use crate::{
    backoff::PerObject,
    by_object::locked,
    crd::{OnDelete, WarmPool},
    runtime::{guard, server::Progress, shell::Reconciler},
    warmpool::Deletion,
};

/// The WarmPool controller's part in the controllers' shell
/// ([`crate::runtime::shell`]): its stages are `run_stages`, a success
/// starts the pool's back-off over, and a panic drops the pool's loop.
impl Reconciler for Context {
    const KIND: &'static str = "WarmPool";
    type Object = WarmPool;
    type Error = ReconcileError;

    async fn stages(ctx: Arc<Self>, wp: Arc<WarmPool>) -> Result<Action, ReconcileError> {
        let (ns, name) = (crate::crd::namespace_of(wp.as_ref()), wp.name_any());
        let action = run_stages(wp, ctx.clone()).await?;
        ctx.backoff().succeeded(&ns, &name);
        Ok(action)
    }

    fn stopped(&self, wp: &WarmPool, stop: guard::Stopped) -> ReconcileError {
        let pool = key(&crate::crd::namespace_of(wp), &wp.name_any());
        // Its loop may be half-changed: the next pass makes a new one from
        // the status.
        self.forget(&pool);
        ReconcileError::Stopped { pool, source: stop }
    }

    fn stopped_of(error: &ReconcileError) -> Option<&guard::Stopped> {
        match error {
            ReconcileError::Stopped { source, .. } => Some(source),
            _ => None,
        }
    }

    fn stage(error: &ReconcileError) -> &'static str {
        error.stage()
    }

    async fn degraded(&self, wp: &WarmPool, reason: &'static str, message: String) {
        if let Err(e) = degraded(self, wp, reason, message).await {
            tracing::warn!(pool = %key(&crate::crd::namespace_of(wp), &wp.name_any()), reason,
                error = %e, "cannot say it in the status");
        }
    }

    fn progress(&self) -> &Progress {
        self.config().progress()
    }

    fn backoff(&self) -> &PerObject {
        self.backoff()
    }

    fn count_failed(&self, namespace: &str, name: &str, stage: &'static str) {
        if let Some(m) = &self.config().metrics() {
            m.reconcile_failed(&key(namespace, name), stage);
        }
    }
}

/// One pass of `wp`'s pool on its Scheduler's database, once `wp` has the
/// finalizer; a missing Scheduler or a bad Secret is a `Degraded` status
/// instead. A WarmPool being deleted is dealt with as its `spec.onDelete`
/// says. The fence is checked here, once, before anything is done. Each
/// stage's future is boxed: held in this one they made it larger than a
/// thread's stack in a debug build.
pub(super) async fn run_stages(
    wp: Arc<WarmPool>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let ns = crate::crd::namespace_of(&*wp);
    let pool = key(&ns, &wp.name_any());
    ctx.config()
        .fence()
        .check()
        .map_err(|source| ReconcileError::Fenced {
            pool: pool.clone(),
            source,
        })?;
    ctx.forget_gone();
    let wp = ctx.with_places_written(&pool, wp).await;
    let deleted = match &wp.meta().deletion_timestamp {
        None => None,
        Some(_) if !finalizer::has(&wp) => {
            // Nothing of this operator's left to hold it.
            ctx.forget(&pool);
            return Ok(Action::await_change());
        }
        Some(_)
            if wp.spec.on_delete == OnDelete::Orphan
                && Box::pin(class::may_leave(&wp, &ctx, &pool)).await? =>
        {
            return orphan(&wp, &ctx, &pool).await;
        }
        Some(since) => {
            Some(DateTime::from_timestamp(since.0.as_second(), 0).unwrap_or_else(Utc::now))
        }
    };
    // With a class, every stage from here on sees the spec the class
    // makes of the pool; one the class refuses runs no loop.
    let wp = match class::effective(wp.clone(), &ctx, &pool, deleted.is_some()).await? {
        Ok(wp) => wp,
        Err(refusal) => {
            ctx.forget(&pool);
            degraded(&ctx, &wp, refusal.reason(), refusal.message().to_string()).await?;
            return Ok(Action::requeue(Duration::from_secs(30)));
        }
    };
    // The drain time-out within the class's bound as it is now.
    let deletion = deleted.map(|since| Deletion::new(since, wp.spec.drain_timeout_seconds, false));
    if deletion.is_none() && !ctx.has_finalizer(&wp) {
        // Before anything is launched: a deletion then waits for the
        // instances.
        finalizer::add(ctx.client(), ctx.config().fence(), &wp)
            .await
            .map_err(|e| ReconcileError::finalizer(&pool, e))?;
        if let Some(uid) = &wp.metadata.uid {
            locked(ctx.finalized()).insert(uid.clone());
        }
        tracing::info!(pool = %pool, finalizer = FINALIZER, "finalizer added");
    }
    let slot = ctx.slot(&pool);
    let mut guard = slot.lock().await;
    let prepared = Box::pin(prepare(&wp, &ctx, &pool, &mut guard, deletion.is_some()));
    if let Some(problem) = prepared.await? {
        *guard = None;
        drop(guard);
        ctx.forget(&pool);
        if let Some(deletion) = deletion {
            return Box::pin(deletion::without_database(
                &wp, &ctx, &pool, deletion, problem,
            ))
            .await;
        }
        degraded(&ctx, &wp, &problem.reason, problem.message).await?;
        return Ok(Action::requeue(Duration::from_secs(30)));
    }
    let Some(state) = guard.as_mut() else {
        return Ok(Action::requeue(Duration::from_secs(30)));
    };
    if deletion.is_none() {
        Box::pin(state.follow(&wp, &pool)).await;
    }
    tell_loop(&wp, &ctx, &pool, state, deletion);
    if deletion.is_none() {
        Box::pin(record_place(&wp, &ctx, &pool, state)).await?;
    }
    let outcome = Box::pin(state.pool_loop_mut().pass(Utc::now())).await;
    for e in Box::pin(state.pass_former(ctx.client(), ctx.config(), &wp)).await {
        ctx.say(&wp, &e).await;
    }
    Box::pin(write_back(&wp, &ctx, &pool, state, outcome)).await
}

/// Tells the loop what this reconcile read: its class's book (a handle
/// made when the loop's class changes), the deletion (or none) and the
/// drain annotation.
fn tell_loop(
    wp: &WarmPool,
    ctx: &Context,
    pool: &str,
    state: &mut PoolState,
    deletion: Option<Deletion>,
) {
    let class = wp.spec.class_ref.as_ref().map(|c| c.name.as_str());
    if state.pool_loop().budget_class() != class {
        let ns = crate::crd::namespace_of(wp);
        state
            .pool_loop_mut()
            .set_budget(class.map(|c| ctx.config().budgets().budget(c, pool, &ns)));
    }
    state.tell_deletion(deletion);
    state.pool_loop_mut().set_drain(
        wp.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::warmpool::DRAIN))
            .map(|v| crate::warmpool::drain_of(v))
            .unwrap_or_default(),
    );
}
