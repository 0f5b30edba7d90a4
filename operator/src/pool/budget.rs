//! What the pools of each WarmPoolClass hold, and the one place launches
//! are granted against the class's limits: a pool's loop asks before each
//! `RunInstances` batch and gets at most the room left, counted over every
//! pool of the class in this process under one lock — so two pools racing
//! for the last places never pass a limit together. Nothing here ever
//! takes an instance back: a lowered limit only stops launches.
//!
//! A pool's holding is what its last listing showed present plus what it
//! launched since; a pool of the class without a loop here (stopped by a
//! problem, or not reconciled yet since a restart) counts as its status
//! last said, its vCPUs at the class's largest type.
//!
//! Kept whole, one concept: the book of a class and the one way launches
//! are granted from it, with the tests that race two pools through it.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use crate::by_object::locked;
use crate::crd::{ClassLimits, WarmPoolClassSpec};

/// How long a class says `LimitReached` after a pool was last held back.
pub const LIMIT_SHOWN: Duration = Duration::from_secs(60);

/// A pool of a class as its WarmPool shows it, for the pools without a loop.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Member {
    /// `namespace/name`.
    pub pool: String,
    pub namespace: String,
    /// The instances its status counts (launching, idle, busy, stopped,
    /// terminating).
    pub instances: i64,
}

/// The class's side of the book: its limits, its members, what its pools
/// hold.
#[derive(Default)]
struct Book {
    limits: ClassLimits,
    namespace_limits: ClassLimits,
    /// The types a pool of the class may use: a pool without a loop counts
    /// each of its instances at the largest of them.
    types: Vec<String>,
    members: Vec<Member>,
    /// By pool: the loop that reports it and its instances by type.
    held: HashMap<String, Held>,
    /// When a pool was last held back, and why.
    held_back: Option<(Instant, String)>,
    /// The members were told ([`Budgets::set_members`]).
    members_known: bool,
}

struct Held {
    loop_id: u64,
    namespace: String,
    by_type: BTreeMap<String, i64>,
}

/// Instances and vCPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub instances: i64,
    pub vcpus: i64,
}

impl Usage {
    fn add(&mut self, other: Usage) {
        self.instances += other.instances;
        self.vcpus += other.vcpus;
    }
}

/// What a class's pools hold, for its status.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClassUsage {
    pub total: Usage,
    pub namespaces: BTreeMap<String, Usage>,
    /// Why a pool was held back within [`LIMIT_SHOWN`].
    pub held_back: Option<String>,
}

/// Every class's book, shared by the loops of one operator process.
#[derive(Default)]
pub struct Budgets {
    books: Mutex<HashMap<String, Book>>,
    /// vCPUs by instance type, as EC2 describes them (the same everywhere).
    vcpus: Mutex<HashMap<String, i64>>,
    next: AtomicU64,
}

impl Budgets {
    /// Tells the book of `class` its limits and types, from its spec.
    pub fn set_limits(&self, class: &str, spec: &WarmPoolClassSpec) {
        let mut books = locked(&self.books);
        let book = books.entry(class.to_string()).or_default();
        book.limits = spec.limits.clone().unwrap_or_default();
        book.namespace_limits = spec.namespace_limits.clone().unwrap_or_default();
        book.types = spec.instance_types.clone();
    }

    /// Tells the book of `class` its members: every WarmPool naming it, in
    /// every scope. Until it is told, nothing of the class is launched
    /// (a pool without a loop here would not be counted); pools no longer
    /// members stop counting.
    pub fn set_members(&self, class: &str, members: Vec<Member>) {
        let mut books = locked(&self.books);
        let book = books.entry(class.to_string()).or_default();
        book.held
            .retain(|pool, _| members.iter().any(|m| &m.pool == pool));
        book.members = members;
        book.members_known = true;
    }

    /// The classes with a book.
    pub fn classes(&self) -> Vec<String> {
        locked(&self.books).keys().cloned().collect()
    }

    /// Forgets `class` (deleted): its pools are refused until it is back.
    pub fn forget_class(&self, class: &str) {
        locked(&self.books).remove(class);
    }

