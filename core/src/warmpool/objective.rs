//! Sizing a pool to a time-to-start objective (`spec.objective`): for the
//! hour ahead, how many idle and how many stopped instances to keep so that
//! the share of runs the objective names starts within its target, at the
//! least cost. Pure: the demand history, the start times measured by
//! source and the clock come in.
//!
//! The model. Runs that arrive within one cold start of each other (a
//! slice) cannot be served by a launch made for the first of them: of the
//! `n` runs of a slice, the first `idle` are handed an idle instance, the
//! next `stopped` one started from the reserve, the rest wait for a cold
//! launch. Each source starts a run within the target for the share of
//! its starts measured so ([`StartTimes`]). An hour of the week is planned
//! from the slices of that hour in the weeks of history: the runs that
//! would have waited longer than the target, over all the runs. Of the
//! holdings that meet the objective within the spec's bounds, the
//! cheapest: an idle instance costs its running seconds, a stopped one
//! its volumes' (`stoppedCostRatio` of that); the launches that replace
//! what runs took are the same whatever is held, and are left out.
//!
//! The model, the search over it, and the hours
//! of the week it is fed.

use chrono::{DateTime, Datelike, Duration, TimeZone, Timelike, Utc};

use super::forecast::Demand;
use crate::crd::WarmPoolSpec;

const WEEK_SECS: i64 = 7 * 24 * 3600;

/// The share of each source's starts that were within the target, 0 to 1
/// (an idle hand-out almost always is; a source never measured counts as
/// never within, so the plan relies on it only once it has been seen).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StartTimes {
    idle: f64,
    reserve: f64,
    cold: f64,
}

impl StartTimes {
    /// The share of idle hand-outs that started within the target.
    pub fn idle(&self) -> f64 {
        self.idle
    }

    /// The share of starts from the stopped reserve within the target.
    pub fn reserve(&self) -> f64 {
        self.reserve
    }

    /// The share of cold launches within the target.
    pub fn cold(&self) -> f64 {
        self.cold
    }

    /// Of its parts, as the fields say.
    pub const fn new(idle: f64, reserve: f64, cold: f64) -> Self {
        StartTimes {
            idle,
            reserve,
            cold,
        }
    }
}

/// What the plan may choose from: the spec's (or the moment's) idle and
/// stopped ranges, and the instances it may hold at most.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bounds {
    idle: (u32, u32),
    /// `None` without `spec.stopped`: no reserve.
    stopped: Option<(u32, u32)>,
    max_instances: u32,
    /// What the class's limits let the pool hold idle and stopped at most
    /// (what it holds now and the room they leave), with the limit that
    /// leaves the least; `None`: no class limit applies.
    class: Option<(u32, &'static str)>,
}

impl Bounds {
    /// The idle range (min, max) the plan may choose within.
    pub fn idle(&self) -> (u32, u32) {
        self.idle
    }

    /// The most instances the pool may hold (`spec.maxInstances`).
    pub fn max_instances(&self) -> u32 {
        self.max_instances
    }

