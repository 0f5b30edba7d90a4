//! One pass of a pool: observe (EC2 first, then the database, see
//! `observe.rs`) → the moment's spec → [`plan`] → act (see `act/`) →
//! status (`conditions.rs`) and events; and a loop run on its own (the local
//! mode): passes on the pool's notifications, every resync, and after a
//! back-off. Every EC2 call and every statement checks the loop's
//! [`crate::fence::Fence`] just before it goes out; a fenced pass ends
//! there, with [`PoolError::Fenced`].
//!
//! The pass as the sequence it is, the few steps
//! of its own it names, and the loop that repeats it.

use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};

use crate::crd::WarmPoolSpec;
use crate::fence::MaybeFenced;
use crate::warmpool::{
    forecast::Floors,
    plan::{plan, Ec2Instance, PoolPlan, Snapshot},
    schedule,
};

use super::PoolLoop;
use crate::warmpool::act::Orders;
use crate::warmpool::metrics::Counts;
use crate::warmpool::objective;
use crate::warmpool::observe::{Observer, Planned};
use crate::warmpool::pass_report::{Deletion, PassReport, PoolError, PoolEvent};

/// How much later than a move EC2 must say an instance launched for the
/// loop left at the old place to leave it alone: more than the clocks of
/// the operator and EC2 part by.
const LAUNCH_CLOCK_SLACK: chrono::TimeDelta = chrono::TimeDelta::minutes(2);

/// The hours ahead whose floor `status.forecast` shows.
const FORECAST_HOURS_SHOWN: usize = 6;

/// The spec as given with what holds at the moment of a pass over it: the
/// one spec both the plan and the act step read.
struct Moment {
    /// A schedule under way replaces the idle range (one that cannot be
    /// read is a warning, and `spec.idle` holds), the forecast raises the
    /// floor of either, within its max, and a deletion's drain time-out is
    /// the one it was told.
    spec: WarmPoolSpec,
    active: Result<Option<schedule::Active>, schedule::ScheduleError>,
    floors: Option<Floors>,
    /// With `spec.objective`: what it keeps, which raised the floors.
    objective: Option<Planned>,
}

impl PoolLoop {
    /// One pass at `now` (the operator's clock, for EC2's launch times):
    /// observe, the moment's spec, plan, act, the status.
    pub async fn pass(&mut self, now: DateTime<Utc>) -> Result<PassReport, PoolError> {
        let deleting = self.deletion.borrow().is_some();
        let run_stale = self.run_stale();
        let mut snap = self.observer().observe(deleting, run_stale).await?;
        self.listed = Some(
            snap.instances()
                .iter()
                .map(|i| i.id().to_string())
                .collect(),
        );
        self.observer().learn_types().await?;
        self.tell_vcpus();
        // Read after the observation: a deletion that began meanwhile
        // launches nothing in this pass already.
        let deletion = *self.deletion.borrow();
        snap = snap.with_deleting(deletion.map(|d| d.since()));
        if let Some(d) = deletion.filter(|d| d.left_behind()) {
            self.leave_later_launches(&mut snap, d.since());
        }
        self.act.holds_mut().expire(now);
        let foreign = self.hold_foreign_types(now);
        let moment = self.moment(now, deletion, &snap).await?;
        let spec = &moment.spec;
        let decided = plan(spec, &snap, self.act.holds().until(), &self.limits(), now);
        self.count_cost(&snap);
        tracing::debug!(
            pool = %self.act.pool(),
            instances = snap.instances().len(),
            rows = snap.rows().len(),
            demand = snap.demand(),
            launches = decided.launch_count(),
            retirements = decided.retirements().len(),
            "planned"
        );
        let mut report = self.report(&moment, &snap, &decided, now);
        self.notices(foreign, &moment, &snap, now, &mut report);
        match deletion {
            Some(d) => self.announce_deletion(&decided, d, &mut report),
            None => {
                self.act
                    .count_boot_failures(&mut self.world, &decided, &snap, now, &mut report)
                    .await?
            }
        }
        let orders = Orders::new(spec, &decided, snap.template_version(), now);
        self.act(orders, &mut report).await?;
        // After acting, so that asking never delays what the pass does.
        if deletion.is_none() {
            let version = snap.template_version();
            crate::warmpool::act::preflight::ask(
                &mut self.world,
                &mut self.act,
                spec,
                &snap,
                version,
                now,
                &mut report,
            )
            .await;
        }
        self.act.ended_by_loop(report.terminated());
        report.set_instances(crate::warmpool::roster::roster(
            spec,
            &snap,
            &decided,
            self.act.launches().times(),
        ));
        // A refusal of the credentials outlasts the pass that met it (see
        // `Denials`), over any boot failure: the IAM policy mends it.
        if let Some(message) = self.act.denials().standing() {
            report.set_degraded(Some((crate::warmpool::pass_report::UNAUTHORIZED, message)));
        }
        let status = crate::warmpool::conditions::status(
            &report,
            &mut self.conditions,
            self.act.holds(),
            self.act.launches().batches(),
            &mut self.cost,
            now,
        );
        report.set_status(status);
        self.deletion_announced |= report.deleting();
        self.gauge(&report);
        Ok(report)
    }