    /// The book's handle for the loop of `pool` (in `namespace`) of `class`.
    pub fn budget(self: &Arc<Self>, class: &str, pool: &str, namespace: &str) -> Budget {
        Budget {
            budgets: self.clone(),
            class: class.to_string(),
            pool: pool.to_string(),
            namespace: namespace.to_string(),
            loop_id: self.next.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Of `types`, those whose vCPUs are not known yet.
    pub fn unknown_vcpus(&self, types: &[String]) -> Vec<String> {
        let known = locked(&self.vcpus);
        types
            .iter()
            .filter(|t| !t.is_empty() && !known.contains_key(*t))
            .cloned()
            .collect()
    }

    /// Learns the vCPUs of instance types.
    pub fn learn_vcpus(&self, vcpus: impl IntoIterator<Item = (String, i64)>) {
        locked(&self.vcpus).extend(vcpus);
    }

    /// What `class`'s pools hold.
    pub fn usage(&self, class: &str) -> ClassUsage {
        let books = locked(&self.books);
        let vcpus = locked(&self.vcpus);
        let Some(book) = books.get(class) else {
            return ClassUsage::default();
        };
        let mut out = ClassUsage {
            held_back: book
                .held_back
                .as_ref()
                .filter(|(at, _)| at.elapsed() < LIMIT_SHOWN)
                .map(|(_, why)| why.clone()),
            ..ClassUsage::default()
        };
        for (namespace, u) in book.by_namespace(&vcpus) {
            out.total.add(u);
            out.namespaces.insert(namespace, u);
        }
        out
    }
}

impl Book {
    /// What each namespace's pools hold.
    fn by_namespace(&self, vcpus: &HashMap<String, i64>) -> BTreeMap<String, Usage> {
        let largest = self
            .types
            .iter()
            .filter_map(|t| vcpus.get(t))
            .copied()
            .max()
            .unwrap_or(0);
        let mut out: BTreeMap<String, Usage> = BTreeMap::new();
        for h in self.held.values() {
            let u = out.entry(h.namespace.clone()).or_default();
            for (t, n) in &h.by_type {
                u.instances += n;
                u.vcpus += n * vcpus.get(t).copied().unwrap_or(0);
            }
        }
        for m in self
            .members
            .iter()
            .filter(|m| !self.held.contains_key(&m.pool))
        {
            out.entry(m.namespace.clone()).or_default().add(Usage {
                instances: m.instances,
                vcpus: m.instances * largest,
            });
        }
        out
    }
}

/// A grant: how many of the instances asked for may be launched, and if
/// fewer, why (the `LimitReached` message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub count: u32,
    pub held_back: Option<String>,
}

/// One pool loop's handle on its class's book; dropped with the loop, its
/// holding stops counting (a pool without a loop counts by its status).
pub struct Budget {
    budgets: Arc<Budgets>,
    class: String,
    pool: String,
    namespace: String,
    loop_id: u64,
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Budget({} of {})", self.pool, self.class)
    }
}

/// Which limit left the least room, with what was used of it.
struct Room {
    count: i64,
    limit: &'static str,
    max: i64,
    used: i64,
    /// What one instance takes of it.
    per: i64,
    scope: String,
}

/// Of the limits `book` sets, the one that leaves the least room for an
/// instance of `per` vCPUs (none when they are not known): `total` is what
/// all the class's pools hold, `mine` what those of `namespace` do.
fn tightest(book: &Book, total: Usage, mine: Usage, per: i64, namespace: &str) -> Option<Room> {
    let all = || "all its pools".to_string();
    let here = || format!("the pools of namespace {namespace}");
    let rooms = [
        (
            book.limits.instances,
            "limits.instances",
            total.instances,
            1,
            all(),
        ),
        (book.limits.vcpus, "limits.vcpus", total.vcpus, per, all()),
        (
            book.namespace_limits.instances,
            "namespaceLimits.instances",
            mine.instances,
            1,
            here(),
        ),
        (
            book.namespace_limits.vcpus,
            "namespaceLimits.vcpus",
            mine.vcpus,
            per,
            here(),
        ),
    ];
    rooms
        .into_iter()
        .filter_map(|(max, limit, used, per, scope)| {
            let max = max?;
            Some(Room {
                count: if per > 0 {
                    (max - used).max(0) / per
                } else {
                    0
                },
                limit,
                max,
                used,
                per,
                scope,
            })
        })
        .min_by_key(|r| r.count)
}