    /// Of its parts, as the fields say.
    pub fn new(
        idle: (u32, u32),
        stopped: Option<(u32, u32)>,
        max_instances: u32,
        class: Option<(u32, &'static str)>,
    ) -> Self {
        Bounds {
            idle,
            stopped,
            max_instances,
            class,
        }
    }

    /// The most instances the pool may hold idle and stopped: maxInstances,
    /// or less where the class's limits leave less.
    fn most(&self) -> u32 {
        self.class
            .map_or(self.max_instances, |(n, _)| n.min(self.max_instances))
    }
}

/// What the objective may choose from at a moment: `spec`'s idle range
/// (the schedule's and the forecast's floor in it), its stopped range,
/// maxInstances, and what the class's limits let it hold (`class`).
pub fn bounds(spec: &WarmPoolSpec, class: Option<(u32, &'static str)>) -> Bounds {
    let n = |v: i32| u32::try_from(v).unwrap_or(0);
    Bounds {
        idle: (n(spec.idle.min), n(spec.idle.max).max(n(spec.idle.min))),
        stopped: spec.stopped.as_ref().map(|s| {
            let max = s.max.unwrap_or(s.min).max(s.min);
            (n(s.min), n(max))
        }),
        max_instances: n(spec.max_instances),
        class,
    }
}

/// `spec` with the floors `choice` keeps: the objective only adds, and
/// only within the ranges — a ceiling it lowered would retire, the next
/// hour, what it launched this one.
pub fn raise(spec: &mut WarmPoolSpec, choice: &Choice) {
    let idle = i32::try_from(choice.idle).unwrap_or(i32::MAX);
    spec.idle.min = spec.idle.min.max(idle.min(spec.idle.max));
    if let Some(stopped) = spec.stopped.as_mut() {
        let max = stopped.max.unwrap_or(stopped.min);
        let want = i32::try_from(choice.stopped).unwrap_or(i32::MAX);
        stopped.min = stopped.min.max(want.min(max));
    }
}

/// The limit that keeps a pool from its objective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    /// `idle.max` (or `stopped.max`): more would meet it.
    IdleMax,
    StoppedMax,
    /// `maxInstances`.
    MaxInstances,
    /// One of the class's limits (named): the room its other pools and
    /// namespaces leave.
    Class(&'static str),
    /// Every source that could hold more is slower than the target: the
    /// reserve's starts and the cold launches.
    SourcesTooSlow,
}

impl Binding {
    /// For the `ObjectiveUnreachable` condition: what binds, in the spec's
    /// words.
    pub fn describe(self) -> String {
        match self {
            Binding::IdleMax => "idle.max".into(),
            Binding::StoppedMax => "stopped.max".into(),
            Binding::MaxInstances => "maxInstances".into(),
            Binding::Class(limit) => format!("the WarmPoolClass's {limit}"),
            Binding::SourcesTooSlow => "the start times: more would wait for the stopped \
                 reserve or a cold launch, both slower than the target"
                .into(),
        }
    }
}

/// What to keep for an hour.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Choice {
    idle: u32,
    stopped: u32,
    /// The share of the hour's runs (in its weeks of history) that would
    /// have started within the target, 0 to 1; 1 without runs.
    met: f64,
    /// What the choice holds an hour, in instance-seconds of a running
    /// instance.
    cost: f64,
    /// Why the objective is not met, when it is not.
    binding: Option<Binding>,
}

impl Choice {
    /// Idle instances to keep.
    pub fn idle(&self) -> u32 {
        self.idle
    }

    /// Stopped instances to keep in the reserve.
    pub fn stopped(&self) -> u32 {
        self.stopped
    }

    /// The share of the hour's runs (in its weeks of history) that would
    /// have started within the target, 0 to 1; 1 without runs.
    pub fn met(&self) -> f64 {
        self.met
    }

