//! What a pass says: its report (status, events, what it did) and its
//! errors; and the deletion a loop is told of.

use chrono::{DateTime, Utc};
use orca_db::DbError;

use super::{ec2::Ec2Error, plan::PoolPlan};
use crate::crd::WarmPoolStatus;
use crate::fence::Fenced;

/// Something worth a Kubernetes Event; `reason` is CamelCase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolEvent {
    reason: &'static str,
    message: String,
    warning: bool,
}

impl PoolEvent {
    /// The Event's reason.
    pub fn reason(&self) -> &'static str {
        self.reason
    }

    /// The Event's note.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// A Warning, not a Normal Event.
    pub fn is_warning(&self) -> bool {
        self.warning
    }

    /// An event of `reason`, a Warning if `warning`.
    pub fn new(reason: &'static str, message: String, warning: bool) -> Self {
        PoolEvent {
            reason,
            message,
            warning,
        }
    }
}

/// A WarmPool's deletion with `onDelete: Terminate`, as its loop is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deletion {
    /// Its `deletionTimestamp`.
    since: DateTime<Utc>,
    /// `spec.drainTimeoutSeconds` as it is now: an edit made during the
    /// deletion (say, to 0 to stop waiting for busy instances) counts.
    drain_timeout_seconds: i64,
    /// The loop is left where the pool ran (it moved, or in the local
    /// mode its file was removed), not the WarmPool's deletion: what EC2
    /// launched after `since` is the loop's of the new place, which may
    /// list the same instances (another endpoint of the same EC2), and is
    /// left to it (see `PoolLoop::leave_later_launches`).
    left_behind: bool,
}

impl Deletion {
    /// A deletion at `since` with `drain_timeout_seconds` as the spec
    /// says now; `left_behind`: the loop was left where the pool ran.
    pub fn new(since: DateTime<Utc>, drain_timeout_seconds: i64, left_behind: bool) -> Self {
        Deletion {
            since,
            drain_timeout_seconds,
            left_behind,
        }
    }

    /// Its `deletionTimestamp`.
    pub fn since(&self) -> DateTime<Utc> {
        self.since
    }

    /// `spec.drainTimeoutSeconds` as it is now: an edit made during the
    /// deletion (say, to 0 to stop waiting for busy instances) counts.
    pub fn drain_timeout_seconds(&self) -> i64 {
        self.drain_timeout_seconds
    }

    /// The loop is left where the pool ran (it moved, or in the local
    /// mode its file was removed), not the WarmPool's deletion: what EC2
    /// launched after `since` is the loop's of the new place, which may
    /// list the same instances (another endpoint of the same EC2), and is
    /// left to it (see `PoolLoop::leave_later_launches`).
    pub fn left_behind(&self) -> bool {
        self.left_behind
    }
}

/// What one pass saw and did. The pass starts it from its plan
/// ([`PassReport::planned`]); the stages add what they did, each through a
/// method saying what happened; the pass ends it with the roster and the
/// status. Everyone else reads it.
#[derive(Clone, Debug, Default)]
pub struct PassReport {
    /// `observedGeneration` is left for the caller.
    status: WarmPoolStatus,
    events: Vec<PoolEvent>,
    plan: PoolPlan,
    /// Instances launched and terminated by this pass.
    launched: Vec<String>,
    terminated: Vec<String>,
    /// Instances started from the stopped reserve by this pass.
    started: Vec<String>,
    /// A call was answered `RequestLimitExceeded` to the end: back off.
    throttled: bool,
    /// The WarmPool is being deleted with `onDelete: Terminate`.
    deleting: bool,
    /// Why the pool is `Degraded` beyond this pass's warnings: boots that
    /// keep failing (reason, message).
    degraded: Option<(&'static str, String)>,
    /// Being deleted, and EC2 listed none of its instances pending or
    /// running, nor lacks one this loop launched: its finalizer may go.
    deleted: bool,
    /// The idle range the pass kept: `spec.idle`, or an active schedule's.
    idle_min: i32,
    /// The schedule whose period is under way (`status.activeSchedule`).
    active_schedule: Option<String>,
    /// With `spec.forecast`: the floor of the hours ahead
    /// (`status.forecast`).
    forecast: Option<crate::crd::ForecastStatus>,
    /// With `spec.objective`: how close it is (`status.objective`).
    objective: Option<crate::crd::ObjectiveStatus>,
    /// The instances one by one (`status.instances`).
    instances: Vec<crate::crd::PoolInstance>,
}

impl PassReport {
    /// The report of a pass that has planned `plan` and not yet acted;
    /// `deleting`: the pool is being deleted (or was left where it ran),
    /// `deleted`: and nothing of it is left there. The moment's figures
    /// are added by the `with_` methods.
    pub(crate) fn planned(plan: PoolPlan, deleting: bool, deleted: bool) -> Self {
        PassReport {
            plan,
            deleting,
            deleted,
            ..PassReport::default()
        }
    }