impl Room {
    /// Why `count` of `wanted` instances of `instance_type` were granted
    /// in WarmPoolClass `class`, this room being the tightest.
    fn held_back(&self, class: &str, instance_type: &str, wanted: u32, count: u32) -> String {
        if self.per == 0 {
            return format!(
                "WarmPoolClass {class}: the vCPUs of {instance_type} are not known yet \
                 ({}): {wanted} more wanted, none launched",
                self.limit
            );
        }
        let unit = if self.limit.ends_with("instances") {
            "instances"
        } else {
            "vCPUs"
        };
        format!(
            "WarmPoolClass {class}: {} hold {} of their {} {unit} ({}): {wanted} more wanted, {count} launched",
            self.scope,
            self.used + self.per * count as i64,
            self.max,
            self.limit
        )
    }
}

impl Budget {
    /// The class the pool counts against.
    pub fn class(&self) -> &str {
        &self.class
    }

    /// What the pool holds now, by instance type: its last listing's present
    /// instances and those it launched since.
    pub fn held(&self, by_type: BTreeMap<String, i64>) {
        let mut books = locked(&self.budgets.books);
        let Some(book) = books.get_mut(&self.class) else {
            return;
        };
        book.held.insert(
            self.pool.clone(),
            Held {
                loop_id: self.loop_id,
                namespace: self.namespace.clone(),
                by_type,
            },
        );
    }

    /// Up to `wanted` instances of `instance_type`, as many as every limit
    /// of the class leaves room for; those granted count as held at once.
    pub fn grant(&self, instance_type: &str, wanted: u32) -> Grant {
        let mut books = locked(&self.budgets.books);
        let vcpus = locked(&self.budgets.vcpus);
        let Some(book) = books.get_mut(&self.class) else {
            return Grant {
                count: 0,
                held_back: Some(format!("WarmPoolClass {} is not known yet", self.class)),
            };
        };
        if !book.members_known {
            // Not every pool of the class is counted yet (the operator's
            // first seconds): the next pass asks again.
            tracing::debug!(pool = %self.pool, class = %self.class, "the class's pools are not counted yet");
            return Grant {
                count: 0,
                held_back: None,
            };
        }
        let usage = book.by_namespace(&vcpus);
        let mut total = Usage::default();
        for u in usage.values() {
            total.add(*u);
        }
        let mine = usage.get(&self.namespace).copied().unwrap_or_default();
        let per = vcpus.get(instance_type).copied().unwrap_or(0);
        let tightest = tightest(book, total, mine, per, &self.namespace);
        let count = tightest
            .as_ref()
            .map_or(wanted as i64, |r| r.count.min(wanted as i64)) as u32;
        let held_back = tightest
            .filter(|_| count < wanted)
            .map(|r| r.held_back(&self.class, instance_type, wanted, count));
        if count > 0 {
            let held = book.held.entry(self.pool.clone()).or_insert_with(|| Held {
                loop_id: self.loop_id,
                namespace: self.namespace.clone(),
                by_type: BTreeMap::new(),
            });
            *held.by_type.entry(instance_type.to_string()).or_default() += count as i64;
        }
        if let Some(why) = &held_back {
            book.held_back = Some((Instant::now(), why.clone()));
        }
        Grant { count, held_back }
    }

    /// Gives back `n` granted instances of `instance_type` that were not
    /// launched.
    pub fn release(&self, instance_type: &str, n: u32) {
        let mut books = locked(&self.budgets.books);
        if let Some(held) = books
            .get_mut(&self.class)
            .and_then(|b| b.held.get_mut(&self.pool))
        {
            let count = held.by_type.entry(instance_type.to_string()).or_default();
            *count = (*count - n as i64).max(0);
        }
    }

    /// The book of all classes, for the vCPUs.
    pub fn budgets(&self) -> &Budgets {
        &self.budgets
    }
}

