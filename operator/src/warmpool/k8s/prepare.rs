//! The dereference stage: a WarmPool's Scheduler and that Scheduler's
//! database Secret, made into the pool's loop — kept while the WarmPool
//! and its database are the same, given a new spec in place, made afresh
//! otherwise (the old place retired when the pool moved).

use std::{sync::Arc, time::Duration};

use chrono::Utc;
use k8s_openapi::api::core::v1::Secret;
use kube::{runtime::reflector::ObjectRef, Api, ResourceExt};
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use super::{
    context::{Context, PoolState, UrlSource},
    error::ReconcileError,
    listen::DatabaseKey,
    retiring,
};
use crate::{
    backoff::Backoff,
    crd::{Problem, Scheduler, SecretKeyRef, WarmPool},
    runtime::database::read_url,
    warmpool::PoolLoop,
};

/// Makes `slot` hold a loop for `wp` on its current database: kept when
/// the WarmPool is the same (uid) and its URL's Secret unchanged (a new
/// generation's spec reaches it just before its pass, in `stages`), made
/// afresh otherwise. A WarmPool
/// being deleted keeps its loop without looking at the Scheduler or the
/// Secret. What stops the pool from running, if anything.
pub(super) async fn prepare(
    wp: &WarmPool,
    ctx: &Context,
    pool: &str,
    slot: &mut Option<PoolState>,
    deleting: bool,
) -> Result<Option<Problem>, ReconcileError> {
    let same = slot.as_ref().is_some_and(|s| s.is_of(wp));
    if same && deleting {
        return Ok(None);
    }
    let ns = crate::crd::namespace_of(wp);
    let (secret_ref, run_stale) = match database_of(wp, ctx, pool, deleting).await? {
        Ok(found) => found,
        Err(problem) => return Ok(Some(problem)),
    };
    let version = ctx.ready_caches().await.and_then(|c| {
        c.secrets()
            .get(&ObjectRef::new(&secret_ref.name).within(&ns))
            .and_then(|m| m.resource_version())
    });
    let source = UrlSource::new(secret_ref.clone(), version);
    if let (Some(state), Some(stale)) = (slot.as_mut().filter(|_| same), run_stale) {
        state.pool_loop_mut().set_run_stale(stale);
    }
    // A new spec that moves the pool (another Scheduler, region or
    // endpoint) gets a loop of its own; the old one drains the old place.
    // (A class's change reaches the pool's spec without a new generation.)
    let moving = slot.as_ref().is_some_and(|s| {
        same && s.behind(wp) && crate::warmpool::drift::moved(s.pool_loop().spec(), &wp.spec)
    });
    let kept = same && !moving;
    if let Some(state) = slot.as_mut().filter(|_| kept) {
        if state.source() == &source && source.version().is_some() {
            return Ok(None);
        }
    }
    let (url_text, url) = match read_secret(ctx, &ns, &secret_ref, &source, pool).await? {
        Ok(read) => read,
        Err(problem) => return Ok(Some(problem)),
    };
    let database: DatabaseKey = Sha256::digest(url_text.as_bytes()).into();
    if let Some(state) = slot.as_mut().filter(|_| kept) {
        if state.database() == &database {
            state.read_again(source);
            return Ok(None);
        }
        tracing::info!(pool = %pool, "the database URL changed; the pool's loop starts again on it");
    }
    // What the last writer knew: this replica's last status, or the one
    // read back from the WarmPool.
    let remembered = slot
        .as_ref()
        .filter(|_| same)
        .and_then(|s| s.last().cloned())
        .or_else(|| wp.status.clone())
        .unwrap_or_default();
    let (deletion, told) = watch::channel(None);
    let lp = new_loop(wp, ctx, pool, &url_text, told, &remembered, run_stale).await?;
    let old = slot.take().filter(|_| same);
    let retiring = retiring_of(old, moving, wp, ctx, pool, &remembered).await;
    tracing::info!(pool = %pool, generation = ?wp.metadata.generation, "pool loop made");
    let backoff = Backoff::new(
        ctx.config().tuning().backoff_base(),
        ctx.config().tuning().backoff_cap(),
    );
    *slot = Some(PoolState::new(
        wp,
        (source, database),
        lp,
        deletion,
        backoff,
        retiring,
    ));
    ctx.set_database(pool, Some((database, &url)));
    Ok(None)
}

/// A new loop for `wp` on the database at `url_text`, told of the
/// WarmPool's deletion by `told`, taking up where `remembered` left off.
async fn new_loop(
    wp: &WarmPool,
    ctx: &Context,
    pool: &str,
    url_text: &str,
    told: watch::Receiver<Option<crate::warmpool::Deletion>>,
    remembered: &crate::crd::WarmPoolStatus,
    run_stale: Option<Duration>,
) -> Result<PoolLoop, ReconcileError> {
    let mut lp = PoolLoop::new(
        &crate::crd::namespace_of(wp),
        &wp.name_any(),
        wp.spec.clone(),
        url_text,
        ctx.config().tuning().clone(),
        ctx.config().fence().clone(),
    )
    .await
    .map_err(|source| ReconcileError::Start {
        pool: pool.to_string(),
        source,
    })?
    .sharing(ctx.connections())
    .with_listings(ctx.config().listings())
    .with_deletion(told)
    .remember(wp.metadata.uid.as_deref().unwrap_or_default(), remembered);
    if let Some(m) = &ctx.config().metrics() {
        lp = lp.with_metrics(m.clone());
    }
    if let Some(stale) = run_stale {
        lp.set_run_stale(stale);
    }
    Ok(lp)
}

