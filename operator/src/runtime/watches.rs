//! One watch of each kind the controllers share, per scope: Schedulers,
//! WarmPools and the Secrets' metadata are each listed and watched once,
//! kept in one store, and each controller that follows them gets every
//! event of that watch — deletions included, which the in-use guard needs
//! (the last user gone frees a Secret) and kube's shared streams do not
//! pass on.
//!
//! The store is updated before a subscriber sees the event, as with a
//! reflector of its own. A watch error is logged here, once for all, and
//! the watch backs off and resumes; subscribers see only events.
//!
//! Whether a store has listed is asked through its one [`Listed`], never
//! through the store itself: kube's `Store::wait_until_ready` wakes only
//! the last of the tasks that wait on it at once, and the others sleep
//! until something else wakes them (at a cold start, every pass but one
//! sat out its whole time-out).

use std::{sync::Arc, time::Duration};

use futures::{
    channel::mpsc,
    future::{self, BoxFuture, Shared},
    FutureExt, Stream, StreamExt,
};
use k8s_openapi::{
    api::core::v1::{Namespace, Secret},
    NamespaceResourceScope,
};
use kube::{
    api::{ApiResource, DynamicObject},
    core::PartialObjectMeta,
    runtime::{
        reflector::{self, store::Writer, ObjectRef, Store},
        watcher, WatchStreamExt,
    },
    Api, Client, Resource, ResourceExt,
};
use serde::de::DeserializeOwned;

use super::database::SecretUrls;
use crate::crd::{Scheduler, WarmPool, WarmPoolClass};

/// A Secret's metadata: the operator keeps no Secret's data.
pub type SecretMeta = PartialObjectMeta<Secret>;

/// A Namespace's metadata: its labels, which a WarmPoolClass selects by.
pub type NamespaceMeta = PartialObjectMeta<Namespace>;

