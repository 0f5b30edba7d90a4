//! The observe stage of a pool's pass: EC2 first (or a listing recent
//! enough to reuse), then the database — the rows, the demand, their
//! ages by the database's clock — into one [`Snapshot`]; what EC2 says of
//! the spec's instance types, the forecast's floors from the database's
//! history, and the count of boots that keep failing.
//!
//! What one pass reads before it plans, and what
//! the observer keeps between passes to read it (`Seen`).

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};

use super::forecast::{self, Demand, Floors};
use super::objective::{self, Bounds, Choice, Outlook, StartTimes};
use super::plan::{Ec2Instance, Offering, Snapshot};

use super::act::Lessons;
use super::cost::Cost;
use super::ec2::TypeFacts;
use super::listings::{Marks, Place, Want};
use super::live::Live;
use super::pass_report::PoolError;
use super::starts::Starts;
use super::tags::{TAG_CLASS, TAG_NAMESPACE};
use crate::crd::{Objective, ObjectiveStatus, StaticFloor, WarmPoolSpec};

/// How often the forecast is made again from the database's history.
pub const FORECAST_EVERY: Duration = Duration::from_secs(3600);

/// The shares of starts within the target before any was measured: an
/// idle hand-out is (its run waits for nothing); the reserve and cold
/// launches are relied on only once seen.
const UNMEASURED: StartTimes = StartTimes::new(1.0, 0.0, 0.0);

/// Cold starts of one offering measured in the last hour before the
/// objective takes that offering's start times rather than the pool's.
const MEASURED_ON: usize = 3;

/// Weeks of demand history the objective plans from.
const OBJECTIVE_WEEKS: i32 = 4;

/// How often the objective's attainment over the last day is read again.
const DAY_EVERY: Duration = Duration::from_secs(300);

/// The objective's plan for a pass: what to keep, and what from.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Planned {
    choice: Choice,
    planned_from: String,
    /// Its cost over the next day against the static floor, as of the
    /// history's last reading.
    outlook: Outlook,
    /// Of the last day's runs, how many started within the target, and how
    /// many there were (read every [`DAY_EVERY`]).
    day: Option<(u64, u64)>,
    /// With `spec.objective.prices` for the type the next launch goes to:
    /// that type and its running price an hour.
    priced: Option<(String, f64)>,
}

impl Planned {
    /// What it keeps, and how it was chosen.
    pub(super) fn choice(&self) -> &Choice {
        &self.choice
    }

    /// `status.objective`: the share of the last hour's runs that started
    /// within the target, what the plan keeps and what from.
    pub(super) fn status(&self, o: &Objective, starts: &Starts) -> ObjectiveStatus {
        let p = self;
        let price = p.priced.as_ref().map(|(_, h)| *h);
        let cents = |v: f64| (v * 100.0).round() / 100.0;
        use orca_db::pool::Source;
        let target = o.time_to_start.seconds as f64;
        let (within, runs) = [Source::Idle, Source::Reserve, Source::Cold]
            .into_iter()
            .filter_map(|s| starts.within(s, target))
            .fold((0.0, 0usize), |(w, n), (share, runs)| {
                (w + share * runs as f64, n + runs)
            });
        ObjectiveStatus {
            attained_percent: (runs > 0).then(|| (within / runs as f64 * 1000.0).round() / 10.0),
            runs: runs as i64,
            idle: i32::try_from(p.choice.idle()).unwrap_or(i32::MAX),
            stopped: i32::try_from(p.choice.stopped()).unwrap_or(i32::MAX),
            planned_from: p.planned_from.clone(),
            expected_percent: (p.choice.met() * 1000.0).round() / 10.0,
            day_attained_percent: p
                .day
                .filter(|(_, runs)| *runs > 0)
                .map(|(within, runs)| (within as f64 / runs as f64 * 1000.0).round() / 10.0),
            day_runs: p
                .day
                .map_or(0, |(_, runs)| i64::try_from(runs).unwrap_or(i64::MAX)),
            expected_instance_hours: (p.outlook.next_day() * 10.0).round() / 10.0,
            static_floor: p.outlook.static_floor().map(|idle| StaticFloor {
                idle: i32::try_from(idle).unwrap_or(i32::MAX),
                instance_hours: f64::from(idle) * 24.0,
                cost: price.map(|h| cents(f64::from(idle) * 24.0 * h)),
            }),
            expected_cost: price.map(|h| cents(p.outlook.next_day() * h)),
            priced_as: p.priced.as_ref().map(|(t, _)| t.clone()),
        }
    }
}

