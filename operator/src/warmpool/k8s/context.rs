//! What every reconcile of the WarmPool controller shares: the client,
//! the watches' caches, each pool's loop between reconciles, the
//! listeners of the pools' databases and the per-pool back-off.

use std::{
    collections::{HashMap, HashSet},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use futures::channel::mpsc;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    core::PartialObjectMeta,
    runtime::{
        events::{Recorder, Reporter},
        reflector::{ObjectRef, Store},
    },
    Client, Resource,
};
use orca_db::DatabaseUrl;
use tokio::sync::watch;

use super::{
    config::{PoolControllerConfig, FINALIZER},
    listen::{DatabaseKey, Listeners},
    retiring::Former,
};
use crate::{
    backoff::{Backoff, PerObject},
    by_object::locked,
    connections::Connections,
    crd::{Scheduler, SecretKeyRef, WarmPool, WarmPoolClass, WarmPoolStatus},
    runtime::{
        database::SecretUrls,
        status::post_event,
        watches::{FirstListing, NamespaceMeta},
    },
    warmpool::{Deletion, PoolEvent, PoolLoop},
};

/// Where a pool's database URL was read from: the Secret, its key and the
/// Secret's `resourceVersion` (unknown without the watch of Secrets).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct UrlSource {
    /// The Secret and its keys (the URL's, the CA's).
    secret: SecretKeyRef,
    version: Option<String>,
}

/// A pool between reconciles.
pub(super) struct PoolState {
    uid: Option<String>,
    generation: Option<i64>,
    source: UrlSource,
    database: DatabaseKey,
    lp: PoolLoop,
    /// Tells the loop of the WarmPool's deletion.
    deletion: watch::Sender<Option<Deletion>>,
    /// The status this replica last wrote (or found written): only a change
    /// is written.
    last: Option<WarmPoolStatus>,
    /// Between failed or throttled passes.
    backoff: Backoff,
    /// Where the pool ran before, while instances are left there.
    former: Former,
}

impl PoolState {
    /// The state of `wp`'s pool, whose loop `lp` acts on the database
    /// `database` read from `source`, told of a deletion through
    /// `deletion`; `former` drain where it ran before.
    pub(super) fn new(
        wp: &WarmPool,
        (source, database): (UrlSource, DatabaseKey),
        lp: PoolLoop,
        deletion: watch::Sender<Option<Deletion>>,
        backoff: Backoff,
        former: Former,
    ) -> PoolState {
        PoolState {
            uid: wp.metadata.uid.clone(),
            generation: wp.metadata.generation,
            source,
            database,
            lp,
            deletion,
            last: wp.status.clone(),
            backoff,
            former,
        }
    }

    /// Whether this is the state of `wp` (the same uid), not of an
    /// earlier object of its name.
    pub(super) fn is_of(&self, wp: &WarmPool) -> bool {
        self.uid == wp.metadata.uid
    }

    /// Whether `wp`'s spec is not the one the loop runs (a new
    /// generation, or a class's change without one).
    pub(super) fn behind(&self, wp: &WarmPool) -> bool {
        self.generation != wp.metadata.generation || self.lp.spec() != &wp.spec
    }

    /// The loop runs `wp`'s spec from now, if it did not.
    pub(super) async fn follow(&mut self, wp: &WarmPool, pool: &str) {
        if self.behind(wp) {
            self.lp.set_spec(wp.spec.clone()).await;
            self.generation = wp.metadata.generation;
            tracing::info!(pool = %pool, generation = ?wp.metadata.generation, "new spec");
        }
    }

    /// The pool's loop.
    pub(super) fn pool_loop(&self) -> &PoolLoop {
        &self.lp
    }

    /// The pool's loop, to tell it something or run its pass.
    pub(super) fn pool_loop_mut(&mut self) -> &mut PoolLoop {
        &mut self.lp
    }

    /// Where the database URL was read from.
    pub(super) fn source(&self) -> &UrlSource {
        &self.source
    }

    /// The database the loop acts on.
    pub(super) fn database(&self) -> &DatabaseKey {
        &self.database
    }

    /// The URL was read again from `source`, and names the same database.
    pub(super) fn read_again(&mut self, source: UrlSource) {
        self.source = source;
    }

