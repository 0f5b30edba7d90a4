//! One EC2 listing for many pools (docs/architecture.md#one-listing-for-many-pools).
//!
//! EC2 throttles `DescribeInstances` per account and region, for everything
//! the account runs. So the pools of one operator that list in the same
//! place (region, endpoint, the operator's and the cluster's tags) share
//! their listings: one paginated call, filtered by the operator's and the
//! cluster's tags, serves every pool of the place for
//! [`super::Tuning::listing_reuse`]. A pool's instances are picked out of it
//! by their pool and Scheduler tags, as the pool's own filter would.
//!
//! A pass may take a listing only if it was asked for after the pool's
//! last act: what the pool terminated, stopped, started
//! or ended would look otherwise in an older one. Its own launches are
//! counted apart (the loop's `ours`), and rows made after the listing was
//! asked for are never taken for rows of gone instances (the pass reads
//! the database's clock, and places the listing on it).
//!
//! A pass the last listing serves takes it without waiting. While a new
//! one is under way, a pass takes the last one if it is less than twice
//! `listing_reuse` old; else it waits for the new one, and takes it if it
//! is new enough for it: a burst of passes makes one call.
//!
//! Which listing a pass may take, and the tables
//! that pin that rule down.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use super::{
    budget::{Census, Counted},
    ec2::{Ec2, Ec2Config, Ec2Error, Tagged},
    plan::Ec2Instance,
    tags::{Ownership, TAG_CLUSTER, TAG_OPERATOR},
};

/// The places where pools list, each with its last listing: one per
/// operator (the Kubernetes mode's controller in one term as leader, the
/// local mode).
#[derive(Clone)]
pub struct Listings {
    places: Arc<Mutex<HashMap<PlaceKey, Arc<Place>>>>,
    /// When they were made: no loop of this operator acted before, and a
    /// replica that led before stopped acting before this one led.
    made: Instant,
    /// The last act of each pool's loops since (`namespace/name`); `None`
    /// while one is under way (or a pass failed in one).
    acts: Arc<Mutex<HashMap<String, Option<Instant>>>>,
}

impl Default for Listings {
    fn default() -> Self {
        Listings {
            places: Default::default(),
            made: Instant::now(),
            acts: Default::default(),
        }
    }
}

/// Where a listing is made, and for whom.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct PlaceKey {
    region: String,
    endpoint: Option<String>,
    operator: String,
    cluster: String,
}

impl Listings {
    /// What a new loop of `pool` may take: a listing asked for after the
    /// last act of the pool's loops before it, or after these listings
    /// were made. So the loops a starting operator makes take one listing
    /// between them, not one each.
    pub(super) fn floor(&self, pool: &str) -> Instant {
        let acts = self.acts.lock().unwrap_or_else(|e| e.into_inner());
        match acts.get(pool) {
            None => self.made,
            Some(Some(t)) => (*t).max(self.made),
            Some(None) => Instant::now(),
        }
    }

    /// A loop of `pool` begins to act (`done` false), or is done acting.
    pub(super) fn acting(&self, pool: &str, done: bool) {
        let mut acts = self.acts.lock().unwrap_or_else(|e| e.into_inner());
        acts.insert(pool.to_string(), done.then(Instant::now));
    }

    /// The place of `owner`'s pool, listing through `cfg`: shared with
    /// every pool of the same region, endpoint, operator and cluster.
    pub(super) fn place(&self, cfg: &Ec2Config, owner: &Ownership) -> Arc<Place> {
        let key = PlaceKey {
            region: cfg.region().clone(),
            endpoint: cfg.endpoint().clone(),
            operator: owner.operator().clone(),
            cluster: owner.cluster().clone(),
        };
        // A panic while holding this lock leaves a map that is still whole.
        let mut places = self.places.lock().unwrap_or_else(|e| e.into_inner());
        places
            .entry(key)
            .or_insert_with(|| Arc::new(Place::new(true)))
            .clone()
    }

