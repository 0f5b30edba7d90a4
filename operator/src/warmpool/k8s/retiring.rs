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
//!
//! A former place whose database cannot be had when a loop for it is to be
//! made (its Secret deleted or broken, its database down; a restarted
//! operator, a new leader, a pool's loop made afresh) stays in
//! `status.retiring` all the same, is asked again at every pass, and is
//! said (`FormerPlaceUnreached`). Past `drainTimeoutSeconds` from the move
//! its instances are terminated by EC2 alone, as a deleted pool's without
//! its database are ([`super::deletion`]), and it goes once EC2 lists none
//! there: a place dropped from the status would leave them running with
//! nothing to terminate them, a pool's deletion included.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt};
use tokio::sync::watch;

use super::config::PoolControllerConfig;
use crate::{
    crd::{spec_seconds, FormerPlace, SecretKeyRef, WarmPool, WarmPoolSpec},
    runtime::database::read_url,
    warmpool::{
        ec2::{Ec2, Ec2Config, Ec2Error, Ownership},
        Deletion, PoolEvent, PoolLoop,
    },
};

/// Where a pool ran before, while instances may be left there: a loop for
/// each place whose database it could reach, and the places whose it could
/// not yet.
#[derive(Default)]
pub(super) struct Former {
    loops: Vec<Retiring>,
    unreached: Vec<Unreached>,
}

/// A former place whose database could not be had, and why.
struct Unreached {
    place: FormerPlace,
    why: String,
}

impl Former {
    /// Every former place, as `status.retiring` shows them.
    pub(super) fn places(&self) -> Vec<FormerPlace> {
        let reached = self.loops.iter().map(|r| r.place.clone());
        reached
            .chain(self.unreached.iter().map(|u| u.place.clone()))
            .collect()
    }

    /// Whether nothing is left anywhere the pool ran before.
    pub(super) fn is_empty(&self) -> bool {
        self.loops.is_empty() && self.unreached.is_empty()
    }

    /// The loop `r` drains a place too.
    pub(super) fn push(&mut self, r: Retiring) {
        self.loops.push(r);
    }

    /// Lets go of the former places `spec` runs the pool in again: its
    /// loop takes their instances over (a second loop there would
    /// terminate what the pool launches).
    pub(super) fn back_to(&mut self, spec: &WarmPoolSpec, pool: &str) {
        self.loops.retain(|r| {
            let back = is_where(&r.place, spec);
            if back {
                tracing::info!(pool = %pool, place = ?r.place, "the pool moved back where it ran before: its loop takes the instances over again");
            }
            !back
        });
        self.unreached.retain(|u| !is_where(&u.place, spec));
    }

    /// One pass over every former place of `wp` (leaving alone what the
    /// pool's loop, `successor`, has where it runs, `here`; while it has
    /// not listed there, `None`, the places that may be its EC2 wait):
    /// each place unreached is asked
    /// for its database again, and if it still cannot be had, its
    /// instances are terminated by EC2 alone once the drain time-out since
    /// the move is past, save those EC2 lists where the pool runs now
    /// (`here`); then a pass of each place's loop. Places with nothing
    /// left go. What they say, for the WarmPool.
    pub(super) async fn pass(
        &mut self,
        client: &kube::Client,
        config: &PoolControllerConfig,
        wp: &WarmPool,
        (here, successor): (Place<'_>, Option<&HashSet<String>>),
    ) -> Vec<PoolEvent> {
        let mut events = Vec::new();
        let mut still = Vec::new();
        for u in std::mem::take(&mut self.unreached) {
            // Boxed, as each step below: the reconcile's future would
            // otherwise hold all of theirs at once (a debug build's
            // outgrew a thread's stack).
            match Box::pin(reach(client, config, wp, &u.place)).await {
                Ok(r) => {
                    tracing::info!(pool = %wp.name_any(), place = ?u.place, "a former place's database is reached: its loop drains it");
                    self.loops.push(r);
                }
                Err(why) => {
                    let u = Unreached { why, ..u };
                    if Box::pin(sweep(config, wp, (&u, here), &mut events)).await != Some(false) {
                        still.push(u);
                    }
                }
            }
        }
        self.unreached = still;
        events.extend(Box::pin(pass_all(wp, &mut self.loops, (here, successor))).await);
        events
    }
}

/// Where `place` is, as events name it.
fn where_(place: &FormerPlace) -> String {
    format!(
        "{} in {}{}",
        place.scheduler,
        place.region,
        place
            .endpoint
            .as_deref()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default()
    )
}

/// A place as `(scheduler, region, endpoint)`.
pub(super) type Place<'a> = (&'a str, &'a str, Option<&'a str>);

