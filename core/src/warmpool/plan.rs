//! The pool's *decide* step
//! (docs/architecture.md#warmpool-controller-decide): a pure function from
//! one snapshot — the pool's EC2 instances (listed first), its live
//! `orca.instances` rows and unserved demand (read after) — to the launches
//! and retirements that bring the pool back to its spec.
//!
//! No I/O and no clock of its own: the caller passes `now` for EC2's launch
//! times, and the rows carry ages the database computed (only the database
//! clock judges a row's time, docs/architecture.md#time-and-clocks).
//!
//! The plan and its phases, each a function, in
//! the order `plan` calls them (where each instance stands, the rows of
//! what is gone, the drifted, the reserve and the idle, the launches);
//! its tables are in `plan_tests/`.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};

use crate::crd::WarmPoolSpec;

pub use super::instance::{offerings, Ec2Instance, Ec2State, Offering};
pub use crate::rows::PoolRow;

/// Everything the plan looks at, gathered by one observation.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Listed before the rows were read.
    instances: Vec<Ec2Instance>,
    /// The pool's live rows.
    rows: Vec<PoolRow>,
    /// Instances listed in EC2 (or launched by this loop and not listed
    /// yet), without a live row, that had rows once.
    known: HashSet<String>,
    /// Instances this loop launched itself (so a missing row means a slow
    /// boot, not a leak; and one the listing does not show yet is booting).
    ours: HashSet<String>,
    /// Unserved `orca.pool_demand` rows of the pool.
    demand: i64,
    /// When the WarmPool's deletion with `onDelete: Terminate` began (its
    /// `deletionTimestamp`); `None` while it is not being deleted.
    deleting: Option<DateTime<Utc>>,
    /// By row id: how many seconds before EC2 was listed each live row was
    /// made (negative: after), by the database's clock. A row without an
    /// entry counts as made after the listing.
    made_before_listing: HashMap<i64, f64>,
    /// By row id: busy rows whose run is not running at the row's start any
    /// more, or whose run's heartbeat is stale, and for how many seconds
    /// they have been seen so.
    hung: HashMap<i64, f64>,
    /// Instances a person asked to drain (the WarmPool's annotation
    /// `orca.dev/drain`): each retired once it is not in a run.
    drain: HashSet<String>,
    /// The number the launch template's version resolves to now (see
    /// [`super::drift`]); `None` without a template, or not known.
    template_version: Option<String>,
}

impl Snapshot {
    /// Leaves the instances `ids` out, with their rows and marks: they
    /// are not this pass's to count, keep or end.
    pub fn leave_out(&mut self, ids: &HashSet<String>) {
        self.instances.retain(|i| !ids.contains(i.id()));
        self.rows.retain(|r| !ids.contains(r.instance()));
        self.ours.retain(|id| !ids.contains(id));
        self.drain.retain(|id| !ids.contains(id));
    }

    /// Instances this loop launched itself (so a missing row means a slow
    /// boot, not a leak; and one the listing does not show yet is booting).
    pub fn ours(&self) -> &HashSet<String> {
        &self.ours
    }

    /// Unserved `orca.pool_demand` rows of the pool.
    pub fn demand(&self) -> i64 {
        self.demand
    }

    /// When the WarmPool's deletion with `onDelete: Terminate` began (its
    /// `deletionTimestamp`); `None` while it is not being deleted.
    pub fn deleting(&self) -> Option<DateTime<Utc>> {
        self.deleting
    }

    /// These, with `instances` set.
    pub fn with_instances(self, instances: Vec<Ec2Instance>) -> Self {
        Snapshot { instances, ..self }
    }

    /// These, with `rows` set.
    pub fn with_rows(self, rows: Vec<PoolRow>) -> Self {
        Snapshot { rows, ..self }
    }

    /// These, with `known` set.
    pub fn with_known(self, known: HashSet<String>) -> Self {
        Snapshot { known, ..self }
    }

    /// These, with `ours` set.
    pub fn with_ours(self, ours: HashSet<String>) -> Self {
        Snapshot { ours, ..self }
    }

    /// These, with `demand` set.
    pub fn with_demand(self, demand: i64) -> Self {
        Snapshot { demand, ..self }
    }

    /// These, with `deleting` set.
    pub fn with_deleting(self, deleting: Option<DateTime<Utc>>) -> Self {
        Snapshot { deleting, ..self }
    }

    /// These, with `made_before_listing` set.
    pub fn with_made_before_listing(self, made_before_listing: HashMap<i64, f64>) -> Self {
        Snapshot {
            made_before_listing,
            ..self
        }
    }

    /// These, with `hung` set.
    pub fn with_hung(self, hung: HashMap<i64, f64>) -> Self {
        Snapshot { hung, ..self }
    }

    /// These, with `drain` set.
    pub fn with_drain(self, drain: HashSet<String>) -> Self {
        Snapshot { drain, ..self }
    }

    /// These, with `template_version` set.
    pub fn with_template_version(self, template_version: Option<String>) -> Self {
        Snapshot {
            template_version,
            ..self
        }
    }

    /// Listed before the rows were read.
    pub fn instances(&self) -> &Vec<Ec2Instance> {
        &self.instances
    }

