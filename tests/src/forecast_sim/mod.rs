//! A month of a WarmPool on a simulated clock, for `bench forecast`,
//! `bench objective` and the objective's tests against what demand does:
//! runs arrive with a daily and weekly cycle (and, as a world says, busier
//! days, bursts, one-off surges, slower boots, spot reclaims), the
//! operator's own plan (`orca_operator::warmpool::plan`) decides each tick what
//! to launch and retire, and instances boot, serve runs and power off when
//! idle too long as the agent makes them. The idle floor is either a static
//! `idle.min`, a schedule's, the forecast warm-up
//! (`orca_operator::warmpool::forecast`) or a time-to-start objective
//! (`orca_operator::warmpool::objective`: its bounds, choice and raise), each
//! fed the simulated history as the operator reads it. What it tells: runs
//! that waited for a cold launch and how long each waited, the
//! instance-hours paid, and launches the plan took back unused.

use std::collections::{BTreeMap, HashSet, VecDeque};

use chrono::{DateTime, Datelike, Duration, Timelike, Utc};
use orca_db::pool::Source;
use orca_operator::crd::{Forecast, Objective, StartTarget, WarmPoolSpec};
use orca_operator::warmpool::{
    drift::launch_hash,
    forecast::{floors, Demand, Floors},
    objective::{self, StartTimes},
    plan::{Ec2Instance, Ec2State, Limits, Offering, PoolRow, Snapshot},
    schedule,
};

/// How often the simulated operator plans for its objective again.
const PLAN_EVERY: i64 = 600;

/// The share of the last hour's hand-outs within `target` seconds, by
/// source (a run handed an idle instance at once, one started from the
/// reserve for it, or one that waited for a launch), as the operator
/// measures them; a source not seen counts as the operator counts it
/// (idle always in time, the reserve and a launch never).
fn shares(recent: &VecDeque<(i64, Source, i64)>, target: i64) -> StartTimes {
    let share = |source: Source, unseen: f64| {
        let of: Vec<i64> = recent
            .iter()
            .filter(|(_, s, _)| *s == source)
            .map(|(_, _, w)| *w)
            .collect();
        if of.is_empty() {
            unseen
        } else {
            of.iter().filter(|w| **w <= target).count() as f64 / of.len() as f64
        }
    };
    StartTimes::new(
        share(Source::Idle, 1.0),
        share(Source::Reserve, 0.0),
        share(Source::Cold, 0.0),
    )
}

/// The simulated world's constants.
#[derive(Clone, Debug)]
pub struct World {
    /// When the simulation starts (a Monday, 00:00 UTC).
    start: DateTime<Utc>,
    /// Days simulated before the measured ones: the forecast's history.
    warm_up_days: i64,
    /// Days measured.
    days: i64,
    /// Seconds per tick: each tick one plan.
    tick_secs: i64,
    /// From launch to an idle row.
    boot_secs: i64,
    /// How long each run keeps its instance.
    run_secs: i64,
    /// Runs a minute at the busiest hour of a workday.
    peak_per_min: f64,
    /// Bursts of runs at once, a workday: how many, and how many runs each.
    bursts_per_day: u32,
    burst_runs: u32,
    /// Days (from the start) whose boots take `slow_boot_secs` instead: a
    /// new image that boots slower, for a week.
    slow_days: std::ops::Range<i64>,
    slow_boot_secs: i64,
    /// From a reserve instance's start to its agent back, idle.
    reserve_start_secs: i64,
    /// Days (from the start) whose demand is `busy_factor` times the
    /// cycle's.
    busy_days: std::ops::Range<i64>,
    busy_factor: f64,
    /// One-off bursts beyond the daily ones: the second (from the start)
    /// and how many runs at once.
    surges: Vec<(i64, u32)>,
    /// Spot reclaims: the second (from the start) and how many instances
    /// EC2 takes back, the idle ones first, then those booting.
    reclaims: Vec<(i64, u32)>,
    seed: u64,
}

impl World {
    /// These, with `warm_up_days` set.
    pub fn with_warm_up_days(self, warm_up_days: i64) -> Self {
        World {
            warm_up_days,
            ..self
        }
    }

    /// These, with `days` set.
    pub fn with_days(self, days: i64) -> Self {
        World { days, ..self }
    }

    /// These, with `tick_secs` set.
    pub fn with_tick_secs(self, tick_secs: i64) -> Self {
        World { tick_secs, ..self }
    }

