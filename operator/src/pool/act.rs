//! The act step of a pass: retire (the race-free end or the claim first,
//! then batched `TerminateInstances`), then launch (batched `RunInstances`
//! with a `ClientToken` each, the next offering on a capacity error, and
//! back-off on `RequestLimitExceeded`).
//!
//! What it does to the world goes through [`World`]: the loop's [`Live`]
//! world fences each statement and EC2 call (a fenced one ends the pass);
//! the act step's tests answer from a table (`act_tests.rs`).

use std::{
    collections::{BTreeMap, HashSet},
    future::Future,
    time::Instant,
};

use chrono::{DateTime, Utc};

use crate::backoff::Backoff;

use super::{
    ec2::{client_token, Ec2Error, RunRequest},
    holds,
    live::Live,
    plan::{offerings, End, Offering, PoolPlan, Reason, WithRow},
    pool_loop::PoolLoop,
    report::{PassReport, PoolError, PoolEvent},
    userdata::{self, DatabaseSource},
};

/// An EC2 call on a list of instances.
#[derive(Clone, Copy)]
enum Call<'a> {
    Terminate,
    Stop,
    Start(&'a Offering),
}

/// `items` parted into those not `refused` and those refused, each with
/// why.
fn parted<'a>(
    items: &[&'a WithRow],
    refused: Vec<(String, Ec2Error)>,
) -> (Vec<&'a WithRow>, Vec<(&'a WithRow, Ec2Error)>) {
    let done = items
        .iter()
        .copied()
        .filter(|s| !refused.iter().any(|(r, _)| *r == s.instance))
        .collect();
    let failed = refused
        .into_iter()
        .filter_map(|(id, e)| items.iter().find(|s| s.instance == id).map(|s| (*s, e)))
        .collect();
    (done, failed)
}

/// Everything the act step does to the pool's rows and to EC2.
pub trait World {
    /// The race-free end of idle rows: those it ended.
    fn end_idle_rows(
        &mut self,
        rows: &[i64],
    ) -> impl Future<Output = Result<HashSet<i64>, PoolError>> + Send;
    /// The operator's claim on `instance` of `pool`, which has no live row;
    /// `None` if it has one now.
    fn claim(
        &mut self,
        instance: &str,
        pool: &str,
    ) -> impl Future<Output = Result<Option<i64>, PoolError>> + Send;
    /// Ends busy row `row`, only while it is busy: whether it did.
    fn end_busy_row(&mut self, row: i64) -> impl Future<Output = Result<bool, PoolError>> + Send;
    fn end_claim(&mut self, row: i64) -> impl Future<Output = Result<(), PoolError>> + Send;
    /// Ends the live rows of instances EC2 no longer runs: those it ended.
    fn end_rows_of_gone(
        &mut self,
        rows: &[i64],
    ) -> impl Future<Output = Result<Vec<i64>, PoolError>> + Send;
    fn terminate(&mut self, ids: &[String]) -> impl Future<Output = Result<(), Ec2Error>> + Send;
    /// Takes idle rows into the stopped reserve, race-free: those it took.
    fn reserve_idle_rows(
        &mut self,
        rows: &[i64],
    ) -> impl Future<Output = Result<HashSet<i64>, PoolError>> + Send;
    /// Marks reserved rows woken: those it marked.
    fn wake_rows(
        &mut self,
        rows: &[i64],
    ) -> impl Future<Output = Result<HashSet<i64>, PoolError>> + Send;
    /// Puts woken rows whose instances did not start back into the reserve.
    fn unwake_rows(&mut self, rows: &[i64]) -> impl Future<Output = Result<(), PoolError>> + Send;
    /// Turns a reserved or woken row into the operator's claim; `None` if
    /// its agent marked it idle first.
    fn claim_reserved(
        &mut self,
        row: i64,
    ) -> impl Future<Output = Result<Option<i64>, PoolError>> + Send;
    fn stop(&mut self, ids: &[String]) -> impl Future<Output = Result<(), Ec2Error>> + Send;
    fn start(
        &mut self,
        ids: &[String],
        offering: &Offering,
    ) -> impl Future<Output = Result<(), Ec2Error>> + Send;
    /// `RunInstances`: the ids launched.
    fn run(
        &mut self,
        req: &RunRequest<'_>,
    ) -> impl Future<Output = Result<Vec<String>, Ec2Error>> + Send;
}

impl World for Live {
    async fn end_idle_rows(&mut self, rows: &[i64]) -> Result<HashSet<i64>, PoolError> {
        self.read(async |db| orca_db::pool::end_idle_rows(db, rows).await)
            .await
    }