    /// With the moment's `idle.min` (a schedule's under way).
    pub(crate) fn with_idle_min(self, idle_min: i32) -> Self {
        PassReport { idle_min, ..self }
    }

    /// With the schedule under way, as the status says it.
    pub(crate) fn with_active_schedule(self, active_schedule: Option<String>) -> Self {
        PassReport {
            active_schedule,
            ..self
        }
    }

    /// With the forecast's floors ahead (`status.forecast`).
    pub(crate) fn with_forecast(self, forecast: Option<crate::crd::ForecastStatus>) -> Self {
        PassReport { forecast, ..self }
    }

    /// With how close the objective is (`status.objective`).
    pub(crate) fn with_objective(self, objective: Option<crate::crd::ObjectiveStatus>) -> Self {
        PassReport { objective, ..self }
    }

    /// The status the pass wrote, `observedGeneration` left for the caller.
    pub fn status(&self) -> &WarmPoolStatus {
        &self.status
    }

    /// The Events the pass says, in order.
    pub fn events(&self) -> &[PoolEvent] {
        &self.events
    }

    /// The status and Events, for the one who writes them.
    pub fn into_status_and_events(self) -> (WarmPoolStatus, Vec<PoolEvent>) {
        (self.status, self.events)
    }

    /// What the pass planned.
    pub fn plan(&self) -> &PoolPlan {
        &self.plan
    }

    /// The instances this pass launched.
    pub fn launched(&self) -> &[String] {
        &self.launched
    }

    /// The instances this pass terminated.
    pub fn terminated(&self) -> &[String] {
        &self.terminated
    }

    /// The instances this pass started from the stopped reserve.
    pub fn started(&self) -> &[String] {
        &self.started
    }

    /// Whether a call was answered `RequestLimitExceeded` to the end: the
    /// next pass backs off.
    pub fn throttled(&self) -> bool {
        self.throttled
    }

    /// Whether the WarmPool is being deleted with `onDelete: Terminate`.
    pub fn deleting(&self) -> bool {
        self.deleting
    }

    /// Why the pool is `Degraded` beyond this pass's warnings (reason,
    /// message).
    pub fn degraded(&self) -> Option<&(&'static str, String)> {
        self.degraded.as_ref()
    }

    /// Being deleted, and nothing of it left in EC2: its finalizer may go.
    pub fn deleted(&self) -> bool {
        self.deleted
    }

    /// The least idle count the pass kept.
    pub fn idle_min(&self) -> i32 {
        self.idle_min
    }

    /// The schedule whose period is under way.
    pub fn active_schedule(&self) -> Option<&String> {
        self.active_schedule.as_ref()
    }

    /// The floor of the hours ahead, with `spec.forecast`.
    pub fn forecast(&self) -> Option<&crate::crd::ForecastStatus> {
        self.forecast.as_ref()
    }