    /// The pool's live rows.
    pub fn rows(&self) -> &Vec<PoolRow> {
        &self.rows
    }

    /// Instances listed in EC2 (or launched by this loop and not listed
    /// yet), without a live row, that had rows once.
    pub fn known(&self) -> &HashSet<String> {
        &self.known
    }

    /// Instances a person asked to drain (the WarmPool's annotation
    /// `orca.dev/drain`): each retired once it is not in a run.
    pub fn drain(&self) -> &HashSet<String> {
        &self.drain
    }

    /// The number the launch template's version resolves to now (see
    /// [`super::drift`]); `None` without a template, or not known.
    pub fn template_version(&self) -> Option<&str> {
        self.template_version.as_deref()
    }
}

/// The knobs of the policy that are not in the spec.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// An idle row whose agent has not `polled` for this long is stale.
    stale_secs: f64,
    /// An instance this loop did not launch, with no row, is leaked once
    /// this old (at least 60 s in production: see `Tuning::leak_grace`).
    leak_grace_secs: f64,
    /// At most this many instances per `RunInstances` call.
    max_batch: u32,
    /// A busy instance seen hung (see [`Snapshot::hung`]) this long is
    /// retired.
    hung_grace_secs: f64,
    /// A live row of an instance EC2 did not list at all is ended once it
    /// was made this long before the listing (an instance launched just
    /// before may not be listed yet).
    unlisted_grace_secs: f64,
}

impl Limits {
    /// These, with `leak_grace_secs` set.
    pub fn with_leak_grace_secs(self, leak_grace_secs: f64) -> Self {
        Limits {
            leak_grace_secs,
            ..self
        }
    }

    /// These, with `max_batch` set.
    pub fn with_max_batch(self, max_batch: u32) -> Self {
        Limits { max_batch, ..self }
    }

    /// Of its parts, as the fields say.
    pub fn new(
        stale_secs: f64,
        leak_grace_secs: f64,
        max_batch: u32,
        hung_grace_secs: f64,
        unlisted_grace_secs: f64,
    ) -> Self {
        Limits {
            stale_secs,
            leak_grace_secs,
            max_batch,
            hung_grace_secs,
            unlisted_grace_secs,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            stale_secs: 30.0,
            leak_grace_secs: 300.0,
            max_batch: 100,
            hung_grace_secs: 60.0,
            unlisted_grace_secs: 60.0,
        }
    }
}

/// Why an instance is retired; the CamelCase form is the event reason and
/// the metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    IdleBeyondMax,
    Stale,
    MaxUses,
    NoLiveRow,
    BootTimeout,
    Leaked,
    /// The WarmPool is being deleted with `onDelete: Terminate`.
    PoolDeleted,
    /// Busy, but its run is over at that start or its heartbeat is stale,
    /// for longer than the grace: the agent never came back.
    Hung,
    /// Stopped in the reserve beyond `stopped.max`.
    ReserveBeyondMax,
    /// Its launch spec is out of date (see [`super::drift`]), and the pool
    /// has enough without it.
    Drifted,
    /// In the stopped reserve, but EC2 refused to stop or start it (a
    /// missing permission, an instance that cannot stop): it would be
    /// parked for good.
    ReserveFailed,
    /// A person asked for it to go (`kubectl orca drain`): retired once it
    /// is not in a run.
    Drained,
}

impl Reason {
    pub const ALL: [Reason; 12] = [
        Reason::IdleBeyondMax,
        Reason::Stale,
        Reason::MaxUses,
        Reason::NoLiveRow,
        Reason::BootTimeout,
        Reason::Leaked,
        Reason::PoolDeleted,
        Reason::Hung,
        Reason::ReserveBeyondMax,
        Reason::Drifted,
        Reason::ReserveFailed,
        Reason::Drained,
    ];

    /// The CamelCase name: the event reason and the metric's `reason`
    /// label.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::IdleBeyondMax => "IdleBeyondMax",
            Reason::Stale => "Stale",
            Reason::MaxUses => "MaxUses",
            Reason::NoLiveRow => "NoLiveRow",
            Reason::BootTimeout => "BootTimeout",
            Reason::Leaked => "Leaked",
            Reason::PoolDeleted => "PoolDeleted",
            Reason::Hung => "Hung",
            Reason::ReserveBeyondMax => "ReserveBeyondMax",
            Reason::Drifted => "Drifted",
            Reason::ReserveFailed => "ReserveFailed",
            Reason::Drained => "Drained",
        }
    }
}

/// How the act step makes sure nobody hands the instance out before it is
/// terminated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// End its idle row race-free first (docs/protocol.md#the-race-free-end);
    /// terminate only if that
    /// ended it.
    Idle(i64),
    /// It has no live row: insert the operator's claim first; terminate only
    /// if that succeeded (an agent that just wrote a row wins).
    Claim,
    /// The operator's claim is already its live row (an earlier pass did
    /// not finish): terminate, then end the claim.
    Claimed(i64),
    /// A busy instance of a deleted pool past `drainTimeoutSeconds`, or a
    /// hung one: end its busy row first, and terminate only if that row was
    /// still busy (one whose run just ended goes idle, and is retired as
    /// idle).
    Busy(i64),
    /// Its row is in the stopped reserve (or was started from it, its agent
    /// not back yet): turn that row into the operator's claim in one
    /// statement, then terminate, then end the claim.
    Reserved(i64),
}