    async fn claim(&mut self, instance: &str, pool: &str) -> Result<Option<i64>, PoolError> {
        self.read(async |db| orca_db::pool::claim(db, instance, pool).await)
            .await
    }

    async fn end_busy_row(&mut self, row: i64) -> Result<bool, PoolError> {
        self.read(async |db| orca_db::pool::end_busy_row(db, row).await)
            .await
    }

    async fn end_claim(&mut self, row: i64) -> Result<(), PoolError> {
        self.read(async |db| orca_db::pool::end_claim(db, row).await)
            .await
    }

    async fn end_rows_of_gone(&mut self, rows: &[i64]) -> Result<Vec<i64>, PoolError> {
        self.read(async |db| orca_db::pool::end_rows_of_gone(db, rows).await)
            .await
    }

    async fn terminate(&mut self, ids: &[String]) -> Result<(), Ec2Error> {
        self.ec2.terminate(ids).await
    }

    async fn reserve_idle_rows(&mut self, rows: &[i64]) -> Result<HashSet<i64>, PoolError> {
        self.read(async |db| orca_db::pool::reserve_idle_rows(db, rows).await)
            .await
    }

    async fn wake_rows(&mut self, rows: &[i64]) -> Result<HashSet<i64>, PoolError> {
        self.read(async |db| orca_db::pool::wake_rows(db, rows).await)
            .await
    }

    async fn unwake_rows(&mut self, rows: &[i64]) -> Result<(), PoolError> {
        self.read(async |db| orca_db::pool::unwake_rows(db, rows).await)
            .await
    }

    async fn claim_reserved(&mut self, row: i64) -> Result<Option<i64>, PoolError> {
        self.read(async |db| orca_db::pool::claim_reserved(db, row).await)
            .await
    }

    async fn stop(&mut self, ids: &[String]) -> Result<(), Ec2Error> {
        self.ec2.stop(ids).await
    }

    async fn start(&mut self, ids: &[String], offering: &Offering) -> Result<(), Ec2Error> {
        self.ec2.start(ids, offering).await
    }

    async fn run(&mut self, req: &RunRequest<'_>) -> Result<Vec<String>, Ec2Error> {
        self.ec2.run(req).await
    }
}