/// The objective's reading of the database (`spec.objective`).
#[derive(Debug)]
pub(super) struct Reading {
    /// The demand history as last read.
    history: Option<Read>,
    /// When the last day's attainment was read, and what it was.
    day: Option<(Instant, (u64, u64))>,
}

/// The demand history as read at `at`: its slices' length, its slices by
/// hour of the week, and the outlook made with them.
#[derive(Debug)]
struct Read {
    at: Instant,
    slice_secs: i64,
    hours: Vec<Vec<u32>>,
    outlook: Option<Outlook>,
}

impl Reading {
    pub(super) fn new() -> Reading {
        Reading {
            history: None,
            day: None,
        }
    }
}

/// After the tenancy tags were refused, they are tried again this much later.
pub const MARK_RETRY: Duration = Duration::from_secs(300);

/// How long after a failed `DescribeInstanceTypes` it is made again.
const ASK_TYPES_AGAIN: Duration = Duration::from_secs(60);

/// What observing keeps between passes.
#[derive(Debug)]
pub(super) struct Seen {
    /// A pass may take a listing asked for after this (the loop's last
    /// act, or its start); `None`: the next pass lists anew (an act was
    /// under way when a pass failed).
    fresh_after: Option<Instant>,
    /// Busy rows seen hung, and the database's clock at the listing of the
    /// pass that first saw each so.
    hung_since: HashMap<i64, f64>,
    /// Instances of the pool without the cluster's tag were looked for
    /// (see [`Observer::list`]).
    adopted: bool,
    /// Those of them the last listing adopted, for the pass to say so.
    just_adopted: Vec<String>,
    /// The instance types EC2 described to this loop.
    types: HashMap<String, TypeFacts>,
    /// The number the launch template's version resolved to, and when it
    /// was asked.
    resolved_template: Option<(Instant, String)>,
    /// The forecast's floors and when they were made (`spec.forecast`).
    floors: Option<(Instant, Floors)>,
    /// What the objective read of the database (`spec.objective`).
    history: Reading,
    /// The share of each source's starts within the objective's target,
    /// as last measured: kept through an hour without such starts.
    shares: StartTimes,
    /// The instances given their tenancy tags (see [`Observer::mark`]).
    marked: HashSet<String>,
    /// When adding them was last refused.
    mark_failed: Option<Instant>,
    /// When describing the instance types last failed.
    types_failed: Option<Instant>,
}

impl Seen {
    /// Nothing seen yet; a listing from before now is not taken.
    pub(super) fn new() -> Seen {
        Seen {
            fresh_after: Some(Instant::now()),
            hung_since: HashMap::new(),
            adopted: false,
            just_adopted: Vec::new(),
            types: HashMap::new(),
            resolved_template: None,
            floors: None,
            history: Reading::new(),
            shares: UNMEASURED,
            marked: HashSet::new(),
            mark_failed: None,
            types_failed: None,
        }
    }

    /// A listing asked for after `at` is fresh enough for a pass (`None`:
    /// the next pass lists anew).
    pub(super) fn fresh_after(&mut self, at: Option<Instant>) {
        self.fresh_after = at;
    }

    /// A new spec: the launch template is resolved anew, and the forecast
    /// and the objective read their history again.
    pub(super) fn spec_changed(&mut self, template_changed: bool) {
        if template_changed {
            self.resolved_template = None;
        }
        self.floors = None;
        self.history = Reading::new();
    }

