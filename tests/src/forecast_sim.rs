//! A month of a WarmPool on a simulated clock, for `bench-forecast`: runs
//! arrive with a daily and weekly cycle, the operator's own plan
//! (`orca_operator::pool::plan`) decides each tick what to launch and
//! retire, and instances boot, serve runs and power off when idle too long
//! as the agent makes them. The idle floor is either a static `idle.min`, a
//! schedule's, the forecast warm-up (`orca_operator::pool::forecast`) or
//! a time-to-start objective (`orca_operator::pool::objective`), each fed
//! the simulated history. What it tells: runs that waited for a cold
//! launch and how long each waited, and the instance-hours paid.

use std::collections::{BTreeMap, HashSet, VecDeque};

use chrono::{DateTime, Datelike, Duration, Timelike, Utc};
use orca_operator::crd::{Forecast, Objective, StartTarget, WarmPoolSpec};
use orca_operator::pool::{
    drift::launch_hash,
    forecast::{floors, Demand, Floors},
    objective::{self, Bounds, History, StartTimes},
    plan::{Ec2Instance, Ec2State, Limits, Offering, PoolRow, Snapshot},
    schedule,
};

/// How often the simulated operator plans for its objective again.
const PLAN_EVERY: i64 = 600;

/// The share of the last hour's hand-outs within `target` seconds, by
/// source (a run handed an idle instance at once, or one that waited for a
/// launch), as the operator measures them; a source not seen counts as
/// the operator counts it (idle always in time, a launch never).
fn shares(recent: &VecDeque<(i64, bool, i64)>, target: i64) -> StartTimes {
    let share = |cold: bool, unseen: f64| {
        let of: Vec<i64> = recent
            .iter()
            .filter(|(_, c, _)| *c == cold)
            .map(|(_, _, w)| *w)
            .collect();
        if of.is_empty() {
            unseen
        } else {
            of.iter().filter(|w| **w <= target).count() as f64 / of.len() as f64
        }
    };
    StartTimes {
        idle: share(false, 1.0),
        reserve: 0.0,
        cold: share(true, 0.0),
    }
}

/// The simulated world's constants.
#[derive(Clone, Debug)]
pub struct World {
    /// When the simulation starts (a Monday, 00:00 UTC).
    pub start: DateTime<Utc>,
    /// Days simulated before the measured ones: the forecast's history.
    pub warm_up_days: i64,
    /// Days measured.
    pub days: i64,
    /// Seconds per tick: each tick one plan.
    pub tick_secs: i64,
    /// From launch to an idle row.
    pub boot_secs: i64,
    /// How long each run keeps its instance.
    pub run_secs: i64,
    /// Runs a minute at the busiest hour of a workday.
    pub peak_per_min: f64,
    /// Bursts of runs at once, a workday: how many, and how many runs each.
    pub bursts_per_day: u32,
    pub burst_runs: u32,
    /// Days (from the start) whose boots take `slow_boot_secs` instead: a
    /// new image that boots slower, for a week.
    pub slow_days: std::ops::Range<i64>,
    pub slow_boot_secs: i64,
    pub seed: u64,
}

impl World {
    /// From launch to an idle row, for a launch at `s`.
    pub fn boot_at(&self, s: i64) -> i64 {
        if self.slow_days.contains(&(s / 86_400)) {
            self.slow_boot_secs
        } else {
            self.boot_secs
        }
    }
}

impl Default for World {
    fn default() -> Self {
        World {
            start: DateTime::parse_from_rfc3339("2026-11-02T00:00:00Z")
                .expect("a time")
                .with_timezone(&Utc),
            warm_up_days: 14,
            days: 30,
            tick_secs: 30,
            boot_secs: 180,
            run_secs: 900,
            peak_per_min: 1.0,
            bursts_per_day: 0,
            burst_runs: 0,
            slow_days: 0..0,
            slow_boot_secs: 180,
            seed: 7,
        }
    }
}

/// The demand's cycle: runs a minute at `t` as a share of the peak. A
/// workday rises at 08:00 to the morning's peak, dips at lunch, has an
/// afternoon peak and falls off by 19:00; nights are quiet, weekends
/// quieter.
pub fn rate(t: DateTime<Utc>) -> f64 {
    let h = t.hour() as f64 + t.minute() as f64 / 60.0;
    let weekend = t.weekday().number_from_monday() >= 6;
    let day = match h {
        h if h < 7.0 => 0.02,
        h if h < 8.0 => 0.05,
        h if h < 9.0 => 0.6,
        h if h < 12.0 => 1.0,
        h if h < 13.0 => 0.4,
        h if h < 17.0 => 0.8,
        h if h < 19.0 => 0.3,
        _ => 0.05,
    };
    if weekend {
        day * 0.1
    } else {
        day
    }
}