impl<W: World> PoolLoop<W> {
    /// Ends or claims each instance to retire, terminates those it got;
    /// returns how many stay (a hand-out or an agent came first, or EC2
    /// refused), each of which takes back a place the plan counted free.
    pub(super) async fn retire(
        &mut self,
        plan: &PoolPlan,
        report: &mut PassReport,
    ) -> Result<u32, PoolError> {
        let mut going: Vec<(&str, Reason, Option<i64>)> = Vec::new();
        let mut stayed = 0u32;
        // Idle rows: one race-free end for all of them.
        let idle: Vec<i64> = plan
            .retirements
            .iter()
            .filter_map(|r| match r.end {
                End::Idle(row) => Some(row),
                _ => None,
            })
            .collect();
        let pool = self.pool.clone();
        let ended = self.world.end_idle_rows(&idle).await?;
        for r in &plan.retirements {
            let outcome = match r.end {
                End::Idle(row) => ended.contains(&row).then_some(None),
                End::Claim => self.world.claim(&r.instance, &pool).await?.map(Some),
                End::Claimed(row) => Some(Some(row)),
                End::Busy(row) => self.world.end_busy_row(row).await?.then_some(None),
                End::Reserved(row) => self.world.claim_reserved(row).await?.map(Some),
            };
            match outcome {
                Some(claim) => going.push((&r.instance, r.reason, claim)),
                None => {
                    stayed += 1;
                    tracing::info!(pool = %pool, instance = %r.instance, reason = r.reason.as_str(),
                        "not retired: it was handed a run or its agent reported first");
                    report.events.push(PoolEvent::new(
                        "RetirementLost",
                        format!(
                            "{} was not retired ({}): it was handed a run or its agent reported first",
                            r.instance,
                            r.reason.as_str()
                        ),
                        false,
                    ));
                }
            }
        }
        for row in &plan.ends {
            self.world.end_claim(*row).await?;
        }
        // Rows of instances EC2 no longer runs: nothing to terminate.
        if !plan.gone.is_empty() {
            let ended = self.world.end_rows_of_gone(&plan.gone).await?;
            if !ended.is_empty() {
                tracing::info!(pool = %pool, rows = ?ended,
                    "ended the rows of instances EC2 no longer runs");
            }
        }
        if going.is_empty() {
            return Ok(stayed);
        }
        let mut ids: Vec<String> = going.iter().map(|(i, _, _)| i.to_string()).collect();
        match self.each_alone_if_refused(Call::Terminate, &ids).await {
            Ok(refused) if !refused.is_empty() => {
                for (id, why) in &refused {
                    tracing::warn!(pool = %self.pool, instance = %id, error = %why, "terminate refused");
                    report.events.push(PoolEvent::new(
                        "TerminateFailed",
                        format!("{id} could not be terminated; the next pass tries again: {why}"),
                        true,
                    ));
                }
                stayed += refused.len() as u32;
                going.retain(|(i, _, _)| !refused.iter().any(|(r, _)| r == *i));
                ids.retain(|i| !refused.iter().any(|(r, _)| r == i));
                if ids.is_empty() {
                    return Ok(stayed);
                }
            }
            Ok(_) => {}
            Err(e @ Ec2Error::Fenced { .. }) => return Err(self.ec2_error(e)),
            Err(e) => {
                // Ended rows and claims stay: the next pass sees the instances
                // without a live row (or with the claim) and tries again.
                report.throttled |= matches!(e, Ec2Error::Throttled { .. });
                if report.throttled {
                    if let Some(m) = &self.metrics {
                        m.throttle(&self.pool);
                    }
                }
                tracing::warn!(pool = %self.pool, error = %e, count = ids.len(), "terminate failed");
                report
                    .events
                    .push(PoolEvent::new("TerminateFailed", e.to_string(), true));
                return Ok(stayed + ids.len() as u32);
            }
        }
        let mut by_reason: BTreeMap<Reason, Vec<&str>> = BTreeMap::new();
        for (instance, reason, claim) in &going {
            by_reason.entry(*reason).or_default().push(instance);
            if let Some(row) = claim {
                self.world.end_claim(*row).await?;
            }
        }
        for (reason, instances) in by_reason {
            tracing::info!(pool = %self.pool, reason = reason.as_str(), instances = ?instances, "terminated");
            if let Some(m) = &self.metrics {
                m.terminated(&self.pool, reason.as_str(), instances.len());
            }
            report.events.push(PoolEvent::new(
                "Terminated",
                format!("terminated {} ({})", instances.join(", "), reason.as_str()),
                false,
            ));
        }
        report.terminated = ids;
        Ok(stayed)
    }

    /// The stopped reserve: starts the reserve instances the plan starts
    /// (their rows marked woken first, put back if EC2 refuses), then takes
    /// idle rows into the reserve race-free and stops the instances of those
    /// it took, and stops again those still running. A start EC2 refuses
    /// for now is planned again by the next pass (as a launch instead, once
    /// its offering is held for a capacity error); an instance EC2 refuses
    /// to stop or start for good is retired ([`Self::retire_reserved`]).
    pub(super) async fn reserve(
        &mut self,
        plan: &PoolPlan,
        now: DateTime<Utc>,
        report: &mut PassReport,
    ) -> Result<(), PoolError> {
        let mut by_offering: BTreeMap<&Offering, Vec<&WithRow>> = BTreeMap::new();
        for s in &plan.starts {
            by_offering.entry(&s.offering).or_default().push(s);
        }
        for (offering, starts) in by_offering {
            let rows: Vec<i64> = starts.iter().map(|s| s.row).collect();
            let woken = self.world.wake_rows(&rows).await?;
            let starts: Vec<&WithRow> = starts
                .into_iter()
                .filter(|s| woken.contains(&s.row))
                .collect();
            if starts.is_empty() {
                continue;
            }
            let ids: Vec<String> = starts.iter().map(|s| s.instance.clone()).collect();
            match self
                .each_alone_if_refused(Call::Start(offering), &ids)
                .await
            {
                Ok(refused) => {
                    let (started, refused) = parted(&starts, refused);
                    let started: Vec<String> = started.iter().map(|s| s.instance.clone()).collect();
                    if !started.is_empty() {
                        tracing::info!(pool = %self.pool, instances = ?started, "started from the stopped reserve");
                        if let Some(m) = &self.metrics {
                            m.started(&self.pool, started.len());
                        }
                        report.events.push(PoolEvent::new(
                            "Started",
                            format!("started {} from the stopped reserve", started.join(", ")),
                            false,
                        ));
                        report.started.extend(started);
                    }
                    for (start, e) in refused {
                        self.start_failed(offering, &[start], e, now, report)
                            .await?;
                    }
                }
                Err(e @ Ec2Error::Fenced { .. }) => return Err(self.ec2_error(e)),
                Err(e) => self.start_failed(offering, &starts, e, now, report).await?,
            }
        }
        let rows: Vec<i64> = plan.stops.iter().map(|s| s.row).collect();
        let taken = self.world.reserve_idle_rows(&rows).await?;
        let stopping: Vec<&WithRow> = plan
            .stops
            .iter()
            .filter(|s| taken.contains(&s.row))
            .chain(&plan.restops)
            .collect();
        let ids: Vec<String> = stopping.iter().map(|s| s.instance.clone()).collect();
        if ids.is_empty() {
            return Ok(());
        }
        match self.each_alone_if_refused(Call::Stop, &ids).await {
            Ok(refused) => {
                let (stopped, refused) = parted(&stopping, refused);
                if !stopped.is_empty() {
                    let names: Vec<&str> = stopped.iter().map(|s| s.instance.as_str()).collect();
                    tracing::info!(pool = %self.pool, instances = ?names, "stopped into the reserve");
                    if let Some(m) = &self.metrics {
                        let fresh = stopped.iter().filter(|s| taken.contains(&s.row)).count();
                        m.stopped(&self.pool, fresh);
                    }
                    report.events.push(PoolEvent::new(
                        "Stopped",
                        format!("stopped {} into the reserve", names.join(", ")),
                        false,
                    ));
                }
                for (stop, e) in refused {
                    self.stop_failed(&[stop], e, report).await?;
                }
            }
            Err(e @ Ec2Error::Fenced { .. }) => return Err(self.ec2_error(e)),
            Err(e) => self.stop_failed(&stopping, e, report).await?,
        }
        Ok(())
    }