/// An instance with the row the act step changes for it: an idle row to
/// take into the stopped reserve, or a reserved row to wake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WithRow {
    instance: String,
    row: i64,
    /// Where the instance runs: a start that finds no capacity holds it.
    offering: Offering,
}

impl WithRow {
    /// `instance`, whose row is `row`, running in `offering`.
    pub fn new(instance: &str, row: i64, offering: Offering) -> Self {
        WithRow {
            instance: instance.to_string(),
            row,
            offering,
        }
    }

    /// The instance.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Its row's id.
    pub fn row(&self) -> i64 {
        self.row
    }

    /// Where the instance runs: a start that finds no capacity holds it.
    pub fn offering(&self) -> &Offering {
        &self.offering
    }
}

/// An instance to terminate, why, and how its row is ended first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retirement {
    instance: String,
    reason: Reason,
    end: End,
}

impl Retirement {
    /// `instance` to terminate for `reason`, its row ended first as `end`
    /// says.
    pub fn new(instance: &str, reason: Reason, end: End) -> Self {
        Retirement {
            instance: instance.to_string(),
            reason,
            end,
        }
    }

    /// The instance.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Why it goes.
    pub fn reason(&self) -> Reason {
        self.reason
    }

    /// How its row is ended first.
    pub fn end(&self) -> End {
        self.end
    }
}

/// `count` instances of one offering in one `RunInstances` call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchBatch {
    offering: Offering,
    count: u32,
}

impl LaunchBatch {
    /// `count` instances of `offering`.
    pub fn new(offering: Offering, count: u32) -> Self {
        LaunchBatch { offering, count }
    }

    /// The offering launched into.
    pub fn offering(&self) -> &Offering {
        &self.offering
    }

    /// How many instances the call asks for.
    pub fn count(&self) -> u32 {
        self.count
    }
}

/// What the pool looks like, for status and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    launching: u32,
    idle: u32,
    busy: u32,
    terminating: u32,
    /// In the stopped reserve: stopped, being stopped, or about to be.
    stopped: u32,
    /// Started from the reserve by this pass.
    starting: u32,
    /// Present instances whose launch spec is out of date.
    drifted: u32,
}

impl Counts {
    /// Launched and not yet up (booting).
    pub fn launching(&self) -> u32 {
        self.launching
    }

    /// Up with an idle row, waiting for a run.
    pub fn idle(&self) -> u32 {
        self.idle
    }

    /// In a run.
    pub fn busy(&self) -> u32 {
        self.busy
    }

    /// Shutting down, or retired by this pass.
    pub fn terminating(&self) -> u32 {
        self.terminating
    }

    /// In the stopped reserve: stopped, being stopped, or about to be.
    pub fn stopped(&self) -> u32 {
        self.stopped
    }

    /// Started from the reserve by this pass.
    pub fn starting(&self) -> u32 {
        self.starting
    }

    /// Present instances whose launch spec is out of date.
    pub fn drifted(&self) -> u32 {
        self.drifted
    }
}

/// The decision of one pass. The plan is the core's: the act stage reads
/// it and cannot change what it decided (its tests and the reserve's
/// retirements make their own with the `with_` methods).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolPlan {
    /// In the first available offering, at most `max_batch` each.
    launches: Vec<LaunchBatch>,
    /// The other available offerings, in order, for a batch that finds no
    /// capacity.
    fallback: Vec<Offering>,
    /// Instances to terminate, each with why and how its row ends first.
    retirements: Vec<Retirement>,
    /// Claim rows whose instance is gone: end them.
    ends: Vec<i64>,
    /// Other live rows of instances EC2 lists as shutting down, terminated
    /// or stopped, or no longer lists: end them, so no hand-out takes one.
    gone: Vec<i64>,
    /// Idle instances to take into the stopped reserve: their rows first
    /// (race-free), then `StopInstances` for those taken.
    stops: Vec<WithRow>,
    /// Reserve instances EC2 still lists as running (an earlier stop did not
    /// take, or has not yet): `StopInstances` again.
    restops: Vec<WithRow>,
    /// Stopped reserve instances to start: their rows marked woken first,
    /// then `StartInstances`. Started before any launch.
    starts: Vec<WithRow>,
    /// How many more instances `maxInstances` allows once the retirements
    /// are gone (each retirement that does not happen takes one back).
    room: u32,
    /// Instances wanted but not launched: `maxInstances` reached, or no
    /// offering available.
    short: u32,
    /// What the pool looks like.
    counts: Counts,
}

impl PoolPlan {
    /// The instances all the launch batches ask for together.
    pub fn launch_count(&self) -> u32 {
        self.launches.iter().map(|b| b.count).sum()
    }

    /// The launch batches, in the first available offering, at most
    /// `max_batch` each.
    pub fn launches(&self) -> &[LaunchBatch] {
        &self.launches
    }

    /// The other available offerings, in order, for a batch that finds no
    /// capacity.
    pub fn fallback(&self) -> &[Offering] {
        &self.fallback
    }

    /// Instances to terminate, each with why and how its row ends first.
    pub fn retirements(&self) -> &[Retirement] {
        &self.retirements
    }