impl Drop for Budget {
    fn drop(&mut self) {
        let mut books = locked(&self.budgets.books);
        if let Some(book) = books.get_mut(&self.class) {
            if book
                .held
                .get(&self.pool)
                .is_some_and(|h| h.loop_id == self.loop_id)
            {
                book.held.remove(&self.pool);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(instances: Option<i64>, vcpus: Option<i64>) -> ClassLimits {
        ClassLimits { instances, vcpus }
    }

    fn member(pool: &str) -> Member {
        let namespace = pool.split('/').next().unwrap_or_default().to_string();
        Member {
            pool: pool.into(),
            namespace,
            instances: 0,
        }
    }

    fn spec(total: ClassLimits, per_ns: ClassLimits) -> WarmPoolClassSpec {
        let mut spec: WarmPoolClassSpec =
            serde_yaml::from_str("region: r\nlaunch: {runCommand: run}\n").unwrap();
        spec.instance_types = vec!["t3.micro".into(), "t3.xlarge".into()];
        spec.limits = Some(total);
        spec.namespace_limits = Some(per_ns);
        spec
    }

    fn book(total: ClassLimits, per_ns: ClassLimits, members: &[&str]) -> Arc<Budgets> {
        let b = Arc::new(Budgets::default());
        b.learn_vcpus([("t3.micro".to_string(), 2), ("t3.xlarge".to_string(), 4)]);
        b.set_limits("shared", &spec(total, per_ns));
        b.set_members("shared", members.iter().map(|m| member(m)).collect());
        b
    }

    #[test]
    fn a_namespace_gets_no_more_than_its_limit_and_says_which() {
        let b = book(limits(None, None), limits(Some(3), None), &["a/p"]);
        let p = b.budget("shared", "a/p", "a");
        let g = p.grant("t3.micro", 5);
        assert_eq!(g.count, 3);
        assert_eq!(
            g.held_back.as_deref(),
            Some(
                "WarmPoolClass shared: the pools of namespace a hold 3 of their 3 instances \
                 (namespaceLimits.instances): 5 more wanted, 3 launched"
            )
        );
        assert_eq!(p.grant("t3.micro", 1).count, 0);
    }

    #[test]
    fn two_pools_racing_never_pass_the_class_limit_together() {
        let b = book(limits(Some(5), None), limits(None, None), &["a/p", "b/q"]);
        let (p, q) = (
            b.budget("shared", "a/p", "a"),
            b.budget("shared", "b/q", "b"),
        );
        let handles: Vec<_> = [p, q]
            .into_iter()
            .map(|budget| {
                std::thread::spawn(move || {
                    let got: u32 = (0..10).map(|_| budget.grant("t3.micro", 1).count).sum();
                    (got, budget)
                })
            })
            .collect();
        let got: Vec<(u32, Budget)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(got.iter().map(|(n, _)| n).sum::<u32>(), 5);
        assert_eq!(b.usage("shared").total.instances, 5);
    }

    #[test]
    fn vcpus_count_by_type_and_a_lowered_limit_only_stops_launches() {
        let b = book(limits(None, Some(8)), limits(None, None), &["a/p"]);
        let p = b.budget("shared", "a/p", "a");
        p.held(BTreeMap::from([("t3.micro".to_string(), 2)]));
        let g = p.grant("t3.xlarge", 3);
        assert_eq!(g.count, 1, "4 of 8 vCPUs held, one xlarge fits");
        assert!(g.held_back.unwrap().contains("hold 8 of their 8 vCPUs"));
        b.set_limits("shared", &spec(limits(None, Some(2)), limits(None, None)));
        assert_eq!(b.usage("shared").total.vcpus, 8, "nothing given back");
        assert_eq!(p.grant("t3.micro", 1).count, 0);
    }

    #[test]
    fn a_pool_without_a_loop_counts_by_its_status_and_a_dropped_loop_stops_counting() {
        let b = book(limits(Some(4), None), limits(None, None), &[]);
        b.set_members(
            "shared",
            vec![
                Member {
                    instances: 3,
                    ..member("a/old")
                },
                member("a/p"),
            ],
        );
        let p = b.budget("shared", "a/p", "a");
        assert_eq!(p.grant("t3.micro", 5).count, 1);
        drop(p);
        assert_eq!(b.usage("shared").total.instances, 3);
    }

    #[test]
    fn nothing_is_granted_before_the_members_are_known() {
        let b = Arc::new(Budgets::default());
        b.set_limits("shared", &spec(limits(Some(4), None), limits(None, None)));
        let p = b.budget("shared", "a/p", "a");
        assert_eq!(
            p.grant("t3.micro", 1),
            Grant {
                count: 0,
                held_back: None
            }
        );
        b.set_members("shared", vec![member("a/p")]);
        assert_eq!(p.grant("t3.micro", 1).count, 1);
    }

    #[test]
    fn a_type_of_unknown_vcpus_is_not_launched_under_a_vcpu_limit() {
        let b = book(limits(None, Some(100)), limits(None, None), &["a/p"]);
        let p = b.budget("shared", "a/p", "a");
        let g = p.grant("m7i.large", 1);
        assert_eq!(g.count, 0);
        assert!(g.held_back.unwrap().contains("not known yet"));
        assert_eq!(
            b.unknown_vcpus(&["m7i.large".into(), "t3.micro".into()]),
            ["m7i.large"]
        );
    }
}