    /// How close the objective is, with `spec.objective`.
    pub fn objective(&self) -> Option<&crate::crd::ObjectiveStatus> {
        self.objective.as_ref()
    }

    /// The instances one by one.
    pub fn instances(&self) -> &[crate::crd::PoolInstance] {
        &self.instances
    }

    /// The pass says `event`.
    pub(crate) fn say(&mut self, event: PoolEvent) {
        self.events.push(event);
    }

    /// The pass launched `ids`.
    pub(crate) fn add_launched(&mut self, ids: impl IntoIterator<Item = String>) {
        self.launched.extend(ids);
    }

    /// The pass started `ids` from the stopped reserve.
    pub(crate) fn add_started(&mut self, ids: impl IntoIterator<Item = String>) {
        self.started.extend(ids);
    }

    /// The pass terminated `ids` (besides any it terminated before).
    pub(crate) fn add_terminated(&mut self, ids: impl IntoIterator<Item = String>) {
        self.terminated.extend(ids);
    }

    /// A call was answered `RequestLimitExceeded` to the end, if
    /// `throttled`; whether any call of the pass was.
    pub(crate) fn note_throttled(&mut self, throttled: bool) -> bool {
        self.throttled |= throttled;
        self.throttled
    }

    /// The pool is `Degraded` for `why` (reason, message), or for no more
    /// than this pass's warnings if `None`.
    pub(crate) fn set_degraded(&mut self, why: Option<(&'static str, String)>) {
        self.degraded = why;
    }

    /// The instances one by one, as the pass ends.
    pub(crate) fn set_instances(&mut self, instances: Vec<crate::crd::PoolInstance>) {
        self.instances = instances;
    }

    /// The status, as the pass ends.
    pub(crate) fn set_status(&mut self, status: WarmPoolStatus) {
        self.status = status;
    }

    /// A Warning for an EC2 call that failed (`reason`, the error its
    /// message): `Unauthorized` instead when the credentials may not make
    /// the call, and the pool `Degraded` for it, which no boot failure
    /// hides: waiting will not mend it, the IAM policy will.
    pub fn ec2_failed(&mut self, reason: &'static str, e: &Ec2Error) {
        let reason = if self.note_denial(e) {
            UNAUTHORIZED
        } else {
            reason
        };
        self.events
            .push(PoolEvent::new(reason, e.to_string(), true));
    }

    /// The pool `Degraded` (`Unauthorized`) if `e` is a call the
    /// credentials may not make; whether it was.
    pub fn note_denial(&mut self, e: &Ec2Error) -> bool {
        match e.denial() {
            Some(message) => {
                self.degraded = Some((UNAUTHORIZED, message));
                true
            }
            None => false,
        }
    }
}

/// The `Degraded` reason (and the Event's) of an EC2 call the operator's
/// credentials may not make.
pub const UNAUTHORIZED: &str = "Unauthorized";

/// The EC2 actions the credentials were last refused, kept between passes:
/// a pass that does not make the call again (the instance went by itself,
/// no run asked for the reserve) proves nothing, so the pool stays
/// `Degraded` until the action is allowed once or the spec changes.
///
/// A pool's preflight (see [`super::preflight`]) adds what it finds
/// missing, and clears only what it found itself: its dry run on one
/// instance says nothing of a real call refused on another.
#[derive(Clone, Debug, Default)]
pub struct Denials {
    refused: std::collections::BTreeMap<&'static str, String>,
    by_preflight: std::collections::BTreeSet<&'static str>,
}

impl Denials {
    /// Remembers what a call of `action` answered: a denial stands, a
    /// success ends it; any other error says nothing of the policy.
    pub fn record<T>(&mut self, action: &'static str, outcome: &Result<T, Ec2Error>) {
        match outcome {
            Ok(_) => self.allowed(action),
            Err(e) => {
                if let Some(message) = e.denial() {
                    self.refused(action, message, false);
                }
            }
        }
    }