    /// Acts on the pass's `orders`: retire, the stopped reserve, launch.
    ///
    /// What it terminates, ends, stops or starts would look otherwise in a
    /// listing asked for before it is done: the next passes take none of
    /// those (and if the pass fails on the way, the next lists anew). What
    /// it launches is counted as the loop's own; a loop that replaces this
    /// one (a new database) has no `ours`, and must not take a listing from
    /// before these launches either.
    async fn act(&mut self, orders: Orders<'_>, report: &mut PassReport) -> Result<(), PoolError> {
        let plan = orders.plan();
        let changes = !(plan.retirements().is_empty()
            && plan.ends().is_empty()
            && plan.gone().is_empty()
            && plan.stops().is_empty()
            && plan.restops().is_empty()
            && plan.starts().is_empty());
        let acting = self
            .listings
            .clone()
            .filter(|_| changes || plan.launch_count() > 0);
        if changes {
            self.seen.fresh_after(None);
        }
        if let Some(l) = &acting {
            l.acting(self.act.pool(), false);
        }
        let stayed = self.act.retire(&mut self.world, plan, report).await?;
        self.act.reserve(&mut self.world, orders, report).await?;
        self.act
            .launch(&mut self.world, orders, stayed, report)
            .await?;
        if changes {
            self.seen.fresh_after(Some(Instant::now()));
        }
        if let Some(l) = &acting {
            l.acting(self.act.pool(), true);
        }
        Ok(())
    }

