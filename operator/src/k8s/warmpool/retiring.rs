//! Where a pool ran before (docs/operations.md#drift-replacing-what-is-out-of-date):
//! a WarmPool whose `spec.scheduler`, `region` or `endpoint` changes lists
//! and launches in the new place,
//! and its instances in the old one would vanish from its view: never
//! counted, never terminated. Instead the old place keeps a loop of its own
//! (its old spec, its old database and EC2 client) in deletion mode: its
//! idle and booting instances are terminated at once through the race-free
//! end, its busy ones once their run is over, at most `drainTimeoutSeconds`
//! after the move; once EC2 lists none of them, it goes. The places are in
//! `status.retiring`, so a restarted operator takes them up again.

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt};
use tokio::sync::watch;

use super::config::PoolControllerConfig;
use crate::{
    crd::{FormerPlace, SecretKeyRef, WarmPool, WarmPoolSpec},
    k8s::database::read_url,
    pool::{Deletion, PoolEvent, PoolLoop},
};

/// A former place's loop, in deletion mode.
pub(super) struct Retiring {
    pub(super) place: FormerPlace,
    lp: PoolLoop,
    // Held: the loop reads its deletion from it.
    _deletion: watch::Sender<Option<Deletion>>,
}

/// The place `spec` ran on, with its database's Secret, left at `since`.
pub(super) fn place_of(
    spec: &WarmPoolSpec,
    secret: SecretKeyRef,
    since: DateTime<Utc>,
) -> FormerPlace {
    FormerPlace {
        scheduler: spec.scheduler.clone(),
        region: spec.region.clone(),
        endpoint: spec.endpoint.clone(),
        database_secret: secret,
        since: since.to_rfc3339(),
    }
}

/// `lp`, the loop of `place`, put in deletion mode: it terminates what it
/// launched there.
pub(super) fn retire(config: &PoolControllerConfig, lp: PoolLoop, place: FormerPlace) -> Retiring {
    let (tell, told) = watch::channel(Some(deletion_of(&place, lp.spec())));
    let mut lp = lp;
    // It launches nothing, and the pool's count in its class is the new
    // loop's to report, not the old place's.
    lp.set_budget(None);
    let lp = lp
        .with_deletion(told)
        .with_fence(config.fence.clone())
        .with_listings(&config.listings)
        .without_metrics();
    Retiring {
        place,
        lp,
        _deletion: tell,
    }
}

fn deletion_of(place: &FormerPlace, spec: &WarmPoolSpec) -> Deletion {
    Deletion {
        since: DateTime::parse_from_rfc3339(&place.since)
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_else(|_| Utc::now()),
        drain_timeout_seconds: spec.drain_timeout_seconds,
    }
}

/// The loops of `wp`'s former places its status names, as a restarted
/// operator takes them up (each on its database, read from its Secret).
/// A place whose database cannot be had now is left for a later pass.
pub(super) async fn restore(
    client: &kube::Client,
    config: &PoolControllerConfig,
    wp: &WarmPool,
    places: &[FormerPlace],
) -> Vec<Retiring> {
    let ns = crate::crd::namespace_of(wp);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let mut out = Vec::new();
    for place in places {
        let spec = WarmPoolSpec {
            scheduler: place.scheduler.clone(),
            region: place.region.clone(),
            endpoint: place.endpoint.clone(),
            ..wp.spec.clone()
        };
        // Where the pool runs now (a place an older operator recorded for
        // a change of database alone): its instances are the pool's own
        // loop's, and a second loop there would terminate them.
        if !crate::pool::drift::moved(&spec, &wp.spec) {
            tracing::info!(pool = %wp.name_any(), place = ?place,
                "a former place that is where the pool runs now: left to the pool's loop");
            continue;
        }
        let url = match read_url(&secrets, &ns, &place.database_secret).await {
            Ok(Ok((text, _))) => text,
            Ok(Err(problem)) => {
                tracing::warn!(pool = %wp.name_any(), place = ?place, reason = %problem.reason,
                    "a former place's database cannot be had now: {}", problem.message);
                continue;
            }
            Err(e) => {
                tracing::warn!(pool = %wp.name_any(), place = ?place, error = %e,
                    "a former place's Secret cannot be read now");
                continue;
            }
        };
        match PoolLoop::new(&ns, &wp.name_any(), spec, &url, config.tuning.clone()).await {
            Ok(lp) => out.push(retire(config, lp.not_listening(), place.clone())),
            Err(e) => tracing::warn!(pool = %wp.name_any(), error = %e, "a former place's loop"),
        }
    }
    out
}

/// One pass of each former place's loop; those with nothing left go. Their
/// events, each saying which place, for the WarmPool.
pub(super) async fn pass_all(wp: &WarmPool, retiring: &mut Vec<Retiring>) -> Vec<PoolEvent> {
    let mut events = Vec::new();
    let mut done = Vec::new();
    for (at, r) in retiring.iter_mut().enumerate() {
        let where_ = format!(
            "{} in {}{}",
            r.place.scheduler,
            r.place.region,
            r.place
                .endpoint
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        );
        match r.lp.pass(Utc::now()).await {
            Ok(report) => {
                events.extend(report.events.iter().map(|e| PoolEvent {
                    message: format!("where the pool ran before ({where_}): {}", e.message),
                    ..e.clone()
                }));
                if report.deleted {
                    tracing::info!(pool = %wp.name_any(), place = %where_, "nothing left where the pool ran before");
                    done.push(at);
                }
            }
            Err(e) => {
                tracing::warn!(pool = %wp.name_any(), place = %where_, error = %e, "a former place's pass failed");
            }
        }
    }
    for at in done.into_iter().rev() {
        retiring.remove(at);
    }
    events
}