    /// EC2 did not start `starts` (of `offering`): refused for good (a
    /// missing permission, an instance that cannot start), kept they would
    /// be parked for ever — retired; otherwise their rows are put back for
    /// the next pass, and a capacity error holds the offering.
    async fn start_failed(
        &mut self,
        offering: &Offering,
        starts: &[&WithRow],
        e: Ec2Error,
        now: DateTime<Utc>,
        report: &mut PassReport,
    ) -> Result<(), PoolError> {
        if matches!(e, Ec2Error::Refused { .. }) {
            return self
                .retire_reserved("StartFailed", &e, starts, report)
                .await;
        }
        let rows: Vec<i64> = starts.iter().map(|s| s.row).collect();
        self.world.unwake_rows(&rows).await?;
        if let Ec2Error::Capacity { code, .. } = &e {
            self.hold(offering, code, now);
        }
        report.throttled |= matches!(e, Ec2Error::Throttled { .. });
        tracing::warn!(pool = %self.pool, offering = %offering, error = %e, "start failed");
        report
            .events
            .push(PoolEvent::new("StartFailed", e.to_string(), true));
        Ok(())
    }

    /// EC2 did not stop `stopping`: refused for good, stopped again each
    /// pass they would fail each pass, their agents waiting for a stop that
    /// never comes — retired; otherwise their rows stay reserved, and the
    /// next pass sees them still running and stops them again.
    async fn stop_failed(
        &mut self,
        stopping: &[&WithRow],
        e: Ec2Error,
        report: &mut PassReport,
    ) -> Result<(), PoolError> {
        if matches!(e, Ec2Error::Refused { .. }) {
            return self
                .retire_reserved("StopFailed", &e, stopping, report)
                .await;
        }
        report.throttled |= matches!(e, Ec2Error::Throttled { .. });
        tracing::warn!(pool = %self.pool, error = %e, "stop failed");
        report
            .events
            .push(PoolEvent::new("StopFailed", e.to_string(), true));
        Ok(())
    }

    /// `call` on `ids` in one request; when EC2 refuses it (one id it
    /// refuses — termination or stop protection, an instance it does not
    /// know — fails the whole call), on each id alone, so the others go in
    /// this pass: the ids that failed alone, with why. A batch that failed
    /// otherwise (throttled, lost, fenced) is the error.
    async fn each_alone_if_refused(
        &mut self,
        call: Call<'_>,
        ids: &[String],
    ) -> Result<Vec<(String, Ec2Error)>, Ec2Error> {
        match self.call(call, ids).await {
            Ok(()) => Ok(Vec::new()),
            Err(e @ Ec2Error::Refused { .. }) if ids.len() == 1 => Ok(vec![(ids[0].clone(), e)]),
            Err(Ec2Error::Refused { .. }) => {
                let mut failed = Vec::new();
                for id in ids {
                    match self.call(call, std::slice::from_ref(id)).await {
                        Ok(()) => {}
                        Err(e @ Ec2Error::Fenced { .. }) => return Err(e),
                        Err(e) => failed.push((id.clone(), e)),
                    }
                }
                Ok(failed)
            }
            Err(e) => Err(e),
        }
    }

