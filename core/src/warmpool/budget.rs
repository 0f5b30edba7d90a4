//! What each WarmPoolClass's instances are, and the one place launches are
//! granted against the class's limits: a pool's loop asks before each
//! `RunInstances` batch and gets at most the room left, counted under one
//! lock for every pool of the class in this process, so two pools racing
//! for the last places never pass a limit together. Nothing here ever
//! takes an instance back: a lowered limit only stops launches.
//!
//! A class's book counts what runs, not what the WarmPools say: the
//! instances EC2 lists under the class's tag (`orca.dev/class`) in its
//! region — its census, taken every few seconds by the classes' owner
//! (`crate::warmpool::k8s::classes`) — by their own namespace tag and type, whatever
//! their pool is doing (orphaned, retiring, refused, loopless, being
//! deleted, gone); plus what this process launched (or may have launched)
//! through the book that no census has shown yet, and the grants whose
//! `RunInstances` is still under way. A pool that names the class but is
//! not admitted by it is never granted anything, and instances launched
//! under another class (or none) do not count here.
//!
//! The book of a class and the one way launches
//! are granted from it (its tables are `budget_tests.rs`).

use std::{
    collections::{BTreeMap, HashMap, HashSet},
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

/// A census older than this grants nothing: what ran may have changed too
/// much (the classes' owner takes one every few seconds).
pub const CENSUS_FRESH: Duration = Duration::from_secs(60);

/// How long after its launch an instance EC2 has not listed yet is still
/// counted: EC2's listings may lag a launch by seconds, and an instance a
/// census asked for this long after its launch does not show is gone.
pub const LISTING_LAG: Duration = Duration::from_secs(120);

/// One present instance of a class, as EC2 listed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counted {
    id: String,
    /// Its `orca.dev/namespace` tag (empty if it has none).
    namespace: String,
    instance_type: String,
}

impl Counted {
    /// The instance's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its `orca.dev/namespace` tag (empty if it has none).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Its instance type, as EC2 listed it.
    pub fn instance_type(&self) -> &str {
        &self.instance_type
    }

    /// Of its parts, as the fields say.
    pub fn new(id: String, namespace: String, instance_type: String) -> Self {
        Counted {
            id,
            namespace,
            instance_type,
        }
    }
}

/// What EC2 listed under a class's tag, and when that listing was asked
/// for.
#[derive(Clone, Debug)]
pub struct Census {
    asked: Instant,
    instances: Vec<Counted>,
}

impl Census {
    /// Of its parts, as the fields say.
    pub fn new(asked: Instant, instances: Vec<Counted>) -> Self {
        Census { asked, instances }
    }
}

/// The class's side of the book.
#[derive(Default)]
struct Book {
    limits: ClassLimits,
    namespace_limits: ClassLimits,
    /// The last census, or why there is none.
    census: Option<Census>,
    census_failed: Option<String>,
    /// Launched through this book (or maybe launched: an answer lost) and
    /// not shown by a census yet.
    recent: Vec<Recent>,
    /// Granted, by (loop, namespace, type): the launch not answered yet.
    in_flight: HashMap<(u64, String, String), i64>,
    /// When a pool was last held back, and why.
    held_back: Option<(Instant, String)>,
}

/// Instances launched through the book after (or while) the last census
/// was asked for.
struct Recent {
    at: Instant,
    namespace: String,
    instance_type: String,
    /// Their ids; empty for a launch whose answer was lost (`count` of
    /// them may run).
    ids: Vec<String>,
    count: i64,
}

/// Instances and vCPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    instances: i64,
    vcpus: i64,
}

impl Usage {
    /// How many instances.
    pub fn instances(&self) -> i64 {
        self.instances
    }

    /// How many vCPUs they have between them.
    pub fn vcpus(&self) -> i64 {
        self.vcpus
    }

    fn add(&mut self, other: Usage) {
        self.instances += other.instances;
        self.vcpus += other.vcpus;
    }
}

/// What a class's instances are, for its status.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClassUsage {
    total: Usage,
    namespaces: BTreeMap<String, Usage>,
    /// Why a pool was held back within [`LIMIT_SHOWN`].
    held_back: Option<String>,
    /// Why the class's instances could not be counted, if they could not.
    uncounted: Option<String>,
}