/// The instances of `wp` in the unreached place `u`, by EC2 alone: said,
/// and terminated once the drain time-out since the move is past. What
/// EC2 lists where the pool runs now (`here`) is left out: there, another
/// endpoint of the same EC2 lists the same instances, which are the
/// pool's loop's to keep or end. Whether any are left (`None`: EC2 did
/// not answer).
async fn sweep(
    config: &PoolControllerConfig,
    wp: &WarmPool,
    (u, here): (&Unreached, Place<'_>),
    events: &mut Vec<PoolEvent>,
) -> Option<bool> {
    let place = &u.place;
    let at = (
        place.scheduler.as_str(),
        place.region.as_str(),
        place.endpoint.as_deref(),
    );
    let listed = async {
        let (ec2, mut present) = present_in(config, wp, at).await?;
        if !present.is_empty() {
            let (_, now_there) = present_in(config, wp, here).await?;
            present.retain(|id| !now_there.contains(id));
        }
        Ok::<_, Ec2Error>((ec2, present))
    };
    let (ec2, present) = match Box::pin(listed).await {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(pool = %wp.name_any(), place = ?place, error = %e,
                "a former place's instances cannot be listed");
            return None;
        }
    };
    if present.is_empty() {
        tracing::info!(pool = %wp.name_any(), place = ?place, "nothing left where the pool ran before");
        return Some(false);
    }
    let since = DateTime::parse_from_rfc3339(&place.since)
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|_| Utc::now());
    let due = since + spec_seconds(wp.spec.drain_timeout_seconds);
    let where_ = where_(place);
    if Utc::now() < due {
        events.push(PoolEvent::new(
            "FormerPlaceUnreached",
            format!(
                "where the pool ran before ({where_}): its database cannot be had ({}); its {} \
                 instance(s) there are terminated at {} (drainTimeoutSeconds after the move), \
                 busy or not: mend it to let their runs finish first",
                u.why,
                present.len(),
                due.to_rfc3339()
            ),
            true,
        ));
        return Some(true);
    }
    if let Err(e) = ec2.terminate(&present).await {
        tracing::warn!(pool = %wp.name_any(), place = ?place, error = %e,
            "a former place's instances cannot be terminated");
        return Some(true);
    }
    tracing::warn!(pool = %wp.name_any(), place = ?place, instances = ?present,
        "terminated without the former place's database");
    events.push(PoolEvent::new(
        "Terminated",
        format!(
            "where the pool ran before ({where_}): {} instance(s) terminated without its \
             database ({}), drainTimeoutSeconds after the move: {}",
            present.len(),
            u.why,
            present.join(", ")
        ),
        true,
    ));
    Some(true)
}

/// A former place's loop, in deletion mode.
pub(super) struct Retiring {
    place: FormerPlace,
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
        .with_listings(config.listings())
        .without_metrics();
    Retiring {
        place,
        lp,
        _deletion: tell,
    }
}

fn deletion_of(place: &FormerPlace, spec: &WarmPoolSpec) -> Deletion {
    Deletion::new(
        DateTime::parse_from_rfc3339(&place.since)
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_else(|_| Utc::now()),
        spec.drain_timeout_seconds,
        true,
    )
}

/// The loops of `wp`'s former places `places` (its status's, see
/// [`remembered_places`]), as a restarted operator takes them up (each on
/// its database, read from its Secret). A place whose database cannot be
/// had now is kept, unreached, and asked again at every pass.
pub(super) async fn restore(
    client: &kube::Client,
    config: &PoolControllerConfig,
    wp: &WarmPool,
    places: &[FormerPlace],
) -> Former {
    let mut former = Former::default();
    for place in places {
        match Box::pin(reach(client, config, wp, place)).await {
            Ok(r) => former.loops.push(r),
            Err(why) => former.unreached.push(Unreached {
                place: place.clone(),
                why,
            }),
        }
    }
    former
}

/// The loop of `wp`'s former place `place`, on its database read from its
/// Secret; or why that database cannot be had now.
async fn reach(
    client: &kube::Client,
    config: &PoolControllerConfig,
    wp: &WarmPool,
    place: &FormerPlace,
) -> Result<Retiring, String> {
    let ns = crate::crd::namespace_of(wp);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
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
            return Err(problem.message);
        }
        Err(e) => {
            tracing::warn!(pool = %wp.name_any(), place = ?place, error = %e,
                "a former place's Secret cannot be read now");
            return Err(e.to_string());
        }
    };
    let name = wp.name_any();
    let made = PoolLoop::new(
        &ns,
        &name,
        spec,
        &url,
        config.tuning().clone(),
        config.fence().clone(),
    );
    match made.await {
        Ok(lp) => Ok(retire(config, lp.not_listening(), place.clone())),
        Err(e) => {
            tracing::warn!(pool = %wp.name_any(), place = ?place, error = %e, "a former place's loop");
            Err(e.to_string())
        }
    }
}