    /// The census of WarmPoolClass `class`, whose pools launch through
    /// `ec2` at `cfg`: the cluster's (`owner`'s operator and cluster)
    /// present instances EC2 lists under the class's tag there, from a
    /// listing asked for within `within` (shared with the pools there, as
    /// their passes share one).
    pub async fn census(
        &self,
        ec2: &Ec2,
        cfg: &Ec2Config,
        class: &str,
        owner: &Ownership,
        within: Duration,
    ) -> Result<Census, Ec2Error> {
        let want = Want {
            after: Instant::now().checked_sub(within).unwrap_or(self.made),
            within,
            untagged: false,
        };
        self.place(cfg, owner)
            .census(class, owner, want, async |filter: &[(&str, &str)]| {
                ec2.describe_tagged(filter).await
            })
            .await
    }
}

/// Where one or more pools list, and its last listing.
pub(super) struct Place {
    /// Shared: listed by the operator's and the cluster's tags, for every
    /// pool there; else the one pool's own, by all its ownership tags.
    shared: bool,
    /// The last listing: a pass it serves takes it without waiting.
    last: Mutex<Option<Arc<Taken>>>,
    /// Held while a listing is under way.
    listing: tokio::sync::Mutex<()>,
    /// The last listing that failed, and when, while none has worked since.
    failed: Mutex<Option<(Instant, Ec2Error)>>,
}

/// After a failed listing, the place's passes are told so for this long
/// without another call.
const FAILED_FOR: Duration = Duration::from_secs(5);
/// While a listing is under way, a failure this recent is told rather than
/// waited on: a region or endpoint that does not answer costs one call's
/// time-out at a time, not one per pool in turn, and holds none of the
/// controller's reconciles for long.
const FAILED_WHILE_LISTING: Duration = Duration::from_secs(120);

/// `e` again, for another pass: all but a capacity error (not a listing's)
/// and a fence's (each pass checks its own).
fn again(e: &Ec2Error) -> Option<Ec2Error> {
    Some(match e {
        Ec2Error::Throttled { action } => Ec2Error::Throttled { action },
        Ec2Error::Denied {
            action,
            code,
            message,
        } => Ec2Error::Denied {
            action,
            code: code.clone(),
            message: message.clone(),
        },
        Ec2Error::Refused {
            action,
            code,
            message,
        } => Ec2Error::Refused {
            action,
            code: code.clone(),
            message: message.clone(),
        },
        Ec2Error::Transport { action, source } => Ec2Error::Transport {
            action,
            source: source.to_string().into(),
        },
        Ec2Error::Malformed { action, what } => Ec2Error::Malformed { action, what },
        Ec2Error::Capacity { .. } | Ec2Error::Fenced { .. } => return None,
    })
}

/// What a pass asks of a listing.
#[derive(Clone, Copy, Debug)]
pub(super) struct Want {
    /// It was asked for after this: the pool's last act.
    after: Instant,
    /// And less than this long ago.
    within: Duration,
    /// It shows the instances launched before instances carried the
    /// cluster's tag too (the loop's first listing, which adopts them).
    untagged: bool,
}

impl Want {
    /// A listing asked for after `after` and less than `within` ago,
    /// showing the instances without the cluster's tag too if `untagged`.
    pub(super) fn new(after: Instant, within: Duration, untagged: bool) -> Want {
        Want {
            after,
            within,
            untagged,
        }
    }
}

/// One listing, sorted by pool and by class.
#[derive(Debug)]
struct Taken {
    asked: Instant,
    untagged: bool,
    pools: HashMap<(String, String), Group>,
    /// The cluster's present instances by their class tag: each class's
    /// census ([`Place::census`]).
    classes: HashMap<String, Vec<Counted>>,
}

/// One pool's instances in a listing.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Group {
    /// Those with the cluster's tag.
    ours: Vec<Ec2Instance>,
    /// Those without it, not terminated (the listing asked for them).
    untagged: Vec<Ec2Instance>,
    /// Its present instances with the cluster's tag, each with the class
    /// tag it carries (if any) and whether it carries the namespace's: the
    /// loop adds what one launched before those tags lacks.
    marks: Vec<Marks>,
    /// One of the pool's instances came without an id, a state or a
    /// launch time.
    malformed: bool,
}

impl Group {
    /// Its instances with the cluster's tag, those without it, and the
    /// tenancy tags of the first.
    pub(super) fn into_parts(self) -> (Vec<Ec2Instance>, Vec<Ec2Instance>, Vec<Marks>) {
        (self.ours, self.untagged, self.marks)
    }
}

/// The tenancy tags one instance carries.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Marks {
    id: String,
    class: Option<String>,
    namespace: bool,
}