    /// These, with `peak_per_min` set.
    pub fn with_peak_per_min(self, peak_per_min: f64) -> Self {
        World {
            peak_per_min,
            ..self
        }
    }

    /// These, with `bursts_per_day` set.
    pub fn with_bursts_per_day(self, bursts_per_day: u32) -> Self {
        World {
            bursts_per_day,
            ..self
        }
    }

    /// These, with `burst_runs` set.
    pub fn with_burst_runs(self, burst_runs: u32) -> Self {
        World { burst_runs, ..self }
    }

    /// These, with `slow_days` set.
    pub fn with_slow_days(self, slow_days: std::ops::Range<i64>) -> Self {
        World { slow_days, ..self }
    }

    /// These, with `slow_boot_secs` set.
    pub fn with_slow_boot_secs(self, slow_boot_secs: i64) -> Self {
        World {
            slow_boot_secs,
            ..self
        }
    }

    /// These, with `seed` set.
    pub fn with_seed(self, seed: u64) -> Self {
        World { seed, ..self }
    }
}

impl World {
    /// When the simulation starts (a Monday, 00:00 UTC).
    pub fn start(&self) -> DateTime<Utc> {
        self.start
    }

    /// Days measured.
    pub fn days(&self) -> i64 {
        self.days
    }

    /// From launch to an idle row.
    pub fn boot_secs(&self) -> i64 {
        self.boot_secs
    }
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
            reserve_start_secs: 45,
            busy_days: 0..0,
            busy_factor: 1.0,
            surges: Vec::new(),
            reclaims: Vec::new(),
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
        let busy = if w.busy_days.contains(&(s / 86_400)) {
            w.busy_factor
        } else {
            1.0
        };
        let mean = rate(t) * busy * w.peak_per_min * w.tick_secs as f64 / 60.0;
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
    for &(at, runs) in &w.surges {
        out.extend(std::iter::repeat_n(at, runs as usize));
    }
    out.sort_unstable();
    out
}

/// What one policy came to over the measured days.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    runs: u64,
    /// Runs that found no idle instance and waited for one.
    cold: u64,
    /// Instance-hours of every running instance, booting, idle or busy.
    instance_hours: f64,
    /// Those of instances not serving a run (booting or idle): what the
    /// policy holds, the busy hours being the same under any.
    warm_hours: f64,
    /// Instance-hours of the stopped reserve (its volumes' only), apart:
    /// not in the two above.
    stopped_hours: f64,
    /// Each measured run's wait for an instance, in seconds (to the tick),
    /// and the hour it arrived in (from the start of the measured days).
    waits: Vec<(i64, i64)>,
    /// Instances the plan retired that had never served a run, but for idle
    /// beyond the spec's own `idle.max` (after a burst, what was launched
    /// for its runs and found them served goes, as the user's ceiling
    /// says): a launch one plan made and a later one took back for nothing.
    churn: u64,
}

impl Outcome {
    /// How many runs the weeks measured held.
    pub fn runs(&self) -> u64 {
        self.runs
    }

    /// Runs that found no idle instance and waited for one.
    pub fn cold(&self) -> u64 {
        self.cold
    }

    /// Instance-hours of every running instance, booting, idle or busy.
    pub fn instance_hours(&self) -> f64 {
        self.instance_hours
    }

    /// Those of instances not serving a run (booting or idle): what the
    /// policy holds, the busy hours being the same under any.
    pub fn warm_hours(&self) -> f64 {
        self.warm_hours
    }

    /// Instance-hours of the stopped reserve (its volumes' only), apart:
    /// not in the two above.
    pub fn stopped_hours(&self) -> f64 {
        self.stopped_hours
    }
}

impl Outcome {
    /// The share of runs that waited at most `secs`.
    pub fn within(&self, secs: i64) -> f64 {
        let (late, runs) = self.late(0..i64::MAX, secs);
        if runs == 0 {
            return 1.0;
        }
        1.0 - late as f64 / runs as f64
    }