    /// Tells the loop of the WarmPool's deletion (or of none).
    pub(super) fn tell_deletion(&self, deletion: Option<Deletion>) {
        self.deletion.send_replace(deletion);
    }

    /// The status this replica last wrote (or found written).
    pub(super) fn last(&self) -> Option<&WarmPoolStatus> {
        self.last.as_ref()
    }

    /// This replica wrote `status`.
    pub(super) fn wrote(&mut self, status: WarmPoolStatus) {
        self.last = Some(status);
    }

    /// A pass was throttled or failed: how long until the next.
    pub(super) fn backed_off(&mut self) -> Duration {
        self.backoff.next_wait()
    }

    /// A pass went through: the back-off starts again from its base.
    pub(super) fn went_through(&mut self) {
        self.backoff.reset();
    }

    /// Where the pool ran before, while instances are left there.
    pub(super) fn former(&self) -> &Former {
        &self.former
    }

    /// One pass over where the pool ran before; what it says.
    pub(super) async fn pass_former(
        &mut self,
        client: &Client,
        config: &PoolControllerConfig,
        wp: &WarmPool,
    ) -> Vec<PoolEvent> {
        // Most pools ran nowhere else: no copy of what the loop has.
        if self.former.is_empty() {
            return Vec::new();
        }
        let successor = self.lp.successor();
        let spec = self.lp.spec();
        let here = (
            spec.scheduler.as_str(),
            spec.region.as_str(),
            spec.endpoint.as_deref(),
        );
        self.former
            .pass(client, config, wp, (here, successor.as_ref()))
            .await
    }

    /// The state given up for a new loop: its loop, where its URL was read
    /// from, and where it ran before.
    pub(super) fn into_parts(self) -> (PoolLoop, UrlSource, Former) {
        (self.lp, self.source, self.former)
    }
}

/// One pool's state; the controller never reconciles one pool twice at
/// once, the lock only makes that plain.
pub(super) type Slot = Arc<tokio::sync::Mutex<Option<PoolState>>>;

/// The Schedulers, the Secrets' metadata and the WarmPools, as the
/// controller's watches keep them.
#[derive(Clone)]
pub(super) struct Caches {
    schedulers: Store<Scheduler>,
    secrets: Store<PartialObjectMeta<Secret>>,
    pools: Store<WarmPool>,
    /// The URLs read from the Secrets (shared with the Scheduler
    /// controller).
    urls: Arc<SecretUrls>,
    /// The first listing of the Schedulers and the Secrets.
    listed: FirstListing,
    /// The WarmPoolClasses and the Namespaces' labels (cluster-wide).
    classes: Store<WarmPoolClass>,
    namespaces: Store<NamespaceMeta>,
    /// Their first listing.
    cluster_listed: FirstListing,
}

impl Caches {
    /// The namespaced watches' stores (Schedulers, Secrets, WarmPools),
    /// the URLs read from the Secrets and their first listing; the
    /// cluster-wide watches' (classes, Namespaces) and theirs.
    pub(super) fn new(
        (schedulers, secrets, pools): (
            Store<Scheduler>,
            Store<PartialObjectMeta<Secret>>,
            Store<WarmPool>,
        ),
        urls: Arc<SecretUrls>,
        listed: FirstListing,
        (classes, namespaces): (Store<WarmPoolClass>, Store<NamespaceMeta>),
        cluster_listed: FirstListing,
    ) -> Caches {
        Caches {
            schedulers,
            secrets,
            pools,
            urls,
            listed,
            classes,
            namespaces,
            cluster_listed,
        }
    }

    /// The Schedulers, as the watch keeps them.
    pub(super) fn schedulers(&self) -> &Store<Scheduler> {
        &self.schedulers
    }

    /// The Secrets' metadata, as the watch keeps it.
    pub(super) fn secrets(&self) -> &Store<PartialObjectMeta<Secret>> {
        &self.secrets
    }

    /// The WarmPools, as the watch keeps them.
    pub(super) fn pools(&self) -> &Store<WarmPool> {
        &self.pools
    }

    /// The URLs read from the Secrets.
    pub(super) fn urls(&self) -> &Arc<SecretUrls> {
        &self.urls
    }

    /// The WarmPoolClasses, as the watch keeps them.
    pub(super) fn classes(&self) -> &Store<WarmPoolClass> {
        &self.classes
    }