impl Marks {
    /// The instance.
    pub(super) fn id(&self) -> &str {
        &self.id
    }

    /// The class tag it carries, if any.
    pub(super) fn class(&self) -> Option<&str> {
        self.class.as_deref()
    }

    /// Whether it carries the namespace's tag.
    pub(super) fn has_namespace(&self) -> bool {
        self.namespace
    }
}

/// The pools of `listed` (their pool and Scheduler tags): those of
/// `cluster`, and those without a cluster's tag that are not terminated.
/// Another cluster's, and those without a pool's or a Scheduler's tag, are
/// no pool's here. And the classes' censuses: the cluster's present
/// instances by their class tag, whatever pool (if any) they are of.
pub(super) type Sorted = (
    HashMap<(String, String), Group>,
    HashMap<String, Vec<Counted>>,
);

/// `listed` sorted by pool and by class (see [`Sorted`]).
pub(super) fn sort(listed: Vec<Tagged>, cluster: &str) -> Sorted {
    let mut pools: HashMap<(String, String), Group> = HashMap::new();
    let mut classes: HashMap<String, Vec<Counted>> = HashMap::new();
    for t in listed {
        let ours = match t.cluster() {
            Some(c) if c == cluster => true,
            Some(_) => continue,
            None => false,
        };
        if let (true, Some(class), Some(i)) = (ours, t.class(), t.instance()) {
            if i.state().is_present() {
                classes
                    .entry(class.to_string())
                    .or_default()
                    .push(Counted::new(
                        i.id().to_string(),
                        t.namespace().unwrap_or_default().to_string(),
                        i.offering().instance_type().to_string(),
                    ));
            }
        }
        let (Some(pool), Some(scheduler)) = (t.pool(), t.scheduler()) else {
            continue;
        };
        let group = pools
            .entry((pool.to_string(), scheduler.to_string()))
            .or_default();
        let (class, namespace) = (t.class().map(String::from), t.namespace().is_some());
        match t.into_instance() {
            None => group.malformed = true,
            Some(i) if ours => {
                if i.state().is_present() {
                    group.marks.push(Marks {
                        id: i.id().to_string(),
                        class,
                        namespace,
                    });
                }
                group.ours.push(i)
            }
            Some(i) if i.state().is_present() => group.untagged.push(i),
            Some(_) => {}
        }
    }
    (pools, classes)
}

impl Place {
    fn new(shared: bool) -> Place {
        Place {
            shared,
            last: Mutex::new(None),
            listing: tokio::sync::Mutex::new(()),
            failed: Mutex::new(None),
        }
    }

    /// A place of one pool's own: its listings filter by all its ownership
    /// tags and serve it alone (a loop with EC2 credentials of its own).
    pub(super) fn own() -> Arc<Place> {
        Arc::new(Place::new(false))
    }

    /// `owner`'s instances in a listing `want` takes, and when that listing
    /// was asked for: the place's last if it will do, else a new one, made
    /// by `list` with the filter it is given (or, if another pass's
    /// listing under way will do once it is done, that one). A failed
    /// listing fails the passes that asked for it; the place's last stays.
    pub(super) async fn take<F>(
        &self,
        owner: &Ownership,
        want: Want,
        list: F,
    ) -> Result<(Instant, Group), Ec2Error>
    where
        F: AsyncFnOnce(&[(&str, &str)]) -> Result<Vec<Tagged>, Ec2Error>,
    {
        self.listing(owner, want, list).await?.of(owner)
    }

    /// The census of `class` in a listing `want` takes, as [`Place::take`]
    /// takes one: the cluster's present instances tagged with the class,
    /// whichever pool launched them and whatever it is doing now.
    pub(super) async fn census<F>(
        &self,
        class: &str,
        owner: &Ownership,
        want: Want,
        list: F,
    ) -> Result<Census, Ec2Error>
    where
        F: AsyncFnOnce(&[(&str, &str)]) -> Result<Vec<Tagged>, Ec2Error>,
    {
        let taken = self.listing(owner, want, list).await?;
        Ok(Census::new(
            taken.asked,
            taken.classes.get(class).cloned().unwrap_or_default(),
        ))
    }