    /// Of the runs that arrived in `hours` (from the start of the measured
    /// days), how many waited longer than `secs`, and how many there were.
    pub fn late(&self, hours: std::ops::Range<i64>, secs: i64) -> (u64, u64) {
        let of = self.waits.iter().filter(|(h, _)| hours.contains(h));
        of.fold((0, 0), |(late, runs), (_, w)| {
            (late + u64::from(*w > secs), runs + 1)
        })
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
    /// Idle after a start from the reserve, not handed a run since.
    woken: bool,
}

#[derive(Clone, Copy)]
enum Row {
    Idle(i64),
    Busy(i64),
    /// In the stopped reserve.
    Stopped,
    /// Started from the reserve at, its agent not back yet.
    Waking(i64),
}

/// What the simulated objective reads and plans from, as the operator's
/// observer does: the demand in slices of one cold start as measured
/// (counted again when that changes), read once an hour; the last hour's
/// hand-outs (when, whether the run waited for a launch, its wait) for the
/// shares within the target; its last choice.
struct Planner {
    epochs: Vec<i64>,
    counts: Demand,
    read: Option<(i64, Vec<Vec<u32>>)>,
    planned: Option<(i64, objective::Choice)>,
    recent: VecDeque<(i64, Source, i64)>,
}

impl Planner {
    fn new() -> Planner {
        Planner {
            epochs: Vec::new(),
            counts: Demand::new(300),
            read: None,
            planned: None,
            recent: VecDeque::new(),
        }
    }

    fn arrived(&mut self, epoch: i64) {
        self.epochs.push(epoch);
        self.counts.add(epoch);
    }

    /// The slice the operator reads in: the `goal` quantile of the last
    /// hour's waits for a launch, 300 s before any, within 30 to 900 s.
    fn slice(&self, goal: f64) -> i64 {
        let mut cold: Vec<i64> = self
            .recent
            .iter()
            .filter(|(_, source, _)| *source == Source::Cold)
            .map(|(_, _, w)| *w)
            .collect();
        if cold.is_empty() {
            return 300;
        }
        cold.sort_unstable();
        let rank = ((goal * cold.len() as f64).ceil() as usize).clamp(1, cold.len());
        cold[rank - 1].clamp(30, 900)
    }

    /// `pass_spec` raised by the objective `o` at `s` (`now`), planning
    /// again every [`PLAN_EVERY`] as the operator's pass does.
    fn raise(&mut self, o: &Objective, pass_spec: &mut WarmPoolSpec, s: i64, now: DateTime<Utc>) {
        while self.recent.front().is_some_and(|(at, _, _)| s - at >= 3600) {
            self.recent.pop_front();
        }
        let slice = self.slice(o.goal());
        if self.read.as_ref().is_none_or(|(at, _)| s - at >= 3600) {
            if slice != self.counts.slice_secs() {
                self.counts = Demand::new(slice);
                for e in std::mem::take(&mut self.epochs) {
                    self.arrived(e);
                }
            }
            self.read = Some((s, objective::by_hour(&self.counts, now, 4)));
        }
        if self
            .planned
            .as_ref()
            .is_none_or(|(at, _)| s - at >= PLAN_EVERY)
        {
            let shares = shares(&self.recent, o.time_to_start.seconds);
            let h = &self.read.as_ref().expect("read just now").1;
            let bounds = objective::bounds(pass_spec, None);
            let plan = |slices: &[u32]| {
                objective::choose(slices, o.goal(), &shares, &bounds, o.stopped_cost())
            };
            let lead = Duration::seconds(slice);
            self.planned = Some((s, objective::at(h, now, lead, plan)));
        }
        if let Some((_, c)) = &self.planned {
            objective::raise(pass_spec, c);
        }
    }
}

/// The simulated pool: its instances, the runs waiting for one, and the
/// policy's state.
struct Sim<'a> {
    w: &'a World,
    spec: &'a WarmPoolSpec,
    hash: String,
    offering: Offering,
    measured_from: i64,
    out: Outcome,
    instances: Vec<Instance>,
    waiting: VecDeque<i64>,
    next_id: i64,
    history: Demand,
    made: Option<(i64, Floors)>,
    planner: Planner,
}

/// Runs the simulation with `spec` (its `idle` and, if any, `forecast`
/// and `objective`).
pub fn simulate(w: &World, spec: &WarmPoolSpec, arrivals: &[i64]) -> Outcome {
    let mut sim = Sim {
        w,
        spec,
        hash: launch_hash(&spec.launch),
        offering: Offering::new(
            spec.launch.instance_types[0].clone(),
            spec.launch.subnet_ids[0].clone(),
            false,
        ),
        measured_from: w.warm_up_days * 86_400,
        out: Outcome::default(),
        instances: Vec::new(),
        waiting: VecDeque::new(),
        next_id: 0,
        history: Demand::new(spec.forecast.as_ref().map_or(300, |f| f.lead_seconds)),
        made: None,
        planner: Planner::new(),
    };
    let end = sim.measured_from + w.days * 86_400;
    let mut next_arrival = 0usize;
    let mut s = 0i64;
    while s < end {
        sim.agents(s);
        sim.reclaim(s);
        let first = next_arrival;
        while next_arrival < arrivals.len() && arrivals[next_arrival] < s + w.tick_secs {
            next_arrival += 1;
        }
        sim.hand_out(s, &arrivals[first..next_arrival]);
        sim.plan(s);
        s += w.tick_secs;
    }
    sim.out
}

