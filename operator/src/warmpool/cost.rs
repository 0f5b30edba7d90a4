//! What the pool costs (docs/operations.md#pool-metrics): instance-seconds
//! by instance type, capacity type and what the instance was doing (idle,
//! busy, stopped, or in between: booting, starting, being stopped or
//! retired), where the runs handed an instance were served from and how
//! long they waited. Kept in the status, so a restarted operator counts on
//! from there (the waits of the last hour are read again from the
//! database).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use orca_db::pool::{HandOut, Served};

use super::plan::{Ec2Instance, Ec2State, PoolRow, Snapshot};
use super::starts::Starts;
use crate::crd::{InstanceSeconds, RunsServed, TimeToStart, WarmPoolStatus};

/// The totals a status shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    instance_seconds: Vec<InstanceSeconds>,
    runs_served: Option<RunsServed>,
    time_to_start: Option<TimeToStart>,
}

impl Totals {
    /// Instance-seconds by state and type, for `status.instanceSeconds`.
    pub fn instance_seconds(&self) -> &Vec<InstanceSeconds> {
        &self.instance_seconds
    }

    /// Runs served, for `status.runsServed`.
    pub fn runs_served(&self) -> &Option<RunsServed> {
        &self.runs_served
    }

    /// Time to start, for `status.timeToStart`.
    pub fn time_to_start(&self) -> &Option<TimeToStart> {
        &self.time_to_start
    }
}

/// How often the totals in the status are brought up to date when nothing
/// else in it changes: a steady pool's status is not rewritten every pass
/// just because seconds pass (the metrics are up to date at each pass).
pub const SHOWN_EVERY: Duration = Duration::from_secs(600);

/// What an instance was doing, as billed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Use {
    Idle,
    Busy,
    /// Stopped or stopping: EBS only, no compute.
    Stopped,
    /// Running without an idle or busy row: booting, started from the
    /// reserve and not back yet, about to be stopped or retired.
    Other,
}

impl Use {
    pub const ALL: [Use; 4] = [Use::Idle, Use::Busy, Use::Stopped, Use::Other];

    /// The metrics' `use` label: `idle`, `busy`, `stopped` or `booting`.
    pub fn as_str(self) -> &'static str {
        match self {
            Use::Idle => "idle",
            Use::Busy => "busy",
            Use::Stopped => "stopped",
            Use::Other => "booting",
        }
    }
}

/// What `i` (with its live row, if any) was doing; `None` once it is
/// shutting down or gone.
pub fn use_of(i: &Ec2Instance, row: Option<&PoolRow>) -> Option<Use> {
    match i.state() {
        Ec2State::ShuttingDown | Ec2State::Terminated => None,
        Ec2State::Stopped | Ec2State::Stopping => Some(Use::Stopped),
        Ec2State::Pending | Ec2State::Running => Some(match row {
            Some(r) if r.idle_secs().is_some() => Use::Idle,
            Some(r) if r.run().is_some() => Use::Busy,
            _ => Use::Other,
        }),
    }
}

/// The capacity type label: `spot` or `onDemand`.
pub fn market(spot: bool) -> &'static str {
    if spot {
        "spot"
    } else {
        "onDemand"
    }
}

/// Instance type and whether spot: what the seconds are counted by.
type Kind = (String, bool);

/// The pool's running totals.
#[derive(Clone, Debug, Default)]
pub struct Cost {
    seconds: BTreeMap<Kind, BTreeMap<Use, f64>>,
    served: Served,
    /// The hand-outs of the last hour, for the time to start.
    starts: Starts,
    /// The database's time of the newest hand-out counted.
    handed_mark: Option<f64>,
    /// What the status shows, when it was brought up to date, and the rest
    /// of the status it was shown with.
    shown: Totals,
    shown_at: Option<Instant>,
    shown_with: Option<WarmPoolStatus>,
}

impl Cost {
    /// The database's time of the newest hand-out counted; `None` before
    /// the first count.
    pub(super) fn handed_mark(&self) -> Option<f64> {
        self.handed_mark
    }

    /// The hand-outs are counted up to `at` (the database's time).
    pub(super) fn counted_to(&mut self, at: f64) {
        self.handed_mark = Some(at);
    }

    /// Adds `elapsed` for each present instance of `snap`, doing what it
    /// does now; returns what it added, by kind and use.
    pub fn tally(&mut self, snap: &Snapshot, elapsed: Duration) -> Vec<(Kind, Use, f64)> {
        let secs = elapsed.as_secs_f64();
        if secs <= 0.0 {
            return Vec::new();
        }
        let rows: HashMap<&str, &PoolRow> = snap.rows().iter().map(|r| (r.instance(), r)).collect();
        let mut added: BTreeMap<(Kind, Use), f64> = BTreeMap::new();
        for i in snap.instances() {
            if let Some(u) = use_of(i, rows.get(i.id()).copied()) {
                let kind = (
                    i.offering().instance_type().to_string(),
                    i.offering().spot(),
                );
                *added.entry((kind, u)).or_default() += secs;
            }
        }
        for ((kind, u), s) in &added {
            *self
                .seconds
                .entry(kind.clone())
                .or_default()
                .entry(*u)
                .or_default() += s;
        }
        added.into_iter().map(|((k, u), s)| (k, u, s)).collect()
    }

    /// The hand-outs of the last hour, for the time to start.
    pub(super) fn starts(&self) -> &Starts {
        &self.starts
    }

    /// Counts the hand-outs `seen` (the database's time `now`) among the
    /// starts, each placed on its instance's offering as `listed` shows
    /// it: a listing reused from before a launch may not show its instance
    /// yet, so each pass places what its listing shows.
    pub(super) fn count_starts(&mut self, seen: &[HandOut], now: f64, listed: &[Ec2Instance]) {
        self.starts.add(seen, now);
        self.starts.place(listed);
    }