    /// The Namespaces' labels, as the watch keeps them.
    pub(super) fn namespaces(&self) -> &Store<NamespaceMeta> {
        &self.namespaces
    }

    /// The first listing of the classes and the Namespaces.
    pub(super) fn cluster_listed(&self) -> &FirstListing {
        &self.cluster_listed
    }
}

impl UrlSource {
    /// Read from `secret` at `version`.
    pub(super) fn new(secret: SecretKeyRef, version: Option<String>) -> Self {
        UrlSource { secret, version }
    }

    /// The Secret and its keys.
    pub(super) fn secret(&self) -> &SecretKeyRef {
        &self.secret
    }

    /// The Secret's `resourceVersion` the URL was read at.
    pub(super) fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }
}

/// What every reconcile of the WarmPool controller shares.
pub struct Context {
    client: Client,
    config: PoolControllerConfig,
    recorder: Recorder,
    /// `None` outside [`super::run`] (a reconcile called on its own, in tests):
    /// then the Scheduler and the Secret are read from the API.
    caches: Option<Caches>,
    pools: Mutex<HashMap<String, Slot>>,
    listeners: Listeners,
    /// The pools' connections: one per database, shared by its pools.
    connections: Arc<Connections>,
    /// The uids of the WarmPools this replica put the finalizer on.
    finalized: Mutex<HashSet<String>>,
    /// Whether a reconcile said that the watches had not listed.
    warned: AtomicBool,
    /// Failed reconciles in a row, per WarmPool.
    backoff: PerObject,
}

impl Context {
    /// The client the controller acts with.
    pub(super) fn client(&self) -> &Client {
        &self.client
    }

    /// The controller's configuration.
    pub(super) fn config(&self) -> &PoolControllerConfig {
        &self.config
    }

    /// The watches' stores; `None` outside [`super::run`].
    pub(super) fn caches(&self) -> Option<&Caches> {
        self.caches.as_ref()
    }

    /// The pools' connections: one per database.
    pub(super) fn connections(&self) -> &Arc<Connections> {
        &self.connections
    }

    /// The uids of the WarmPools this replica put the finalizer on.
    pub(super) fn finalized(&self) -> &Mutex<HashSet<String>> {
        &self.finalized
    }

    /// Failed reconciles in a row, per WarmPool.
    pub(super) fn backoff(&self) -> &PerObject {
        &self.backoff
    }

    /// A context whose reconciles read Schedulers and Secrets from the API,
    /// and whose listeners' notifications go nowhere.
    pub fn new(client: Client, config: PoolControllerConfig) -> Self {
        let (triggers, _) = mpsc::unbounded();
        Self::with(client, config, None, triggers)
    }

    /// A context with the watches' `caches` (or none) and `triggers` for
    /// the listeners' notifications.
    pub(super) fn with(
        client: Client,
        config: PoolControllerConfig,
        caches: Option<Caches>,
        triggers: mpsc::UnboundedSender<ObjectRef<WarmPool>>,
    ) -> Self {
        Context {
            recorder: Recorder::new(client.clone(), Reporter::from(config.reporter().as_str())),
            listeners: Listeners::new(
                triggers,
                config.fence().clone(),
                config.tuning().application_name("listen"),
            ),
            connections: Arc::new(Connections::named(
                &config.tuning().application_name("pool"),
            )),
            client,
            config,
            caches,
            pools: Mutex::new(HashMap::new()),
            finalized: Mutex::new(HashSet::new()),
            warned: AtomicBool::new(false),
            backoff: PerObject::default(),
        }
    }

    /// Publishes `event` on `wp`, unless the fence is closed.
    pub(super) async fn say(&self, wp: &WarmPool, event: &PoolEvent) {
        let reference = wp.object_ref(&());
        let fence = self.config.fence();
        let (warning, reason) = (event.is_warning(), event.reason());
        if let Err(fenced) = post_event(
            &self.recorder,
            fence,
            &reference,
            warning,
            reason,
            event.message(),
        )
        .await
        {
            tracing::debug!(reason, error = %fenced, "event not posted");
        }
    }

    /// Drops every pool's loop and stops every listener; none starts after.
    pub fn stop_all(&self) {
        self.listeners.stop();
        locked(&self.pools).clear();
        locked(self.listeners.on_database()).clear();
    }