impl Sim<'_> {
    /// Boots end, runs end, idle agents give up (idleSeconds, and the
    /// minute after it).
    fn agents(&mut self, s: i64) {
        for i in &mut self.instances {
            match i.row {
                None if s - i.launched >= self.w.boot_at(i.launched) => i.row = Some(Row::Idle(s)),
                Some(Row::Busy(until)) if s >= until => i.row = Some(Row::Idle(s)),
                Some(Row::Waking(since)) if s - since >= self.w.reserve_start_secs => {
                    i.row = Some(Row::Idle(s));
                    i.woken = true;
                }
                _ => {}
            }
        }
        let idle_secs = self.spec.idle_seconds + 60;
        self.instances
            .retain(|i| !matches!(i.row, Some(Row::Idle(since)) if s - since >= idle_secs));
    }

    /// Spot reclaims due in this tick: idle instances go first, then those
    /// booting.
    fn reclaim(&mut self, s: i64) {
        let tick = s..s + self.w.tick_secs;
        for &(_, n) in self.w.reclaims.iter().filter(|(at, _)| tick.contains(at)) {
            for booting in [false, true] {
                let mut left = n;
                self.instances.retain(|i| {
                    let hit = left > 0
                        && match i.row {
                            Some(Row::Idle(_)) => !booting,
                            None => booting,
                            _ => false,
                        };
                    left -= u32::from(hit);
                    !hit
                });
            }
        }
    }

    /// This tick's arrivals: runs still waiting from before go first; those
    /// that find no idle instance wait (cold starts).
    fn hand_out(&mut self, s: i64, arrivals: &[i64]) {
        let mut arrived: VecDeque<i64> = VecDeque::new();
        for &at in arrivals {
            let epoch = (self.w.start + Duration::seconds(at)).timestamp();
            self.history.add(epoch);
            self.planner.arrived(epoch);
            self.out.runs += u64::from(at >= self.measured_from);
            arrived.push_back(at);
        }
        for i in &mut self.instances {
            if !matches!(i.row, Some(Row::Idle(_))) {
                continue;
            }
            let (at, waited) = match self.waiting.pop_front() {
                Some(at) => (at, true),
                None => match arrived.pop_front() {
                    Some(at) => (at, false),
                    None => break,
                },
            };
            let source = match (waited, i.woken) {
                (_, true) => Source::Reserve,
                (true, false) => Source::Cold,
                (false, false) => Source::Idle,
            };
            let wait = (s - at).max(0);
            if at >= self.measured_from {
                self.out
                    .waits
                    .push(((at - self.measured_from) / 3600, wait));
            }
            self.planner.recent.push_back((s, source, wait));
            i.row = Some(Row::Busy(s + self.w.run_secs));
            i.woken = false;
            i.uses += 1;
            self.next_id += 1;
            i.row_id = self.next_id;
        }
        for at in arrived {
            self.out.cold += u64::from(at >= self.measured_from);
            self.waiting.push_back(at);
        }
    }

    /// The plan, with the idle range of the schedule under way, which the
    /// forecast and the objective raise; what it retires goes, what it
    /// launches boots.
    fn plan(&mut self, s: i64) {
        let now = self.w.start + Duration::seconds(s);
        let spec = self.spec;
        let mut pass_spec = spec.clone();
        let active = schedule::active(&spec.schedules, now);
        pass_spec.idle = schedule::idle_of(spec, &active);
        if let Some(f) = &spec.forecast {
            if self.made.as_ref().is_none_or(|(at, _)| s - at >= 3600) {
                self.made = Some((s, floors(f, &self.history, now)));
            }
            if let Some((_, fl)) = &self.made {
                pass_spec.idle = fl.raise(&pass_spec.idle, now);
            }
        }
        if let Some(o) = &spec.objective {
            self.planner.raise(o, &mut pass_spec, s, now);
        }
        let snap = snapshot(
            &self.instances,
            &self.hash,
            &self.offering,
            s,
            self.w.start,
            self.waiting.len(),
        );
        let limits = Limits::default().with_leak_grace_secs(3600.0);
        let plan = orca_operator::warmpool::plan(&pass_spec, &snap, &BTreeMap::new(), &limits, now);
        let gone: HashSet<&str> = plan.retirements().iter().map(|r| r.instance()).collect();
        let measured = s >= self.measured_from;
        // Churn: a retired instance that never served a run, retired below
        // the spec's own idle.max (a ceiling the user set is the user's).
        let ceiling_lowered = pass_spec.idle.max < spec.idle.max;
        self.instances.retain(|i| {
            let retired = gone.contains(i.id.as_str());
            let users_ceiling = !ceiling_lowered
                && plan.retirements().iter().any(|r| {
                    r.instance() == i.id
                        && r.reason() == orca_operator::warmpool::plan::Reason::IdleBeyondMax
                });
            self.out.churn += u64::from(retired && measured && i.uses == 0 && !users_ceiling);
            !retired
        });
        let stops: HashSet<&str> = plan.stops().iter().map(|w| w.instance()).collect();
        let starts: HashSet<&str> = plan.starts().iter().map(|w| w.instance()).collect();
        for i in &mut self.instances {
            if stops.contains(i.id.as_str()) {
                i.row = Some(Row::Stopped);
                i.woken = false;
            } else if starts.contains(i.id.as_str()) {
                i.row = Some(Row::Waking(s));
            }
        }
        for b in plan.launches() {
            for _ in 0..b.count() {
                self.next_id += 1;
                self.instances.push(Instance {
                    id: format!("i-{}", self.next_id),
                    launched: s,
                    row: None,
                    row_id: self.next_id,
                    uses: 0,
                    woken: false,
                });
            }
        }
        if measured {
            let hours = self.w.tick_secs as f64 / 3600.0;
            let all = self.instances.len();
            let count =
                |f: fn(&Option<Row>) -> bool| self.instances.iter().filter(|i| f(&i.row)).count();
            let busy = count(|r| matches!(r, Some(Row::Busy(_))));
            let stopped = count(|r| matches!(r, Some(Row::Stopped)));
            self.out.instance_hours += (all - stopped) as f64 * hours;
            self.out.warm_hours += (all - busy - stopped) as f64 * hours;
            self.out.stopped_hours += stopped as f64 * hours;
        }
    }
}

