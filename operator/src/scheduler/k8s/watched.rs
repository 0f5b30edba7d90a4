//! What a Scheduler's pass reads from the controller's watches rather than
//! from the API: its pods and Jobs (the stores of the watches that trigger
//! it), and whether its Secret changed (a watch of Secrets' metadata, so
//! the Secret is read again only when its `resourceVersion` moved). In the
//! steady state a pass makes no API request.
//!
//! A store can lag this replica's own writes: a pass that follows the one
//! that created a pod may start before the watch brings the pod back, and
//! would create it again (or, with a new sequence, another one). So each
//! create and delete is recorded as an *expectation* of the Scheduler; a
//! pass reads the stores only once they show every expectation met — the
//! object there, or gone (or going) — waiting briefly for that, and lists
//! from the API if they do not. Without the stores (a pass called on its
//! own, in tests, or a watch that cannot list), it lists from the API.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use k8s_openapi::api::{batch::v1::Job, core::v1::Pod, core::v1::Secret};
use kube::{
    core::PartialObjectMeta,
    runtime::reflector::{ObjectRef, Store},
    Api, ResourceExt,
};

use crate::by_object::{key, locked, ByObject};
use crate::crd::SecretKeyRef;
use crate::runtime::database::{self, ReadUrl, SecretError, SecretUrls};
use crate::runtime::names::LABEL_SCHEDULER;
use crate::runtime::watches::FirstListing;
use crate::scheduler;

/// How long a pass waits for the stores to show its Scheduler's last
/// writes before it lists from the API instead.
const EXPECTATION_WAIT: Duration = Duration::from_secs(2);

/// The stores of one scope's watches (a namespace, or all).
#[derive(Clone)]
pub struct Stores {
    pods: Store<Pod>,
    jobs: Store<Job>,
    secrets: Store<PartialObjectMeta<Secret>>,
    /// The URLs read from those Secrets (shared with the WarmPool
    /// controller).
    urls: Arc<SecretUrls>,
    /// The first listing of the pods, the Jobs and the Secrets.
    listed: FirstListing,
}

impl Stores {
    /// The stores of one scope: its pods, Jobs and Secrets, the URLs read
    /// from those Secrets, and their first listing.
    pub fn new(
        pods: Store<Pod>,
        jobs: Store<Job>,
        secrets: Store<PartialObjectMeta<Secret>>,
        urls: Arc<SecretUrls>,
        listed: FirstListing,
    ) -> Self {
        Stores {
            pods,
            jobs,
            secrets,
            urls,
            listed,
        }
    }
}

/// A write the stores must show before a pass may believe them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    PodCreated(String),
    PodDeleted(String),
    JobCreated(String),
    JobDeleted(String),
}

/// The watches' stores and each Scheduler's writes not yet seen in them:
/// what lets a pass skip the API.
#[derive(Default)]
pub struct Watched {
    scopes: Mutex<Vec<(Option<String>, Stores)>>,
    expected: ByObject<Vec<Expect>>,
    /// Whether a pass said that the watches had not listed.
    warned: AtomicBool,
}

impl Watched {
    /// The watches of `scope` (a namespace; `None`: all) keep `stores`.
    pub fn register(&self, scope: Option<String>, stores: Stores) {
        locked(&self.scopes).push((scope, stores));
    }

