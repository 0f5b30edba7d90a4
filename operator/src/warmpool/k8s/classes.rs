//! The WarmPoolClasses' side (docs/operations.md#warm-pool-classes): every
//! few seconds, for each class, its census — what EC2 lists under the
//! class's tag in its region, whatever pool launched it — told to the book
//! that grants the launches of its pools ([`crate::warmpool::budget`]), and
//! written to the class's status: per namespace, against its limits, with
//! the WarmPools that name the class. Runs under the Lease with the
//! controllers; every EC2 call and write checks the fence.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use futures::future::join_all;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{
    runtime::reflector::{ObjectRef, Store},
    Api, Client, ResourceExt,
};

use crate::{
    crd::{set_condition, NamespaceUsage, WarmPool, WarmPoolClass, WarmPoolClassStatus},
    fence::Fence,
    runtime::{
        status::write_status,
        watches::{ClusterWatches, Listed, NamespaceMeta, Watch},
    },
    warmpool::{
        budget::{Budgets, ClassUsage},
        class::selects,
        ec2::{Ec2, Ec2Config, Ec2Error},
        Listings, Ownership,
    },
};

/// How often the classes are counted and their statuses written (when
/// they changed).
pub const EVERY: Duration = Duration::from_secs(5);

/// How long a listing may be old to serve a class's census: the pools'
/// passes of the class's region share it.
const CENSUS_WITHIN: Duration = Duration::from_secs(10);

/// What the classes' owner reads.
pub struct ClassSources {
    classes: Store<WarmPoolClass>,
    namespaces: Store<NamespaceMeta>,
    /// Every scope's WarmPools.
    pools: Vec<Store<WarmPool>>,
    /// The listings of all of those: nothing is counted before.
    listed: Vec<Listed>,
    /// The namespaces watched (`None`: all). A class is this operator's
    /// to write while it has pools here (or had, or has no status yet): one
    /// installation per class, and an operator of other namespaces leaves
    /// it be.
    scopes: Vec<Option<String>>,
    /// The pools' EC2 listings, which the censuses share.
    listings: Listings,
    /// The operator's and the cluster's tags (pool and Scheduler unused):
    /// a census lists this cluster's instances only.
    owner: Ownership,
}

impl ClassSources {
    /// The classes and the Namespaces of `cluster`, no pools yet (see
    /// [`ClassSources::add_pools`]). Only their stores: a subscriber's
    /// events would wait, unread, for the whole term.
    pub fn new(
        cluster: &mut ClusterWatches,
        scopes: Vec<Option<String>>,
        listings: Listings,
        owner: Ownership,
    ) -> Self {
        let (classes, classes_listed) = cluster.classes().reader();
        let (namespaces, namespaces_listed) = cluster.namespaces().reader();
        ClassSources {
            classes,
            namespaces,
            pools: Vec::new(),
            listed: vec![classes_listed, namespaces_listed],
            scopes,
            listings,
            owner,
        }
    }