/// One pass of each former place's loop (leaving alone what the pool's
/// loop, `successor`, launched or lists where it runs now, `here`); those
/// with nothing left go. Their events, each saying which place, for the
/// WarmPool.
///
/// A former place of the same Scheduler and region may be one EC2 with
/// `here` (another endpoint of it), both listing the same instances: until
/// the pool's loop has listed there (`successor` is `None`), what is its
/// own cannot be told from what is the place's, whose loop would take it
/// all, and the place waits. One of another Scheduler or region lists
/// none of the pool's instances there, and need not.
async fn pass_all(
    wp: &WarmPool,
    retiring: &mut Vec<Retiring>,
    (here, successor): (Place<'_>, Option<&HashSet<String>>),
) -> Vec<PoolEvent> {
    let (mut events, mut done, none) = (Vec::new(), Vec::new(), HashSet::new());
    for (at, r) in retiring.iter_mut().enumerate() {
        let where_ = where_(&r.place);
        let successor = match successor {
            Some(successor) => successor,
            None if r.place.scheduler == here.0 && r.place.region == here.1 => {
                tracing::info!(pool = %wp.name_any(), place = %where_,
                    "the pool's place is not listed yet: the place it ran before waits");
                events.push(PoolEvent::new(
                    "FormerPlaceWaiting",
                    format!(
                        "where the pool ran before ({where_}): waits until the pool's own place \
                         has been listed (it may be the same EC2 under another endpoint); \
                         nothing is terminated there meanwhile"
                    ),
                    false,
                ));
                continue;
            }
            None => &none,
        };
        r.lp.set_successor(successor.clone());
        match r.lp.pass(Utc::now()).await {
            Ok(report) => {
                events.extend(report.events().iter().map(|e| {
                    PoolEvent::new(
                        e.reason(),
                        format!("where the pool ran before ({where_}): {}", e.message()),
                        e.is_warning(),
                    )
                }));
                if report.deleted() {
                    tracing::info!(pool = %wp.name_any(), place = %where_, "nothing left where the pool ran before");
                    done.push(at);
                }
            }
            Err(e) => {
                tracing::warn!(pool = %wp.name_any(), place = %where_, error = %e, "a former place's pass failed");
                events.push(PoolEvent::new(
                    e.degraded_reason(),
                    format!("where the pool ran before ({where_}): {e}"),
                    true,
                ));
            }
        }
    }
    for at in done.into_iter().rev() {
        retiring.remove(at);
    }
    events
}

/// The EC2 of `wp`'s place `(scheduler, region, endpoint)`, and the
/// instances it lists there with the pool's tags, pending, running,
/// stopping or stopped.
pub(super) async fn present_in(
    config: &PoolControllerConfig,
    wp: &WarmPool,
    (scheduler, region, endpoint): (&str, &str, Option<&str>),
) -> Result<(Ec2, Vec<String>), Ec2Error> {
    let owner = Ownership::new(
        &crate::crd::namespace_of(wp),
        &wp.name_any(),
        scheduler,
        config.tuning().operator(),
        config.tuning().cluster(),
    );
    let ec2 = Box::pin(Ec2::new(
        &Ec2Config::new(region, endpoint),
        config.fence().clone(),
    ))
    .await;
    let ids = ec2
        .describe(&owner)
        .await?
        .into_iter()
        .filter(|i| i.state().is_present())
        .map(|i| i.id().to_string())
        .collect();
    Ok((ec2, ids))
}

/// Where `wp`'s status says its instances may be, each once: where it ran
/// last (`status.place`), then each former place (`status.retiring`), as
/// `(scheduler, region, endpoint)`, after those `first` names.
pub(super) fn recorded_places<'a>(
    wp: &'a WarmPool,
    first: Vec<(&'a str, &'a str, Option<&'a str>)>,
) -> Vec<(&'a str, &'a str, Option<&'a str>)> {
    let status = wp.status.iter();
    let last = status.clone().flat_map(|s| &s.place);
    let before = last.chain(status.flat_map(|s| &s.retiring)).map(|p| {
        (
            p.scheduler.as_str(),
            p.region.as_str(),
            p.endpoint.as_deref(),
        )
    });
    let mut out = first;
    for p in before {
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}