/// A few lines of xorshift: the same arrivals for every policy.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Poisson-distributed with mean `mean` (Knuth's; the means here are
    /// small).
    fn poisson(&mut self, mean: f64) -> u32 {
        let limit = (-mean).exp();
        let (mut k, mut p) = (0, 1.0);
        loop {
            p *= self.next();
            if p <= limit {
                return k;
            }
            k += 1;
        }
    }
}

/// The runs' arrival times, in seconds from the start.
pub fn arrivals(w: &World) -> Vec<i64> {
    let mut rng = Rng(w.seed.max(1));
    let mut out = Vec::new();
    let total = (w.warm_up_days + w.days) * 86_400;
    let mut s = 0;
    while s < total {
        let t = w.start + Duration::seconds(s);
        let mean = rate(t) * w.peak_per_min * w.tick_secs as f64 / 60.0;
        for _ in 0..rng.poisson(mean) {
            out.push(s + (rng.next() * w.tick_secs as f64) as i64);
        }
        s += w.tick_secs;
    }
    // Bursts: on workdays, at random moments between 08:00 and 18:00.
    for day in 0..(w.warm_up_days + w.days) {
        let t = w.start + Duration::days(day);
        if t.weekday().number_from_monday() >= 6 {
            continue;
        }
        for _ in 0..w.bursts_per_day {
            let at = day * 86_400 + 8 * 3600 + (rng.next() * 10.0 * 3600.0) as i64;
            out.extend(std::iter::repeat_n(at, w.burst_runs as usize));
        }
    }
    out.sort_unstable();
    out
}

/// What one policy came to over the measured days.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    pub runs: u64,
    /// Runs that found no idle instance and waited for one.
    pub cold: u64,
    /// Instance-hours of every instance, booting, idle or busy.
    pub instance_hours: f64,
    /// Those of instances not serving a run (booting or idle): what the
    /// policy holds, the busy hours being the same under any.
    pub warm_hours: f64,
    /// Each measured run's wait for an instance, in seconds (to the tick),
    /// and the hour it arrived in (from the start).
    pub waits: Vec<(i64, i64)>,
}

impl Outcome {
    /// The share of runs that waited at most `secs`.
    pub fn within(&self, secs: i64) -> f64 {
        if self.waits.is_empty() {
            return 1.0;
        }
        let n = self.waits.iter().filter(|(_, w)| *w <= secs).count();
        n as f64 / self.waits.len() as f64
    }

    /// The share of hours with runs in which at least `goal` of them waited
    /// at most `secs`.
    pub fn hours_met(&self, secs: i64, goal: f64) -> f64 {
        let mut by_hour: BTreeMap<i64, (u32, u32)> = BTreeMap::new();
        for (hour, wait) in &self.waits {
            let e = by_hour.entry(*hour).or_default();
            e.0 += 1;
            e.1 += u32::from(*wait <= secs);
        }
        if by_hour.is_empty() {
            return 1.0;
        }
        let met = by_hour
            .values()
            .filter(|(n, ok)| f64::from(*ok) + 1e-9 >= goal * f64::from(*n))
            .count();
        met as f64 / by_hour.len() as f64
    }
}

struct Instance {
    id: String,
    launched: i64,
    /// An idle row since, or busy until; `None` while booting.
    row: Option<Row>,
    row_id: i64,
    uses: i64,
}

#[derive(Clone, Copy)]
enum Row {
    Idle(i64),
    Busy(i64),
}