    async fn call(&mut self, call: Call<'_>, ids: &[String]) -> Result<(), Ec2Error> {
        match call {
            Call::Terminate => self.world.terminate(ids).await,
            Call::Stop => self.world.stop(ids).await,
            Call::Start(offering) => self.world.start(ids, offering).await,
        }
    }

    /// Retires reserve instances EC2 refused to stop or start (`what` is
    /// the event's reason): each row turned into the operator's claim, then
    /// terminated, as any retirement (`ReserveFailed`).
    async fn retire_reserved(
        &mut self,
        what: &'static str,
        error: &Ec2Error,
        items: &[&WithRow],
        report: &mut PassReport,
    ) -> Result<(), PoolError> {
        let ids: Vec<&str> = items.iter().map(|s| s.instance.as_str()).collect();
        tracing::warn!(pool = %self.pool, instances = ?ids, error = %error,
            "{what}: EC2 refused for good, the instances are retired");
        report.events.push(PoolEvent::new(
            what,
            format!(
                "{error}: {} retired ({})",
                ids.join(", "),
                Reason::ReserveFailed.as_str()
            ),
            true,
        ));
        let plan = PoolPlan {
            retirements: items
                .iter()
                .map(|s| super::plan::Retirement {
                    instance: s.instance.clone(),
                    reason: Reason::ReserveFailed,
                    end: End::Reserved(s.row),
                })
                .collect(),
            ..PoolPlan::default()
        };
        let terminated = std::mem::take(&mut report.terminated);
        self.retire(&plan, report).await?;
        let mut all = terminated;
        all.append(&mut report.terminated);
        report.terminated = all;
        Ok(())
    }