    /// The pass's observer, over what the loop keeps.
    fn observer(&mut self) -> Observer<'_> {
        Observer::new(
            &mut self.world,
            self.act.lend(),
            &mut self.seen,
            &mut self.cost,
            &self.spec,
            &self.place,
            &self.drain,
        )
    }

    /// The spec of the pass at `now` over `snap`, with `deletion` if the
    /// WarmPool is being deleted (see [`Moment`]).
    async fn moment(
        &mut self,
        now: DateTime<Utc>,
        deletion: Option<Deletion>,
        snap: &Snapshot,
    ) -> Result<Moment, PoolError> {
        let active = schedule::active(&self.spec.schedules, now);
        let floors = self.observer().floors(now).await?;
        let idle = schedule::idle_of(&self.spec, &active);
        let mut spec = WarmPoolSpec {
            idle: match &floors {
                Some(f) => f.raise(&idle, now),
                None => idle,
            },
            drain_timeout_seconds: deletion.map_or(self.spec.drain_timeout_seconds, |d| {
                d.drain_timeout_seconds()
            }),
            ..self.spec.clone()
        };
        // The class's room is asked of its book (a lock every pool shares)
        // only by a pool with an objective.
        let class = self
            .spec
            .objective
            .as_ref()
            .and_then(|_| self.class_room(snap));
        let bounds = objective::bounds(&spec, class);
        let objective = self.observer().objective(now, bounds).await?;
        if let Some(p) = &objective {
            objective::raise(&mut spec, p.choice());
        }
        Ok(Moment {
            spec,
            active,
            floors,
            objective,
        })
    }

    /// What the class's limits let the pool hold idle and stopped (see
    /// [`objective::Bounds::class`]): the instances it has that are in no run, and the
    /// room left for the instance type that fits the most. `None` without
    /// a class limit that applies, or while the class is not counted.
    fn class_room(&self, snap: &Snapshot) -> Option<(u32, &'static str)> {
        let budget = self.act.budget()?;
        let mut most: Option<(u32, &'static str)> = None;
        for t in &self.spec.launch.instance_types {
            // A type no limit holds back: the class does not bound the pool.
            let room = budget.room(t)?;
            if most.is_none_or(|(n, _)| room.0 > n) {
                most = Some(room);
            }
        }
        let (room, limit) = most?;
        let present = snap.instances().iter().filter(|i| i.state().is_present());
        let busy = snap.rows().iter().filter(|r| r.run().is_some()).count();
        let held = present.count().saturating_sub(busy);
        Some((
            room.saturating_add(u32::try_from(held).unwrap_or(u32::MAX)),
            limit,
        ))
    }

    /// Counts the instance-seconds since the last pass: what each instance
    /// was doing since is taken to be what it does now; a gap longer than
    /// a few resyncs (the loop stopped, or lost its lease) is not counted.
    fn count_cost(&mut self, snap: &Snapshot) {
        let elapsed = self.cost_at.map_or(Duration::ZERO, |at| at.elapsed());
        self.cost_at = Some(Instant::now());
        if elapsed > self.act.tuning().resync() * 4 {
            return;
        }
        for ((instance_type, spot), u, secs) in self.cost.tally(snap, elapsed) {
            if let Some(m) = self.act.metrics() {
                m.instance_seconds(self.act.pool(), &instance_type, spot, u, secs);
            }
        }
    }

    /// The pass's report as planned, before it acts.
    fn report(
        &self,
        moment: &Moment,
        snap: &Snapshot,
        decided: &PoolPlan,
        now: DateTime<Utc>,
    ) -> PassReport {
        let deleting = snap.deleting().is_some();
        let mut report = PassReport::planned(
            decided.clone(),
            deleting,
            deleting && self.nothing_left(snap),
        )
        .with_idle_min(moment.spec.idle.min)
        .with_active_schedule(match &moment.active {
            Ok(Some(a)) => Some(a.describe(&self.spec)),
            _ => None,
        })
        .with_forecast(moment.floors.as_ref().map(|f| {
            f.status(now, FORECAST_HOURS_SHOWN, |t| {
                schedule::idle_at(&self.spec, t)
            })
        }))
        .with_objective(
            moment
                .objective
                .as_ref()
                .zip(self.spec.objective.as_ref())
                .map(|(p, o)| p.status(o, self.cost.starts())),
        );
        if let (Some(p), Some(o)) = (&moment.objective, &self.spec.objective) {
            if let Some(binding) = p.choice().binding() {
                report.say(PoolEvent::new(
                    "ObjectiveUnreachable",
                    format!(
                        "{} % of runs within {} s is out of reach: at most {:.1} % would have \
                         started in time in this hour of past weeks, with {} idle and {} \
                         stopped; what binds is {}",
                        o.time_to_start.percentile,
                        o.time_to_start.seconds,
                        p.choice().met() * 100.0,
                        p.choice().idle(),
                        p.choice().stopped(),
                        binding.describe()
                    ),
                    true,
                ));
            }
        }
        report
    }

    /// What the pass says beyond what it does: instance types that cannot
    /// run the agent (`foreign`), a schedule or a maintenance window that
    /// cannot be read, drift, adoptions.
    fn notices(
        &mut self,
        foreign: Option<String>,
        moment: &Moment,
        snap: &Snapshot,
        now: DateTime<Utc>,
        report: &mut PassReport,
    ) {
        if let Some(why) = foreign {
            report.say(PoolEvent::new(
                crate::warmpool::ec2::UNSUPPORTED_ARCHITECTURE,
                why,
                true,
            ));
        }
        // A subnet EC2 does not know stays said while it is held: the
        // pool launches in its other subnets, and its list needs mending.
        for (subnet, (code, until)) in self.act.holds().refused_subnets(now) {
            report.say(PoolEvent::new(
                crate::warmpool::act::SUBNET_REFUSED,
                format!(
                    "EC2 refused launches in subnet {subnet} ({code}): skipped until {}, the \
                     pool's other subnets tried; take it out of the pool's subnets \
                     (launch.subnetIds, or its class's)",
                    until.to_rfc3339()
                ),
                true,
            ));
        }
        if let Err(e) = &moment.active {
            report.say(PoolEvent::new("InvalidSchedule", e.to_string(), true));
        }
        if let Err((i, e)) = crate::window::standing(&self.spec.maintenance_windows, now) {
            report.say(PoolEvent::new(
                "InvalidMaintenanceWindow",
                format!(
                    "spec.maintenanceWindows[{i}].{e}; drifted instances wait until it is fixed"
                ),
                true,
            ));
        }
        if report.plan().counts().drifted() > 0 {
            self.announce_drift(snap, report);
        }
        let adopted = self.seen.take_adopted();
        if !adopted.is_empty() {
            report.say(PoolEvent::new(
                "Adopted",
                format!(
                    "{} instance(s) launched before instances carried the cluster's tag, with rows \
                     in this pool's database, tagged {}={}: {}",
                    adopted.len(),
                    crate::warmpool::ec2::TAG_CLUSTER,
                    self.act.owner().cluster(),
                    adopted.join(", ")
                ),
                false,
            ));
        }
    }

    /// The pool's gauges from the pass's status.
    fn gauge(&self, report: &PassReport) {
        if let Some(m) = self.act.metrics() {
            let s = report.status();
            m.counts(
                self.act.pool(),
                Counts::new(s.idle, s.busy, s.stopped, s.launching, report.idle_min()),
            );
        }
    }

    /// A `Drifted` event, once per launch spec: how many instances run an
    /// out-of-date one, of which images, and how fast they are replaced.
    pub(super) fn announce_drift(&mut self, snap: &Snapshot, report: &mut PassReport) {
        let hash = crate::warmpool::drift::launch_hash(&self.spec.launch);
        let version = snap.template_version();
        // Once per launch spec and template version.
        let announced = format!("{hash}@{}", version.unwrap_or_default());
        if self.drift_announced.as_deref() == Some(announced.as_str()) {
            return;
        }
        let drifted: Vec<&Ec2Instance> = snap
            .instances()
            .iter()
            .filter(|i| {
                i.state().is_present()
                    && crate::warmpool::drift::drifted(&self.spec, &hash, version, i)
            })
            .collect();
        let mut images: Vec<&str> = drifted.iter().filter_map(|i| i.image()).collect();
        images.sort_unstable();
        images.dedup();
        let was = if images.is_empty() {
            "another launch spec, instance type or subnet".to_string()
        } else {
            images.join(", ")
        };
        let pace = match self.spec.disruption.max_drifted.max(0) {
            0 => "disruption.maxDrifted is 0: they go by idleSeconds and maxUses".to_string(),
            n => format!(
                "replacing {n} at a time: idle and stopped ones once a replacement is up, \
                 busy ones after their runs"
            ),
        };
        report.say(PoolEvent::new(
            "Drifted",
            format!(
                "{} instance(s) run an out-of-date launch spec ({was} → {}): {pace}",
                drifted.len(),
                crate::warmpool::drift::image_label(&self.spec.launch)
            ),
            false,
        ));
        self.drift_announced = Some(announced);
    }

    /// Holds the offerings of the spec's instance types that cannot run
    /// the agent ([`crate::warmpool::arch`]); what `Degraded` says of them, if any.
    fn hold_foreign_types(&mut self, now: DateTime<Utc>) -> Option<String> {
        let foreign = crate::warmpool::arch::foreign(&self.spec.launch, self.seen.types());
        crate::warmpool::arch::hold(
            &self.spec.launch,
            &foreign,
            self.act.holds_mut(),
            now + chrono::Duration::days(1),
        )
    }

    /// Tells the book of the pool's class the vCPUs of the types it may
    /// launch, as EC2 described them to this loop
    /// ([`Observer::learn_types`]): its limits count them.
    fn tell_vcpus(&self) {
        let Some(budget) = self.act.budget() else {
            return;
        };
        let mut unknown = budget
            .budgets()
            .unknown_vcpus(&self.spec.launch.instance_types);
        unknown.extend(budget.unknown_in_book());
        budget.budgets().learn_vcpus(
            unknown
                .iter()
                .filter_map(|t| self.seen.types().get(t))
                .filter_map(|f| Some((f.name().clone(), f.vcpus()?))),
        );
    }

    /// Whether EC2 listed none of the pool's instances as present, and
    /// every instance this loop launched at all (the listing may lag a
    /// launch): nothing of the pool is left to terminate.
    pub(super) fn nothing_left(&self, snap: &Snapshot) -> bool {
        let listed: HashSet<&str> = snap.instances().iter().map(|i| i.id()).collect();
        snap.instances().iter().all(|i| !i.state().is_present())
            && self.act.launches().ours().all(|id| listed.contains(id))
    }

    /// A loop left where the pool ran at `since` leaves alone what is not
    /// its own there: what EC2 launched after `since` (beyond
    /// [`LAUNCH_CLOCK_SLACK`]: EC2's clock is not the operator's), and
    /// what the loop of the new place launched or lists
    /// ([`PoolLoop::set_successor`]). Where the two places are one EC2
    /// (another endpoint of the same region), both list the same
    /// instances: what the pool's place lists is its loop's to keep or
    /// end, what this loop launched there before the move included, and
    /// this loop, with nothing of its own left, goes. Otherwise it would
    /// terminate what the new loop launches, and the runs on them: after
    /// a restart, what the new loop launched before it, within the
    /// clock's slack of the move.
    fn leave_later_launches(&mut self, snap: &mut Snapshot, since: DateTime<Utc>) {
        let after = since + LAUNCH_CLOCK_SLACK;
        let theirs: HashSet<String> = snap
            .instances()
            .iter()
            .filter(|i| i.launched() > after || self.successor.contains(i.id()))
            .map(|i| i.id().to_string())
            .collect();
        if theirs.is_empty() {
            return;
        }
        snap.leave_out(&theirs);
        self.act.hand_over(&theirs);
    }

    /// The `Deleting` event, until a pass that posted it succeeded.
    pub(super) fn announce_deletion(
        &self,
        plan: &PoolPlan,
        deletion: Deletion,
        report: &mut PassReport,
    ) {
        let (since, drain_timeout_seconds) = (deletion.since(), deletion.drain_timeout_seconds());
        if self.deletion_announced {
            return;
        }
        let drain = crate::crd::spec_seconds(drain_timeout_seconds);
        let until = (since + drain).to_rfc3339();
        tracing::info!(pool = %self.act.pool(), since = %since.to_rfc3339(), busy = plan.counts().busy(),
            retiring = plan.retirements().len(), "WarmPool deleted: terminating its instances");
        report.say(PoolEvent::new(
            "Deleting",
            format!(
                "onDelete Terminate: launching no more; terminating {} idle or booting instances; \
                 {} busy may finish their runs until {until}",
                plan.retirements().len(),
                plan.counts().busy()
            ),
            false,
        ));
    }

    /// Passes until `stop` resolves: on a notification for this pool
    /// (within `min_gap`), every `resync`, and after a back-off when a pass
    /// failed or was throttled. Each pass's outcome goes to `report`.
    pub async fn run<F, S>(mut self, mut report: F, stop: S)
    where
        F: FnMut(Result<&PassReport, &PoolError>),
        S: std::future::Future<Output = ()>,
    {
        tokio::pin!(stop);
        let mut deletion = self.deletion.clone();
        loop {
            // Back-off waits are slept in full: a notification must not
            // cut them short.
            let (wait, backing_off) = match self.pass(Utc::now()).await {
                Ok(r) => {
                    report(Ok(&r));
                    if r.throttled() {
                        (self.backoff.next_wait(), true)
                    } else {
                        self.backoff.reset();
                        (self.act.tuning().resync(), false)
                    }
                }
                Err(e) if e.is_fenced() => {
                    tracing::debug!(pool = %self.act.pool(), error = %e, "pool pass fenced");
                    report(Err(&e));
                    (self.backoff.next_wait(), true)
                }
                Err(e) => {
                    tracing::warn!(pool = %self.act.pool(), error = %e, "pool pass failed");
                    report(Err(&e));
                    (self.backoff.next_wait(), true)
                }
            };
            let pause = if backing_off {
                wait
            } else {
                self.act.tuning().min_gap()
            };
            tokio::select! {
                _ = &mut stop => return,
                _ = tokio::time::sleep(pause) => {}
            }
            if backing_off {
                continue;
            }
            // A deletion's first pass need not wait for the resync.
            tokio::select! {
                _ = &mut stop => return,
                _ = self.wake(wait) => {}
                Ok(()) = deletion.changed() => {}
            }
        }
    }

    /// Returns on a notification for this pool, or after `wait`.
    pub(super) async fn wake(&mut self, wait: Duration) {
        self.world.wake(wait).await;
    }
}
