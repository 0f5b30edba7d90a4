//! The WarmPoolClasses' side (docs/operations.md#warm-pool-classes): every
//! few seconds, for each class, who its pools are (every scope's WarmPools
//! naming it), told to the book that grants their launches
//! ([`crate::pool::budget`]), and what they hold, written to the class's
//! status — per namespace, against its limits, with the pools. Runs under
//! the Lease with the controllers; every write checks the fence.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{
    runtime::reflector::{ObjectRef, Store},
    Api, Client, ResourceExt,
};

use crate::{
    crd::{set_condition, NamespaceUsage, WarmPool, WarmPoolClass, WarmPoolClassStatus},
    fence::Fence,
    k8s::{
        status::write_status,
        watches::{Listed, NamespaceMeta},
    },
    pool::{
        budget::{Budgets, ClassUsage, Member},
        class::selects,
    },
};

/// How often the classes are counted and their statuses written (when
/// they changed).
pub const EVERY: Duration = Duration::from_secs(5);

/// What the classes' owner reads.
pub struct ClassSources {
    pub classes: Store<WarmPoolClass>,
    pub namespaces: Store<NamespaceMeta>,
    /// Every scope's WarmPools.
    pub pools: Vec<Store<WarmPool>>,
    /// The listings of all of those: nothing is counted before.
    pub listed: Vec<Listed>,
    /// The namespaces watched (`None`: all). A class is this operator's
    /// to write while it has pools here (or had, or has no status yet): one
    /// installation per class, and an operator of other namespaces leaves
    /// it be.
    pub scopes: Vec<Option<String>>,
}

/// Counts the classes every [`EVERY`] until dropped.
pub async fn run(client: Client, fence: Fence, budgets: Arc<Budgets>, sources: ClassSources) {
    if !Listed::all(&sources.listed).await {
        tracing::warn!("the watches of WarmPoolClasses, Namespaces or WarmPools ended before they listed; classes are not counted");
        return;
    }
    let api: Api<WarmPoolClass> = Api::all(client);
    let mut tick = tokio::time::interval(EVERY);
    loop {
        tick.tick().await;
        count(&api, &fence, &budgets, &sources).await;
    }
}

async fn count(api: &Api<WarmPoolClass>, fence: &Fence, budgets: &Budgets, sources: &ClassSources) {
    let classes = sources.classes.state();
    for gone in budgets.classes() {
        if !classes.iter().any(|c| c.name_any() == gone) {
            budgets.forget_class(&gone);
        }
    }
    let pools: Vec<Arc<WarmPool>> = sources.pools.iter().flat_map(|s| s.state()).collect();
    for class in classes {
        let name = class.name_any();
        let members: Vec<(Member, &WarmPool)> = pools
            .iter()
            .filter(|p| p.spec.class_ref.as_ref().is_some_and(|r| r.name == name))
            .map(|p| (member_of(p), p.as_ref()))
            .collect();
        budgets.set_limits(&name, &class.spec);
        budgets.set_members(&name, members.iter().map(|(m, _)| m.clone()).collect());
        let status = status_of(&class, &members, &budgets.usage(&name), &sources.namespaces);
        if class.status.as_ref() == Some(&status)
            || !ours(class.status.as_ref(), &members, &sources.scopes)
        {
            continue;
        }
        if let Err(e) = write_status(api, &name, &status, fence).await {
            tracing::warn!(class = %name, error = %e, "the class's status was not written");
        }
    }
}

/// Whether this operator writes a class's status: it has pools of the class,
/// the status is not written yet, or it names pools in the namespaces this
/// operator watches (the last of them just went).
fn ours(
    written: Option<&WarmPoolClassStatus>,
    members: &[(Member, &WarmPool)],
    scopes: &[Option<String>],
) -> bool {
    let watched = |ns: &str| scopes.iter().any(|s| s.as_deref().is_none_or(|s| s == ns));
    !members.is_empty()
        || written.is_none_or(|s| s.namespaces.iter().any(|n| watched(&n.namespace)))
}

fn member_of(p: &WarmPool) -> Member {
    let namespace = crate::crd::namespace_of(p);
    let instances = p.status.as_ref().map_or(0, |s| {
        i64::from(s.launching + s.idle + s.busy + s.stopped + s.terminating)
    });
    Member {
        pool: format!("{namespace}/{}", p.name_any()),
        namespace,
        instances,
    }
}

/// The class's status from what its pools hold; the conditions keep their
/// transition times while they hold.
fn status_of(
    class: &WarmPoolClass,
    members: &[(Member, &WarmPool)],
    usage: &ClassUsage,
    namespaces: &Store<NamespaceMeta>,
) -> WarmPoolClassStatus {
    let mut by_ns: BTreeMap<String, NamespaceUsage> = BTreeMap::new();
    for (m, p) in members {
        by_ns
            .entry(m.namespace.clone())
            .or_insert_with(|| NamespaceUsage {
                namespace: m.namespace.clone(),
                ..NamespaceUsage::default()
            })
            .pools
            .push(p.name_any());
    }
    for (ns, u) in &usage.namespaces {
        let entry = by_ns.entry(ns.clone()).or_insert_with(|| NamespaceUsage {
            namespace: ns.clone(),
            ..NamespaceUsage::default()
        });
        entry.instances = u.instances;
        entry.vcpus = u.vcpus;
    }
    for entry in by_ns.values_mut() {
        let labels = namespaces
            .get(&ObjectRef::new(&entry.namespace))
            .map(|n| n.labels().clone())
            .unwrap_or_default();
        entry.allowed = class
            .spec
            .namespaces
            .as_ref()
            .is_none_or(|s| selects(s, &labels));
        entry.pools.sort();
    }
    let mut conditions = class
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let generation = class.metadata.generation;
    set_condition(
        &mut conditions,
        "Ready",
        true,
        "Counted",
        &format!(
            "{} instances, {} vCPUs held by {} pools",
            usage.total.instances,
            usage.total.vcpus,
            members.len()
        ),
        now.clone(),
        generation,
    );
    match &usage.held_back {
        Some(why) => set_condition(
            &mut conditions,
            "LimitReached",
            true,
            "LaunchHeldBack",
            why,
            now,
            generation,
        ),
        None => set_condition(
            &mut conditions,
            "LimitReached",
            false,
            "WithinLimits",
            "no launch held back in the last minute",
            now,
            generation,
        ),
    }
    WarmPoolClassStatus {
        instances: usage.total.instances,
        vcpus: usage.total.vcpus,
        pool_count: members.len() as i64,
        namespaces: by_ns.into_values().collect(),
        conditions,
    }
}