    /// Why the objective is not met, when it is not.
    pub fn binding(&self) -> Option<Binding> {
        self.binding
    }
}

/// The runs of one slice that wait longer than the target with `idle` and
/// `stopped` held: each source's share of its runs beyond the target.
fn late(n: u32, idle: u32, stopped: u32, starts: &StartTimes) -> f64 {
    let from_idle = n.min(idle);
    let from_reserve = (n - from_idle).min(stopped);
    let cold = n - from_idle - from_reserve;
    f64::from(from_idle) * (1.0 - starts.idle)
        + f64::from(from_reserve) * (1.0 - starts.reserve)
        + f64::from(cold) * (1.0 - starts.cold)
}

/// The share of the runs of `slices` started within the target with
/// `idle` and `stopped` held; 1 without runs.
pub fn met(slices: &[u32], idle: u32, stopped: u32, starts: &StartTimes) -> f64 {
    let runs: u32 = slices.iter().sum();
    if runs == 0 {
        return 1.0;
    }
    let late: f64 = slices.iter().map(|&n| late(n, idle, stopped, starts)).sum();
    1.0 - late / f64::from(runs)
}

/// The cheapest holdings within `bounds` whose runs of `slices` start
/// within the target for at least `goal` of them (0 to 1); when none does,
/// the one that meets most of it, the cheapest of those, with the limit
/// that binds.
pub fn choose(
    slices: &[u32],
    goal: f64,
    starts: &StartTimes,
    bounds: &Bounds,
    stopped_cost: f64,
) -> Choice {
    let cost =
        |idle: u32, stopped: u32| 3600.0 * (f64::from(idle) + f64::from(stopped) * stopped_cost);
    let choice = |idle: u32, stopped: u32| Choice {
        idle,
        stopped,
        met: met(slices, idle, stopped, starts),
        cost: cost(idle, stopped),
        binding: None,
    };
    let (idle_min, idle_max) = bounds.idle;
    let (stopped_min, stopped_max) = bounds.stopped.unwrap_or((0, 0));
    // Holding more than the busiest slice's runs of either kind serves no
    // run more: the search stops there, and takes at most STOPPED_STEPS
    // reserve sizes and a bisection of idle counts for each, however wide
    // the ranges a spec gives (10 000 each at most).
    let peak = slices.iter().copied().max().unwrap_or(0);
    let stopped_top = stopped_max.min(stopped_min.max(peak));
    let step = ((stopped_top.saturating_sub(stopped_min)) / STOPPED_STEPS).max(1) as usize;
    let mut best: Option<Choice> = None;
    let mut closest: Option<Choice> = None;
    let most = bounds.most();
    for stopped in (stopped_min..=stopped_top).step_by(step) {
        if stopped + idle_min > most {
            break;
        }
        let top = idle_max
            .min(most - stopped)
            .min(idle_min.max(peak))
            .max(idle_min);
        let most = choice(top, stopped);
        if most.met + 1e-9 < goal {
            let nearer = closest.is_none_or(|c| {
                most.met > c.met + 1e-9 || (most.met + 1e-9 >= c.met && most.cost < c.cost)
            });
            if nearer {
                closest = Some(most);
            }
            continue;
        }
        // The fewest idle that meet it: more idle never starts fewer runs
        // in time.
        let (mut low, mut high) = (idle_min, top);
        while low < high {
            let mid = low + (high - low) / 2;
            if choice(mid, stopped).met + 1e-9 >= goal {
                high = mid;
            } else {
                low = mid + 1;
            }
        }
        let found = choice(low, stopped);
        if best.is_none_or(|b| found.cost < b.cost) {
            best = Some(found);
        }
    }
    if let Some(b) = best {
        return b;
    }
    let mut c = closest.unwrap_or_else(|| choice(idle_min, stopped_min));
    c.binding = Some(binding(slices, goal, starts, bounds, &c));
    c
}

/// The most reserve sizes [`choose`] tries.
const STOPPED_STEPS: u32 = 256;

/// Which limit keeps `closest` from `goal`: the one that, lifted, would
/// let more runs start within the target.
fn binding(
    slices: &[u32],
    goal: f64,
    starts: &StartTimes,
    bounds: &Bounds,
    closest: &Choice,
) -> Binding {
    let peak = slices.iter().copied().max().unwrap_or(0);
    let unbounded = met(slices, peak, 0, starts);
    if unbounded + 1e-9 < goal {
        // Even an idle instance for every run of every slice falls short:
        // the idle hand-outs themselves are slow.
        return Binding::SourcesTooSlow;
    }
    if closest.idle + closest.stopped >= bounds.most() {
        return match bounds.class {
            Some((n, limit)) if n < bounds.max_instances => Binding::Class(limit),
            _ => Binding::MaxInstances,
        };
    }
    if closest.idle >= bounds.idle.1 {
        if bounds.stopped.is_some_and(|(_, max)| closest.stopped < max) && starts.reserve < 1.0 {
            return Binding::SourcesTooSlow;
        }
        return Binding::IdleMax;
    }
    Binding::StoppedMax
}

/// The counts of `demand`'s slices of each hour of the week (UTC; Monday
/// 00:00 is 0) in the `weeks` weeks before `now`, slices without a run
/// left out (they change no share): made once with the history, so that a
/// pass looks its hour up rather than going through four weeks of slices.
pub fn by_hour(demand: &Demand, now: DateTime<Utc>, weeks: i64) -> Vec<Vec<u32>> {
    let mut hours = vec![Vec::new(); HOURS];
    let slice = demand.slice_secs();
    for (&k, &n) in demand.counts() {
        let start = k * slice;
        let age = now.timestamp() - start;
        if n == 0 || !(0..WEEK_SECS * weeks).contains(&age) {
            continue;
        }
        if let Some(t) = Utc.timestamp_opt(start, 0).single() {
            hours[hour_of_week(t) as usize].push(n);
        }
    }
    hours
}

/// Hours in a week.
const HOURS: usize = 7 * 24;

/// The hour of the week of `t` (UTC): Monday 00:00–01:00 is 0.
fn hour_of_week(t: DateTime<Utc>) -> u32 {
    t.weekday().num_days_from_monday() * 24 + t.hour()
}

/// The slices of `t`'s hour of the week in `hours` ([`by_hour`]).
pub fn at_hour(hours: &[Vec<u32>], t: DateTime<Utc>) -> &[u32] {
    hours
        .get(hour_of_week(t) as usize)
        .map_or(&[][..], Vec::as_slice)
}

/// The choice for the moment `now` from the slices of each hour of the
/// week (`hours`, [`by_hour`]): the hour under way and, from one
/// `lead` before the next hour, that one too — the more of each.
pub fn at(
    hours: &[Vec<u32>],
    now: DateTime<Utc>,
    lead: Duration,
    plan: impl Fn(&[u32]) -> Choice,
) -> Choice {
    let this = plan(at_hour(hours, now));
    let ahead = plan(at_hour(hours, now + lead));
    Choice {
        idle: this.idle.max(ahead.idle),
        stopped: this.stopped.max(ahead.stopped),
        met: this.met.min(ahead.met),
        cost: this.cost.max(ahead.cost),
        binding: this.binding.or(ahead.binding),
    }
}

/// What the objective expects to hold, against the static floor that
/// would meet the same target.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outlook {
    /// The holdings planned for each of the next 24 hours, in
    /// instance-hours of a running instance (a stopped one counts at its
    /// cost ratio).
    next_day: f64,
    /// The fewest idle instances that, kept at every hour, would have
    /// started `goal` of all the history's runs within the target; `None`
    /// when none up to `most_idle` would.
    static_floor: Option<u32>,
}

