//! Tables of (snapshot → plan) for the pool policy: each row a [`Case`], a
//! named pass (spec, snapshot, offerings without capacity, clock) and what
//! its plan must show.

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Duration, TimeZone, Utc};

use super::*;
use crate::crd::WarmPoolSpec;
use crate::test_support::pool_spec as spec;
use Check::{
    Batches, Busy, Ends, Fallback, Gone, Idle, Launches, Launching, Retired, Room, Starts,
    Terminating,
};

// bounds — maxInstances over every small pool, and a pool of ten thousand.
mod bounds;
// deletion — a deleted pool.
mod deletion;
// drift — drift.
mod drift;
// gone — instances EC2 no longer runs.
mod gone;
// launches — launches.
mod launches;
// reserve — the stopped reserve.
mod reserve;
// retirement — retirement.
mod retirement;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap()
}

fn off(t: &str, s: &str) -> Offering {
    Offering::new(t.into(), s.into(), false)
}

/// An instance `age` seconds old.
fn inst(id: &str, age: i64) -> Ec2Instance {
    Ec2Instance::bare(id, Ec2State::Running, now() - Duration::seconds(age))
        .with_offering(off("t3.small", "subnet-a"))
}

fn idle_row(id: i64, instance: &str, idle: f64) -> PoolRow {
    PoolRow::new(id, instance.into())
        .with_idle_secs(Some(idle))
        .with_polled_secs(Some(0.5))
}

/// Idle instances 100 s old, each with its idle row (numbered from 1): the
/// instance and how long it has been idle.
fn idle_pool(idle: &[(&str, f64)]) -> Snapshot {
    let instances = idle.iter().map(|(id, _)| inst(id, 100)).collect();
    snap(instances, idle_rows(idle))
}

/// Idle rows numbered from 1: the instance and how long it has been idle.
fn idle_rows(idle: &[(&str, f64)]) -> Vec<PoolRow> {
    (1..)
        .zip(idle)
        .map(|(n, (id, secs))| idle_row(n, id, *secs))
        .collect()
}

/// `row`, its agent last heard from `secs` ago.
fn polled_ago(secs: f64, row: PoolRow) -> PoolRow {
    row.with_polled_secs(Some(secs))
}

/// The operator's claim on `instance`: a row no agent wrote.
fn claim_row(id: i64, instance: &str) -> PoolRow {
    idle_row(id, instance, 0.0)
        .with_claim(true)
        .with_idle_secs(None)
}

/// An instance 100 s old in `state`.
fn in_state(id: &str, state: Ec2State) -> Ec2Instance {
    inst(id, 100).with_state(state)
}

fn busy_row(id: i64, instance: &str) -> PoolRow {
    idle_row(id, instance, 0.0)
        .with_idle_secs(None)
        .with_run(Some(7))
        .with_uses(1)
}

fn snap(instances: Vec<Ec2Instance>, rows: Vec<PoolRow>) -> Snapshot {
    Snapshot::default()
        .with_instances(instances)
        .with_rows(rows)
}

fn run(spec: &WarmPoolSpec, snap: &Snapshot) -> PoolPlan {
    plan(spec, snap, &BTreeMap::new(), &Limits::default(), now())
}

/// Stopped, in the reserve's state, 1000 s old.
fn stopped(id: &str) -> Ec2Instance {
    inst(id, 1000).with_state(Ec2State::Stopped)
}

/// A row of the stopped reserve.
fn reserved_row(id: i64, instance: &str) -> PoolRow {
    idle_row(id, instance, 0.0)
        .with_idle_secs(None)
        .with_reserved(true)
}

/// A row started from the reserve `secs` ago, its agent not back yet.
fn woken_row(id: i64, instance: &str, secs: f64) -> PoolRow {
    idle_row(id, instance, 0.0)
        .with_idle_secs(None)
        .with_woken_secs(Some(secs))
}

fn retired(p: &PoolPlan) -> Vec<(&str, Reason)> {
    p.retirements
        .iter()
        .map(|r| (r.instance.as_str(), r.reason))
        .collect()
}

/// Every retirement of a plan: (instance, reason, end), in order.
fn retirements(p: &PoolPlan) -> Vec<(&str, Reason, End)> {
    p.retirements
        .iter()
        .map(|r| (r.instance.as_str(), r.reason, r.end))
        .collect()
}