/// Whether one store has listed, for any number of tasks waiting at once.
/// Make one per store, where the store is made, and hand out clones: two
/// of them on one store would again take each other's wake-up.
#[derive(Clone)]
pub struct Listed(Shared<BoxFuture<'static, bool>>);

impl Listed {
    /// The one `Listed` of `store`.
    pub fn of<K>(store: &Store<K>) -> Self
    where
        K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    {
        let store = store.clone();
        Listed(
            async move { store.wait_until_ready().await.is_ok() }
                .boxed()
                .shared(),
        )
    }

    /// Waits until the store has listed: `false` if its watch ended first.
    pub async fn wait(&self) -> bool {
        self.0.clone().await
    }

    /// Waits until each of `stores` has listed: `false` if a watch ended
    /// first.
    pub async fn all(stores: &[Listed]) -> bool {
        future::join_all(stores.iter().map(Listed::wait))
            .await
            .into_iter()
            .all(|listed| listed)
    }
}

/// The first listing of some stores, as the passes of one controller wait
/// for it: every pass that starts before the deadline waits for it (until
/// then at most), none after — then a pass reads from the API instead.
#[derive(Clone)]
pub struct FirstListing {
    stores: Vec<Listed>,
    deadline: tokio::time::Instant,
}

impl FirstListing {
    /// `stores`, waited for until `wait` from now.
    pub fn new(stores: Vec<Listed>, wait: Duration) -> Self {
        Self {
            stores,
            deadline: tokio::time::Instant::now() + wait,
        }
    }

    /// Whether every store has listed, waiting until the deadline.
    pub async fn ready(&self) -> bool {
        tokio::time::timeout_at(self.deadline, Listed::all(&self.stores))
            .await
            .unwrap_or(false)
    }
}

/// `Api` of `K` in `scope` (a namespace; `None`: all).
pub fn namespaced<K>(client: &Client, scope: &Option<String>) -> Api<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
{
    match scope {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// `Api` of `K`'s objects as JSON in `scope`, as [`namespaced`].
fn namespaced_json<K>(client: &Client, scope: &Option<String>) -> Api<DynamicObject>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
{
    let resource = ApiResource::erase::<K>(&());
    match scope {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// One subscriber's part of a [`Watch`]: the shared store and this
/// subscriber's own stream of the watch's events.
pub struct Feed<K: Resource<DynamicType = ()> + Clone + 'static> {
    /// The watch's store, shared by every subscriber.
    store: Store<K>,
    /// Whether the store has listed.
    listed: Listed,
    /// Every event of the watch, in order, after the store has it.
    events: mpsc::UnboundedReceiver<watcher::Event<K>>,
}

impl<K> Feed<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    /// The watch's store, shared by every subscriber.
    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// Whether the store has listed.
    pub fn listed(&self) -> &Listed {
        &self.listed
    }

    /// The events as a watcher stream, for `applied_objects`,
    /// `touched_objects` and `Controller::for_stream`.
    pub fn stream(
        self,
    ) -> (
        Store<K>,
        Listed,
        impl Stream<Item = watcher::Result<watcher::Event<K>>>,
    ) {
        (self.store, self.listed, self.events.map(Ok))
    }
}

/// What no controller reads of an object, dropped before the store keeps
/// it: the field managers' bookkeeping and `kubectl apply`'s copy of the
/// whole object, most of the memory of a thousand objects.
fn slim<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = &mut meta.annotations {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// What is told of an object a [`Watch`] sees deleted.
type Deleted<K> = Box<dyn Fn(&K) + Send>;

/// One list-and-watch of `K` whose store and events any number of
/// subscribers share; it does nothing until [`Watch::run`] is polled.
pub struct Watch<K: Resource<DynamicType = ()> + Clone + 'static> {
    api: Api<K>,
    /// The same objects as JSON, when each is read on its own (see
    /// [`Watch::each_read_alone`]).
    json: Option<Api<DynamicObject>>,
    store: Store<K>,
    listed: Listed,
    writer: Writer<K>,
    subscribers: Vec<mpsc::UnboundedSender<watcher::Event<K>>>,
    /// Told of each object the watch sees deleted.
    deleted: Option<Deleted<K>>,
}

impl<K> Watch<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync,
    K: 'static,
{
    /// A watch of every `K` `api` reaches.
    pub fn new(api: Api<K>) -> Self {
        let (store, writer) = reflector::store();
        Self {
            api,
            json: None,
            listed: Listed::of(&store),
            store,
            writer,
            subscribers: Vec::new(),
            deleted: None,
        }
    }

    /// Lists and watches the objects as JSON (`json`, the same objects as
    /// the typed API), each read as `K` on its own: one that does not read
    /// (a number beyond its field's type that an API server let through,
    /// say) is logged and left as it was last read, where a typed list
    /// would fail whole, and with it every object of every team, at each
    /// listing for as long as that one object lasts.
    pub fn each_read_alone(mut self, json: Api<DynamicObject>) -> Self {
        self.json = Some(json);
        self
    }

    /// `deleted` is told of each object the watch sees deleted, before
    /// the subscribers.
    pub fn on_delete(mut self, deleted: impl Fn(&K) + Send + 'static) -> Self {
        self.deleted = Some(Box::new(deleted));
        self
    }

    /// The store and its listing, for a reader that follows no events
    /// (and does not keep the watch going): a subscriber's events wait
    /// until it reads them, for as long as it lasts.
    pub fn reader(&self) -> (Store<K>, Listed) {
        (self.store.clone(), self.listed.clone())
    }

    /// How many subscribers' feeds it sends its events to.
    #[cfg(test)]
    pub fn subscribers(&self) -> usize {
        self.subscribers.len()
    }

    /// A new subscriber: every event from the watch's start on.
    pub fn subscribe(&mut self) -> Feed<K> {
        let (to, events) = mpsc::unbounded();
        self.subscribers.push(to);
        Feed {
            store: self.store.clone(),
            listed: self.listed.clone(),
            events,
        }
    }

    /// Lists and watches until every subscriber has gone (at once without
    /// any); an error is logged and the watch resumes after a back-off.
    pub async fn run(mut self) {
        if self.subscribers.is_empty() {
            return;
        }
        let kind = K::kind(&());
        let events = match self.json.take() {
            Some(json) => {
                let store = self.store.clone();
                watcher(json, watcher::Config::default())
                    .filter_map(move |e| future::ready(read_alone(e, &store)))
                    .boxed()
            }
            None => watcher(self.api, watcher::Config::default()).boxed(),
        };
        let stream = events.modify(slim);
        let stream = reflector::reflector(self.writer, stream).default_backoff();
        let mut stream = std::pin::pin!(stream);
        let started = std::time::Instant::now();
        let mut listed = false;
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => {
                    if matches!(event, watcher::Event::InitDone) && !listed {
                        listed = true;
                        tracing::info!(kind = %kind, objects = self.store.state().len(),
                            seconds = started.elapsed().as_secs_f64(), "listed");
                    }
                    if let (watcher::Event::Delete(gone), Some(deleted)) = (&event, &self.deleted) {
                        deleted(gone);
                    }
                    self.subscribers
                        .retain(|s| s.unbounded_send(event.clone()).is_ok());
                    if self.subscribers.is_empty() {
                        return;
                    }
                }
                Err(e) => tracing::warn!(kind = %kind, error = %e, "watch failed; resuming"),
            }
        }
    }
}

/// A watch event of JSON objects as one of `K`s, each object read on its
/// own. One that does not read as `K` is logged, and the store keeps what
/// it last read of it (`None`: no event, or the one it had): an update is
/// not applied, a listing keeps the old one, a deletion removes it.
fn read_alone<K>(
    event: watcher::Result<watcher::Event<DynamicObject>>,
    store: &Store<K>,
) -> Option<watcher::Result<watcher::Event<K>>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned,
{
    use watcher::Event;
    let read = |o: DynamicObject| -> Option<K> {
        let mut at = ObjectRef::<K>::new(&o.name_any());
        if let Some(ns) = o.namespace() {
            at = at.within(&ns);
        }
        match serde_json::to_value(&o).and_then(serde_json::from_value::<K>) {
            Ok(k) => Some(k),
            Err(e) => {
                tracing::warn!(kind = %K::kind(&()), object = %at, error = %unquoted(&e.to_string()),
                    "an object that does not read as its kind: left as it was last read");
                store.get(&at).map(|k| (*k).clone())
            }
        }
    };
    Some(Ok(match event {
        Err(e) => return Some(Err(e)),
        Ok(Event::Init) => Event::Init,
        Ok(Event::InitDone) => Event::InitDone,
        Ok(Event::InitApply(o)) => Event::InitApply(read(o)?),
        Ok(Event::Apply(o)) => Event::Apply(read(o)?),
        Ok(Event::Delete(o)) => Event::Delete(read(o)?),
    }))
}

/// `message` with what it quotes left out: a value of a field that did not
/// read may be anything the object holds (a Scheduler's environment, a
/// password among it), and logs carry no secret.
fn unquoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut open: Option<char> = None;
    for c in message.chars() {
        match open {
            Some(q) if c == q => {
                open = None;
                out.push(c);
            }
            Some(_) => {}
            None if c == '"' || c == '`' => {
                open = Some(c);
                out.push(c);
                out.push('…');
            }
            None => out.push(c),
        }
    }
    out
}

