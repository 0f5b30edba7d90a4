//! The class stage: a WarmPool that names a WarmPoolClass runs on the spec
//! the class makes of it ([`crate::warmpool::class::resolve`]), read here from
//! the watches of classes and Namespaces (or the API before they list);
//! every later stage sees only that spec. A pool being deleted is torn
//! down where its instances are — the class's region, or the one its status
//! recorded if the class is gone — whatever the class would refuse now.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use k8s_openapi::api::core::v1::Namespace;
use kube::{runtime::reflector::ObjectRef, Api, ResourceExt};

use super::{context::Context, error::ReconcileError, retiring::recorded_places};
use crate::{
    crd::{WarmPool, WarmPoolClass},
    warmpool::{
        class::{drain_within, may_orphan, resolve, Refusal, Tenant},
        ec2::{Ec2, Ec2Config, Ownership},
    },
};

/// `wp` as its loop runs it: as written without a class, else with the
/// class's region, endpoint and launch — or why it may not run.
pub(super) async fn effective(
    wp: Arc<WarmPool>,
    ctx: &Context,
    pool: &str,
    deleting: bool,
) -> Result<Result<Arc<WarmPool>, Refusal>, ReconcileError> {
    let Some(class_ref) = &wp.spec.class_ref else {
        return Ok(Ok(wp));
    };
    let name = class_ref.name.clone();
    let Some(class) = class_of(ctx, pool, &name).await? else {
        ctx.config().budgets().forget_class(&name);
        return Ok(match last_place(&wp) {
            // Gone before the pool, or never there (a name mistyped): its
            // instances are where the pool ran last.
            Some((region, endpoint)) if deleting => {
                let mut spec = wp.spec.clone();
                spec.region = region;
                spec.endpoint = endpoint;
                Ok(with_spec(&wp, spec))
            }
            _ => Err(Refusal::new(
                "ClassNotFound",
                format!("WarmPoolClass {name} does not exist"),
            )),
        });
    };
    ctx.config().budgets().set_limits(&name, &class.spec);
    let ns = crate::crd::namespace_of(&*wp);
    let labels = labels_of(ctx, pool, &ns).await?;
    let tenant = Tenant::new(&ns, &labels);
    match resolve(&name, &class.spec, &tenant, &wp.spec) {
        Ok(spec) => Ok(Ok(with_spec(&wp, spec))),
        Err(_) if deleting => {
            // Torn down where it ran, refused or not, its busy instances
            // drained within the class's bound as it is now; outside the
            // class's book, which would tag its class-less instances for
            // the class and count them against the teams it admits (a
            // pool pointed at another team's class, then deleted).
            let mut spec = wp.spec.clone();
            spec.region = class.spec.region.clone();
            spec.endpoint = class.spec.endpoint.clone();
            spec.drain_timeout_seconds = drain_within(&class.spec, &wp.spec);
            spec.class_ref = None;
            Ok(Ok(with_spec(&wp, spec)))
        }
        Err(refusal) => Ok(Err(refusal)),
    }
}

/// Where `wp`'s instances are, for its deletion without its class: the
/// class's region and endpoint its status recorded, else where its status
/// says its loop ran (a pool without a class before, pointed at a class
/// that does not exist), else its own spec's region (a pool a release
/// before this one ran). `None`: it never ran anywhere.
fn last_place(wp: &WarmPool) -> Option<(String, Option<String>)> {
    let status = wp.status.as_ref();
    let class = status.and_then(|s| Some((s.class_region.clone()?, s.class_endpoint.clone())));
    let place = || {
        let p = status?.place.as_ref()?;
        Some((p.region.clone(), p.endpoint.clone()))
    };
    let spec = || {
        let s = &wp.spec;
        (!s.region.is_empty()).then(|| (s.region.clone(), s.endpoint.clone()))
    };
    class.or_else(place).or_else(spec)
}