    /// Launches the plan's batches, minus one instance for each retirement
    /// that did not happen (so `maxInstances` holds).
    pub(super) async fn launch(
        &mut self,
        plan: &PoolPlan,
        stayed: u32,
        now: DateTime<Utc>,
        report: &mut PassReport,
    ) -> Result<(), PoolError> {
        let mut budget = plan.launch_count().min(plan.room.saturating_sub(stayed));
        if plan.short > 0 {
            let (reason, warning) = if plan.launches.is_empty() && plan.room > 0 {
                ("NoCapacity", true)
            } else {
                ("MaxInstancesReached", false)
            };
            report.events.push(PoolEvent::new(
                reason,
                format!(
                    "{} more instances wanted, none launched for them",
                    plan.short
                ),
                warning,
            ));
        }
        if budget == 0 {
            return Ok(());
        }
        // Boots keep failing: launching more would only fail the same way.
        if self.boot.holding().is_some() {
            return Ok(());
        }
        let user_data = userdata::render(
            &self.spec,
            &self.pool,
            DatabaseSource::for_spec(&self.spec, &self.url.0),
        );
        let chain: Vec<Offering> = plan
            .launches
            .first()
            .map(|b| b.offering.clone())
            .into_iter()
            .chain(plan.fallback.iter().cloned())
            .collect();
        let mut at = 0usize;
        for batch in &plan.launches {
            let count = batch.count.min(budget);
            if count == 0 {
                break;
            }
            let mut mismatched = false;
            loop {
                let Some(offering) = chain.get(at) else {
                    report.events.push(PoolEvent::new(
                        "NoCapacity",
                        format!("no instance type and subnet has capacity for {budget} more"),
                        true,
                    ));
                    return Ok(());
                };
                let token = client_token(&self.launch_id, self.launch_batches);
                let answer = self.run_batch(offering, count, &token, &user_data).await;
                // A token EC2 answered is used up; one whose answer was lost
                // (or throttled to the end) is retried by the next pass.
                if !matches!(
                    answer,
                    Err(Ec2Error::Transport { .. }
                        | Ec2Error::Throttled { .. }
                        | Ec2Error::Fenced { .. })
                ) {
                    self.launch_batches += 1;
                }
                match answer {
                    // The token was EC2's already, for another request: the
                    // next token, at once (the count moved on above).
                    Err(Ec2Error::Refused { ref code, .. })
                        if code == "IdempotentParameterMismatch" && !mismatched =>
                    {
                        mismatched = true;
                        tracing::warn!(pool = %self.pool, token = %token,
                            "the launch token was used for another request; a new one");
                        continue;
                    }
                    Ok(ids) => {
                        tracing::info!(pool = %self.pool, offering = %offering, count, token = %token,
                            instances = ?ids, "launched");
                        let learnt = Instant::now();
                        for id in &ids {
                            self.ours.insert(id.clone(), learnt);
                        }
                        if let Some(m) = &self.metrics {
                            m.launched(&self.pool, count);
                        }
                        report.events.push(PoolEvent::new(
                            "Launched",
                            format!("launched {count} ({offering}): {}", ids.join(", ")),
                            false,
                        ));
                        report.launched.extend(ids);
                        budget -= count;
                        break;
                    }
                    Err(Ec2Error::Capacity { code, message, .. }) => {
                        let (until, held) = self.hold(offering, &code, now);
                        tracing::warn!(pool = %self.pool, offering = %offering, code = %code,
                            %message, "no capacity; trying the next offering");
                        if let Some(m) = &self.metrics {
                            m.capacity_error(
                                &self.pool,
                                &offering.instance_type,
                                &offering.subnet,
                                &code,
                            );
                        }
                        let also = if held > 1 {
                            format!(" with {} more offerings under the same quota", held - 1)
                        } else {
                            String::new()
                        };
                        report.events.push(PoolEvent::new(
                            "CapacityUnavailable",
                            format!(
                                "{offering}: {code}; skipped{also} until {}",
                                until.to_rfc3339()
                            ),
                            true,
                        ));
                        // The next offering not held (a quota error holds
                        // more than the one refused).
                        at += 1;
                        while chain
                            .get(at)
                            .is_some_and(|o| self.unavailable.get(o).is_some_and(|u| *u > now))
                        {
                            at += 1;
                        }
                    }
                    Err(e @ Ec2Error::Fenced { .. }) => return Err(self.ec2_error(e)),
                    Err(e @ Ec2Error::Throttled { .. }) => {
                        report.throttled = true;
                        report
                            .events
                            .push(PoolEvent::new("Throttled", e.to_string(), true));
                        return Ok(());
                    }
                    Err(e) => {
                        tracing::warn!(pool = %self.pool, offering = %offering, error = %e, "launch failed");
                        report
                            .events
                            .push(PoolEvent::new("LaunchFailed", e.to_string(), true));
                        return Ok(());
                    }
                }
            }
        }
        Ok(())
    }

    /// Holds `offering`, refused with `code`, for the capacity hold, and
    /// with it every offering of the pool the same quota covers
    /// ([`holds::held_by`]): until when, and how many are held.
    fn hold(
        &mut self,
        offering: &Offering,
        code: &str,
        now: DateTime<Utc>,
    ) -> (DateTime<Utc>, usize) {
        let until = now
            + chrono::Duration::from_std(self.tuning.capacity_hold)
                .unwrap_or(chrono::Duration::minutes(3));
        let held = holds::held_by(offering, code, &offerings(&self.spec.launch));
        for o in &held {
            self.unavailable.insert(o.clone(), until);
            self.capacity_codes.insert(o.clone(), code.to_string());
        }
        (until, held.len())
    }

    /// One batch, retried with the same token while EC2 throttles.
    async fn run_batch(
        &mut self,
        offering: &Offering,
        count: u32,
        token: &str,
        user_data: &str,
    ) -> Result<Vec<String>, Ec2Error> {
        let mut backoff = Backoff::new(self.tuning.backoff_base, self.tuning.backoff_cap);
        loop {
            let req = RunRequest {
                launch: &self.spec.launch,
                offering,
                count,
                token,
                user_data,
                owner: &self.owner,
            };
            match self.world.run(&req).await {
                Err(Ec2Error::Throttled { action })
                    if backoff.attempts() + 1 < self.tuning.throttle_attempts =>
                {
                    if let Some(m) = &self.metrics {
                        m.throttle(&self.pool);
                    }
                    let wait = backoff.next_wait();
                    tracing::info!(pool = %self.pool, action, ?wait, "throttled; backing off");
                    tokio::time::sleep(wait).await;
                }
                Err(e @ Ec2Error::Throttled { .. }) => {
                    if let Some(m) = &self.metrics {
                        m.throttle(&self.pool);
                    }
                    return Err(e);
                }
                other => return other,
            }
        }
    }
}