/// The shared watches of one scope.
pub struct Watches {
    /// The Schedulers: the Scheduler controller's own objects, and what a
    /// WarmPool names.
    schedulers: Watch<Scheduler>,
    /// The WarmPools.
    pools: Watch<WarmPool>,
    /// The Secrets' metadata: a change tells who reads one to read it
    /// again.
    secrets: Watch<SecretMeta>,
    /// The database URLs read from those Secrets, at the versions the
    /// watch shows; what was read of a deleted Secret goes with it.
    urls: Arc<SecretUrls>,
}

impl Watches {
    /// The Schedulers' watch, to subscribe to or read.
    pub fn schedulers(&mut self) -> &mut Watch<Scheduler> {
        &mut self.schedulers
    }

    /// The WarmPools' watch.
    pub fn pools(&mut self) -> &mut Watch<WarmPool> {
        &mut self.pools
    }

    /// The Secrets' watch.
    pub fn secrets(&mut self) -> &mut Watch<SecretMeta> {
        &mut self.secrets
    }

    /// The database URLs read from the Secrets the watch shows.
    pub fn urls(&self) -> &Arc<SecretUrls> {
        &self.urls
    }

    /// The watches of `scope` (a namespace; `None`: all).
    pub fn new(client: &Client, scope: &Option<String>) -> Self {
        let urls = Arc::new(SecretUrls::default());
        let gone = urls.clone();
        Self {
            schedulers: Watch::new(namespaced(client, scope)).each_read_alone(namespaced_json::<
                Scheduler,
            >(
                client, scope
            )),
            pools: Watch::new(namespaced(client, scope))
                .each_read_alone(namespaced_json::<WarmPool>(client, scope)),
            secrets: Watch::new(namespaced(client, scope)).on_delete(move |m: &SecretMeta| {
                gone.forget(
                    m.metadata.namespace.as_deref().unwrap_or_default(),
                    &m.name_any(),
                )
            }),
            urls,
        }
    }