    /// The WarmPools of one more scope.
    pub fn add_pools(&mut self, pools: &Watch<WarmPool>) {
        let (store, listed) = pools.reader();
        self.pools.push(store);
        self.listed.push(listed);
    }
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
    let censuses = classes
        .iter()
        .map(|class| census(class, fence, budgets, sources));
    if join_all(censuses).await.contains(&Err(())) {
        // Fenced: this replica may not act any more.
        return;
    }
    let pools: Vec<Arc<WarmPool>> = sources.pools.iter().flat_map(|s| s.state()).collect();
    for class in classes {
        let name = class.name_any();
        let members: Vec<&WarmPool> = pools
            .iter()
            .filter(|p| p.spec.class_ref.as_ref().is_some_and(|r| r.name == name))
            .map(|p| p.as_ref())
            .collect();
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

/// Tells the book of `class` its limits and its census; `Err` when the
/// fence closed.
async fn census(
    class: &WarmPoolClass,
    fence: &Fence,
    budgets: &Budgets,
    sources: &ClassSources,
) -> Result<(), ()> {
    let name = class.name_any();
    budgets.set_limits(&name, &class.spec);
    let cfg = Ec2Config::new(&class.spec.region, class.spec.endpoint.as_deref());
    let ec2 = Ec2::new(&cfg, fence.clone()).await;
    match sources
        .listings
        .census(&ec2, &cfg, &name, &sources.owner, CENSUS_WITHIN)
        .await
    {
        Ok(census) => budgets.census(&name, census),
        Err(Ec2Error::Fenced { .. }) => return Err(()),
        Err(e) => {
            tracing::warn!(class = %name, error = %e, "the class's instances could not be listed");
            budgets.census_failed(&name, e.to_string());
        }
    }
    Ok(())
}

/// Whether this operator writes a class's status: it has pools of the class,
/// the status is not written yet, or it names pools in the namespaces this
/// operator watches (the last of them just went).
fn ours(
    written: Option<&WarmPoolClassStatus>,
    members: &[&WarmPool],
    scopes: &[Option<String>],
) -> bool {
    let watched = |ns: &str| scopes.iter().any(|s| s.as_deref().is_none_or(|s| s == ns));
    !members.is_empty()
        || written.is_none_or(|s| s.namespaces.iter().any(|n| watched(&n.namespace)))
}

/// The class's status from its census and the WarmPools that name it
/// (`members`); the conditions keep their transition times while they
/// hold.
fn status_of(
    class: &WarmPoolClass,
    members: &[&WarmPool],
    usage: &ClassUsage,
    namespaces: &Store<NamespaceMeta>,
) -> WarmPoolClassStatus {
    let mut by_ns: BTreeMap<String, NamespaceUsage> = BTreeMap::new();
    for p in members {
        let namespace = crate::crd::namespace_of(*p);
        by_ns
            .entry(namespace.clone())
            .or_insert_with(|| NamespaceUsage {
                namespace,
                ..NamespaceUsage::default()
            })
            .pools
            .push(p.name_any());
    }
    for (ns, u) in usage.namespaces() {
        let entry = by_ns.entry(ns.clone()).or_insert_with(|| NamespaceUsage {
            namespace: ns.clone(),
            ..NamespaceUsage::default()
        });
        entry.instances = u.instances();
        entry.vcpus = u.vcpus();
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
    let counted = format!(
        "{} instances, {} vCPUs running under the class; {} WarmPools name it",
        usage.total().instances(),
        usage.total().vcpus(),
        members.len()
    );
    let (ready, reason, message) = match &usage.uncounted() {
        None => (true, "Counted", counted),
        Some(why) => (
            false,
            "NotCounted",
            format!("{why}: no launch of the class is granted until they are"),
        ),
    };
    set_condition(
        &mut conditions,
        "Ready",
        ready,
        reason,
        &message,
        now.clone(),
        generation,
    );
    match &usage.held_back() {
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
        instances: usage.total().instances(),
        vcpus: usage.total().vcpus(),
        pool_count: members.len() as i64,
        namespaces: by_ns.into_values().collect(),
        conditions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::watches::Watches;

    /// The census reads the watches' stores and nothing else: the
    /// controllers subscribe to their events and read them, and a feed
    /// kept by the census would hold every class's and Namespace's event,
    /// unread, for as long as the replica leads.
    #[tokio::test]
    async fn the_census_takes_the_stores_and_leaves_the_events() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let mut cluster = ClusterWatches::new(&client);
        let mut watches = Watches::new(&client, &None);
        let mut sources = ClassSources::new(
            &mut cluster,
            vec![None],
            Listings::default(),
            Ownership::of_cluster("orca-operator", "east"),
        );
        sources.add_pools(watches.pools());
        assert_eq!(sources.listed.len(), 3, "each store's listing awaited");
        assert_eq!(cluster.classes().subscribers(), 0);
        assert_eq!(cluster.namespaces().subscribers(), 0);
        assert_eq!(watches.pools().subscribers(), 0);
    }
}
