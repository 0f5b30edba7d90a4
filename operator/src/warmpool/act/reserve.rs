//! The act step for the stopped reserve: starting reserve instances the
//! plan starts, stopping idle ones into it, and retiring those EC2 will
//! not stop or start.

use std::collections::BTreeMap;

use super::{Actuator, Call, Orders};
use crate::warmpool::{
    ec2::Ec2Error,
    pass_report::{PassReport, PoolError, PoolEvent},
    plan::{End, Offering, PoolPlan, Reason, Retirement, WithRow},
    world::World,
};

/// `items` parted into those not `refused` and those refused, each with
/// why.
fn parted<'a>(
    items: &[&'a WithRow],
    refused: Vec<(String, Ec2Error)>,
) -> (Vec<&'a WithRow>, Vec<(&'a WithRow, Ec2Error)>) {
    let done = items
        .iter()
        .copied()
        .filter(|s| !refused.iter().any(|(r, _)| *r == s.instance()))
        .collect();
    let failed = refused
        .into_iter()
        .filter_map(|(id, e)| items.iter().find(|s| s.instance() == id).map(|s| (*s, e)))
        .collect();
    (done, failed)
}

impl Actuator {
    /// The stopped reserve: starts the reserve instances the plan starts
    /// (their rows marked woken first, put back if EC2 refuses), then takes
    /// idle rows into the reserve race-free and stops the instances of those
    /// it took, and stops again those still running. A start EC2 refuses
    /// for now is planned again by the next pass (as a launch instead, once
    /// its offering is held for a capacity error); an instance EC2 refuses
    /// to stop or start for good is retired ([`Self::retire_reserved`]).
    pub(in crate::warmpool) async fn reserve(
        &mut self,
        world: &mut impl World,
        orders: Orders<'_>,
        report: &mut PassReport,
    ) -> Result<(), PoolError> {
        let plan = orders.plan;
        let mut by_offering: BTreeMap<&Offering, Vec<&WithRow>> = BTreeMap::new();
        for s in plan.starts() {
            by_offering.entry(s.offering()).or_default().push(s);
        }
        for (offering, starts) in by_offering {
            let rows: Vec<i64> = starts.iter().map(|s| s.row()).collect();
            let woken = world.wake_rows(&rows).await?;
            let starts: Vec<&WithRow> = starts
                .into_iter()
                .filter(|s| woken.contains(&s.row()))
                .collect();
            if starts.is_empty() {
                continue;
            }
            let ids: Vec<String> = starts.iter().map(|s| s.instance().to_string()).collect();
            match self
                .each_alone_if_refused(world, Call::Start(offering), &ids)
                .await
            {
                Ok(refused) => {
                    let (started, refused) = parted(&starts, refused);
                    let started: Vec<String> =
                        started.iter().map(|s| s.instance().to_string()).collect();
                    if !started.is_empty() {
                        tracing::info!(pool = %self.pool, instances = ?started, "started from the stopped reserve");
                        if let Some(m) = &self.metrics {
                            m.started(&self.pool, started.len());
                        }
                        report.say(PoolEvent::new(
                            "Started",
                            format!("started {} from the stopped reserve", started.join(", ")),
                            false,
                        ));
                        report.add_started(started);
                    }
                    for (start, e) in refused {
                        self.start_failed(world, orders, offering, &[start], e, report)
                            .await?;
                    }
                }
                Err(e @ Ec2Error::Fenced { .. }) => return Err(PoolError::ec2(&self.pool, e)),
                Err(e) => {
                    self.start_failed(world, orders, offering, &starts, e, report)
                        .await?
                }
            }
        }
        let rows: Vec<i64> = plan.stops().iter().map(|s| s.row()).collect();
        let taken = world.reserve_idle_rows(&rows).await?;
        let stopping: Vec<&WithRow> = plan
            .stops()
            .iter()
            .filter(|s| taken.contains(&s.row()))
            .chain(plan.restops())
            .collect();
        let ids: Vec<String> = stopping.iter().map(|s| s.instance().to_string()).collect();
        if ids.is_empty() {
            return Ok(());
        }
        match self.each_alone_if_refused(world, Call::Stop, &ids).await {
            Ok(refused) => {
                let (stopped, refused) = parted(&stopping, refused);
                if !stopped.is_empty() {
                    let names: Vec<&str> = stopped.iter().map(|s| s.instance()).collect();
                    tracing::info!(pool = %self.pool, instances = ?names, "stopped into the reserve");
                    if let Some(m) = &self.metrics {
                        let fresh = stopped.iter().filter(|s| taken.contains(&s.row())).count();
                        m.stopped(&self.pool, fresh);
                    }
                    report.say(PoolEvent::new(
                        "Stopped",
                        format!("stopped {} into the reserve", names.join(", ")),
                        false,
                    ));
                }
                for (stop, e) in refused {
                    self.stop_failed(world, &[stop], e, report).await?;
                }
            }
            Err(e @ Ec2Error::Fenced { .. }) => return Err(PoolError::ec2(&self.pool, e)),
            Err(e) => self.stop_failed(world, &stopping, e, report).await?,
        }
        Ok(())
    }