    /// Runs the three watches until their subscribers have gone.
    pub async fn run(self) {
        futures::join!(self.schedulers.run(), self.pools.run(), self.secrets.run());
    }
}

/// The cluster-wide watches, one for every scope: the WarmPoolClasses and
/// the Namespaces' metadata (their labels).
pub struct ClusterWatches {
    classes: Watch<WarmPoolClass>,
    namespaces: Watch<NamespaceMeta>,
}

impl ClusterWatches {
    /// The WarmPoolClasses' watch.
    pub fn classes(&mut self) -> &mut Watch<WarmPoolClass> {
        &mut self.classes
    }

    /// The Namespaces' watch (their labels).
    pub fn namespaces(&mut self) -> &mut Watch<NamespaceMeta> {
        &mut self.namespaces
    }

    /// Both watches, over the whole cluster.
    pub fn new(client: &Client) -> Self {
        let classes = ApiResource::erase::<WarmPoolClass>(&());
        Self {
            classes: Watch::new(Api::all(client.clone()))
                .each_read_alone(Api::all_with(client.clone(), &classes)),
            namespaces: Watch::new(Api::all(client.clone())),
        }
    }

    /// Runs both watches until their subscribers have gone.
    pub async fn run(self) {
        futures::join!(self.classes.run(), self.namespaces.run());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    /// Sixteen passes waiting at once on a store that has not listed.
    fn waiting(listed: &Listed) -> Vec<tokio::task::JoinHandle<bool>> {
        (0..16)
            .map(|_| {
                let listed = listed.clone();
                tokio::spawn(async move { listed.wait().await })
            })
            .collect()
    }

    #[tokio::test]
    async fn every_pass_waiting_for_a_listing_wakes_when_it_comes() {
        let (store, mut writer) = reflector::store::<Pod>();
        let listed = Listed::of(&store);
        let passes = waiting(&listed);
        // Let each of them poll (and register its wake-up) first.
        tokio::time::sleep(Duration::from_millis(50)).await;
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let woken = tokio::time::timeout(Duration::from_secs(2), future::join_all(passes))
            .await
            .expect("a pass still waits after the store listed");
        assert!(woken.into_iter().all(|w| w.expect("no pass panicked")));
    }

    #[tokio::test]
    async fn a_pass_before_the_deadline_waits_for_the_listing() {
        let (store, mut writer) = reflector::store::<Pod>();
        let first = FirstListing::new(vec![Listed::of(&store)], Duration::from_secs(30));
        let lists = async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            writer.apply_watcher_event(&watcher::Event::Init);
            writer.apply_watcher_event(&watcher::Event::InitDone);
        };
        let (ready, ()) = tokio::join!(first.ready(), lists);
        assert!(ready, "the pass waited and uses the stores");
    }

    #[tokio::test]
    async fn a_store_that_never_lists_holds_passes_up_until_the_deadline_only() {
        let (store, _writer) = reflector::store::<Pod>();
        let first = FirstListing::new(vec![Listed::of(&store)], Duration::from_millis(100));
        // Each pass, before the deadline and after it, reads the API.
        for _ in 0..2 {
            let ready = tokio::time::timeout(Duration::from_secs(10), first.ready()).await;
            assert_eq!(ready.ok(), Some(false));
        }
    }
}