    /// Another class's book grants the pool's launches (or none): the
    /// instances tagged for the one before are looked at again, so that
    /// those without a class's tag get this one's.
    pub(super) fn class_changed(&mut self) {
        self.marked.clear();
    }

    /// The instances the last listing adopted, said once.
    pub(super) fn take_adopted(&mut self) -> Vec<String> {
        std::mem::take(&mut self.just_adopted)
    }

    /// The instance types EC2 described to this loop.
    pub(super) fn types(&self) -> &HashMap<String, TypeFacts> {
        &self.types
    }
}

/// One pass's observer: the world the loop lends it, what it keeps
/// ([`Seen`]), and what it reads of the loop and of the act step's
/// lessons (the launches, whose fate it learns; the capacity holds; the
/// class's book).
pub(super) struct Observer<'a> {
    world: &'a mut Live,
    /// The pool (`namespace/name`), its owner, the knobs and metrics, and
    /// the act stage's lessons it reads: its launches, holds and book.
    lessons: Lessons<'a>,
    seen: &'a mut Seen,
    cost: &'a mut Cost,
    spec: &'a WarmPoolSpec,
    place: &'a Arc<Place>,
    drain: &'a HashSet<String>,
}

impl<'a> Observer<'a> {
    /// The observer of one pass over the loop's `world`, `spec`, `place`
    /// and the instances it was asked to `drain`, keeping what it sees in
    /// `seen` and `cost`, reading the act stage's `lessons`.
    pub(super) fn new(
        world: &'a mut Live,
        lessons: Lessons<'a>,
        seen: &'a mut Seen,
        cost: &'a mut Cost,
        spec: &'a WarmPoolSpec,
        place: &'a Arc<Place>,
        drain: &'a HashSet<String>,
    ) -> Observer<'a> {
        Observer {
            world,
            lessons,
            seen,
            cost,
            spec,
            place,
            drain,
        }
    }
}