    /// The stores covering `ns` once they have listed, waiting for that
    /// in the controller's first seconds; `None` without them.
    pub async fn ready(&self, ns: &str) -> Option<Stores> {
        let stores = locked(&self.scopes)
            .iter()
            .find(|(scope, _)| scope.as_deref().is_none_or(|s| s == ns))
            .map(|(_, s)| s.clone())?;
        match stores.listed.ready().await {
            true => Some(stores),
            false => {
                if !self.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "the watches of pods, Jobs and Secrets have not listed yet; \
                         the Scheduler controller lists from the API until they have \
                         (check the operator's RBAC: list and watch on pods, jobs and \
                         secrets)"
                    );
                }
                None
            }
        }
    }

    /// A pass of Scheduler `ns/name` made `write`.
    pub fn expect(&self, ns: &str, name: &str, write: Expect) {
        self.expected
            .lock()
            .entry(key(ns, name))
            .or_default()
            .push(write);
    }

    /// The pods and Jobs of Scheduler `ns/name` from the stores, once they
    /// show its writes (waiting up to `EXPECTATION_WAIT`, 2 s); `None` if they
    /// do not by then, or there are no stores: list from the API.
    pub async fn owned(&self, ns: &str, name: &str) -> Option<(Vec<Pod>, Vec<Job>)> {
        let stores = self.ready(ns).await?;
        let expected = self
            .expected
            .lock()
            .get(&key(ns, name))
            .cloned()
            .unwrap_or_default();
        let deadline = Instant::now() + EXPECTATION_WAIT;
        while !expected.iter().all(|e| met(&stores, ns, e)) {
            if Instant::now() >= deadline {
                tracing::debug!(scheduler = %name, namespace = %ns, ?expected,
                    "the watches do not show this replica's writes yet; listing");
                self.expected.lock().remove(&key(ns, name));
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Met: a later pass needs them no more (the stores never go back).
        if !expected.is_empty() {
            let mut all = self.expected.lock();
            if let Some(left) = all.get_mut(&key(ns, name)) {
                left.retain(|e| !expected.contains(e));
                if left.is_empty() {
                    all.remove(&key(ns, name));
                }
            }
        }
        let label = scheduler::scheduler_label(name);
        let (pods, jobs) = (
            labelled(&stores.pods, ns, &label),
            labelled(&stores.jobs, ns, &label),
        );
        Some((pods, jobs))
    }

    /// The database URL in `secret_ref`'s Secret of `ns`: read again only
    /// when the watch of Secrets shows its `resourceVersion` moved, and
    /// once for all the Schedulers and WarmPools on it (see
    /// [`SecretUrls`]); from the API each time without the watch, or when
    /// the watch holds no such Secret (it may lag a new one).
    pub async fn read_url(
        &self,
        secrets: &Api<Secret>,
        ns: &str,
        secret_ref: &SecretKeyRef,
    ) -> Result<ReadUrl, SecretError> {
        let Some(stores) = self.ready(ns).await else {
            return database::read_url(secrets, ns, secret_ref).await;
        };
        let Some(meta) = stores
            .secrets
            .get(&ObjectRef::new(&secret_ref.name).within(ns))
        else {
            return database::read_url(secrets, ns, secret_ref).await;
        };
        let version = meta.resource_version().unwrap_or_default();
        stores.urls.read(secrets, ns, secret_ref, &version).await
    }

    /// Scheduler `ns/name` is gone: nothing of it is kept.
    pub fn forget(&self, ns: &str, name: &str) {
        self.expected.forget(ns, name);
    }
}

fn met(stores: &Stores, ns: &str, e: &Expect) -> bool {
    let pod = |n: &str| stores.pods.get(&ObjectRef::new(n).within(ns));
    let job = |n: &str| stores.jobs.get(&ObjectRef::new(n).within(ns));
    match e {
        Expect::PodCreated(n) => pod(n).is_some(),
        Expect::JobCreated(n) => job(n).is_some(),
        Expect::PodDeleted(n) => pod(n).is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
        Expect::JobDeleted(n) => job(n).is_none_or(|j| j.metadata.deletion_timestamp.is_some()),
    }
}

/// The objects of `store` in `ns` labelled as Scheduler `label`'s.
fn labelled<K: kube::Resource<DynamicType = ()> + Clone + 'static>(
    store: &Store<K>,
    ns: &str,
    label: &str,
) -> Vec<K> {
    store
        .state()
        .iter()
        .filter(|o| {
            o.meta().namespace.as_deref() == Some(ns)
                && o.meta()
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_SCHEDULER))
                    .map(String::as_str)
                    == Some(label)
        })
        .map(|o| (**o).clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::watches::Listed;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use kube::runtime::{reflector, watcher::Event};

    fn pod(name: &str, scheduler: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                labels: Some(
                    [(
                        LABEL_SCHEDULER.to_string(),
                        scheduler::scheduler_label(scheduler),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// Watched stores over `pods` (listed), no Jobs, no Secrets; the pods'
    /// writer, to play the watch.
    fn watched(pods: Vec<Pod>) -> (Watched, reflector::store::Writer<Pod>) {
        let (pod_store, mut pod_writer) = reflector::store::<Pod>();
        let (jobs, mut job_writer) = reflector::store::<Job>();
        let (secrets, mut secret_writer) = reflector::store::<PartialObjectMeta<Secret>>();
        pod_writer.apply_watcher_event(&Event::Init);
        for p in pods {
            pod_writer.apply_watcher_event(&Event::InitApply(p));
        }
        pod_writer.apply_watcher_event(&Event::InitDone);
        job_writer.apply_watcher_event(&Event::Init);
        job_writer.apply_watcher_event(&Event::InitDone);
        secret_writer.apply_watcher_event(&Event::Init);
        secret_writer.apply_watcher_event(&Event::InitDone);
        let w = Watched::default();
        let listed = vec![
            Listed::of(&pod_store),
            Listed::of(&jobs),
            Listed::of(&secrets),
        ];
        w.register(
            Some("ns".into()),
            Stores {
                pods: pod_store,
                jobs,
                secrets,
                urls: Default::default(),
                listed: FirstListing::new(listed, Duration::ZERO),
            },
        );
        (w, pod_writer)
    }

    fn names(owned: &Option<(Vec<Pod>, Vec<Job>)>) -> Option<Vec<String>> {
        owned
            .as_ref()
            .map(|(pods, _)| pods.iter().map(|p| p.name_any()).collect())
    }

    #[tokio::test]
    async fn a_pass_reads_only_its_schedulers_pods_from_the_store() {
        let (w, _writer) = watched(vec![pod("a-1", "a"), pod("b-1", "b")]);
        assert_eq!(names(&w.owned("ns", "a").await), Some(vec!["a-1".into()]));
        // No stores for another namespace: list from the API.
        assert_eq!(names(&w.owned("other", "a").await), None);
    }

    #[tokio::test]
    async fn a_store_that_lags_a_create_is_waited_for_not_believed() {
        let (w, mut writer) = watched(vec![pod("a-1", "a")]);
        w.expect("ns", "a", Expect::PodCreated("a-2".into()));
        let late = pod("a-2", "a");
        let watch = async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            writer.apply_watcher_event(&Event::Apply(late));
            writer
        };
        let (owned, _writer) = tokio::join!(w.owned("ns", "a"), watch);
        let mut got = names(&owned).expect("the store, once it shows the pod");
        got.sort();
        assert_eq!(got, ["a-1", "a-2"]);
        // Met once, it holds no later pass up.
        assert!(w.expected.lock().is_empty());
    }

    #[tokio::test]
    async fn a_store_that_never_shows_a_write_is_listed_past() {
        let (w, _writer) = watched(vec![pod("a-1", "a")]);
        w.expect("ns", "a", Expect::PodCreated("a-2".into()));
        assert_eq!(names(&w.owned("ns", "a").await), None);
        // The list was believed instead: the next pass uses the store.
        assert_eq!(names(&w.owned("ns", "a").await), Some(vec!["a-1".into()]));
    }

    #[tokio::test]
    async fn a_deleted_pod_still_in_the_store_is_met_once_it_is_going() {
        let mut going = pod("a-1", "a");
        going.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        let (w, _writer) = watched(vec![going]);
        w.expect("ns", "a", Expect::PodDeleted("a-1".into()));
        assert!(w.owned("ns", "a").await.is_some());
    }
}