/// One row of a table: a pass — the pool's spec and snapshot, the offerings
/// without capacity and until when, the limits and the clock — and what its
/// plan must show: `want`, which the row's table checks of every row, and
/// `also`, what this row checks besides. Every failure names the row.
struct Case<W> {
    name: String,
    spec: WarmPoolSpec,
    snap: Snapshot,
    held: BTreeMap<Offering, DateTime<Utc>>,
    limits: Limits,
    at: DateTime<Utc>,
    want: W,
    also: Vec<Check>,
}

/// A row whose pass runs at `now()`, every offering available, with the
/// default limits, checking only its table's `want`.
fn case<W>(name: impl Into<String>, spec: WarmPoolSpec, snap: Snapshot, want: W) -> Case<W> {
    Case {
        name: name.into(),
        spec,
        snap,
        held: BTreeMap::new(),
        limits: Limits::default(),
        at: now(),
        want,
        also: Vec::new(),
    }
}

impl<W> Case<W> {
    /// `offering` has no capacity until `secs` after `now()` (a hold already
    /// over, if negative).
    fn held(mut self, offering: Offering, secs: i64) -> Self {
        self.held.insert(offering, now() + Duration::seconds(secs));
        self
    }

    /// The pass runs `secs` after `now()`.
    fn at(mut self, secs: i64) -> Self {
        self.at = now() + Duration::seconds(secs);
        self
    }

    fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// What else this row checks of its plan, beyond its table's `want`.
    fn also(mut self, checks: impl IntoIterator<Item = Check>) -> Self {
        self.also.extend(checks);
        self
    }

    /// Plans the pass and checks `also` of it; `want` is its table's to
    /// check.
    #[track_caller]
    fn plan(&self) -> PoolPlan {
        let p = plan(&self.spec, &self.snap, &self.held, &self.limits, self.at);
        for check in &self.also {
            check.check(&self.name, &p);
        }
        p
    }
}

/// What a row checks of its plan beyond its table's `want`.
enum Check {
    /// Every retirement: (instance, reason, end), in order.
    Retired(Vec<(&'static str, Reason, End)>),
    /// How many instances are launched (and no batch when none).
    Launches(u32),
    /// Every launch batch: (offering, count), in order.
    Batches(Vec<(Offering, u32)>),
    Fallback(Vec<Offering>),
    /// The instances started from the reserve, in order.
    Starts(Vec<&'static str>),
    Ends(Vec<i64>),
    Gone(Vec<i64>),
    /// The room left under maxInstances.
    Room(u32),
    /// How many are counted idle, busy, launching, terminating.
    Idle(u32),
    Busy(u32),
    Launching(u32),
    Terminating(u32),
    Counts(Counts),
    /// The whole plan (boxed: it is large beside the others).
    Plan(Box<PoolPlan>),
}

impl Check {
    #[track_caller]
    fn check(&self, name: &str, p: &PoolPlan) {
        match self {
            Check::Retired(want) => assert_eq!(&retirements(p), want, "{name}: retirements"),
            Check::Launches(want) => {
                assert_eq!(p.launch_count(), *want, "{name}: launches");
                assert_eq!(p.launches.is_empty(), *want == 0, "{name}: {p:?}");
            }
            Check::Batches(want) => {
                let got: Vec<(Offering, u32)> = p
                    .launches
                    .iter()
                    .map(|b| (b.offering.clone(), b.count))
                    .collect();
                assert_eq!(&got, want, "{name}: batches");
            }
            Check::Fallback(want) => assert_eq!(&p.fallback, want, "{name}: fallback"),
            Check::Starts(want) => {
                let got: Vec<&str> = p.starts.iter().map(|w| w.instance.as_str()).collect();
                assert_eq!(&got, want, "{name}: starts");
            }
            Check::Ends(want) => assert_eq!(&p.ends, want, "{name}: ends"),
            Check::Gone(want) => assert_eq!(&p.gone, want, "{name}: gone"),
            Check::Room(want) => assert_eq!(p.room, *want, "{name}: room"),
            Check::Idle(want) => assert_eq!(p.counts.idle, *want, "{name}: idle"),
            Check::Busy(want) => assert_eq!(p.counts.busy, *want, "{name}: busy"),
            Check::Launching(want) => assert_eq!(p.counts.launching, *want, "{name}: launching"),
            Check::Terminating(want) => {
                assert_eq!(p.counts.terminating, *want, "{name}: terminating")
            }
            Check::Counts(want) => assert_eq!(&p.counts, want, "{name}: counts"),
            Check::Plan(want) => assert_eq!(p, &**want, "{name}: the whole plan"),
        }
    }
}