    /// A listing `want` takes (see [`Place::take`]).
    async fn listing<F>(
        &self,
        owner: &Ownership,
        want: Want,
        list: F,
    ) -> Result<Arc<Taken>, Ec2Error>
    where
        F: AsyncFnOnce(&[(&str, &str)]) -> Result<Vec<Tagged>, Ec2Error>,
    {
        if let Some(taken) = self.fitting(want) {
            return Ok(taken);
        }
        if let Some(e) = self.failure(FAILED_FOR) {
            return Err(e);
        }
        let _listing = match self.listing.try_lock() {
            Ok(listing) => listing,
            Err(_) => {
                if let Some(e) = self.failure(FAILED_WHILE_LISTING) {
                    return Err(e);
                }
                // Another pass's listing is under way: the last one, if it
                // is less than twice as old as `within` allows, will do
                // meanwhile (a hand-out's launch waits for no listing).
                let meanwhile = Want {
                    within: want.within * 2,
                    ..want
                };
                if let Some(taken) = self.fitting(meanwhile) {
                    return Ok(taken);
                }
                self.listing.lock().await
            }
        };
        // The one under way while this pass waited may do; or it failed.
        if let Some(taken) = self.fitting(want) {
            return Ok(taken);
        }
        if let Some(e) = self.failure(FAILED_FOR) {
            return Err(e);
        }
        let filter: Vec<(&str, &str)> = match (self.shared, want.untagged) {
            (true, true) => vec![(TAG_OPERATOR, owner.operator())],
            (true, false) => vec![
                (TAG_OPERATOR, owner.operator()),
                (TAG_CLUSTER, owner.cluster()),
            ],
            (false, true) => owner.legacy_tags().to_vec(),
            (false, false) => owner.tags().to_vec(),
        };
        let asked = Instant::now();
        let listed = match list(&filter).await {
            Ok(listed) => listed,
            Err(e) => {
                if let Some(kept) = again(&e) {
                    *self.failed.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some((Instant::now(), kept));
                }
                return Err(e);
            }
        };
        *self.failed.lock().unwrap_or_else(|p| p.into_inner()) = None;
        let (pools, classes) = sort(listed, owner.cluster());
        let taken = Arc::new(Taken {
            asked,
            untagged: want.untagged,
            pools,
            classes,
        });
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(taken.clone());
        Ok(taken)
    }

    /// The last failed listing's error, if it failed within `within`.
    fn failure(&self, within: Duration) -> Option<Ec2Error> {
        let failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        failed
            .as_ref()
            .filter(|(at, _)| at.elapsed() < within)
            .and_then(|(_, e)| again(e))
    }

    /// The last listing, if it will do for `want`.
    fn fitting(&self, want: Want) -> Option<Arc<Taken>> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.as_ref()
            .filter(|t| {
                t.asked >= want.after
                    && t.asked.elapsed() < want.within
                    && (t.untagged || !want.untagged)
            })
            .cloned()
    }
}