impl Observer<'_> {
    /// Observes: EC2 first (a listing of the pool's place new enough for
    /// it, see [`super::listings`]), then the rows and the demand, a row
    /// whose run has not beaten for `run_stale` (the Scheduler's stale
    /// limit, see `PoolLoop::set_run_stale`) counting as hung. A WarmPool
    /// `deleting` lists anew.
    pub(super) async fn observe(
        &mut self,
        deleting: bool,
        run_stale: Duration,
    ) -> Result<Snapshot, PoolError> {
        // A deletion, and a pass after one that failed while it acted, list
        // anew.
        let after = match self.seen.fresh_after {
            Some(after) if !deleting => after,
            _ => Instant::now(),
        };
        let (snap, reused) = self.observe_once(after, run_stale).await?;
        // An instance a listing made before this pass shows alive lost its
        // last row since (its agent powered it off, say): the listing
        // cannot tell whether it still runs, so look again rather than
        // terminate it twice.
        if reused
            && snap
                .instances()
                .iter()
                .any(|i| i.state().is_present() && snap.known().contains(i.id()))
        {
            return Ok(self.observe_once(Instant::now(), run_stale).await?.0);
        }
        Ok(snap)
    }

    /// One observation, with a listing asked for after `after` and rows
    /// hung past `stale`; and whether the listing was asked for before
    /// this observation began.
    async fn observe_once(
        &mut self,
        after: Instant,
        stale: Duration,
    ) -> Result<(Snapshot, bool), PoolError> {
        // The database's clock, then the listing: a row made after the
        // listing was asked for may be of an instance it does not show.
        // A listing asked for before the clock was read is placed on the
        // database's clock by the time between them, counted from after the
        // read: never later than it was.
        let clock = self
            .world
            .read(async |db| orca_db::pool::clock(db).await)
            .await?;
        let read = Instant::now();
        let (asked, instances) = self.list(after).await?;
        let reused = asked < read;
        let listed = clock - read.saturating_duration_since(asked).as_secs_f64();
        let pool = self.lessons.pool();
        let count_uses = self.spec.max_uses > 0;
        let live = self
            .world
            .read(async |db| orca_db::pool::live_rows(db, pool, count_uses).await)
            .await?;
        // Present, or launched by this loop and not listed yet, without a
        // live row: had it rows once?
        let unlisted = self
            .lessons
            .launches()
            .ours()
            .filter(|id| !instances.iter().any(|i| i.id() == *id));
        let without: Vec<String> = instances
            .iter()
            .filter(|i| i.state().is_present())
            .map(|i| i.id())
            .chain(unlisted)
            .filter(|id| !live.iter().any(|r| r.instance() == *id))
            .map(str::to_string)
            .collect();
        let known = self
            .world
            .read(async |db| orca_db::pool::known(db, &without).await)
            .await?;
        let checks = self
            .world
            .read(async |db| orca_db::pool::check_rows(db, pool, listed, stale).await)
            .await?;
        let mut made_before_listing = HashMap::with_capacity(checks.len());
        let (mut hung, mut hung_since) = (HashMap::new(), HashMap::new());
        for c in checks {
            made_before_listing.insert(c.row(), c.made_before_listing());
            if c.hung() {
                let since = self
                    .seen
                    .hung_since
                    .get(&c.row())
                    .copied()
                    .unwrap_or(listed);
                hung_since.insert(c.row(), since);
                hung.insert(c.row(), listed - since);
            }
        }
        self.seen.hung_since = hung_since;
        let demand = self
            .world
            .read(async |db| orca_db::pool::open_demand(db, pool).await)
            .await?;
        self.count_hand_outs(listed, &instances).await?;
        self.lessons.launches().listed(&instances);
        let snap = Snapshot::default()
            .with_instances(instances)
            .with_rows(live)
            .with_known(known)
            .with_ours(self.lessons.launches().ours().map(str::to_string).collect())
            .with_demand(demand)
            .with_made_before_listing(made_before_listing)
            .with_hung(hung)
            .with_drain(self.drain.clone())
            .with_template_version(self.template_version().await?);
        Ok((snap, reused))
    }

    /// Counts the hand-outs since the last pass (runs served, the time to
    /// start); at the loop's first, those of the last hour, for the time
    /// to start, of which only the last minute's are counted as served (the
    /// status restored the rest). `listed`: the listing's time on the
    /// database's clock; `instances`: what it listed, for the offering of
    /// each instance handed out.
    async fn count_hand_outs(
        &mut self,
        listed: f64,
        instances: &[Ec2Instance],
    ) -> Result<(), PoolError> {
        let pool = self.lessons.pool();
        let first = self.cost.handed_mark().is_none();
        let after = self
            .cost
            .handed_mark()
            .unwrap_or(listed - super::starts::WINDOW_SECS);
        let outs = self
            .world
            .read(async |db| orca_db::pool::hand_outs_since(db, pool, after).await)
            .await?;
        self.cost.counted_to(outs.last().map_or(after, |h| h.at()));
        let mut served = orca_db::pool::Served::default();
        for h in outs.iter().filter(|h| !first || h.at() > listed - 60.0) {
            served.add(h.source());
            if let Some(m) = self.lessons.metrics() {
                m.time_to_start(self.lessons.pool(), h.source(), h.waited());
            }
        }
        self.cost.count_starts(&outs, listed, instances);
        self.cost.add_served(served);
        if let Some(m) = self.lessons.metrics() {
            m.served(self.lessons.pool(), served);
        }
        Ok(())
    }

    /// The number the spec's launch template version resolves to, asked
    /// of EC2 at most once a `Tuning::template_every` (a minute;
    /// `DescribeLaunchTemplateVersions`);
    /// `None` without a template. A failed call keeps the last answer, or
    /// none: no instance is known to drift by its version meanwhile.
    async fn template_version(&mut self) -> Result<Option<String>, PoolError> {
        let Some(template) = &self.spec.launch.launch_template else {
            self.seen.resolved_template = None;
            return Ok(None);
        };
        if let Some((at, version)) = &self.seen.resolved_template {
            if at.elapsed() < self.lessons.tuning().template_every() {
                return Ok(Some(version.clone()));
            }
        }
        let answer = self.world.ec2().template_version(template).await;
        self.lessons
            .answered("DescribeLaunchTemplateVersions", &answer);
        match answer {
            Ok(version) => {
                self.seen.resolved_template = Some((Instant::now(), version.clone()));
                Ok(Some(version))
            }
            Err(e @ super::ec2::Ec2Error::Fenced { .. }) => {
                Err(PoolError::ec2(self.lessons.pool(), e))
            }
            Err(e) => {
                tracing::warn!(pool = %self.lessons.pool(), error = %e,
                    "the launch template's version could not be resolved");
                Ok(self.seen.resolved_template.as_ref().map(|(_, v)| v.clone()))
            }
        }
    }

    /// The pool's instances in a listing asked for after `after`, and when
    /// it was asked for. For the loop's first listing, one that shows the
    /// instances launched before instances carried the cluster's tag too —
    /// and those of them whose agents reported to this pool's database are
    /// adopted: tagged with this cluster's name (so that later listings,
    /// which filter on it, show them) and listed as the pool's. One without
    /// a row here may be another cluster's, and is left alone (its agent
    /// powers it off once idle).
    pub(super) async fn list(
        &mut self,
        after: Instant,
    ) -> Result<(Instant, Vec<Ec2Instance>), PoolError> {
        let want = Want::new(
            after,
            self.lessons.tuning().listing_reuse(),
            !self.seen.adopted,
        );
        let place = self.place.clone();
        let ec2 = self.world.ec2();
        let taken = place
            .take(
                self.lessons.owner(),
                want,
                async |filter: &[(&str, &str)]| ec2.describe_tagged(filter).await,
            )
            .await;
        let (asked, group) = taken.map_err(|e| PoolError::ec2(self.lessons.pool(), e))?;
        let (mut instances, untagged, marks) = group.into_parts();
        self.mark(&marks).await?;
        if self.seen.adopted || untagged.is_empty() {
            self.seen.adopted = true;
            return Ok((asked, instances));
        }
        let ids: Vec<String> = untagged.iter().map(|i| i.id().to_string()).collect();
        let pool = self.lessons.pool();
        let mut ours: Vec<String> = self
            .world
            .read(async |db| orca_db::pool::had_rows(db, pool, &ids).await)
            .await?
            .into_iter()
            .collect();
        ours.sort();
        if ours.is_empty() {
            tracing::info!(pool = %self.lessons.pool(), instances = ?ids,
                "instances with this pool's tags but no cluster's and no row in its database: \
                 another cluster's, left alone");
        } else {
            let tagged = self
                .world
                .ec2()
                .tag_cluster(&ours, self.lessons.owner())
                .await;
            tagged.map_err(|e| PoolError::ec2(self.lessons.pool(), e))?;
            // A listing asked for before the tags (this one, kept for the
            // other passes) does not show them as the pool's: the next
            // pass lists anew, or it would launch as many again.
            self.seen.fresh_after = Some(Instant::now());
            tracing::info!(pool = %self.lessons.pool(), instances = ?ours, cluster = %self.lessons.owner().cluster(), "adopted");
            instances.extend(
                untagged
                    .into_iter()
                    .filter(|i| ours.iter().any(|o| o == i.id())),
            );
            self.seen.just_adopted = ours;
        }
        self.seen.adopted = true;
        Ok((asked, instances))
    }

    /// Adds the tenancy tags the pool's instances lack — launched before
    /// instances carried them — so that a class's census counts them: the
    /// namespace's on every one, the class's (the loop's) on those without
    /// one (an instance launched through another class keeps counting
    /// there). Once per instance; a refusal is said in the log and tried
    /// again after [`MARK_RETRY`], never failing the pass.
    async fn mark(&mut self, marks: &[Marks]) -> Result<(), PoolError> {
        if self
            .seen
            .mark_failed
            .is_some_and(|at| at.elapsed() < MARK_RETRY)
        {
            return Ok(());
        }
        let class = self.lessons.budget().map(|b| b.class().to_string());
        let owner = self.lessons.owner();
        let wants = |m: &Marks| {
            let mut tags = Vec::new();
            if !m.has_namespace() {
                tags.push((TAG_NAMESPACE, owner.namespace().to_string()));
            }
            if let (None, Some(c)) = (m.class(), &class) {
                tags.push((TAG_CLASS, c.clone()));
            }
            tags
        };
        let mut by_tags: BTreeMap<Vec<(&str, String)>, Vec<String>> = BTreeMap::new();
        for m in marks.iter().filter(|m| !self.seen.marked.contains(m.id())) {
            let tags = wants(m);
            if !tags.is_empty() {
                by_tags.entry(tags).or_default().push(m.id().to_string());
            }
        }
        for (tags, ids) in by_tags {
            let pairs: Vec<(&str, &str)> = tags.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let answer = self.world.ec2().add_tags(&ids, &pairs).await;
            self.lessons.answered("CreateTags", &answer);
            match answer {
                Ok(()) => {
                    tracing::info!(pool = %self.lessons.pool(), instances = ?ids, tags = ?pairs,
                        "tenancy tags added");
                    self.seen.marked.extend(ids);
                }
                Err(e @ super::ec2::Ec2Error::Fenced { .. }) => {
                    return Err(PoolError::ec2(self.lessons.pool(), e))
                }
                Err(e) => {
                    tracing::warn!(pool = %self.lessons.pool(), instances = ?ids, error = %e,
                        "the tenancy tags could not be added; their class does not count them yet");
                    self.seen.mark_failed = Some(Instant::now());
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// The forecast's floors with `spec.forecast`: from the database's
    /// history once every [`FORECAST_EVERY`] (and after a new spec), else
    /// as made last.
    pub(super) async fn floors(&mut self, now: DateTime<Utc>) -> Result<Option<Floors>, PoolError> {
        let Some(spec) = self.spec.forecast.clone() else {
            self.seen.floors = None;
            return Ok(None);
        };
        if let Some((made, f)) = &self.seen.floors {
            if made.elapsed() < FORECAST_EVERY {
                return Ok(Some(f.clone()));
            }
        }
        let pool = self.lessons.pool();
        let counts = self
            .world
            .read(async |db| {
                orca_db::pool::demand_history(db, pool, spec.lead_seconds, spec.weeks).await
            })
            .await?;
        let demand = Demand::new(spec.lead_seconds).with_counts(counts.into_iter().collect());
        let f = forecast::floors(&spec, &demand, now);
        self.seen.floors = Some((Instant::now(), f.clone()));
        Ok(Some(f))
    }

    /// The objective's holdings for `now` within `bounds`
    /// (`spec.objective`): planned from the demand history, read from the
    /// database once every [`FORECAST_EVERY`] (and after a new spec) in
    /// slices of one cold start as measured, and from the share of each
    /// source's starts within the target (the last hour's, or as last
    /// measured).
    pub(super) async fn objective(
        &mut self,
        now: DateTime<Utc>,
        bounds: Bounds,
    ) -> Result<Option<Planned>, PoolError> {
        let Some(objective) = self.spec.objective.clone() else {
            self.seen.history = Reading::new();
            return Ok(None);
        };
        let target = objective.time_to_start.seconds as f64;
        // A cold start is the next launch's: of its offering where enough of
        // them were measured, as start times differ by type and subnet.
        let next = self.next_offering(now);
        let on = next.clone().filter(|o| {
            self.cost
                .starts()
                .within_on(orca_db::pool::Source::Cold, target, o)
                .is_some_and(|(_, n)| n >= MEASURED_ON)
        });
        let shares = self.shares_within(target, on.as_ref());
        // Runs within one cold start of each other: a launch for the first
        // serves none of the others in time.
        let cold = self
            .cost
            .starts()
            .quantile(orca_db::pool::Source::Cold, objective.goal(), on.as_ref())
            .unwrap_or(300.0)
            .clamp(30.0, 900.0);
        self.read_objective(target, cold.round() as i64, now)
            .await?;
        let reading = &mut self.seen.history;
        let Some(Read {
            slice_secs,
            hours,
            outlook: made,
            ..
        }) = &mut reading.history
        else {
            return Ok(None);
        };
        // An idle instance against a stopped one at the prices of the type
        // the next launch goes to.
        let stopped_cost = next.as_ref().map_or(objective.stopped_cost(), |o| {
            objective.stopped_cost_of(o.instance_type(), o.spot())
        });
        let priced = next.as_ref().and_then(|o| {
            let p = objective.price_of(o.instance_type())?;
            Some((o.instance_type().to_string(), p.running(o.spot())))
        });
        let plan = |slices: &[u32]| {
            super::objective::choose(slices, objective.goal(), &shares, &bounds, stopped_cost)
        };
        let lead = chrono::Duration::seconds(cold as i64);
        let choice = super::objective::at(hours, now, lead, plan);
        let outlook = *made.get_or_insert_with(|| {
            let most_idle = bounds.idle().1.min(bounds.max_instances());
            super::objective::outlook(hours, now, plan, objective.goal(), &shares, most_idle)
        });
        let busiest = super::objective::at_hour(hours, now);
        Ok(Some(Planned {
            choice,
            planned_from: planned_from(busiest, *slice_secs, &objective, &shares, on.as_ref()),
            outlook,
            day: reading.day.map(|(_, d)| d),
            priced,
        }))
    }

    /// The share of each source's starts within `target` seconds in the
    /// last hour (cold launches' of offering `on` if given), kept from the
    /// last measure for a source without one.
    fn shares_within(&mut self, target: f64, on: Option<&Offering>) -> StartTimes {
        use orca_db::pool::Source;
        let starts = self.cost.starts();
        let was = self.seen.shares;
        let share = |source: Source, was: f64| {
            let measured = match on {
                Some(o) if source == Source::Cold => starts.within_on(source, target, o),
                _ => starts.within(source, target),
            };
            measured.map_or(was, |(within, _)| within)
        };
        self.seen.shares = StartTimes::new(
            share(Source::Idle, was.idle()),
            share(Source::Reserve, was.reserve()),
            share(Source::Cold, was.cold()),
        );
        self.seen.shares
    }

    /// The offering the next launch goes to: the spec's first without a
    /// capacity hold at `now`.
    fn next_offering(&self, now: DateTime<Utc>) -> Option<Offering> {
        let held = self.lessons.holds().until();
        super::instance::offerings(&self.spec.launch)
            .into_iter()
            .find(|o| held.get(o).is_none_or(|until| *until <= now))
    }

    /// Reads what the objective plans from when it is due: the demand
    /// history in slices of `slice` seconds every [`FORECAST_EVERY`] (its
    /// outlook made again with it), the last day's starts within `target`
    /// every [`DAY_EVERY`].
    async fn read_objective(
        &mut self,
        target: f64,
        slice: i64,
        now: DateTime<Utc>,
    ) -> Result<(), PoolError> {
        let pool = self.lessons.pool();
        let due = |at: Option<&Instant>, every: Duration| at.is_none_or(|a| a.elapsed() >= every);
        let reading = &self.seen.history;
        if due(reading.history.as_ref().map(|h| &h.at), FORECAST_EVERY) {
            let counts = self
                .world
                .read(async |db| {
                    orca_db::pool::demand_history(db, pool, slice, OBJECTIVE_WEEKS).await
                })
                .await?;
            let h = Demand::new(slice).with_counts(counts.into_iter().collect());
            let hours = objective::by_hour(&h, now, i64::from(OBJECTIVE_WEEKS));
            self.seen.history.history = Some(Read {
                at: Instant::now(),
                slice_secs: slice,
                hours,
                outlook: None,
            });
        }
        if due(self.seen.history.day.as_ref().map(|d| &d.0), DAY_EVERY) {
            let day = self
                .world
                .read(async |db| orca_db::pool::attainment(db, pool, target, 24).await)
                .await?;
            self.seen.history.day = Some((Instant::now(), day));
        }
        Ok(())
    }

    /// Asks EC2 about the instance types this loop has not had described
    /// yet (`DescribeInstanceTypes`): the spec's, and those its class's
    /// book counts without knowing their vCPUs (which its limits count;
    /// see `Budget::unknown_in_book`); their architectures too. A type EC2
    /// does not describe stays unknown. A failed call is made again
    /// [`ASK_TYPES_AGAIN`] on, and one the credentials may not make keeps
    /// the pool `Unauthorized`, naming the action, until one is answered.
    pub(super) async fn learn_types(&mut self) -> Result<(), PoolError> {
        if self
            .seen
            .types_failed
            .is_some_and(|at| at.elapsed() < ASK_TYPES_AGAIN)
        {
            return Ok(());
        }
        let in_book = self
            .lessons
            .budget()
            .map(|b| b.unknown_in_book())
            .unwrap_or_default();
        let mut unknown: Vec<String> = self
            .spec
            .launch
            .instance_types
            .iter()
            .cloned()
            .chain(in_book)
            .filter(|t| !self.seen.types.contains_key(t))
            .collect();
        unknown.sort();
        unknown.dedup();
        if unknown.is_empty() {
            return Ok(());
        }
        let answer = self.world.ec2().describe_types(&unknown).await;
        self.lessons.answered("DescribeInstanceTypes", &answer);
        match answer {
            Ok(facts) => {
                self.seen.types_failed = None;
                for f in facts {
                    self.seen.types.insert(f.name().clone(), f);
                }
            }
            Err(e @ super::ec2::Ec2Error::Fenced { .. }) => {
                return Err(PoolError::ec2(self.lessons.pool(), e))
            }
            // Not known: no launch of those types under a vCPU limit, and
            // no architecture check, until a pass learns them.
            Err(e) => {
                tracing::warn!(pool = %self.lessons.pool(), error = %e,
                    "the pool's instance types could not be described");
                self.seen.types_failed = Some(Instant::now());
            }
        }
        Ok(())
    }
}

/// What the objective planned from, for `status.objective.plannedFrom`:
/// the busiest of the hour's slices (`busiest`) of `slice_secs`, and the
/// share of each source's starts within the target.
fn planned_from(
    busiest: &[u32],
    slice_secs: i64,
    objective: &crate::crd::Objective,
    shares: &StartTimes,
    on: Option<&Offering>,
) -> String {
    let mut busiest = busiest.to_vec();
    busiest.sort_unstable_by(|a, b| b.cmp(a));
    busiest.truncate(3);
    let slices = if busiest.is_empty() {
        "no runs".to_string()
    } else {
        busiest
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let cold_on = on
        .map(|o| {
            let spot = if o.spot() { " (spot)" } else { "" };
            format!(" ({} in {}{spot})", o.instance_type(), o.subnet())
        })
        .unwrap_or_default();
    format!(
        "busiest {slice_secs}-second slices of this hour in {OBJECTIVE_WEEKS} weeks: {slices}; \
         starts within {}s: idle {:.0} %, reserve {:.0} %, cold {:.0} %{cold_on}",
        objective.time_to_start.seconds,
        shares.idle() * 100.0,
        shares.reserve() * 100.0,
        shares.cold() * 100.0,
    )
}