/// Runs the simulation with `spec` (its `idle` and, if any, `forecast`).
pub fn simulate(w: &World, spec: &WarmPoolSpec, arrivals: &[i64]) -> Outcome {
    let hash = launch_hash(&spec.launch);
    let offering = Offering {
        instance_type: spec.launch.instance_types[0].clone(),
        subnet: spec.launch.subnet_ids[0].clone(),
        ..Offering::default()
    };
    let limits = Limits {
        leak_grace_secs: 3600.0,
        ..Limits::default()
    };
    let measured_from = w.warm_up_days * 86_400;
    let end = measured_from + w.days * 86_400;
    let mut out = Outcome::default();
    let mut instances: Vec<Instance> = Vec::new();
    let mut waiting: VecDeque<i64> = VecDeque::new();
    let mut next_id = 0i64;
    let mut history = Demand::new(spec.forecast.as_ref().map_or(300, |f| f.lead_seconds));
    let mut made: Option<(i64, Floors)> = None;
    // The objective's: demand in slices of one boot, read once an hour as
    // the operator reads it, and the last hour's hand-outs (when, whether
    // the run waited for a launch, its wait) for the shares within target.
    let mut counts = History {
        slice_secs: w.boot_secs,
        ..History::default()
    };
    let mut read: Option<(i64, Vec<Vec<u32>>)> = None;
    let mut planned: Option<(i64, objective::Choice)> = None;
    let mut recent: VecDeque<(i64, bool, i64)> = VecDeque::new();
    let mut next_arrival = 0usize;
    let mut s = 0i64;
    while s < end {
        let now = w.start + Duration::seconds(s);
        let measured = s >= measured_from;
        // Boots end, runs end, idle agents give up (idleSeconds, and the
        // minute after it).
        for i in &mut instances {
            match i.row {
                None if s - i.launched >= w.boot_at(i.launched) => i.row = Some(Row::Idle(s)),
                Some(Row::Busy(until)) if s >= until => i.row = Some(Row::Idle(s)),
                _ => {}
            }
        }
        instances.retain(
            |i| !matches!(i.row, Some(Row::Idle(since)) if s - since >= spec.idle_seconds + 60),
        );
        // This tick's arrivals; runs still waiting from before go first.
        let mut arrived: VecDeque<i64> = VecDeque::new();
        while next_arrival < arrivals.len() && arrivals[next_arrival] < s + w.tick_secs {
            let at = arrivals[next_arrival];
            next_arrival += 1;
            let epoch = (w.start + Duration::seconds(at)).timestamp();
            history.add(epoch);
            *counts
                .counts
                .entry(epoch.div_euclid(counts.slice_secs))
                .or_default() += 1;
            out.runs += u64::from(at >= measured_from);
            arrived.push_back(at);
        }
        for i in &mut instances {
            if !matches!(i.row, Some(Row::Idle(_))) {
                continue;
            }
            let (at, waited_for_launch) = match waiting.pop_front() {
                Some(at) => (at, true),
                None => match arrived.pop_front() {
                    Some(at) => (at, false),
                    None => break,
                },
            };
            let wait = (s - at).max(0);
            if at >= measured_from {
                out.waits.push(((at - measured_from) / 3600, wait));
            }
            recent.push_back((s, waited_for_launch, wait));
            i.row = Some(Row::Busy(s + w.run_secs));
            i.uses += 1;
            next_id += 1;
            i.row_id = next_id;
        }
        // Those that found no idle instance wait: cold starts.
        for at in arrived {
            out.cold += u64::from(at >= measured_from);
            waiting.push_back(at);
        }
        // The plan, with the idle range of the schedule under way, which
        // the forecast and the objective raise.
        let mut pass_spec = spec.clone();
        let active = schedule::active(&spec.schedules, now);
        pass_spec.idle = schedule::idle_of(spec, &active);
        if let Some(f) = &spec.forecast {
            if made.as_ref().is_none_or(|(at, _)| s - at >= 3600) {
                made = Some((s, floors(f, &history, now)));
            }
            if let Some((_, fl)) = &made {
                pass_spec.idle = fl.raise(&pass_spec.idle, now);
            }
        }
        while recent.front().is_some_and(|(at, _, _)| s - at >= 3600) {
            recent.pop_front();
        }
        if let Some(o) = &spec.objective {
            if read.as_ref().is_none_or(|(at, _)| s - at >= 3600) {
                read = Some((s, counts.by_hour(now, 4)));
            }
            if planned.as_ref().is_none_or(|(at, _)| s - at >= PLAN_EVERY) {
                let shares = shares(&recent, o.time_to_start.seconds);
                let h = &read.as_ref().expect("read just now").1;
                let bounds = Bounds {
                    idle: (
                        pass_spec.idle.min.max(0) as u32,
                        pass_spec.idle.max.max(0) as u32,
                    ),
                    stopped: None,
                    max_instances: spec.max_instances.max(0) as u32,
                    class: None,
                };
                let plan = |slices: &[u32]| {
                    objective::choose(slices, o.goal(), &shares, &bounds, o.stopped_cost())
                };
                let lead = Duration::seconds(w.boot_at(s));
                planned = Some((s, objective::at(h, now, lead, plan)));
            }
            if let Some((_, c)) = &planned {
                let idle = c.idle as i32;
                pass_spec.idle.min = pass_spec.idle.min.max(idle.min(pass_spec.idle.max));
            }
        }
        let snap = snapshot(&instances, &hash, &offering, s, w.start, waiting.len());
        let plan = orca_operator::pool::plan(&pass_spec, &snap, &BTreeMap::new(), &limits, now);
        let gone: HashSet<&str> = plan
            .retirements
            .iter()
            .map(|r| r.instance.as_str())
            .collect();
        instances.retain(|i| !gone.contains(i.id.as_str()));
        for b in &plan.launches {
            for _ in 0..b.count {
                next_id += 1;
                instances.push(Instance {
                    id: format!("i-{next_id}"),
                    launched: s,
                    row: None,
                    row_id: next_id,
                    uses: 0,
                });
            }
        }
        if measured {
            let hours = w.tick_secs as f64 / 3600.0;
            let busy = instances
                .iter()
                .filter(|i| matches!(i.row, Some(Row::Busy(_))))
                .count();
            out.instance_hours += instances.len() as f64 * hours;
            out.warm_hours += (instances.len() - busy) as f64 * hours;
        }
        s += w.tick_secs;
    }
    out
}