impl Taken {
    fn of(&self, owner: &Ownership) -> Result<(Instant, Group), Ec2Error> {
        let key = (owner.pool().clone(), owner.scheduler().clone());
        let group = self.pools.get(&key).cloned().unwrap_or_default();
        if group.malformed {
            return Err(Ec2Error::Malformed {
                action: "DescribeInstances",
                what: "an instance id, state or launch time",
            });
        }
        Ok((self.asked, group))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use chrono::Utc;

    use super::*;
    use crate::warmpool::plan::Ec2State;
    use crate::warmpool::tags::{TAG_CLASS, TAG_NAMESPACE, TAG_POOL, TAG_SCHEDULER};

    fn owner(pool: &str) -> Ownership {
        Ownership::new("ns", pool, "sched", "orca-operator", "east")
    }

    /// `instance` listed with `tags` (key, value).
    fn listed_as(instance: Option<Ec2Instance>, tags: &[(&str, String)]) -> Tagged {
        Tagged::new(instance, |key| {
            tags.iter().find(|(k, _)| *k == key).map(|(_, v)| v.clone())
        })
    }

    /// The pool's and its Scheduler's tags of `pool`'s instances, and the
    /// cluster's if any.
    fn tags_of(pool: &str, cluster: Option<&str>) -> Vec<(&'static str, String)> {
        let o = owner(pool);
        let mut tags = vec![
            (TAG_POOL, o.pool().clone()),
            (TAG_SCHEDULER, o.scheduler().clone()),
        ];
        tags.extend(cluster.map(|c| (TAG_CLUSTER, c.to_string())));
        tags
    }

    fn tagged(id: &str, pool: &str, cluster: Option<&str>, state: Ec2State) -> Tagged {
        let instance = Ec2Instance::bare(id, state, Utc::now());
        listed_as(Some(instance), &tags_of(pool, cluster))
    }

    fn ids(g: &Group) -> Vec<&str> {
        g.ours.iter().map(|i| i.id()).collect()
    }

    /// The place's listing as `calls` counts them, answering `listed`.
    async fn take(
        place: &Place,
        pool: &str,
        want: Want,
        calls: &AtomicUsize,
        listed: &[Tagged],
    ) -> (Instant, Group) {
        place
            .take(&owner(pool), want, async |_filter: &[(&str, &str)]| {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok(listed.to_vec())
            })
            .await
            .unwrap()
    }

    fn want(after: Instant) -> Want {
        Want {
            after,
            within: Duration::from_secs(60),
            untagged: false,
        }
    }

    #[test]
    fn a_new_loop_takes_a_listing_from_after_its_pools_last_act() {
        let listings = Listings::default();
        let made = listings.made;
        assert_eq!(
            listings.floor("ns/a"),
            made,
            "no act yet: since they were made"
        );
        listings.acting("ns/a", false);
        let during = Instant::now();
        assert!(
            listings.floor("ns/a") >= during,
            "an act under way: a new listing"
        );
        listings.acting("ns/a", true);
        let done = listings.floor("ns/a");
        assert!(done > made && done <= Instant::now());
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(listings.floor("ns/a"), done, "after the act, from its end");
        assert_eq!(
            listings.floor("ns/b"),
            made,
            "another pool's act is not its"
        );
    }

    #[test]
    fn a_listing_is_sorted_by_pool_and_another_clusters_instances_are_no_ones() {
        let listed = vec![
            tagged("i-a1", "a", Some("east"), Ec2State::Running),
            tagged("i-b1", "b", Some("east"), Ec2State::Running),
            tagged("i-a2", "a", Some("west"), Ec2State::Running),
            tagged("i-a3", "a", None, Ec2State::Running),
            tagged("i-a4", "a", None, Ec2State::Terminated),
            listed_as(
                Some(Ec2Instance::bare("i-x", Ec2State::Running, Utc::now())),
                &tags_of("a", Some("east"))[1..],
            ),
        ];
        let (pools, _) = sort(listed, "east");
        let a = &pools[&(owner("a").pool().clone(), owner("a").scheduler().clone())];
        let b = &pools[&(owner("b").pool().clone(), owner("b").scheduler().clone())];
        assert_eq!(ids(a), ["i-a1"]);
        assert_eq!(a.untagged.len(), 1);
        assert_eq!(a.untagged[0].id(), "i-a3");
        assert_eq!(ids(b), ["i-b1"]);
        assert!(b.untagged.is_empty());
        assert_eq!(pools.len(), 2);
    }

    #[test]
    fn a_pool_of_another_scheduler_with_the_same_name_is_another_pool() {
        let mut tags = tags_of("a", Some("east"));
        tags[1].1 = Ownership::new("ns", "a", "other", "orca-operator", "east")
            .scheduler()
            .clone();
        let instance = Ec2Instance::bare("i-o", Ec2State::Running, Utc::now());
        let other = listed_as(Some(instance), &tags);
        let (pools, _) = sort(
            vec![tagged("i-a", "a", Some("east"), Ec2State::Running), other],
            "east",
        );
        assert_eq!(
            ids(&pools[&(owner("a").pool().clone(), owner("a").scheduler().clone())]),
            ["i-a"]
        );
    }

    #[tokio::test]
    async fn one_listing_serves_every_pool_of_the_place_until_one_acts() {
        let place = Place::new(true);
        let calls = AtomicUsize::new(0);
        let listed = [
            tagged("i-a", "a", Some("east"), Ec2State::Running),
            tagged("i-b", "b", Some("east"), Ec2State::Running),
        ];
        let start = Instant::now();
        let (asked, a) = take(&place, "a", want(start), &calls, &listed).await;
        let (again, b) = take(&place, "b", want(start), &calls, &listed).await;
        assert_eq!((ids(&a), ids(&b)), (vec!["i-a"], vec!["i-b"]));
        assert_eq!((calls.load(Ordering::SeqCst), again), (1, asked));
        // A pool with no instances in the listing has none.
        let (_, c) = take(&place, "c", want(start), &calls, &listed).await;
        assert_eq!((calls.load(Ordering::SeqCst), c), (1, Group::default()));
        // Pool b acted after the listing was asked for: it lists again; a
        // does not, and takes that newer listing.
        let acted = Instant::now();
        let (newer, _) = take(&place, "b", want(acted), &calls, &listed).await;
        assert!(newer >= acted);
        let (a_newer, _) = take(&place, "a", want(start), &calls, &listed).await;
        assert_eq!((calls.load(Ordering::SeqCst), a_newer), (2, newer));
    }

    #[tokio::test]
    async fn an_old_listing_or_one_without_the_untagged_is_taken_again() {
        let place = Place::new(true);
        let calls = AtomicUsize::new(0);
        let start = Instant::now();
        take(&place, "a", want(start), &calls, &[]).await;
        let adopting = Want {
            untagged: true,
            ..want(start)
        };
        take(&place, "a", adopting, &calls, &[]).await;
        assert_eq!(calls.load(Ordering::SeqCst), 2, "the first had no untagged");
        // The one with the untagged serves those without the need.
        take(&place, "b", want(start), &calls, &[]).await;
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        let fresh_only = Want {
            within: Duration::ZERO,
            ..want(start)
        };
        take(&place, "b", fresh_only, &calls, &[]).await;
        assert_eq!(
            calls.load(Ordering::SeqCst),
            3,
            "past `within`, listed anew"
        );
    }

    /// Pools a to d take a listing at once, each listing taking 50 ms and
    /// failing if `fail`: what each got.
    async fn four_at_once(
        place: &Arc<Place>,
        calls: &Arc<AtomicUsize>,
        fail: bool,
    ) -> Vec<Result<(Instant, Group), Ec2Error>> {
        let start = Instant::now();
        let mut tasks = Vec::new();
        for pool in ["a", "b", "c", "d"] {
            let (place, calls) = (place.clone(), calls.clone());
            tasks.push(tokio::spawn(async move {
                place
                    .take(&owner(pool), want(start), async |_f: &[(&str, &str)]| {
                        calls.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        if fail {
                            return Err(Ec2Error::Transport {
                                action: "DescribeInstances",
                                source: "no answer".into(),
                            });
                        }
                        Ok(vec![])
                    })
                    .await
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    }

    #[tokio::test]
    async fn passes_that_ask_at_once_make_one_call() {
        let place = Arc::new(Place::new(true));
        let calls = Arc::new(AtomicUsize::new(0));
        for got in four_at_once(&place, &calls, false).await {
            got.unwrap();
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    /// Pool b's listing, fresh, taking `ms` (counted in `calls`).
    fn listing_under_way(
        place: &Arc<Place>,
        calls: &Arc<AtomicUsize>,
        within: Duration,
        ms: u64,
    ) -> tokio::task::JoinHandle<(Instant, Group)> {
        let (place, calls) = (place.clone(), calls.clone());
        tokio::spawn(async move {
            let fresh = Want {
                within,
                ..want(Instant::now())
            };
            place
                .take(&owner("b"), fresh, async |_f: &[(&str, &str)]| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok(vec![])
                })
                .await
                .unwrap()
        })
    }

    #[tokio::test]
    async fn while_a_listing_is_under_way_a_pass_takes_the_last_one_if_not_too_old() {
        let place = Arc::new(Place::new(true));
        let calls = Arc::new(AtomicUsize::new(0));
        let start = Instant::now();
        let within = Duration::from_millis(300);
        let fast = Want {
            within,
            ..want(start)
        };
        take(&place, "a", fast, &calls, &[]).await;
        // Past `within`, not past twice it.
        tokio::time::sleep(Duration::from_millis(350)).await;
        let slow = listing_under_way(&place, &calls, within, 400);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let asked = Instant::now();
        let (taken, _) = take(&place, "a", fast, &calls, &[]).await;
        assert!(taken < asked, "the last listing, taken at once");
        assert!(
            asked.elapsed() < Duration::from_millis(300),
            "it did not wait"
        );
        slow.await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        // Past twice `within`, a pass waits for the one under way.
        tokio::time::sleep(Duration::from_millis(650)).await;
        let slow = listing_under_way(&place, &calls, within, 200);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let asked = Instant::now();
        let (taken, _) = take(&place, "a", fast, &calls, &[]).await;
        assert!(
            taken >= asked - Duration::from_millis(100),
            "the new one, waited for"
        );
        slow.await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 3, "and not listed again");
    }

    #[tokio::test]
    async fn a_listing_that_fails_slowly_is_made_once_for_the_passes_of_its_place() {
        let place = Arc::new(Place::new(true));
        let calls = Arc::new(AtomicUsize::new(0));
        let start = Instant::now();
        for got in four_at_once(&place, &calls, true).await {
            let e = got.expect_err("the listing failed");
            assert!(matches!(e, Ec2Error::Transport { .. }), "{e}");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1, "one call for the four");
        // A pass right after is told so without a call.
        let again = place
            .take(&owner("a"), want(start), async |_f: &[(&str, &str)]| {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok(vec![])
            })
            .await;
        assert!(again.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_malformed_instance_fails_its_own_pool_only() {
        let place = Place::new(true);
        let calls = AtomicUsize::new(0);
        let broken = listed_as(None, &tags_of("a", Some("east")));
        let listed = [broken, tagged("i-b", "b", Some("east"), Ec2State::Running)];
        let start = Instant::now();
        let (_, b) = take(&place, "b", want(start), &calls, &listed).await;
        assert_eq!(ids(&b), ["i-b"]);
        let a = place
            .take(&owner("a"), want(start), async |_f: &[(&str, &str)]| {
                Ok(vec![])
            })
            .await;
        assert!(matches!(a, Err(Ec2Error::Malformed { .. })), "{a:?}");
    }

    #[test]
    fn a_shared_place_filters_by_operator_and_cluster_an_own_one_by_every_tag() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let seen = Mutex::new(Vec::new());
        for (shared, untagged) in [(true, false), (true, true), (false, false), (false, true)] {
            let place = Place::new(shared);
            let w = Want {
                untagged,
                ..want(Instant::now())
            };
            rt.block_on(place.take(&owner("a"), w, async |f: &[(&str, &str)]| {
                let keys: Vec<String> = f.iter().map(|(k, _)| k.to_string()).collect();
                seen.lock().unwrap().push(keys);
                Ok(vec![])
            }))
            .unwrap();
        }
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen[0], [TAG_OPERATOR, TAG_CLUSTER]);
        assert_eq!(seen[1], [TAG_OPERATOR]);
        assert_eq!(seen[2].len(), 4);
        assert_eq!(seen[3].len(), 3);
        assert!(!seen[3].contains(&TAG_CLUSTER.to_string()));
    }

    #[test]
    fn a_census_counts_the_clusters_present_instances_of_the_class_whatever_their_pool() {
        let of_class = |id: &str, pool: Option<&str>, cluster: &str, class: &str, state| {
            let mut tags = tags_of(pool.unwrap_or("gone"), Some(cluster));
            if pool.is_none() {
                // Its pool's and Scheduler's tags lost: no pool's, still
                // the class's.
                tags.drain(..2);
            }
            tags.push((TAG_CLASS, class.into()));
            tags.push((TAG_NAMESPACE, "team-a".into()));
            listed_as(Some(Ec2Instance::bare(id, state, Utc::now())), &tags)
        };
        let listed = vec![
            of_class("i-1", Some("a"), "east", "shared", Ec2State::Running),
            of_class("i-2", Some("deleted"), "east", "shared", Ec2State::Stopped),
            of_class("i-3", None, "east", "shared", Ec2State::Pending),
            of_class("i-4", Some("a"), "east", "shared", Ec2State::Terminated),
            of_class("i-5", Some("a"), "west", "shared", Ec2State::Running),
            of_class("i-6", Some("a"), "east", "other", Ec2State::Running),
            tagged("i-7", "a", Some("east"), Ec2State::Running),
        ];
        let (_, classes) = sort(listed, "east");
        let mut shared: Vec<&str> = classes["shared"].iter().map(|c| c.id()).collect();
        shared.sort();
        assert_eq!(shared, ["i-1", "i-2", "i-3"]);
        assert_eq!(classes["shared"][0].namespace(), "team-a");
        assert_eq!(classes["other"].len(), 1);
        assert_eq!(classes.len(), 2);
    }
}
