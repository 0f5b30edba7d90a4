//! One pass of a pool: observe (EC2 first, then the database) → [`plan`]
//! → act (see `act.rs`) → status and events. Every EC2 call and every
//! statement checks the loop's [`Fence`] just before it goes out; a fenced
//! pass ends there, with [`PoolError::Fenced`].

use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};

use super::{
    forecast::{self, Demand, Floors},
    plan::{plan, Ec2Instance, PoolPlan, Snapshot},
    schedule,
};
use crate::crd::WarmPoolSpec;

use super::pool_loop::PoolLoop;
use super::report::{Deletion, PassReport, PoolError, PoolEvent};

/// How often the forecast is made again from the database's history.
pub const FORECAST_EVERY: Duration = Duration::from_secs(3600);

/// The hours ahead whose floor `status.forecast` shows.
const FORECAST_HOURS_SHOWN: usize = 6;

impl PoolLoop {
    /// One pass at `now` (the operator's clock, for EC2's launch times).
    pub async fn pass(&mut self, now: DateTime<Utc>) -> Result<PassReport, PoolError> {
        let mut snap = self.observe().await?;
        self.learn_types().await?;
        self.count_held(&snap);
        let adopted = std::mem::take(&mut self.just_adopted);
        // Read after the observation: a deletion that began meanwhile
        // launches nothing in this pass already.
        let deletion = *self.deletion.borrow();
        snap.deleting = deletion.map(|d| d.since);
        self.unavailable.retain(|_, until| *until > now);
        let unavailable = &self.unavailable;
        self.capacity_codes
            .retain(|o, _| unavailable.contains_key(o));
        let foreign = self.hold_foreign_types(now);
        // What the plan goes by is the spec as given, with two things of
        // the moment over it: a schedule under way replaces the idle range
        // (one that cannot be read is a warning, and `spec.idle` holds), and
        // a deletion's drain time-out is the one it was told.
        let active = schedule::active(&self.spec.schedules, now);
        // And the forecast raises the floor of either, within its max.
        let floors = self.floors(now).await?;
        let idle = schedule::idle_of(&self.spec, &active);
        let spec = WarmPoolSpec {
            idle: match &floors {
                Some(f) => f.raise(&idle, now),
                None => idle,
            },
            drain_timeout_seconds: deletion
                .map_or(self.spec.drain_timeout_seconds, |d| d.drain_timeout_seconds),
            ..self.spec.clone()
        };
        let spec = &spec;
        let decided = plan(spec, &snap, &self.unavailable, &self.limits(), now);
        // What each instance was doing since the last pass is taken to be
        // what it does now; a gap longer than a few resyncs (the loop
        // stopped, or lost its lease) is not counted.
        let elapsed = self.cost_at.map_or(Duration::ZERO, |at| at.elapsed());
        self.cost_at = Some(Instant::now());
        if elapsed <= self.tuning.resync * 4 {
            for ((instance_type, spot), u, secs) in self.cost.tally(&snap, elapsed) {
                if let Some(m) = &self.metrics {
                    m.instance_seconds(&self.pool, &instance_type, spot, u, secs);
                }
            }
        }
        let idle_min = spec.idle.min;
        tracing::debug!(
            pool = %self.pool,
            instances = snap.instances.len(),
            rows = snap.rows.len(),
            demand = snap.demand,
            launches = decided.launch_count(),
            retirements = decided.retirements.len(),
            "planned"
        );
        let mut report = PassReport {
            plan: decided.clone(),
            deleting: snap.deleting.is_some(),
            deleted: snap.deleting.is_some() && self.nothing_left(&snap),
            idle_min,
            active_schedule: match &active {
                Ok(Some(a)) => Some(a.describe(&self.spec)),
                _ => None,
            },
            forecast: floors.map(|f| {
                f.status(now, FORECAST_HOURS_SHOWN, |t| {
                    schedule::idle_at(&self.spec, t)
                })
            }),
            ..PassReport::default()
        };
        if let Some(why) = foreign {
            report.events.push(PoolEvent::new(
                super::ec2::UNSUPPORTED_ARCHITECTURE,
                why,
                true,
            ));
        }
        if let Err(e) = &active {
            report
                .events
                .push(PoolEvent::new("InvalidSchedule", e.to_string(), true));
        }
        if let Err((i, e)) = crate::window::standing(&self.spec.maintenance_windows, now) {
            report.events.push(PoolEvent::new(
                "InvalidMaintenanceWindow",
                format!(
                    "spec.maintenanceWindows[{i}].{e}; drifted instances wait until it is fixed"
                ),
                true,
            ));
        }
        if decided.counts.drifted > 0 {
            self.announce_drift(&snap, &mut report);
        }
        if !adopted.is_empty() {
            report.events.push(PoolEvent::new(
                "Adopted",
                format!(
                    "{} instance(s) launched before instances carried the cluster's tag, with rows \
                     in this pool's database, tagged {}={}: {}",
                    adopted.len(),
                    super::ec2::TAG_CLUSTER,
                    self.owner.cluster,
                    adopted.join(", ")
                ),
                false,
            ));
        }
        if let Some(d) = deletion {
            self.announce_deletion(&decided, d, &mut report);
        } else {
            self.count_boot_failures(&decided, &snap, &mut report).await;
        }
        // What this pass terminates, ends, stops or starts would look
        // otherwise in a listing asked for before it is done: the next
        // passes take none of those (and if the pass fails on the way, the
        // next lists anew). What it launches is counted as the loop's own.
        let acts = !(decided.retirements.is_empty()
            && decided.ends.is_empty()
            && decided.gone.is_empty()
            && decided.stops.is_empty()
            && decided.restops.is_empty()
            && decided.starts.is_empty());
        // A loop that replaces this one (a new database) has no `ours`: it
        // must not take a listing from before this pass's launches either.
        let launches = decided.launch_count() > 0;
        if acts {
            self.fresh_after = None;
        }
        if let Some(l) = self.listings.as_ref().filter(|_| acts || launches) {
            l.acting(&self.pool, false);
        }
        let failed_ends = self.retire(&decided, &mut report).await?;
        self.reserve(&decided, now, &mut report).await?;
        self.launch(&decided, failed_ends, now, &mut report).await?;
        if acts {
            self.fresh_after = Some(Instant::now());
        }
        if let Some(l) = self.listings.as_ref().filter(|_| acts || launches) {
            l.acting(&self.pool, true);
        }
        report.instances = super::roster::roster(spec, &snap, &decided, &self.launch_times);
        // A refusal of the credentials outlasts the pass that met it (see
        // `Denials`), over any boot failure: the IAM policy mends it.
        if let Some(message) = self.denials.standing() {
            report.degraded = Some((super::report::UNAUTHORIZED, message.to_string()));
        }
        report.status = self.status(&report, now);
        self.deletion_announced |= report.deleting;
        if let Some(m) = &self.metrics {
            let s = &report.status;
            m.counts(
                &self.pool,
                super::metrics::Counts {
                    idle: s.idle,
                    busy: s.busy,
                    stopped: s.stopped,
                    launching: s.launching,
                    idle_min: report.idle_min,
                },
            );
        }
        Ok(report)
    }