/// Where `wp`'s database URL is (its Scheduler's Secret), with that
/// Scheduler's stale limit, which judges whether a busy instance's run
/// still beats (the `Hung` check): its runs' heartbeats are its. Or why
/// there is none.
async fn database_of(
    wp: &WarmPool,
    ctx: &Context,
    pool: &str,
    deleting: bool,
) -> Result<Result<(SecretKeyRef, Option<Duration>), Problem>, ReconcileError> {
    let recorded = wp.status.as_ref().and_then(|s| s.database_secret.clone());
    Ok(match (scheduler_of(wp, ctx, pool).await?, recorded) {
        (Some(s), _) => {
            let stale = s
                .spec
                .handover
                .stale_seconds
                .clamp(1, crate::crd::MAX_SECONDS);
            Ok((
                s.spec.database.url_secret_ref.clone(),
                Some(Duration::from_secs(stale as u64)),
            ))
        }
        // Deleted after its Scheduler: the database it last ran on (kept,
        // with its Secret, for this) ends its rows before its instances go.
        (None, Some(recorded)) if deleting => Ok((recorded, None)),
        // No Scheduler, no database to run the pool on: the loop stops,
        // and starts afresh (clearing `Degraded`) once it is back.
        (None, _) => Err(Problem {
            reason: "SchedulerMissing".into(),
            message: format!(
                "Scheduler {}/{} does not exist",
                crate::crd::namespace_of(wp),
                wp.spec.scheduler
            ),
        }),
    })
}

/// The database URL in `secret_ref` (at `source`'s version), as text and
/// parsed, or what is wrong with it: read once for all the pools and
/// Schedulers on the Secret at this version; from the API without the
/// watch's version.
async fn read_secret(
    ctx: &Context,
    ns: &str,
    secret_ref: &SecretKeyRef,
    source: &UrlSource,
    pool: &str,
) -> Result<Result<(String, orca_db::DatabaseUrl), Problem>, ReconcileError> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client().clone(), ns);
    let read = match (&source.version(), &ctx.caches()) {
        (Some(version), Some(caches)) => {
            caches.urls().read(&secrets, ns, secret_ref, version).await
        }
        _ => read_url(&secrets, ns, secret_ref).await,
    }
    .map_err(|source| ReconcileError::Secret {
        pool: pool.to_string(),
        source,
    })?;
    Ok(read)
}

/// What the new loop's place keeps draining: the loop it replaces drains
/// where the pool ran (another Scheduler, region or endpoint); a new
/// replica takes up the places its status (`remembered`) names.
async fn retiring_of(
    old: Option<PoolState>,
    moving: bool,
    wp: &WarmPool,
    ctx: &Context,
    pool: &str,
    remembered: &crate::crd::WarmPoolStatus,
) -> retiring::Former {
    match old {
        // Only the database changed: the EC2 place is the same, and so is
        // its listing. The new loop takes the instances over; a loop of the
        // old database there would terminate what the new one launches
        // (and the runs on it, whose rows it cannot see), every pass.
        Some(old) if !moving => {
            tracing::info!(pool = %pool, "the database changed, not the place: the new loop takes the instances over");
            old.into_parts().2
        }
        Some(old) => {
            let (old_loop, old_source, mut former) = old.into_parts();
            // Back where it ran before: the pool's loop takes that place's
            // instances over again.
            former.back_to(&wp.spec, pool);
            let place =
                retiring::place_of(old_loop.spec(), old_source.secret().clone(), Utc::now());
            tracing::info!(pool = %pool, place = ?place, "the pool moved: the old place's loop terminates what it launched there");
            former.push(retiring::retire(ctx.config(), old_loop, place));
            former
        }
        None => {
            let places = retiring::remembered_places(remembered, &wp.spec);
            retiring::restore(ctx.client(), ctx.config(), wp, &places).await
        }
    }
}

/// `wp`'s Scheduler: from the watch's store in [`super::run`], else from the API.
pub(super) async fn scheduler_of(
    wp: &WarmPool,
    ctx: &Context,
    pool: &str,
) -> Result<Option<Arc<Scheduler>>, ReconcileError> {
    let ns = crate::crd::namespace_of(wp);
    if let Some(caches) = ctx.ready_caches().await {
        return Ok(caches
            .schedulers()
            .get(&ObjectRef::new(&wp.spec.scheduler).within(&ns)));
    }
    let schedulers: Api<Scheduler> = Api::namespaced(ctx.client().clone(), &ns);
    ctx.config()
        .fence()
        .check()
        .map_err(|source| ReconcileError::Fenced {
            pool: pool.to_string(),
            source,
        })?;
    schedulers
        .get_opt(&wp.spec.scheduler)
        .await
        .map(|s| s.map(Arc::new))
        .map_err(|source| ReconcileError::Kube {
            pool: pool.to_string(),
            source,
        })
}