fn snapshot(
    instances: &[Instance],
    hash: &str,
    offering: &Offering,
    s: i64,
    start: DateTime<Utc>,
    waiting: usize,
) -> Snapshot {
    let (mut listed, mut rows, mut ours) = (Vec::new(), Vec::new(), HashSet::new());
    for i in instances {
        listed.push(
            Ec2Instance::bare(
                &i.id,
                match i.row {
                    Some(Row::Stopped) => Ec2State::Stopped,
                    _ => Ec2State::Running,
                },
                start + Duration::seconds(i.launched),
            )
            .with_offering(offering.clone())
            .with_launch(Some(hash.to_string())),
        );
        match i.row {
            None => {
                ours.insert(i.id.clone());
            }
            Some(row) => rows.push(
                PoolRow::new(i.row_id, i.id.clone())
                    .with_run(match row {
                        Row::Busy(_) => Some(i.row_id),
                        _ => None,
                    })
                    .with_idle_secs(match row {
                        Row::Idle(since) => Some((s - since) as f64),
                        _ => None,
                    })
                    .with_polled_secs(Some(0.0))
                    .with_uses(i.uses)
                    .with_reserved(matches!(row, Row::Stopped))
                    .with_woken_secs(match row {
                        Row::Waking(since) => Some((s - since) as f64),
                        _ => None,
                    }),
            ),
        }
    }
    Snapshot::default()
        .with_demand(waiting as i64)
        .with_instances(listed)
        .with_rows(rows)
        .with_ours(ours)
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
        prices: Default::default(),
    });
    spec
}

/// `spec` with a stopped reserve of `min` to `max` instances.
pub fn with_reserve(mut spec: WarmPoolSpec, min: i32, max: i32) -> WarmPoolSpec {
    spec.stopped = Some(orca_operator::crd::StoppedRange {
        min,
        max: Some(max),
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

#[cfg(test)]
mod objective_tests;