    /// As [`Denials::record`], for a write of the database URL's parameter
    /// (`ssm:PutParameter`): a refusal of the credentials stands, a write
    /// made ends it.
    pub fn record_ssm<T>(&mut self, outcome: &Result<T, super::ssm::SsmError>) {
        match outcome {
            Ok(_) => self.allowed("PutParameter"),
            Err(e) => {
                if let Some(message) = e.denial() {
                    self.refused(e.action(), message, false);
                }
            }
        }
    }

    /// What a preflight said of `action` (see [`super::preflight`]): a
    /// denial stands as a refused call's does; an allowance ends one the
    /// preflight found, not one a real call met.
    pub fn note(&mut self, action: &'static str, outcome: &super::preflight::Outcome) {
        match outcome {
            super::preflight::Outcome::Allowed if self.by_preflight.contains(action) => {
                self.allowed(action)
            }
            super::preflight::Outcome::Missing(message) => {
                self.refused(action, message.clone(), true)
            }
            _ => {}
        }
    }

    fn allowed(&mut self, action: &'static str) {
        self.refused.remove(action);
        self.by_preflight.remove(action);
    }

    fn refused(&mut self, action: &'static str, message: String, by_preflight: bool) {
        self.refused.insert(action, message);
        if by_preflight {
            self.by_preflight.insert(action);
        } else {
            self.by_preflight.remove(action);
        }
    }

    /// The `Degraded` message of the denials still standing, if any: each
    /// refusal's, so that a policy mended one action at a time is told
    /// every action it lacks at once.
    pub fn standing(&self) -> Option<String> {
        (!self.refused.is_empty()).then(|| {
            self.refused
                .values()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join("; ")
        })
    }

    /// Forgets every denial: the spec changed, and what it needs may be
    /// other calls.
    pub fn clear(&mut self) {
        self.refused.clear();
        self.by_preflight.clear();
    }
}

/// Why a pool's loop could not start or a pass failed: an EC2 call, the
/// database, or the fence closed.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("pool {pool}: {source}")]
    Ec2 {
        pool: String,
        #[source]
        source: Ec2Error,
    },
    #[error("pool {pool}: database: {source}")]
    Db {
        pool: String,
        #[source]
        source: DbError,
    },
    #[error("pool {pool}: {source}")]
    Fenced {
        pool: String,
        #[source]
        source: Fenced,
    },
}

impl PoolError {
    /// An EC2 call of pool `pool` failed (fenced or not: see
    /// [`crate::fence::MaybeFenced`]).
    pub(super) fn ec2(pool: &str, source: Ec2Error) -> PoolError {
        PoolError::Ec2 {
            pool: pool.to_string(),
            source,
        }
    }

    /// The `Degraded` reason of a pass that failed with this:
    /// [`UNAUTHORIZED`] for a call the credentials may not make, else
    /// `PassFailed`.
    pub fn degraded_reason(&self) -> &'static str {
        match self {
            PoolError::Ec2 {
                source: Ec2Error::Denied { .. },
                ..
            } => UNAUTHORIZED,
            _ => "PassFailed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(action: &'static str) -> Result<(), Ec2Error> {
        Err(super::super::ec2::classify(
            action,
            None,
            "UnauthorizedOperation",
            "not allowed",
        ))
    }

    #[test]
    fn a_denial_stands_until_the_action_is_allowed_once() {
        let mut d = Denials::default();
        d.record("StartInstances", &denied("StartInstances"));
        assert!(d.standing().unwrap().contains("ec2:StartInstances"));
        // Other calls, and other errors of the same call, say nothing of it.
        d.record("TerminateInstances", &Ok(()));
        d.record::<()>(
            "StartInstances",
            &Err(Ec2Error::Throttled {
                action: "StartInstances",
            }),
        );
        assert!(d.standing().is_some());
        d.record("StartInstances", &Ok(()));
        assert_eq!(d.standing(), None);
        d.record("RunInstances", &denied("RunInstances"));
        d.clear();
        assert_eq!(d.standing(), None);
    }
}