impl ClassUsage {
    /// What the class's instances are, every namespace's together.
    pub fn total(&self) -> Usage {
        self.total
    }

    /// What they are by namespace (their `orca.dev/namespace` tag).
    pub fn namespaces(&self) -> &BTreeMap<String, Usage> {
        &self.namespaces
    }

    /// Why a pool was held back within [`LIMIT_SHOWN`].
    pub fn held_back(&self) -> Option<&str> {
        self.held_back.as_deref()
    }

    /// Why the class's instances could not be counted, if they could not.
    pub fn uncounted(&self) -> Option<&str> {
        self.uncounted.as_deref()
    }
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
    /// Tells the book of `class` its limits, from its spec.
    pub fn set_limits(&self, class: &str, spec: &WarmPoolClassSpec) {
        let mut books = locked(&self.books);
        let book = books.entry(class.to_string()).or_default();
        book.limits = spec.limits.clone().unwrap_or_default();
        book.namespace_limits = spec.namespace_limits.clone().unwrap_or_default();
    }

    /// Tells the book of `class` what EC2 listed under its tag: it counts
    /// from it, and forgets the launches it shows (or that it would show
    /// by now).
    pub fn census(&self, class: &str, census: Census) {
        let mut books = locked(&self.books);
        let book = books.entry(class.to_string()).or_default();
        let listed: HashSet<&str> = census.instances.iter().map(|i| i.id.as_str()).collect();
        book.recent.retain_mut(|r| {
            // A lost answer's launches have no ids: they count until the
            // listing lag is over.
            if !r.ids.is_empty() {
                r.ids.retain(|id| !listed.contains(id.as_str()));
                r.count = r.ids.len() as i64;
            }
            let shown = r.count == 0;
            let old = r.at + LISTING_LAG < census.asked;
            !(shown || old)
        });
        book.census = Some(census);
        book.census_failed = None;
    }

    /// Tells the book of `class` that its instances could not be listed
    /// (`why`): once its census is old, nothing is granted.
    pub fn census_failed(&self, class: &str, why: String) {
        locked(&self.books)
            .entry(class.to_string())
            .or_default()
            .census_failed = Some(why);
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
        let mut out: Vec<String> = types
            .iter()
            .filter(|t| !t.is_empty() && !known.contains_key(*t))
            .cloned()
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Learns the vCPUs of instance types.
    pub fn learn_vcpus(&self, vcpus: impl IntoIterator<Item = (String, i64)>) {
        locked(&self.vcpus).extend(vcpus);
    }

    /// What `class`'s instances are.
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
            uncounted: book.uncounted(),
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
    /// Why the book cannot count now: no census yet, or one too old.
    fn uncounted(&self) -> Option<String> {
        match (&self.census, &self.census_failed) {
            (Some(c), _) if c.asked.elapsed() < CENSUS_FRESH => None,
            (_, Some(why)) => Some(format!("its instances cannot be listed: {why}")),
            (Some(_), None) => Some("its instances were not listed for a minute".into()),
            (None, None) => Some("its instances are not counted yet".into()),
        }
    }

    /// What each namespace's instances of the class are: the census's, the
    /// launches since, and the grants under way. An instance of a type
    /// whose vCPUs are not known counts none (a vCPU limit then grants
    /// nothing: see [`Budget::grant`]).
    fn by_namespace(&self, vcpus: &HashMap<String, i64>) -> BTreeMap<String, Usage> {
        let mut out: BTreeMap<String, Usage> = BTreeMap::new();
        let mut add = |namespace: &str, instance_type: &str, n: i64| {
            out.entry(namespace.to_string()).or_default().add(Usage {
                instances: n,
                vcpus: n * vcpus.get(instance_type).copied().unwrap_or(0),
            });
        };
        for i in self.census.iter().flat_map(|c| &c.instances) {
            add(&i.namespace, &i.instance_type, 1);
        }
        for r in &self.recent {
            add(&r.namespace, &r.instance_type, r.count);
        }
        for ((_, namespace, instance_type), n) in &self.in_flight {
            add(namespace, instance_type, *n);
        }
        out
    }

    /// The types of what the book counts.
    fn types(&self) -> impl Iterator<Item = &str> {
        let census = self.census.iter().flat_map(|c| &c.instances);
        census
            .map(|i| i.instance_type.as_str())
            .chain(self.recent.iter().map(|r| r.instance_type.as_str()))
            .chain(self.in_flight.keys().map(|(_, _, t)| t.as_str()))
    }
}

/// A grant: how many of the instances asked for may be launched, and if
/// fewer, why (the `LimitReached` message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    count: u32,
    held_back: Option<String>,
}