/// Whether `wp`, deleted with `onDelete: Orphan`, may leave its instances
/// running: a pool without a class may; one with a class only if the class
/// exists and allows it (`poolLimits.orphan`). And so must every class its
/// instances were launched under (their `orca.dev/class` tag, where its
/// status says they are): a pool pointed from a class that forbids it to
/// one that allows it leaves none of the first class's instances running.
/// Else it is torn down as with Terminate.
pub(super) async fn may_leave(
    wp: &WarmPool,
    ctx: &Context,
    pool: &str,
) -> Result<bool, ReconcileError> {
    let current = wp.spec.class_ref.as_ref().map(|c| c.name.as_str());
    if let Some(name) = current {
        if !allows_orphans(ctx, pool, name).await? {
            return Ok(false);
        }
    }
    for class in launched_under(wp, ctx, pool).await? {
        if Some(class.as_str()) != current && !allows_orphans(ctx, pool, &class).await? {
            tracing::info!(pool = %pool, class = %class,
                "onDelete Orphan: instances were launched under a class that does not allow it; torn down");
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether the class `name` exists and lets its pools orphan instances.
async fn allows_orphans(ctx: &Context, pool: &str, name: &str) -> Result<bool, ReconcileError> {
    Ok(class_of(ctx, pool, name)
        .await?
        .is_some_and(|c| may_orphan(&c.spec)))
}

/// The classes `wp`'s instances were launched under, by their
/// `orca.dev/class` tag: EC2's listing of its instances where it ran last
/// (`status.place`) and in each former place (`status.retiring`).
async fn launched_under(
    wp: &WarmPool,
    ctx: &Context,
    pool: &str,
) -> Result<BTreeSet<String>, ReconcileError> {
    let tuning = &ctx.config().tuning();
    let mut classes = BTreeSet::new();
    for (scheduler, region, endpoint) in recorded_places(wp, Vec::new()) {
        let owner = Ownership::new(
            &crate::crd::namespace_of(wp),
            &wp.name_any(),
            scheduler,
            tuning.operator(),
            tuning.cluster(),
        );
        let ec2 = Box::pin(Ec2::new(
            &Ec2Config::new(region, endpoint),
            ctx.config().fence().clone(),
        ))
        .await;
        let listed =
            ec2.describe_tagged(&owner.tags())
                .await
                .map_err(|source| ReconcileError::Ec2 {
                    pool: pool.to_string(),
                    source,
                })?;
        let present = listed
            .into_iter()
            .filter(|t| t.instance().is_some_and(|i| i.state().is_present()));
        classes.extend(present.filter_map(|t| t.class().map(String::from)));
    }
    Ok(classes)
}

fn with_spec(wp: &WarmPool, spec: crate::crd::WarmPoolSpec) -> Arc<WarmPool> {
    let mut out = wp.clone();
    out.spec = spec;
    Arc::new(out)
}

/// The class `name`: from the watch once it has listed, else from the API.
async fn class_of(
    ctx: &Context,
    pool: &str,
    name: &str,
) -> Result<Option<Arc<WarmPoolClass>>, ReconcileError> {
    if let Some(caches) = &ctx.caches() {
        if caches.cluster_listed().ready().await {
            return Ok(caches.classes().get(&ObjectRef::new(name)));
        }
    }
    if let Some(fenced) = fenced(ctx, pool) {
        return Err(fenced);
    }
    Api::<WarmPoolClass>::all(ctx.client().clone())
        .get_opt(name)
        .await
        .map(|c| c.map(Arc::new))
        .map_err(|source| ReconcileError::Kube {
            pool: pool.to_string(),
            source,
        })
}

/// The labels of namespace `ns`.
async fn labels_of(
    ctx: &Context,
    pool: &str,
    ns: &str,
) -> Result<BTreeMap<String, String>, ReconcileError> {
    if let Some(caches) = &ctx.caches() {
        if caches.cluster_listed().ready().await {
            return Ok(caches
                .namespaces()
                .get(&ObjectRef::new(ns))
                .map(|n| n.labels().clone())
                .unwrap_or_default());
        }
    }
    if let Some(fenced) = fenced(ctx, pool) {
        return Err(fenced);
    }
    Api::<Namespace>::all(ctx.client().clone())
        .get_opt(ns)
        .await
        .map(|n| n.map(|n| n.labels().clone()).unwrap_or_default())
        .map_err(|source| ReconcileError::Kube {
            pool: pool.to_string(),
            source,
        })
}

/// The fence, before a read from the API: the error if it is closed.
fn fenced(ctx: &Context, pool: &str) -> Option<ReconcileError> {
    ctx.config()
        .fence()
        .check()
        .err()
        .map(|source| ReconcileError::Fenced {
            pool: pool.to_string(),
            source,
        })
}