    /// Claim rows whose instance is gone: to end.
    pub fn ends(&self) -> &[i64] {
        &self.ends
    }

    /// Other live rows of instances gone: to end, so no hand-out takes one.
    pub fn gone(&self) -> &[i64] {
        &self.gone
    }

    /// Idle instances to take into the stopped reserve.
    pub fn stops(&self) -> &[WithRow] {
        &self.stops
    }

    /// Reserve instances EC2 still lists as running: `StopInstances` again.
    pub fn restops(&self) -> &[WithRow] {
        &self.restops
    }

    /// Stopped reserve instances to start, before any launch.
    pub fn starts(&self) -> &[WithRow] {
        &self.starts
    }

    /// How many more instances `maxInstances` allows once the retirements
    /// are gone.
    pub fn room(&self) -> u32 {
        self.room
    }

    /// Instances wanted but not launched.
    pub fn short(&self) -> u32 {
        self.short
    }

    /// What the pool looks like, for status and metrics.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// These, with the launch batches `launches`.
    pub fn with_launches(self, launches: Vec<LaunchBatch>) -> Self {
        PoolPlan { launches, ..self }
    }

    /// These, with the fall-back offerings `fallback`.
    pub fn with_fallback(self, fallback: Vec<Offering>) -> Self {
        PoolPlan { fallback, ..self }
    }

    /// These, with the retirements `retirements`.
    pub fn with_retirements(self, retirements: Vec<Retirement>) -> Self {
        PoolPlan {
            retirements,
            ..self
        }
    }

    /// These, with the idle instances `stops` to take into the reserve.
    pub fn with_stops(self, stops: Vec<WithRow>) -> Self {
        PoolPlan { stops, ..self }
    }

    /// These, with the reserve instances `restops` to stop again.
    pub fn with_restops(self, restops: Vec<WithRow>) -> Self {
        PoolPlan { restops, ..self }
    }

    /// These, with the reserve instances `starts` to start.
    pub fn with_starts(self, starts: Vec<WithRow>) -> Self {
        PoolPlan { starts, ..self }
    }

    /// These, with `room` more instances allowed.
    pub fn with_room(self, room: u32) -> Self {
        PoolPlan { room, ..self }
    }
}

/// FNV-1a: instance ids are short and not attacker-chosen, and the plan of
/// 10 000 instances should take milliseconds even in a debug build.
#[derive(Default)]
struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = h;
    }
}

type FnvBuild = std::hash::BuildHasherDefault<Fnv>;

fn age_secs(now: DateTime<Utc>, then: DateTime<Utc>) -> f64 {
    (now - then).num_milliseconds() as f64 / 1000.0
}

/// Decides one pass: retire idle beyond `idle.max` (longest idle
/// first), stale, past `maxUses`, without a live row any more, booting past
/// `bootTimeoutSeconds`, leaked, and busy but hung; end the rows of
/// instances EC2 no longer runs; launch up to `idle.min` plus unserved
/// demand, counting instances still booting, never past `maxInstances`.
/// `unavailable` holds offerings without capacity until the time given.
///
/// Its phases, in order: where each instance stands (`count_listed`),
/// the rows of what is gone (`end_rows_of_gone`), the drifted
/// (`replace_drifted`), the stopped reserve and the idle (`start_reserve`,
/// `settle_idle`) and the launches (`launch`).
pub fn plan(
    spec: &WarmPoolSpec,
    snap: &Snapshot,
    unavailable: &BTreeMap<Offering, DateTime<Utc>>,
    limits: &Limits,
    now: DateTime<Utc>,
) -> PoolPlan {
    if let Some(since) = snap.deleting {
        return plan_deletion(spec, snap, since, now);
    }
    let given = Given {
        spec,
        snap,
        unavailable,
        limits,
        now,
    };
    let mut out = PoolPlan::default();
    let drift = Drift::of(&given);
    let (states, unlisted) = states(snap, now);
    let mut fleet = count_listed(&given, &drift, &unlisted, &mut out);
    end_rows_of_gone(&given, &states, &mut out);
    if spec.paused {
        return paused(out, &fleet);
    }
    // Idle and booting instances the pool needs running.
    let need = i64::from(spec.idle.min.max(0)) + snap.demand.max(0) + i64::from(fleet.interrupted);
    let running_short = replace_drifted(&mut out, &mut fleet, need, drift.max);
    let starts = start_reserve(&given, &mut out, &mut fleet, running_short);
    let reserve_launches = settle_idle(&given, &drift, &mut out, &mut fleet, need);
    out.counts.terminating += out.retirements.len() as u32;
    let staying = fleet.present.saturating_sub(out.retirements.len()) as i64;
    out.room = (i64::from(spec.max_instances) - staying).max(0) as u32;
    // Launched for runs first, then for the reserve.
    let want = (running_short - starts) as u32 + reserve_launches;
    launch(&given, &mut out, want);
    out
}

/// What a plan is made from.
#[derive(Clone, Copy)]
struct Given<'a> {
    spec: &'a WarmPoolSpec,
    snap: &'a Snapshot,
    unavailable: &'a BTreeMap<Offering, DateTime<Utc>>,
    limits: &'a Limits,
    now: DateTime<Utc>,
}