    /// The forecast's floors with `spec.forecast`: from the database's
    /// history once every [`FORECAST_EVERY`] (and after a new spec), else
    /// as made last.
    async fn floors(&mut self, now: DateTime<Utc>) -> Result<Option<Floors>, PoolError> {
        let Some(spec) = self.spec.forecast.clone() else {
            self.floors = None;
            return Ok(None);
        };
        if let Some((made, f)) = &self.floors {
            if made.elapsed() < FORECAST_EVERY {
                return Ok(Some(f.clone()));
            }
        }
        let pool = self.pool.clone();
        let counts = self
            .world
            .read(async |db| {
                orca_db::pool::demand_history(db, &pool, spec.lead_seconds, spec.weeks).await
            })
            .await?;
        let mut demand = Demand::new(spec.lead_seconds);
        demand.counts = counts.into_iter().collect();
        let f = forecast::floors(&spec, &demand, now);
        self.floors = Some((Instant::now(), f.clone()));
        Ok(Some(f))
    }

    /// A `Drifted` event, once per launch spec: how many instances run an
    /// out-of-date one, of which images, and how fast they are replaced.
    pub(super) fn announce_drift(&mut self, snap: &Snapshot, report: &mut PassReport) {
        let hash = super::drift::launch_hash(&self.spec.launch);
        let version = snap.template_version.as_deref();
        // Once per launch spec and template version.
        let announced = format!("{hash}@{}", version.unwrap_or_default());
        if self.drift_announced.as_deref() == Some(announced.as_str()) {
            return;
        }
        let drifted: Vec<&Ec2Instance> = snap
            .instances
            .iter()
            .filter(|i| {
                i.state.is_present() && super::drift::drifted(&self.spec, &hash, version, i)
            })
            .collect();
        let mut images: Vec<&str> = drifted.iter().filter_map(|i| i.image.as_deref()).collect();
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
        report.events.push(PoolEvent::new(
            "Drifted",
            format!(
                "{} instance(s) run an out-of-date launch spec ({was} → {}): {pace}",
                drifted.len(),
                super::drift::image_label(&self.spec.launch)
            ),
            false,
        ));
        self.drift_announced = Some(announced);
    }