    /// Adds `s` to the runs served so far, by where each was served from.
    pub fn add_served(&mut self, s: Served) {
        self.served += s;
    }

    /// The totals as the status keeps them, whole seconds.
    pub fn status(&self) -> Totals {
        let instance_seconds = self
            .seconds
            .iter()
            .map(|((t, spot), by)| {
                let get = |u| by.get(&u).copied().unwrap_or(0.0).round() as i64;
                InstanceSeconds {
                    instance_type: t.clone(),
                    capacity_type: market(*spot).into(),
                    idle: get(Use::Idle),
                    busy: get(Use::Busy),
                    stopped: get(Use::Stopped),
                    booting: get(Use::Other),
                }
            })
            .collect();
        let s = self.served;
        let runs_served = (s.idle() + s.reserve() + s.cold() > 0).then_some(RunsServed {
            idle: s.idle() as i64,
            reserve: s.reserve() as i64,
            cold: s.cold() as i64,
        });
        Totals {
            instance_seconds,
            runs_served,
            time_to_start: self.starts.figures(),
        }
    }

    /// The totals for a status whose other fields are `rest`: brought up to
    /// date when `rest` differs from the last one (the status is written
    /// then anyway) or [`SHOWN_EVERY`] after the last time; else as shown
    /// before.
    pub fn shown(&mut self, rest: &WarmPoolStatus) -> Totals {
        let due = self.shown_at.is_none_or(|at| at.elapsed() >= SHOWN_EVERY);
        if due || self.shown_with.as_ref() != Some(rest) {
            self.shown = self.status();
            self.shown_at = Some(Instant::now());
            self.shown_with = Some(rest.clone());
        }
        self.shown.clone()
    }

    /// Counts on from a status written earlier.
    pub fn restore(&mut self, seconds: &[InstanceSeconds], served: Option<&RunsServed>) {
        for s in seconds {
            let by = self
                .seconds
                .entry((s.instance_type.clone(), s.capacity_type == "spot"))
                .or_default();
            for (u, v) in [
                (Use::Idle, s.idle),
                (Use::Busy, s.busy),
                (Use::Stopped, s.stopped),
                (Use::Other, s.booting),
            ] {
                *by.entry(u).or_default() += v.max(0) as f64;
            }
        }
        if let Some(r) = served {
            self.add_served(Served::new(
                r.idle.max(0) as u64,
                r.reserve.max(0) as u64,
                r.cold.max(0) as u64,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::warmpool::plan::Offering;

    fn inst(id: &str, state: Ec2State, t: &str, spot: bool) -> Ec2Instance {
        Ec2Instance::bare(id, state, Utc::now()).with_offering(Offering::new(
            t.into(),
            "subnet-a".into(),
            spot,
        ))
    }

    fn row(instance: &str, idle: bool, run: Option<i64>) -> PoolRow {
        PoolRow::new(1, instance.into())
            .with_run(run)
            .with_idle_secs(idle.then_some(1.0))
            .with_polled_secs(Some(0.1))
            .with_reserved(!idle && run.is_none())
    }

    #[test]
    fn seconds_are_counted_by_type_capacity_and_use_and_survive_a_restart() {
        let snap = Snapshot::default()
            .with_instances(vec![
                inst("i-1", Ec2State::Running, "t3.small", false),
                inst("i-2", Ec2State::Running, "t3.small", false),
                inst("i-3", Ec2State::Stopped, "t3.small", false),
                inst("i-4", Ec2State::Running, "m5.large", true),
                inst("i-5", Ec2State::Pending, "m5.large", true),
                inst("i-6", Ec2State::Terminated, "m5.large", true),
            ])
            .with_rows(vec![
                row("i-1", true, None),
                row("i-2", false, Some(7)),
                row("i-3", false, None),
                row("i-4", true, None),
            ]);
        let mut cost = Cost::default();
        cost.tally(&snap, Duration::from_secs(10));
        cost.tally(&snap, Duration::from_secs(5));
        cost.add_served(Served::new(3, 1, 2));
        let totals = cost.status();
        let by: Vec<(&str, &str, [i64; 4])> = totals
            .instance_seconds
            .iter()
            .map(|s| {
                (
                    s.instance_type.as_str(),
                    s.capacity_type.as_str(),
                    [s.idle, s.busy, s.stopped, s.booting],
                )
            })
            .collect();
        assert_eq!(
            by,
            [
                ("m5.large", "spot", [15, 0, 0, 15]),
                ("t3.small", "onDemand", [15, 15, 15, 0]),
            ]
        );
        let mut again = Cost::default();
        again.restore(&totals.instance_seconds, totals.runs_served.as_ref());
        assert_eq!(again.status(), totals);
    }

    #[test]
    fn the_status_shows_new_totals_only_with_another_change_or_after_a_while() {
        let snap = Snapshot::default()
            .with_instances(vec![inst("i-1", Ec2State::Running, "t3.small", false)])
            .with_rows(vec![row("i-1", true, None)]);
        let mut cost = Cost::default();
        let steady = WarmPoolStatus {
            idle: 1,
            ..WarmPoolStatus::default()
        };
        cost.tally(&snap, Duration::from_secs(10));
        let first = cost.shown(&steady);
        assert_eq!(first.instance_seconds[0].idle, 10);
        // Seconds pass, nothing else changes: the status stays as it was,
        // so a steady pool's status is not written again.
        cost.tally(&snap, Duration::from_secs(10));
        assert_eq!(cost.shown(&steady), first);
        // Something else changes: the totals come along.
        let busy = WarmPoolStatus { busy: 1, ..steady };
        assert_eq!(cost.shown(&busy).instance_seconds[0].idle, 20);
    }
}
