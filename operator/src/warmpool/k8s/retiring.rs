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

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt};
use tokio::sync::watch;

use super::config::PoolControllerConfig;
use crate::{
    crd::{FormerPlace, SecretKeyRef, WarmPool, WarmPoolSpec},
    runtime::database::read_url,
    warmpool::{Deletion, PoolEvent, PoolLoop},
};

/// A former place's loop, in deletion mode.
pub(super) struct Retiring {
    place: FormerPlace,
    lp: PoolLoop,
    // Held: the loop reads its deletion from it.
    _deletion: watch::Sender<Option<Deletion>>,
}

impl Retiring {
    /// The former place this loop drains.
    pub(super) fn place(&self) -> &FormerPlace {
        &self.place
    }
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

/// Whether `place` is where `spec` runs a pool: the same Scheduler,
/// region and endpoint (the instances one listing sees).
pub(super) fn is_where(place: &FormerPlace, spec: &WarmPoolSpec) -> bool {
    place.scheduler == spec.scheduler
        && place.region == spec.region
        && place.endpoint == spec.endpoint
}

/// Where `spec` runs the pool now, on the database of `secret`: since
/// `before` said so if it is the same place, else from now.
pub(super) fn here(
    spec: &WarmPoolSpec,
    secret: SecretKeyRef,
    before: Option<&FormerPlace>,
) -> FormerPlace {
    match before {
        Some(b) if is_where(b, spec) && b.database_secret == secret => b.clone(),
        _ => place_of(spec, secret, Utc::now()),
    }
}

/// The places a new loop of `wp` (`spec` as it runs now) takes up from
/// its status: those it was draining, and the one it last ran in if the
/// spec moved it away from there meanwhile (while no operator ran, or
/// while it was being deleted); none where it runs now, whose instances
/// are the new loop's own.
pub(super) fn remembered_places(
    status: &crate::crd::WarmPoolStatus,
    spec: &WarmPoolSpec,
) -> Vec<FormerPlace> {
    let mut places: Vec<FormerPlace> = status.retiring.clone();
    if let Some(last) = &status.place {
        if !is_where(last, spec) && !places.iter().any(|p| same(p, last)) {
            places.push(FormerPlace {
                since: Utc::now().to_rfc3339(),
                ..last.clone()
            });
        }
    }
    places.retain(|p| !is_where(p, spec));
    places
}

fn same(a: &FormerPlace, b: &FormerPlace) -> bool {
    a.scheduler == b.scheduler && a.region == b.region && a.endpoint == b.endpoint
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
        left_behind: true,
    }
}

/// The loops of `wp`'s former places `places` (its status's, see
/// [`remembered_places`]), as a restarted operator takes them up (each on
/// its database, read from its Secret). A place whose database cannot be
/// had now is left for a later pass.
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
        let name = wp.name_any();
        let made = PoolLoop::new(
            &ns,
            &name,
            spec,
            &url,
            config.tuning.clone(),
            config.fence.clone(),
        );
        match made.await {
            Ok(lp) => out.push(retire(config, lp.not_listening(), place.clone())),
            Err(e) => tracing::warn!(pool = %wp.name_any(), error = %e, "a former place's loop"),
        }
    }
    out
}

/// One pass of each former place's loop (leaving alone what the pool's
/// loop, `successor`, launched); those with nothing left go. Their
/// events, each saying which place, for the WarmPool.
pub(super) async fn pass_all(
    wp: &WarmPool,
    retiring: &mut Vec<Retiring>,
    successor: &HashSet<String>,
) -> Vec<PoolEvent> {
    let mut events = Vec::new();
    let mut done = Vec::new();
    for (at, r) in retiring.iter_mut().enumerate() {
        r.lp.set_successor(successor.clone());
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
                events.extend(report.events().iter().map(|e| PoolEvent {
                    message: format!("where the pool ran before ({where_}): {}", e.message),
                    ..e.clone()
                }));
                if report.deleted() {
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