impl Given<'_> {
    /// Whether `offering` has no capacity now.
    fn held(&self, offering: &Offering) -> bool {
        self.unavailable
            .get(offering)
            .is_some_and(|until| *until > self.now)
    }
}

/// Drifted instances (see `super::drift`) are replaced, at most
/// `disruption.maxDrifted` at a time: idle and stopped ones apart.
struct Drift {
    hash: String,
    /// How many may be replaced now: none outside the maintenance windows
    /// (or with one that cannot be read, which the pass reports).
    max: usize,
}

impl Drift {
    fn of(given: &Given) -> Drift {
        let spec = given.spec;
        let max = match crate::window::standing(&spec.maintenance_windows, given.now) {
            Ok(s) if s.open() || spec.maintenance_windows.is_empty() => {
                spec.disruption.max_drifted.max(0) as usize
            }
            _ => 0,
        };
        Drift {
            hash: super::drift::launch_hash(&spec.launch),
            max,
        }
    }

    fn is(&self, given: &Given, i: &Ec2Instance) -> bool {
        super::drift::drifted(
            given.spec,
            &self.hash,
            given.snap.template_version.as_deref(),
            i,
        )
    }
}

type Placed<'a> = (&'a Ec2Instance, &'a PoolRow);

/// The present instances that stay, by where they stand.
#[derive(Default)]
struct Fleet<'a> {
    present: usize,
    idle: Vec<Placed<'a>>,
    /// Idle, of an out-of-date launch spec, and replaceable now.
    old_idle: Vec<Placed<'a>>,
    /// The stopped reserve: those EC2 lists stopped (they can be started).
    reserve: Vec<Placed<'a>>,
    /// Stopped, of an out-of-date launch spec, and replaceable now.
    old_reserve: Vec<Placed<'a>>,
    /// Stopped and drifted, not replaced in this pass: in the reserve, but
    /// counting for nothing in it.
    old_stopped_left: u32,
    booting: u32,
    /// Reserve instances still being stopped.
    stopping: u32,
    /// Busy instances EC2 is about to take back.
    interrupted: u32,
}