impl Outlook {
    /// The holdings planned for each of the next 24 hours, in
    /// instance-hours of a running instance (a stopped one counts at its
    /// cost ratio).
    pub fn next_day(&self) -> f64 {
        self.next_day
    }

    /// The fewest idle instances that, kept at every hour, would have
    /// started `goal` of all the history's runs within the target; `None`
    /// when none up to `most_idle` would.
    pub fn static_floor(&self) -> Option<u32> {
        self.static_floor
    }
}

/// The [`Outlook`] at `now` from the slices of each hour of the week
/// (`hours`), planning each hour with `plan`; the static floor within
/// `most_idle` (the idle instances a pool may hold).
pub fn outlook(
    hours: &[Vec<u32>],
    now: DateTime<Utc>,
    plan: impl Fn(&[u32]) -> Choice,
    goal: f64,
    starts: &StartTimes,
    most_idle: u32,
) -> Outlook {
    let next_day = (0..24)
        .map(|h| plan(at_hour(hours, now + Duration::hours(h))).cost / 3600.0)
        .sum();
    let all: Vec<u32> = hours.iter().flatten().copied().collect();
    let peak = all.iter().copied().max().unwrap_or(0);
    let top = most_idle.min(peak);
    let meets = |n: u32| met(&all, n, 0, starts) + 1e-9 >= goal;
    let static_floor = meets(top).then(|| {
        // More idle never starts fewer runs in time: the fewest, bisected.
        let (mut low, mut high) = (0, top);
        while low < high {
            let mid = low + (high - low) / 2;
            if meets(mid) {
                high = mid;
            } else {
                low = mid + 1;
            }
        }
        low
    });
    Outlook {
        next_day,
        static_floor,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    const FAST: StartTimes = StartTimes {
        idle: 1.0,
        reserve: 1.0,
        cold: 0.0,
    };

    fn bounds(idle: (u32, u32), stopped: Option<(u32, u32)>, max: u32) -> Bounds {
        Bounds {
            idle,
            stopped,
            max_instances: max,
            class: None,
        }
    }

    #[test]
    fn the_share_met_counts_each_sources_runs_within_the_target() {
        // Slices of 3 and 1 runs; 2 idle: the third run of the first slice
        // waits for a cold launch, beyond the target.
        assert_eq!(met(&[3, 1], 2, 0, &FAST), 0.75);
        // A stopped instance serves it within the target.
        assert_eq!(met(&[3, 1], 2, 1, &FAST), 1.0);
        // A reserve within the target half the time.
        let half = StartTimes {
            reserve: 0.5,
            ..FAST
        };
        assert_eq!(met(&[3, 1], 2, 1, &half), 0.875);
        assert_eq!(met(&[], 0, 0, &FAST), 1.0);
    }

    #[test]
    fn the_cheapest_holdings_that_meet_the_goal_are_chosen() {
        // Twenty slices: most of one run, two of four.
        let mut slices = vec![1u32; 18];
        slices.extend([4, 4]);
        type Row = (&'static str, f64, Option<(u32, u32)>, f64, (u32, u32));
        let table: &[Row] = &[
            // 26 runs; one idle leaves 6 late (77 %), two leave 4 (84.6 %),
            // four leave none.
            ("all within, idle only", 1.0, None, 0.05, (4, 0)),
            ("84 %, idle only", 0.84, None, 0.05, (2, 0)),
            // A stopped instance costs a twentieth of an idle one, and
            // starts within the target: the reserve serves them all.
            (
                "all within, with a reserve",
                1.0,
                Some((0, 5)),
                0.05,
                (0, 4),
            ),
            // One as dear as an idle instance is no cheaper: idle only.
            ("a dear reserve", 1.0, Some((0, 5)), 1.0, (4, 0)),
        ];
        for (what, goal, stopped, ratio, want) in table {
            let c = choose(
                &slices,
                *goal,
                &FAST,
                &bounds((0, 10), *stopped, 20),
                *ratio,
            );
            assert_eq!((c.idle, c.stopped), *want, "{what}: {c:?}");
            assert!(c.met >= *goal, "{what}: {c:?}");
            assert_eq!(c.binding, None, "{what}");
        }
    }

    #[test]
    fn the_spec_stays_a_floor_and_a_ceiling() {
        // No runs: the floors of the spec.
        let c = choose(&[], 0.95, &FAST, &bounds((2, 5), Some((1, 3)), 10), 0.05);
        assert_eq!((c.idle, c.stopped, c.met), (2, 1, 1.0));
        // idle.max binds: 5 runs at once, at most 3 idle, no reserve.
        let c = choose(&[5], 1.0, &FAST, &bounds((0, 3), None, 10), 0.05);
        assert_eq!((c.idle, c.binding), (3, Some(Binding::IdleMax)));
        // maxInstances binds.
        let c = choose(&[5], 1.0, &FAST, &bounds((0, 5), Some((0, 5)), 3), 0.05);
        assert_eq!(c.idle + c.stopped, 3);
        assert_eq!(c.binding, Some(Binding::MaxInstances));
        // The class's limits leave less than maxInstances: they bind, by
        // name; with more room than maxInstances, maxInstances does.
        let class = |n| Bounds {
            class: Some((n, "namespaceLimits.vcpus")),
            ..bounds((0, 5), None, 3)
        };
        let c = choose(&[5], 1.0, &FAST, &class(2), 0.05);
        assert_eq!(
            (c.idle, c.binding),
            (2, Some(Binding::Class("namespaceLimits.vcpus")))
        );
        let c = choose(&[5], 1.0, &FAST, &class(9), 0.05);
        assert_eq!((c.idle, c.binding), (3, Some(Binding::MaxInstances)));
        // The reserve starts slower than the target: it does not help, and
        // the limit named is the start time, not stopped.max.
        let slow = StartTimes {
            reserve: 0.0,
            ..FAST
        };
        let c = choose(&[5], 1.0, &slow, &bounds((0, 3), Some((0, 5)), 10), 0.05);
        assert_eq!((c.idle, c.stopped), (3, 0));
        assert_eq!(c.binding, Some(Binding::SourcesTooSlow));
    }

    #[test]
    fn a_choice_raises_floors_within_the_ranges_and_never_lowers_a_ceiling() {
        let mut spec: WarmPoolSpec = serde_yaml::from_str(
            "scheduler: s\nregion: r\nidle: {min: 1, max: 5}\nstopped: {min: 0, max: 2}\n\
             maxInstances: 9\nlaunch: {imageId: ami-1, instanceTypes: [t3.micro], \
             subnetIds: [subnet-1], runCommand: run}\n",
        )
        .unwrap();
        let b = super::bounds(&spec, Some((4, "limits.instances")));
        assert_eq!(
            (b.idle, b.stopped, b.max_instances),
            ((1, 5), Some((0, 2)), 9)
        );
        let pick = |idle, stopped| Choice {
            idle,
            stopped,
            met: 1.0,
            cost: 0.0,
            binding: None,
        };
        raise(&mut spec, &pick(8, 3));
        assert_eq!((spec.idle.min, spec.idle.max), (5, 5));
        assert_eq!(
            spec.stopped.as_ref().map(|s| (s.min, s.max)),
            Some((2, Some(2)))
        );
        // A lower choice keeps what the spec (or an earlier raise) says.
        raise(&mut spec, &pick(0, 0));
        assert_eq!((spec.idle.min, spec.idle.max), (5, 5));
    }

    #[test]
    fn the_widest_ranges_a_spec_allows_are_searched_in_bounded_steps() {
        // A tenant's own history may hold any number of runs at once, and
        // its spec ranges of 10 000: the choice still comes at once.
        let slices = vec![1_000_000u32; 480];
        // (Searched one by one, this was 10^8 holdings of 480 slices each:
        // a pass that never ended, on a worker every pool shares.)
        let wide = bounds((0, 10_000), Some((0, 10_000)), 10_000);
        let c = choose(&slices, 1.0, &FAST, &wide, 0.05);
        assert_eq!(c.idle + c.stopped, 10_000, "{c:?}");
        assert_eq!(c.binding, Some(Binding::MaxInstances));
    }

    #[test]
    fn the_outlook_sets_the_hours_holdings_against_a_floor_kept_all_day() {
        let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let now = t("2026-12-07T00:00:00Z"); // a Monday, midnight
        let mut hours = vec![Vec::new(); HOURS];
        // Monday 09:00: eight slices of four runs at once; the other hours
        // of the week one run now and then (ten single-run slices).
        hours[9] = vec![4; 8];
        for h in [20, 40, 60, 80, 100, 120, 140, 150, 160, 165] {
            hours[h] = vec![1];
        }
        let b = bounds((0, 10), None, 10);
        let plan = |s: &[u32]| choose(s, 0.95, &FAST, &b, 0.05);
        let o = outlook(&hours, now, plan, 0.95, &FAST, 10);
        // The next 24 hours: four idle through 09:00, one at 20:00.
        assert_eq!(o.next_day, 5.0);
        // Kept at every hour: 42 runs, 32 of them at 09:00; three idle
        // leave 8 late (81 %), four none.
        assert_eq!(o.static_floor, Some(4));
        // A pool that may hold three idle at most has no such floor.
        assert_eq!(
            outlook(&hours, now, plan, 0.95, &FAST, 3).static_floor,
            None
        );
        // No history: nothing held, no floor needed.
        let empty = vec![Vec::new(); HOURS];
        let o = outlook(&empty, now, plan, 0.95, &FAST, 10);
        assert_eq!((o.next_day, o.static_floor), (0.0, Some(0)));
    }

    #[test]
    fn an_hour_is_planned_from_the_same_hour_of_past_weeks() {
        let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let now = t("2026-12-07T08:58:00Z"); // a Monday
        let mut counts = BTreeMap::new();
        let mut add = |at: &str, n: u32| {
            counts.insert(t(at).timestamp() / 300, n);
        };
        add("2026-11-30T09:05:00Z", 4); // last Monday 09:00
        add("2026-11-23T09:40:00Z", 2); // the one before
        add("2026-11-30T08:05:00Z", 1); // last Monday 08:00
        add("2026-10-26T09:05:00Z", 9); // six weeks ago: too old
        let h = Demand::new(300).with_counts(counts);
        let hours = by_hour(&h, now, 4);
        let mut nine = at_hour(&hours, t("2026-12-07T09:00:00Z")).to_vec();
        nine.sort_unstable();
        assert_eq!(nine, [2, 4]);
        assert_eq!(at_hour(&hours, now), [1]);
        // Two minutes before 09:00 with a five-minute lead: 09:00's plan.
        let plan = |s: &[u32]| choose(s, 1.0, &FAST, &bounds((0, 9), None, 9), 0.05);
        assert_eq!(hours.len(), 168);
        assert_eq!(at(&hours, now, Duration::minutes(5), plan).idle, 4);
        assert_eq!(at(&hours, now, Duration::minutes(1), plan).idle, 1);
    }
}