fn snapshot(
    instances: &[Instance],
    hash: &str,
    offering: &Offering,
    s: i64,
    start: DateTime<Utc>,
    waiting: usize,
) -> Snapshot {
    let mut snap = Snapshot {
        demand: waiting as i64,
        ..Snapshot::default()
    };
    let mut ours = HashSet::new();
    for i in instances {
        snap.instances.push(Ec2Instance {
            id: i.id.clone(),
            state: Ec2State::Running,
            launched: start + Duration::seconds(i.launched),
            offering: offering.clone(),
            launch: Some(hash.to_string()),
            image: None,
            template_version: None,
        });
        match i.row {
            None => {
                ours.insert(i.id.clone());
            }
            Some(row) => snap.rows.push(PoolRow {
                id: i.row_id,
                instance: i.id.clone(),
                run: match row {
                    Row::Busy(_) => Some(i.row_id),
                    Row::Idle(_) => None,
                },
                idle_secs: match row {
                    Row::Idle(since) => Some((s - since) as f64),
                    Row::Busy(_) => None,
                },
                polled_secs: Some(0.0),
                uses: i.uses,
                claim: false,
                reserved: false,
                woken_secs: None,
                noticed: false,
                interrupted: false,
            }),
        }
    }
    snap.ours = ours;
    snap
}

/// The simulated pool's spec: idle `min..=max`, at most `max_instances`,
/// the defaults of a WarmPool otherwise (a boot time-out of 300 s).
pub fn spec(min: i32, max: i32, max_instances: i32) -> WarmPoolSpec {
    let mut s = crate::warm::spec(
        "http://127.0.0.1:9",
        &["t3.micro"],
        &["subnet-1".into()],
        min,
        max,
        max_instances,
    );
    s.boot_timeout_seconds = 300;
    s
}

/// `spec` with a time-to-start objective: `percentile` % of runs within
/// `seconds`.
pub fn with_objective(mut spec: WarmPoolSpec, percentile: i32, seconds: i64) -> WarmPoolSpec {
    spec.objective = Some(Objective {
        time_to_start: StartTarget {
            percentile,
            seconds,
        },
        stopped_cost_ratio: None,
    });
    spec
}

/// `spec` with a schedule: `idle.min` = `min` on workdays from 08:00 for
/// 11 hours.
pub fn with_workday_schedule(mut spec: WarmPoolSpec, min: i32) -> WarmPoolSpec {
    use orca_operator::crd::{IdleRange, IdleSchedule, Period};
    spec.schedules = vec![IdleSchedule {
        period: Period {
            cron: "0 8 * * 1-5".into(),
            timezone: "UTC".into(),
            duration: "11h".into(),
        },
        idle: IdleRange {
            min,
            max: spec.idle.max,
        },
    }];
    spec
}

/// `spec` with the forecast warm-up (its defaults but the lead, one boot).
pub fn with_forecast(mut spec: WarmPoolSpec, w: &World) -> WarmPoolSpec {
    spec.forecast = Some(Forecast {
        lead_seconds: w.boot_secs,
        ..Forecast::default()
    });
    spec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_run_is_served_and_a_higher_floor_waits_less_and_costs_more() {
        let w = World {
            warm_up_days: 0,
            days: 2,
            ..World::default()
        };
        let arrivals = arrivals(&w);
        assert!(arrivals.len() > 500, "{}", arrivals.len());
        let spec = |min| spec(min, 12, 200);
        let low = simulate(&w, &spec(0), &arrivals);
        let high = simulate(&w, &spec(6), &arrivals);
        assert_eq!(low.runs, arrivals.len() as u64);
        assert!(high.cold < low.cold, "{high:?} {low:?}");
        assert!(high.instance_hours > low.instance_hours, "{high:?} {low:?}");
    }
}