/// Where one present instance stands.
enum Standing<'a> {
    Retire(Reason, End),
    Idle(&'a PoolRow),
    OldIdle(&'a PoolRow),
    Reserve(&'a PoolRow),
    OldReserve(&'a PoolRow),
    /// In the reserve, but running: stop it again.
    Restop(i64),
    Stopping,
    Booting,
    /// Its row is ended: its agent cannot answer.
    Gone(i64),
    Busy {
        interrupted: bool,
    },
    /// Its agent ends its row for a spot notice: neither idle nor retired.
    Leaving,
}

/// The state of every instance EC2 lists, and of those this loop launched
/// that the listing does not show (EC2's listing lags a launch, or is
/// older than it): pending, launched just now, so that, counted, they are
/// not launched twice — unless one had a row that ended since (its agent
/// powered it off): the next listing tells. The second are also returned
/// as instances.
fn states(
    snap: &Snapshot,
    now: DateTime<Utc>,
) -> (HashMap<&str, Ec2State, FnvBuild>, Vec<Ec2Instance>) {
    let mut states: HashMap<&str, Ec2State, FnvBuild> =
        HashMap::with_capacity_and_hasher(snap.instances.len(), FnvBuild::default());
    for i in &snap.instances {
        states.insert(i.id(), i.state());
    }
    let unlisted: Vec<&String> = snap
        .ours
        .iter()
        .filter(|id| !states.contains_key(id.as_str()) && !snap.known.contains(*id))
        .collect();
    for id in &unlisted {
        states.insert(id.as_str(), Ec2State::Pending);
    }
    let unlisted = unlisted
        .into_iter()
        .map(|id| Ec2Instance::bare(id, Ec2State::Pending, now))
        .collect();
    (states, unlisted)
}

/// The first phase: each instance EC2 lists (and each of `unlisted`) by
/// where it stands; the retirements, stops again and ended rows that
/// follow from it alone go into `out`, with the counts of the terminating,
/// the busy and the drifted.
fn count_listed<'a>(
    given: &Given<'a>,
    drift: &Drift,
    unlisted: &'a [Ec2Instance],
    out: &mut PoolPlan,
) -> Fleet<'a> {
    let snap = given.snap;
    let mut rows: HashMap<&str, &PoolRow, FnvBuild> =
        HashMap::with_capacity_and_hasher(snap.rows.len(), FnvBuild::default());
    for r in &snap.rows {
        rows.insert(r.instance(), r);
    }
    let mut fleet = Fleet::default();
    for i in snap.instances.iter().chain(unlisted) {
        if !i.state().is_present() {
            if i.state() == Ec2State::ShuttingDown {
                out.counts.terminating += 1;
            }
            continue;
        }
        fleet.present += 1;
        let drifted = drift.is(given, i);
        out.counts.drifted += u32::from(drifted);
        let row = rows.get(i.id()).copied();
        match standing(given, i, row, drifted && drift.max > 0) {
            Standing::Retire(reason, end) => out.retirements.push(Retirement {
                instance: i.id().to_string(),
                reason,
                end,
            }),
            Standing::Idle(row) => fleet.idle.push((i, row)),
            Standing::OldIdle(row) => fleet.old_idle.push((i, row)),
            Standing::Reserve(row) => fleet.reserve.push((i, row)),
            Standing::OldReserve(row) => fleet.old_reserve.push((i, row)),
            Standing::Restop(row) => {
                fleet.stopping += 1;
                out.restops.push(WithRow {
                    instance: i.id().to_string(),
                    row,
                    offering: i.offering().clone(),
                });
            }
            Standing::Stopping => fleet.stopping += 1,
            Standing::Booting => fleet.booting += 1,
            Standing::Gone(row) => out.gone.push(row),
            Standing::Busy { interrupted } => {
                out.counts.busy += 1;
                // Its run is about to be cut short: its replacement is
                // launched now, not two minutes from now.
                fleet.interrupted += u32::from(interrupted);
            }
            Standing::Leaving => {}
        }
    }
    fleet
}

/// Where present instance `i`, with its live `row` if any, stands;
/// `replaceable`: drifted, and drifted instances may be replaced now.
fn standing<'a>(
    given: &Given,
    i: &Ec2Instance,
    row: Option<&'a PoolRow>,
    replaceable: bool,
) -> Standing<'a> {
    let (snap, spec, limits) = (given.snap, given.spec, given.limits);
    let drain = snap.drain.contains(i.id());
    let Some(row) = row else {
        return if drain {
            // Asked to drain: it goes once it is not in a run (a busy one
            // finishes it; a hand-out that wins the race gives it one more).
            Standing::Retire(Reason::Drained, End::Claim)
        } else if snap.known.contains(i.id()) {
            Standing::Retire(Reason::NoLiveRow, End::Claim)
        } else {
            let (limit, reason) = if snap.ours.contains(i.id()) {
                (spec.boot_timeout_seconds as f64, Reason::BootTimeout)
            } else {
                (limits.leak_grace_secs, Reason::Leaked)
            };
            if age_secs(given.now, i.launched()) >= limit {
                Standing::Retire(reason, End::Claim)
            } else {
                Standing::Booting
            }
        };
    };
    if row.claim() {
        return Standing::Retire(Reason::NoLiveRow, End::Claimed(row.id()));
    }
    if drain && row.reserved() {
        return Standing::Retire(Reason::Drained, End::Reserved(row.id()));
    }
    if drain && row.idle_secs().is_some() {
        return Standing::Retire(Reason::Drained, End::Idle(row.id()));
    }
    if row.reserved() {
        return match i.state() {
            Ec2State::Stopped if replaceable => Standing::OldReserve(row),
            Ec2State::Stopped => Standing::Reserve(row),
            Ec2State::Running => Standing::Restop(row.id()),
            _ => Standing::Stopping,
        };
    }
    // Started from the reserve; its agent has not marked it idle yet.
    if let (None, Some(woken)) = (row.idle_secs(), row.woken_secs()) {
        return if woken >= spec.boot_timeout_seconds as f64 {
            Standing::Retire(Reason::BootTimeout, End::Reserved(row.id()))
        } else {
            Standing::Booting
        };
    }
    // Its agent cannot answer: end the row; without one, the next pass
    // claims and terminates it (NoLiveRow).
    if i.state() == Ec2State::Stopped {
        return Standing::Gone(row.id());
    }
    if row.idle_secs().is_none() {
        let hung = snap.hung.get(&row.id());
        return if hung.is_some_and(|secs| *secs >= limits.hung_grace_secs) {
            Standing::Retire(Reason::Hung, End::Busy(row.id()))
        } else {
            Standing::Busy {
                interrupted: row.interrupted(),
            }
        };
    }
    if row.noticed() {
        Standing::Leaving
    } else if row.polled_secs().is_none_or(|p| p > limits.stale_secs) {
        Standing::Retire(Reason::Stale, End::Idle(row.id()))
    } else if spec.max_uses > 0 && row.uses() >= i64::from(spec.max_uses) {
        Standing::Retire(Reason::MaxUses, End::Idle(row.id()))
    } else if replaceable {
        Standing::OldIdle(row)
    } else {
        Standing::Idle(row)
    }
}

/// The claims of instances gone, and the other rows of instances EC2 no
/// longer runs. EC2 was listed before the rows were read, so a row of an
/// instance it did not list may be newer than the listing: only one made a
/// grace before it is ended. And an instance missing from the listing may
/// still run (its tags changed under it): of those, only rows with no run
/// are ended — no more hand-outs — never a busy one, whose run would be
/// cut short.
fn end_rows_of_gone(given: &Given, states: &HashMap<&str, Ec2State, FnvBuild>, out: &mut PoolPlan) {
    let snap = given.snap;
    if snap.rows.iter().any(|r| r.claim()) {
        let listed: HashSet<&str> = snap
            .instances
            .iter()
            .filter(|i| i.state().is_present())
            .map(|i| i.id())
            .collect();
        for row in &snap.rows {
            if row.claim() && !listed.contains(row.instance()) {
                out.ends.push(row.id());
            }
        }
    }
    for row in snap.rows.iter().filter(|r| !r.claim()) {
        let gone = match states.get(row.instance()) {
            Some(state) => !state.is_present(),
            None => {
                row.run().is_none()
                    && snap
                        .made_before_listing
                        .get(&row.id())
                        .is_some_and(|secs| *secs >= given.limits.unlisted_grace_secs)
            }
        };
        if gone {
            out.gone.push(row.id());
        }
    }
}