    /// EC2 did not start `starts` (of `offering`): refused for good (a
    /// missing permission, an instance that cannot start), kept they would
    /// be parked for ever — retired; otherwise their rows are put back for
    /// the next pass, and a capacity error holds the offering.
    async fn start_failed(
        &mut self,
        world: &mut impl World,
        orders: Orders<'_>,
        offering: &Offering,
        starts: &[&WithRow],
        e: Ec2Error,
        report: &mut PassReport,
    ) -> Result<(), PoolError> {
        let Orders { spec, now, .. } = orders;
        if matches!(e, Ec2Error::Refused { .. } | Ec2Error::Denied { .. }) {
            return self
                .retire_reserved(world, "StartFailed", &e, starts, report)
                .await;
        }
        let rows: Vec<i64> = starts.iter().map(|s| s.row()).collect();
        world.unwake_rows(&rows).await?;
        if let Ec2Error::Capacity { code, .. } = &e {
            self.hold(spec, offering, code, now);
        }
        report.note_throttled(matches!(e, Ec2Error::Throttled { .. }));
        tracing::warn!(pool = %self.pool, offering = %offering, error = %e, "start failed");
        report.ec2_failed("StartFailed", &e);
        Ok(())
    }

    /// EC2 did not stop `stopping`: refused for good, stopped again each
    /// pass they would fail each pass, their agents waiting for a stop that
    /// never comes — retired; otherwise their rows stay reserved, and the
    /// next pass sees them still running and stops them again. A stop the
    /// credentials may not make is the latter: retired, they would be
    /// launched again for the reserve and refused again, a loop of
    /// launches; kept, they cost what the reserve would, the pool
    /// `Degraded` until the policy allows the stop.
    async fn stop_failed(
        &mut self,
        world: &mut impl World,
        stopping: &[&WithRow],
        e: Ec2Error,
        report: &mut PassReport,
    ) -> Result<(), PoolError> {
        if matches!(e, Ec2Error::Refused { .. }) {
            return self
                .retire_reserved(world, "StopFailed", &e, stopping, report)
                .await;
        }
        report.note_throttled(matches!(e, Ec2Error::Throttled { .. }));
        tracing::warn!(pool = %self.pool, error = %e, "stop failed");
        report.ec2_failed("StopFailed", &e);
        Ok(())
    }

    /// Retires reserve instances EC2 refused to stop or start (`what` is
    /// the event's reason): each row turned into the operator's claim, then
    /// terminated, as any retirement (`ReserveFailed`).
    async fn retire_reserved(
        &mut self,
        world: &mut impl World,
        what: &'static str,
        error: &Ec2Error,
        items: &[&WithRow],
        report: &mut PassReport,
    ) -> Result<(), PoolError> {
        let ids: Vec<&str> = items.iter().map(|s| s.instance()).collect();
        tracing::warn!(pool = %self.pool, instances = ?ids, error = %error,
            "{what}: EC2 refused for good, the instances are retired");
        report.note_denial(error);
        report.say(PoolEvent::new(
            what,
            format!(
                "{error}: {} retired ({})",
                ids.join(", "),
                Reason::ReserveFailed.as_str()
            ),
            true,
        ));
        let plan = PoolPlan::default().with_retirements(
            items
                .iter()
                .map(|s| {
                    Retirement::new(s.instance(), Reason::ReserveFailed, End::Reserved(s.row()))
                })
                .collect(),
        );
        self.retire(world, &plan, report).await?;
        Ok(())
    }
}