    /// The watches' stores once they have listed, waiting for that in the
    /// controller's first seconds ([`FIRST_LISTING`](crate::runtime::names::FIRST_LISTING));
    /// `None` if they have not (a watch refused — say, RBAC without `list`
    /// on Secrets): then the Scheduler and the Secret are read from the
    /// API, as without the watches.
    pub(super) async fn ready_caches(&self) -> Option<&Caches> {
        let caches = self.caches.as_ref()?;
        match caches.listed.ready().await {
            true => Some(caches),
            false => {
                if !self.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "the watches of Schedulers and Secrets have not listed yet; \
                         reading them from the API until they have (check the \
                         operator's RBAC: list and watch on secrets)"
                    );
                }
                None
            }
        }
    }

    /// Whether `wp` has the finalizer: on it, or added by this replica
    /// already (the watch may not have brought that change back yet).
    pub(super) fn has_finalizer(&self, wp: &WarmPool) -> bool {
        crate::runtime::finalizer::has(&wp.metadata, FINALIZER)
            || wp
                .metadata
                .uid
                .as_ref()
                .is_some_and(|uid| locked(&self.finalized).contains(uid))
    }

    /// The slot of `pool`'s loop, made empty if there is none.
    pub(super) fn slot(&self, pool: &str) -> Slot {
        locked(&self.pools)
            .entry(pool.to_string())
            .or_default()
            .clone()
    }

    /// `wp` with the places this replica last wrote of it (`status.place`,
    /// `status.retiring`), if its state is of this very object: the
    /// watch's copy may be older than the write,
    /// and a pass that finds the pool Degraded (and writes its status
    /// back), deletes it without its database or orphans it must see
    /// every place its instances may be.
    pub(super) async fn with_places_written(&self, pool: &str, wp: Arc<WarmPool>) -> Arc<WarmPool> {
        let Some(slot) = locked(&self.pools).get(pool).cloned() else {
            return wp;
        };
        let guard = slot.lock().await;
        // Another object of the same name (deleted and made again) has
        // places of its own.
        let of_wp = guard.as_ref().filter(|s| s.is_of(&wp));
        let Some(last) = of_wp.and_then(PoolState::last) else {
            return wp;
        };
        let read = wp.status.as_ref();
        if read.is_some_and(|s| s.place == last.place && s.retiring == last.retiring) {
            return wp;
        }
        let mut newer = (*wp).clone();
        let status = newer.status.get_or_insert_with(Default::default);
        status.place = last.place.clone();
        status.retiring = last.retiring.clone();
        Arc::new(newer)
    }

    /// Forgets `pool`: its loop and connection go, and the listener of its
    /// database if no other pool uses it.
    pub(super) fn forget(&self, pool: &str) {
        locked(&self.pools).remove(pool);
        self.set_database(pool, None);
    }

    /// Records the database `pool`'s loop runs on (none: no loop), and
    /// starts or stops the listeners to match.
    pub(super) fn set_database(&self, pool: &str, database: Option<(DatabaseKey, &DatabaseUrl)>) {
        let mut databases = locked(self.listeners.on_database());
        match database {
            Some((key, url)) => {
                databases.insert(pool.to_string(), key);
                self.listeners.ensure(key, url);
            }
            None => {
                databases.remove(pool);
            }
        }
        let used: Vec<DatabaseKey> = databases.values().copied().collect();
        self.listeners.retain(&used);
    }

    /// Forgets the pools whose WarmPool the watch no longer holds (deleted
    /// with its finalizer removed by hand, say).
    pub(super) fn forget_gone(&self) {
        let Some(caches) = &self.caches else {
            return;
        };
        let keys: Vec<String> = locked(&self.pools).keys().cloned().collect();
        for pool in keys {
            let (ns, name) = pool.split_once('/').unwrap_or(("", &pool));
            if caches.pools.get(&ObjectRef::new(name).within(ns)).is_none() {
                tracing::info!(pool = %pool, "WarmPool gone; its loop stops");
                self.forget(&pool);
            }
        }
    }
}

/// Stops the pools and listeners when [`super::run`] ends, or is dropped.
pub(super) struct StopAll(pub(super) Arc<Context>);

impl Drop for StopAll {
    fn drop(&mut self) {
        self.0.stop_all();
    }
}