/// A paused pool changes nothing; it still reports what it sees.
fn paused(mut out: PoolPlan, fleet: &Fleet) -> PoolPlan {
    out.retirements.clear();
    out.ends.clear();
    out.gone.clear();
    out.restops.clear();
    out.counts.idle = (fleet.idle.len() + fleet.old_idle.len()) as u32;
    out.counts.launching = fleet.booting;
    out.counts.stopped = (fleet.reserve.len() + fleet.old_reserve.len()) as u32 + fleet.stopping;
    out
}

/// The drifted, at most `max_drifted` of them at a time; how many more
/// the pool needs running than it has, `need` being what it needs.
///
/// Drifted idle instances serve runs until they are replaced. At most
/// `maxDrifted` of them at a time count for nothing here, so that their
/// replacements launch (fewer while instances still boot); each one goes
/// only once the pool has enough without it — after its replacement is
/// idle, never before — the longest idle first. Drifted stopped instances
/// are never started; they are replaced by launches that refill the
/// reserve, at most `maxDrifted` a pass.
fn replace_drifted(out: &mut PoolPlan, fleet: &mut Fleet, need: i64, max_drifted: usize) -> usize {
    let surplus = (fleet.idle.len() + fleet.old_idle.len()) as i64 - need;
    let going = fleet.old_idle.len().min(surplus.max(0) as usize);
    if going > 0 {
        fleet.old_idle.sort_unstable_by(|a, b| {
            let (x, y) = (
                a.1.idle_secs().unwrap_or(0.0),
                b.1.idle_secs().unwrap_or(0.0),
            );
            y.total_cmp(&x).then_with(|| a.0.id().cmp(b.0.id()))
        });
        for (i, row) in fleet.old_idle.drain(..going) {
            out.retirements.push(Retirement {
                instance: i.id().to_string(),
                reason: Reason::Drifted,
                end: End::Idle(row.id()),
            });
        }
    }
    let replacing = fleet
        .old_idle
        .len()
        .min(max_drifted.saturating_sub(fleet.booting as usize));
    let counted = fleet.idle.len() + fleet.old_idle.len() - replacing;
    let running_short = (need - counted as i64 - i64::from(fleet.booting)).max(0) as usize;
    // What is left of them is needed as it is: neither parked in the
    // reserve nor retired as beyond idle.max (there is no spare idle).
    fleet.idle.append(&mut fleet.old_idle);
    let old_stopped = fleet.old_reserve.len();
    for (i, row) in fleet.old_reserve.drain(..old_stopped.min(max_drifted)) {
        out.retirements.push(Retirement {
            instance: i.id().to_string(),
            reason: Reason::Drifted,
            end: End::Reserved(row.id()),
        });
    }
    fleet.old_stopped_left = fleet.old_reserve.len() as u32;
    running_short
}

/// Starts reserve instances for up to `running_short` of what the pool
/// needs running, before anything is launched, in the order of the
/// instance ids, so one pass and the next agree; one whose offering had no
/// capacity at its last start waits, like a launch in it. How many start.
fn start_reserve(
    given: &Given,
    out: &mut PoolPlan,
    fleet: &mut Fleet,
    running_short: usize,
) -> usize {
    fleet.reserve.sort_unstable_by(|a, b| {
        let (x, y) = (given.held(a.0.offering()), given.held(b.0.offering()));
        x.cmp(&y).then_with(|| a.0.id().cmp(b.0.id()))
    });
    let startable = fleet
        .reserve
        .iter()
        .take_while(|(i, _)| !given.held(i.offering()))
        .count();
    let starts = running_short.min(startable);
    for (i, row) in fleet.reserve.drain(..starts) {
        out.starts.push(WithRow {
            instance: i.id().to_string(),
            row: row.id(),
            offering: i.offering().clone(),
        });
    }
    out.counts.starting = starts as u32;
    starts
}