    /// Asks EC2 about the spec's instance types this loop has not had
    /// described yet (`DescribeInstanceTypes`): their vCPUs, which a
    /// class's limits count, and their architectures. A type EC2 does not
    /// describe stays unknown, and a failed call is made again next pass.
    async fn learn_types(&mut self) -> Result<(), PoolError> {
        let unknown: Vec<String> = self
            .spec
            .launch
            .instance_types
            .iter()
            .filter(|t| !self.types.contains_key(*t))
            .cloned()
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        match self.world.ec2.describe_types(&unknown).await {
            Ok(facts) => {
                for f in facts {
                    self.types.insert(f.name.clone(), f);
                }
            }
            Err(e @ super::Ec2Error::Fenced { .. }) => return Err(self.ec2_error(e)),
            // Not known: no launch of those types under a vCPU limit, and
            // no architecture check, until a pass learns them.
            Err(e) => tracing::warn!(pool = %self.pool, error = %e,
                "the pool's instance types could not be described"),
        }
        Ok(())
    }

    /// Holds the offerings of the spec's instance types that cannot run
    /// the agent ([`super::arch`]); what `Degraded` says of them, if any.
    fn hold_foreign_types(&mut self, now: DateTime<Utc>) -> Option<String> {
        let foreign = super::arch::foreign(&self.spec.launch, &self.types);
        super::arch::hold(
            &self.spec.launch,
            &foreign,
            &mut self.unavailable,
            &mut self.capacity_codes,
            now + chrono::Duration::days(1),
        )
    }

    /// Tells the pool's class what the pool holds — its present instances
    /// and those it launched that the listing does not show yet — and the
    /// vCPUs of the types it may launch, as EC2 described them to this
    /// loop ([`PoolLoop::learn_types`]).
    fn count_held(&self, snap: &Snapshot) {
        let Some(budget) = &self.budget else {
            return;
        };
        let mut by_type: std::collections::BTreeMap<String, i64> = Default::default();
        let listed: HashSet<&str> = snap.instances.iter().map(|i| i.id.as_str()).collect();
        for i in snap.instances.iter().filter(|i| i.state.is_present()) {
            *by_type.entry(i.offering.instance_type.clone()).or_default() += 1;
        }
        for (id, (_, offering)) in &self.launch_times {
            if !listed.contains(id.as_str()) && self.ours.contains_key(id) {
                *by_type.entry(offering.instance_type.clone()).or_default() += 1;
            }
        }
        budget.held(by_type);
        let unknown = budget
            .budgets()
            .unknown_vcpus(&self.spec.launch.instance_types);
        budget.budgets().learn_vcpus(
            unknown
                .iter()
                .filter_map(|t| self.types.get(t))
                .filter_map(|f| Some((f.name.clone(), f.vcpus?))),
        );
    }

    /// Whether EC2 listed none of the pool's instances as present, and
    /// every instance this loop launched at all (the listing may lag a
    /// launch): nothing of the pool is left to terminate.
    pub(super) fn nothing_left(&self, snap: &Snapshot) -> bool {
        let listed: HashSet<&str> = snap.instances.iter().map(|i| i.id.as_str()).collect();
        snap.instances.iter().all(|i| !i.state.is_present())
            && self.ours.keys().all(|id| listed.contains(id.as_str()))
    }

    /// The `Deleting` event, until a pass that posted it succeeded.
    pub(super) fn announce_deletion(
        &self,
        plan: &PoolPlan,
        Deletion {
            since,
            drain_timeout_seconds,
        }: Deletion,
        report: &mut PassReport,
    ) {
        if self.deletion_announced {
            return;
        }
        let drain = crate::crd::spec_seconds(drain_timeout_seconds);
        let until = (since + drain).to_rfc3339();
        tracing::info!(pool = %self.pool, since = %since.to_rfc3339(), busy = plan.counts.busy,
            retiring = plan.retirements.len(), "WarmPool deleted: terminating its instances");
        report.events.push(PoolEvent {
            reason: "Deleting",
            message: format!(
                "onDelete Terminate: launching no more; terminating {} idle or booting instances; \
                 {} busy may finish their runs until {until}",
                plan.retirements.len(),
                plan.counts.busy
            ),
            warning: false,
        });
    }
}
