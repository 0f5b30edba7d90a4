//! A pass's status (docs/operations.md#warmpool-conditions): the counts,
//! the offerings without capacity, and the conditions `Available`,
//! `Progressing` and `Degraded` (and `Terminating` while the WarmPool is
//! deleted), each keeping its transition time while its status holds.

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::{cost::Cost, holds::Holds, pass_report::PassReport};
use crate::crd::{set_condition, WarmPoolStatus};

/// The status of the pass `report` tells, at `now`: `conditions` are the
/// last pass's, and become this one's; the capacity `holds`, the
/// `launch_batches` EC2 answered and the `cost` (which it counts) are the loop's.
pub(super) fn status(
    report: &PassReport,
    conditions: &mut Vec<Condition>,
    holds: &Holds,
    launch_batches: u64,
    cost: &mut Cost,
    now: DateTime<Utc>,
) -> WarmPoolStatus {
    let c = report.plan().counts();
    let launching = launching(report);
    let previous = std::mem::take(conditions);
    *conditions = holding(report)
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
        idle: c.idle() as i32,
        busy: c.busy() as i32,
        stopped: c.stopped() as i32,
        terminating: c.terminating() as i32,
        drifted: c.drifted() as i32,
        launch_batches: launch_batches as i64,
        capacity_errors: holds.status(now),
        active_schedule: report.active_schedule().cloned(),
        forecast: report.forecast().cloned(),
        objective: report.objective().cloned(),
        instances: report.instances().to_vec(),
        // The Kubernetes mode's, which knows the Secret and the places.
        database_secret: None,
        retiring: Vec::new(),
        place: None,
        class_region: None,
        class_endpoint: None,
        instance_seconds: Vec::new(),
        runs_served: None,
        time_to_start: None,
        conditions: conditions.clone(),
    };
    let totals = cost.shown(&status);
    status.instance_seconds = totals.instance_seconds().clone();
    status.runs_served = totals.runs_served().clone();
    status.time_to_start = totals.time_to_start().clone();
    status
}

/// Launching: booting, and launched or started by the pass.
fn launching(report: &PassReport) -> u32 {
    report.plan().counts().launching()
        + report.launched().len() as u32
        + report.started().len() as u32
}

/// Each condition the pass's `report` says: its type, status, reason and
/// message.
fn holding(report: &PassReport) -> Vec<(&'static str, bool, &'static str, String)> {
    let c = report.plan().counts();
    let launching = launching(report);
    let degraded = report.events().iter().find(|e| e.is_warning());
    let min = report.idle_min().max(0) as u32;
    let mut now_holding = vec![
        if report.deleting() {
            (
                "Available",
                false,
                "Deleting",
                "the WarmPool is being deleted".to_string(),
            )
        } else if c.idle() >= min {
            (
                "Available",
                true,
                "IdleReached",
                format!("{} idle, {} busy", c.idle(), c.busy()),
            )
        } else {
            (
                "Available",
                false,
                "BelowIdleMin",
                format!("{} idle of {min}", c.idle()),
            )
        },
        if c.drifted() > 0 && !report.deleting() {
            (
                    "Progressing",
                    true,
                    "ReplacingDrifted",
                    format!(
                        "{} instance(s) of an out-of-date launch spec being replaced; {launching} launching",
                        c.drifted()
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
        match (&report.degraded(), degraded) {
            (Some((reason, message)), _) => ("Degraded", true, *reason, message.clone()),
            (None, Some(e)) => ("Degraded", true, e.reason(), e.message().to_string()),
            (None, None) => ("Degraded", false, "AsExpected", "no errors".into()),
        },
    ];
    if report.deleting() {
        // What keeps the WarmPool (its finalizer) until EC2 lists none.
        now_holding.push((
            "Terminating",
            true,
            "PoolDeleted",
            format!(
                "onDelete Terminate: {} terminating, {} busy finishing their runs",
                c.terminating(),
                c.busy()
            ),
        ));
    }
    now_holding
}

fn time(t: DateTime<Utc>) -> Time {
    Time(
        k8s_openapi::jiff::Timestamp::from_second(t.timestamp())
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}
