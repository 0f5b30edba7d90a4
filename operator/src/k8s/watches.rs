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

use std::{sync::Arc, time::Instant};

use futures::{channel::mpsc, Stream, StreamExt};
use k8s_openapi::{api::core::v1::Secret, NamespaceResourceScope};
use kube::{
    core::PartialObjectMeta,
    runtime::{
        reflector::{self, store::Writer, Store},
        watcher, WatchStreamExt,
    },
    Api, Client, Resource, ResourceExt,
};
use serde::de::DeserializeOwned;

use super::database::SecretUrls;
use crate::crd::{Scheduler, WarmPool};

/// A Secret's metadata: the operator keeps no Secret's data.
pub type SecretMeta = PartialObjectMeta<Secret>;

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

/// One subscriber's part of a [`Watch`]: the shared store and this
/// subscriber's own stream of the watch's events.
pub struct Feed<K: Resource<DynamicType = ()> + Clone + 'static> {
    /// The watch's store, shared by every subscriber.
    pub store: Store<K>,
    /// Every event of the watch, in order, after the store has it.
    pub events: mpsc::UnboundedReceiver<watcher::Event<K>>,
}

impl<K> Feed<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    /// The events as a watcher stream, for `applied_objects`,
    /// `touched_objects` and `Controller::for_stream`.
    pub fn stream(
        self,
    ) -> (
        Store<K>,
        impl Stream<Item = watcher::Result<watcher::Event<K>>>,
    ) {
        (self.store, self.events.map(Ok))
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
    store: Store<K>,
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
            store,
            writer,
            subscribers: Vec::new(),
            deleted: None,
        }
    }

    /// `deleted` is told of each object the watch sees deleted, before
    /// the subscribers.
    pub fn on_delete(mut self, deleted: impl Fn(&K) + Send + 'static) -> Self {
        self.deleted = Some(Box::new(deleted));
        self
    }

    /// A new subscriber: every event from the watch's start on.
    pub fn subscribe(&mut self) -> Feed<K> {
        let (to, events) = mpsc::unbounded();
        self.subscribers.push(to);
        Feed {
            store: self.store.clone(),
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
        let stream = watcher(self.api, watcher::Config::default()).modify(slim);
        let stream = reflector::reflector(self.writer, stream).default_backoff();
        let mut stream = std::pin::pin!(stream);
        let started = Instant::now();
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

/// The shared watches of one scope.
pub struct Watches {
    /// The Schedulers: the Scheduler controller's own objects, and what a
    /// WarmPool names.
    pub schedulers: Watch<Scheduler>,
    /// The WarmPools.
    pub pools: Watch<WarmPool>,
    /// The Secrets' metadata: a change tells who reads one to read it
    /// again.
    pub secrets: Watch<SecretMeta>,
    /// The database URLs read from those Secrets, at the versions the
    /// watch shows; what was read of a deleted Secret goes with it.
    pub urls: Arc<SecretUrls>,
}

impl Watches {
    /// The watches of `scope` (a namespace; `None`: all).
    pub fn new(client: &Client, scope: &Option<String>) -> Self {
        let urls = Arc::new(SecretUrls::default());
        let gone = urls.clone();
        Self {
            schedulers: Watch::new(namespaced(client, scope)),
            pools: Watch::new(namespaced(client, scope)),
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