/// The reserve kept within `stopped.max`, spare idle parked in it or
/// retired beyond `idle.max`, and the counts of what stays; how many
/// launches refill the reserve.
///
/// Beyond stopped.max, stopped ones are terminated (never one being
/// stopped). Idle beyond what the pool needs running refills the reserve
/// first, the longest idle first; then idle beyond idle.max is retired,
/// also longest idle first. Unserved demand is about to take idle
/// instances, so it raises both bars.
fn settle_idle(
    given: &Given,
    drift: &Drift,
    out: &mut PoolPlan,
    fleet: &mut Fleet,
    need: i64,
) -> u32 {
    let (spec, demand) = (given.spec, given.snap.demand);
    let (reserve_min, reserve_max) = spec.stopped.as_ref().map_or((0, 0), |r| {
        (r.min.max(0) as usize, r.max_or_min().max(0) as usize)
    });
    let mut reserved = fleet.reserve.len() + fleet.stopping as usize;
    let excess = reserved
        .saturating_sub(reserve_max)
        .min(fleet.reserve.len());
    for (i, row) in fleet.reserve.drain(..excess) {
        out.retirements.push(Retirement {
            instance: i.id().to_string(),
            reason: Reason::ReserveBeyondMax,
            end: End::Reserved(row.id()),
        });
    }
    reserved -= excess;
    let idle = &mut fleet.idle;
    let spare_idle = idle.len().saturating_sub(need as usize);
    let max_idle = (i64::from(spec.idle.max.max(0)) + demand.max(0)) as usize;
    // Sorted only when some go (a pool of many idle instances, most passes
    // keeping them all, skips it). Drifted ones kept (outside the
    // maintenance windows, or with maxDrifted 0) go first: going anyway,
    // the out-of-date should.
    if spare_idle > 0 || idle.len() > max_idle {
        idle.sort_unstable_by(|a, b| {
            let (x, y) = (
                a.1.idle_secs().unwrap_or(0.0),
                b.1.idle_secs().unwrap_or(0.0),
            );
            drift
                .is(given, b.0)
                .cmp(&drift.is(given, a.0))
                .then_with(|| y.total_cmp(&x))
                .then_with(|| a.0.id().cmp(b.0.id()))
        });
    }
    let spare_booting = (idle.len() + fleet.booting as usize)
        .saturating_sub(need as usize)
        .saturating_sub(spare_idle);
    // Spare idle fills the reserve up to stopped.max (stopping costs less
    // than terminating and launching again); launches refill it to
    // stopped.min only.
    let deficit = reserve_min.saturating_sub(reserved);
    let parks = reserve_max.saturating_sub(reserved).min(spare_idle);
    for (i, row) in idle.drain(..parks) {
        out.stops.push(WithRow {
            instance: i.id().to_string(),
            row: row.id(),
            offering: i.offering().clone(),
        });
    }
    if idle.len() > max_idle {
        for (i, row) in idle.drain(..idle.len() - max_idle) {
            out.retirements.push(Retirement {
                instance: i.id().to_string(),
                reason: Reason::IdleBeyondMax,
                end: End::Idle(row.id()),
            });
        }
    }
    out.counts.idle = idle.len() as u32;
    out.counts.launching = fleet.booting;
    out.counts.stopped = (reserved + parks) as u32 + fleet.old_stopped_left;
    // Booting beyond the need will be idle spare soon, and go to the
    // reserve. Launches refill it only once no run waits: until then each
    // launch is for a run, and the reserve left is for the next ones.
    if demand > 0 {
        0
    } else {
        deficit.saturating_sub(parks + spare_booting) as u32
    }
}

/// `want` instances launched, within `out.room`, in batches of at most
/// `max_batch` in the first offering with capacity, the others after it
/// as the fallback; what is left out is `out.short`.
fn launch(given: &Given, out: &mut PoolPlan, want: u32) {
    let count = want.min(out.room);
    out.short = want - count;
    let mut available = offerings(&given.spec.launch)
        .into_iter()
        .filter(|o| !given.held(o));
    let Some(first) = available.next() else {
        out.short = want;
        return;
    };
    out.fallback = available.collect();
    let batch = given.limits.max_batch.max(1);
    let mut left = count;
    while left > 0 {
        let n = left.min(batch);
        out.launches.push(LaunchBatch {
            offering: first.clone(),
            count: n,
        });
        left -= n;
    }
}

/// The plan of a pool being deleted with `onDelete: Terminate` since
/// `since`, paused or not: launch nothing; retire every idle and booting
/// instance (`PoolDeleted`) by the same race-free end or claim as any
/// retirement; leave each busy one to its run — idle after it, it goes like
/// the others — until `drainTimeoutSeconds` after `since`, then end its
/// busy row and terminate it; end the claims of instances gone.
fn plan_deletion(
    spec: &WarmPoolSpec,
    snap: &Snapshot,
    since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> PoolPlan {
    let mut out = PoolPlan::default();
    let mut rows: HashMap<&str, &PoolRow, FnvBuild> =
        HashMap::with_capacity_and_hasher(snap.rows.len(), FnvBuild::default());
    for r in &snap.rows {
        rows.insert(r.instance(), r);
    }
    let drained = age_secs(now, since) >= spec.drain_timeout_seconds.max(0) as f64;
    let mut listed: HashSet<&str> = HashSet::new();
    for i in &snap.instances {
        if !i.state().is_present() {
            if i.state() == Ec2State::ShuttingDown {
                out.counts.terminating += 1;
            }
            continue;
        }
        listed.insert(i.id());
        let end = match rows.get(i.id()) {
            Some(row) if row.claim() => End::Claimed(row.id()),
            Some(row)
                if row.reserved() || (row.idle_secs().is_none() && row.woken_secs().is_some()) =>
            {
                End::Reserved(row.id())
            }
            Some(row) if row.idle_secs().is_some() => End::Idle(row.id()),
            Some(row) if drained => End::Busy(row.id()),
            Some(_) => {
                out.counts.busy += 1;
                continue;
            }
            None => End::Claim,
        };
        out.retirements.push(Retirement {
            instance: i.id().to_string(),
            reason: Reason::PoolDeleted,
            end,
        });
    }
    for row in &snap.rows {
        if row.claim() && !listed.contains(row.instance()) {
            out.ends.push(row.id());
        }
    }
    out.counts.terminating += out.retirements.len() as u32;
    out
}

#[cfg(test)]
#[path = "plan_tests/mod.rs"]
mod tests;
