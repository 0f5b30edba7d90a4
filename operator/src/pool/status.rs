//! A pass's status (docs/operations.md#warmpool-conditions): the counts,
//! the offerings without capacity, and the conditions `Available`,
//! `Progressing` and `Degraded` (and `Terminating` while the WarmPool is
//! deleted), each keeping its transition time while its status holds.

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{pool_loop::PoolLoop, report::PassReport};
use crate::crd::{set_condition, CapacityError, WarmPoolStatus};

impl<W> PoolLoop<W> {
    pub(super) fn status(&mut self, report: &PassReport, now: DateTime<Utc>) -> WarmPoolStatus {
        let c = report.plan.counts;
        let capacity_errors: Vec<CapacityError> = self
            .unavailable
            .iter()
            .filter(|(_, until)| **until > now)
            .map(|(o, until)| CapacityError {
                instance_type: o.instance_type.clone(),
                subnet: o.subnet.clone(),
                spot: o.spot,
                code: self
                    .capacity_codes
                    .get(o)
                    .cloned()
                    .unwrap_or_else(|| "InsufficientCapacity".into()),
                until: until.to_rfc3339(),
            })
            .collect();
        let launching = c.launching + report.launched.len() as u32 + report.started.len() as u32;
        let degraded = report.events.iter().find(|e| e.warning);
        let min = report.idle_min.max(0) as u32;
        let mut conditions = vec![
            if report.deleting {
                (
                    "Available",
                    false,
                    "Deleting",
                    "the WarmPool is being deleted".to_string(),
                )
            } else if c.idle >= min {
                (
                    "Available",
                    true,
                    "IdleReached",
                    format!("{} idle, {} busy", c.idle, c.busy),
                )
            } else {
                (
                    "Available",
                    false,
                    "BelowIdleMin",
                    format!("{} idle of {min}", c.idle),
                )
            },
            if c.drifted > 0 && !report.deleting {
                (
                    "Progressing",
                    true,
                    "ReplacingDrifted",
                    format!(
                        "{} instance(s) of an out-of-date launch spec being replaced; {launching} launching",
                        c.drifted
                    ),
                )
            } else if launching > 0 {
                (
                    "Progressing",
                    true,
                    "Launching",
                    format!("{launching} launching"),
                )
            } else {
                ("Progressing", false, "Steady", "nothing launching".into())
            },
            match (&report.degraded, degraded) {
                (Some((reason, message)), _) => ("Degraded", true, *reason, message.clone()),
                (None, Some(e)) => ("Degraded", true, e.reason, e.message.clone()),
                (None, None) => ("Degraded", false, "AsExpected", "no errors".into()),
            },
        ];
        if report.deleting {
            // What keeps the WarmPool (its finalizer) until EC2 lists none.
            conditions.push((
                "Terminating",
                true,
                "PoolDeleted",
                format!(
                    "onDelete Terminate: {} terminating, {} busy finishing their runs",
                    c.terminating, c.busy
                ),
            ));
        }
        let previous = std::mem::take(&mut self.conditions);
        self.conditions = conditions
            .into_iter()
            .map(|(kind, ok, reason, message)| {
                let mut set = previous.clone();
                set_condition(&mut set, kind, ok, reason, &message, time(now), None);
                set.into_iter()
                    .find(|c| c.type_ == kind)
                    .expect("invariant: set_condition leaves the condition it set")
            })
            .collect();
        let mut status = WarmPoolStatus {
            observed_generation: None,
            launching: launching as i32,
            idle: c.idle as i32,
            busy: c.busy as i32,
            stopped: c.stopped as i32,
            terminating: c.terminating as i32,
            drifted: c.drifted as i32,
            launch_batches: self.launch_batches as i64,
            capacity_errors,
            active_schedule: report.active_schedule.clone(),
            forecast: report.forecast.clone(),
            instances: report.instances.clone(),
            // The Kubernetes mode's, which knows the Secret and the places.
            database_secret: None,
            retiring: Vec::new(),
            class_region: None,
            class_endpoint: None,
            instance_seconds: Vec::new(),
            runs_served: None,
            time_to_start: None,
            conditions: self.conditions.clone(),
        };
        let totals = self.cost.shown(&status);
        status.instance_seconds = totals.instance_seconds;
        status.runs_served = totals.runs_served;
        status.time_to_start = totals.time_to_start;
        status
    }
}

fn time(t: DateTime<Utc>) -> Time {
    Time(
        k8s_openapi::jiff::Timestamp::from_second(t.timestamp())
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}