impl Grant {
    /// How many of the instances asked for may be launched.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Why fewer than asked for, if fewer: the `LimitReached` message.
    pub fn held_back(&self) -> Option<&str> {
        self.held_back.as_deref()
    }
}

/// One pool loop's handle on its class's book. Dropped with the loop, its
/// grants still under way count as launched (the census settles them).
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
/// all the class's instances are, `mine` those of `namespace`.
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

    /// The namespace the pool's instances count in.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The instance types the class's book counts (its census, launches
    /// in flight or recent) whose vCPUs are not known: while one is, a
    /// vCPU limit grants nothing, so the class's pools ask EC2 about them
    /// as about their own. Types no pool lists any more — a type taken
    /// out of the class, an orphaned pool's — are among them after a new
    /// leader's first census, which knows no vCPUs.
    pub fn unknown_in_book(&self) -> Vec<String> {
        let types: Vec<String> = match locked(&self.budgets.books).get(&self.class) {
            Some(book) => book.types().map(str::to_string).collect(),
            None => return Vec::new(),
        };
        self.budgets.unknown_vcpus(&types)
    }

    fn flight(&self, instance_type: &str) -> (u64, String, String) {
        (
            self.loop_id,
            self.namespace.clone(),
            instance_type.to_string(),
        )
    }

    /// The limit of the class that leaves the least room for one more
    /// instance of `instance_type`, and the instance type whose vCPUs are
    /// not known, if one is and a vCPU limit needs it.
    fn tightest(
        &self,
        book: &Book,
        vcpus: &HashMap<String, i64>,
        instance_type: &str,
    ) -> (Option<Room>, Option<String>) {
        let usage = book.by_namespace(vcpus);
        let mut total = Usage::default();
        for u in usage.values() {
            total.add(*u);
        }
        let mine = usage.get(&self.namespace).copied().unwrap_or_default();
        let unknown = book
            .types()
            .chain([instance_type])
            .find(|t| !vcpus.contains_key(*t))
            .map(str::to_string);
        let vcpu_limit = book.limits.vcpus.is_some() || book.namespace_limits.vcpus.is_some();
        let per = match (&unknown, vcpu_limit) {
            // What is counted so far is not known in vCPUs: nothing fits.
            (Some(_), true) => 0,
            _ => vcpus.get(instance_type).copied().unwrap_or(0),
        };
        (tightest(book, total, mine, per, &self.namespace), unknown)
    }

    /// How many more instances of `instance_type` the class's limits leave
    /// room for now, with the limit that leaves the least: `None` when no
    /// limit applies, or while the class or its instances are not known
    /// (no launch is granted then anyway). Grants nothing: for the bounds
    /// of a plan, whose launches [`Budget::grant`] still checks.
    pub fn room(&self, instance_type: &str) -> Option<(u32, &'static str)> {
        let books = locked(&self.budgets.books);
        let vcpus = locked(&self.budgets.vcpus);
        let book = books.get(&self.class)?;
        if book.uncounted().is_some() {
            return None;
        }
        let (room, _) = self.tightest(book, &vcpus, instance_type);
        room.map(|r| (u32::try_from(r.count.max(0)).unwrap_or(u32::MAX), r.limit))
    }

    /// Up to `wanted` instances of `instance_type`, as many as every limit
    /// of the class leaves room for; those granted count at once, until
    /// the launch is answered ([`Budget::launched`], [`Budget::lost`],
    /// [`Budget::release`]).
    pub fn grant(&self, instance_type: &str, wanted: u32) -> Grant {
        let mut books = locked(&self.budgets.books);
        let vcpus = locked(&self.budgets.vcpus);
        let Some(book) = books.get_mut(&self.class) else {
            return Grant {
                count: 0,
                held_back: Some(format!("WarmPoolClass {} is not known yet", self.class)),
            };
        };
        if let Some(why) = book.uncounted() {
            // Launching without knowing what runs could pass a limit. The
            // operator's first seconds are not worth a word; a census that
            // fails is.
            let said = book.census_failed.is_some() || book.census.is_some();
            return Grant {
                count: 0,
                held_back: said.then(|| {
                    format!(
                        "WarmPoolClass {}: {why}; {wanted} more wanted, none launched",
                        self.class
                    )
                }),
            };
        }
        let (tightest, unknown) = self.tightest(book, &vcpus, instance_type);
        let count = tightest
            .as_ref()
            .map_or(wanted as i64, |r| r.count.min(wanted as i64)) as u32;
        let held_back = tightest.filter(|_| count < wanted).map(|r| {
            let of = unknown.as_deref().unwrap_or(instance_type);
            r.held_back(&self.class, of, wanted, count)
        });
        if count > 0 {
            *book
                .in_flight
                .entry(self.flight(instance_type))
                .or_default() += count as i64;
        }
        if let Some(why) = &held_back {
            book.held_back = Some((Instant::now(), why.clone()));
        }
        Grant { count, held_back }
    }

    /// Takes `n` of this loop's grants of `instance_type` off the launches
    /// under way, keeping them counted as `ids` (`None`: an answer lost,
    /// `n` may run) until a census settles them.
    fn settle(&self, instance_type: &str, n: u32, ids: Option<Vec<String>>) {
        let mut books = locked(&self.budgets.books);
        let Some(book) = books.get_mut(&self.class) else {
            return;
        };
        let key = self.flight(instance_type);
        if let Some(left) = book.in_flight.get_mut(&key) {
            *left -= n as i64;
            if *left <= 0 {
                book.in_flight.remove(&key);
            }
        }
        if let Some(ids) = ids {
            let count = ids.len() as i64;
            if count > 0 {
                book.recent.push(Recent {
                    at: Instant::now(),
                    namespace: self.namespace.clone(),
                    instance_type: instance_type.to_string(),
                    ids,
                    count,
                });
            }
        }
    }

    /// `n` granted instances of `instance_type` were launched: `ids`.
    pub fn launched(&self, instance_type: &str, n: u32, ids: Vec<String>) {
        self.settle(instance_type, n, Some(ids));
    }

    /// The answer to a launch of `n` granted instances was lost: they may
    /// run, and count until a census asked long enough after says.
    pub fn lost(&self, instance_type: &str, n: u32) {
        let mut books = locked(&self.budgets.books);
        if let Some(book) = books.get_mut(&self.class) {
            book.recent.push(Recent {
                at: Instant::now(),
                namespace: self.namespace.clone(),
                instance_type: instance_type.to_string(),
                ids: Vec::new(),
                count: n as i64,
            });
        }
        drop(books);
        self.settle(instance_type, n, None);
    }

    /// Gives back `n` granted instances of `instance_type` that were not
    /// launched.
    pub fn release(&self, instance_type: &str, n: u32) {
        self.settle(instance_type, n, None);
    }

    /// The book of all classes, for the vCPUs.
    pub fn budgets(&self) -> &Budgets {
        &self.budgets
    }
}

impl Drop for Budget {
    fn drop(&mut self) {
        let mut books = locked(&self.budgets.books);
        let Some(book) = books.get_mut(&self.class) else {
            return;
        };
        let mine: Vec<(u64, String, String)> = book
            .in_flight
            .keys()
            .filter(|(l, _, _)| *l == self.loop_id)
            .cloned()
            .collect();
        for key in mine {
            if let Some(n) = book.in_flight.remove(&key) {
                book.recent.push(Recent {
                    at: Instant::now(),
                    namespace: key.1,
                    instance_type: key.2,
                    ids: Vec::new(),
                    count: n,
                });
            }
        }
    }
}

#[cfg(test)]
#[path = "budget_tests.rs"]
mod tests;
