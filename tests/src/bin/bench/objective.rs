//! A time-to-start objective against what a user would set instead
//! (docs/architecture.md#benchmarks), as `| figure | value | target |`
//! rows: four weeks of synthetic demand (workday peaks, nights, weekends,
//! bursts of runs at once, and a week whose new image boots half as slow
//! again) on a simulated clock (`orca_tests::forecast_sim`: the operator's
//! own plan, schedules, forecast and objective each tick, and its stopped
//! reserve starting in 45 s), after two weeks that only build the history.
//! Each policy's attainment (runs that waited at most the target, and
//! hours in which the objective's share did) and cost (instance-hours warm
//! — booting or idle, what a policy holds — stopped, and in all, the busy
//! hours being the same under any). Two objectives: 95 % within 20 s,
//! which only idle instances meet, against the cheapest static `idle.min`,
//! workday schedule and stopped reserve that start as many runs in time
//! over the four weeks, and the forecast warm-up; 95 % within 90 s, which
//! a reserve start meets, the objective free to keep up to 12 stopped,
//! against the cheapest static `idle.min` and reserve. What a policy holds
//! is its warm hours and its stopped ones at the default
//! stoppedCostRatio (0.05). The target: the objective's at most 0.7 of the
//! cheapest static floor's. No database, no EC2: scripts/bench runs it.

use std::time::Instant;

use chrono::Duration;
use orca_operator::warmpool::{
    forecast::Demand,
    objective::{self, Bounds, StartTimes},
};
use orca_tests::forecast_sim::{
    arrivals, simulate, spec, with_forecast, with_objective, with_reserve, with_workday_schedule,
    Outcome, World,
};

const IDLE_MAX: i32 = 24;
const MAX_INSTANCES: i32 = 200;
/// The objectives: 95 % of runs within 20 s, and within 90 s.
const PERCENTILE: i32 = 95;
const STOPPED_COST: f64 = 0.05;

/// What a policy holds: warm hours, and stopped ones at their ratio.
fn held(o: &Outcome) -> f64 {
    o.warm_hours() + STOPPED_COST * o.stopped_hours()
}

/// One target's comparison on one world's demand.
struct Bench<'a> {
    w: &'a World,
    arrivals: &'a [i64],
    seconds: i64,
}

impl Bench<'_> {
    fn goal(&self) -> f64 {
        f64::from(PERCENTILE) / 100.0
    }

    fn meets(&self, o: &Outcome) -> bool {
        o.within(self.seconds) + 1e-9 >= self.goal()
    }

    fn run(&self, spec: &orca_operator::crd::WarmPoolSpec) -> Outcome {
        simulate(self.w, spec, self.arrivals)
    }

    /// The lowest size `make` takes that meets the target, by bisection (a
    /// larger one never starts fewer runs in time), and its outcome.
    fn cheapest(&self, name: &str, make: &dyn Fn(i32) -> Outcome) -> Option<(i32, Outcome)> {
        let (mut low, mut high) = (0, IDLE_MAX);
        let mut found = None;
        while low <= high {
            let mid = (low + high) / 2;
            let o = make(mid);
            eprintln!(
                "{} s, {name} {mid}: {:.3} within, {:.0} h held",
                self.seconds,
                o.within(self.seconds),
                held(&o)
            );
            if self.meets(&o) {
                found = Some((mid, o));
                high = mid - 1;
            } else {
                low = mid + 1;
            }
        }
        found
    }

    fn row(&self, name: &str, o: &Outcome) {
        println!(
            "| objective bench, {PERCENTILE} % within {} s: {name}: runs within it, hours meeting {PERCENTILE} %, instance-hours warm (booting or idle), stopped, in all ({} runs, 28 days) | {:.1} %, {:.1} %, {:.0}, {:.0}, {:.0} | — |",
            self.seconds,
            o.runs(),
            o.within(self.seconds) * 100.0,
            o.hours_met(self.seconds, self.goal()) * 100.0,
            o.warm_hours(),
            o.stopped_hours(),
            o.instance_hours()
        );
    }

    fn none(&self, what: &str) {
        println!(
            "| objective bench, {PERCENTILE} % within {} s: no {what} up to {IDLE_MAX} meets it | — | — |",
            self.seconds
        );
    }

    fn cheapest_row(&self, what: &str, found: &Option<(i32, Outcome)>) {
        match found {
            Some((n, o)) => self.row(&format!("cheapest {what} meeting it ({n})"), o),
            None => self.none(what),
        }
    }

    /// The objective's holdings against the cheapest static floor's.
    fn ratio(&self, objective: &Outcome, fixed: &Option<(i32, Outcome)>) {
        if let Some((_, o)) = fixed {
            println!(
                "| objective bench, {PERCENTILE} % within {} s: what the objective holds (warm, and stopped at {STOPPED_COST}) against the cheapest static floor that meets it | {:.2} | ≤ 0.70 |",
                self.seconds,
                held(objective) / held(o)
            );
        }
        println!(
            "| objective bench, {PERCENTILE} % within {} s: the objective meets its target over the four weeks | {} | yes |",
            self.seconds,
            if self.meets(objective) { "yes" } else { "no" }
        );
    }
}

pub fn run() {
    let w = World::default()
        .with_days(28)
        .with_bursts_per_day(2)
        .with_burst_runs(6)
        // The third measured week's image boots in 4.5 minutes, not 3
        // (within the spec's bootTimeoutSeconds, 300).
        .with_slow_days((14 + 14)..(14 + 21))
        .with_slow_boot_secs(270);
    let arrivals = arrivals(&w);
    let spec = |min| spec(min, IDLE_MAX, MAX_INSTANCES);
    let reserve = |n| with_reserve(spec(0), n, n);

    let b = Bench {
        w: &w,
        arrivals: &arrivals,
        seconds: 20,
    };
    let objective = b.run(&with_objective(spec(0), PERCENTILE, b.seconds));
    let fixed = b.cheapest("static idle.min", &|min| b.run(&spec(min)));
    let scheduled = b.cheapest("workday schedule", &|min| {
        b.run(&with_workday_schedule(spec(0), min))
    });
    let stopped = b.cheapest("stopped reserve", &|n| b.run(&reserve(n)));
    b.row("the objective", &objective);
    b.cheapest_row("static idle.min", &fixed);
    b.cheapest_row("workday schedule (idle.min 08:00–19:00)", &scheduled);
    b.cheapest_row("stopped reserve (stopped.min, idle.min 0)", &stopped);
    b.row(
        "forecast warm-up (percentile 90, lead one boot)",
        &b.run(&with_forecast(spec(0), &w)),
    );
    b.ratio(&objective, &fixed);

    let b = Bench { seconds: 90, ..b };
    let objective = b.run(&with_reserve(
        with_objective(spec(0), PERCENTILE, b.seconds),
        0,
        12,
    ));
    let fixed = b.cheapest("static idle.min", &|min| b.run(&spec(min)));
    let stopped = b.cheapest("stopped reserve", &|n| b.run(&reserve(n)));
    b.row("the objective, up to 12 stopped", &objective);
    b.cheapest_row("static idle.min", &fixed);
    b.cheapest_row("stopped reserve (stopped.min, idle.min 0)", &stopped);
    b.ratio(&objective, &fixed);
    timing();
}

/// Pools timed, each with four weeks of its own demand.
const POOLS: usize = 200;

/// What the objective costs the operator for 200 pools: the hourly
/// reading (the history's table of slices by hour of the week, and the
/// outlook made with it) and each pass's choice, per pool; the histories
/// are four weeks of the simulated demand, each pool its own seed and
/// peak (a run a minute to five), in slices of a 210 s cold start.
fn timing() {
    let worlds: Vec<World> = (0..POOLS)
        .map(|k| {
            World::default()
                .with_warm_up_days(0)
                .with_days(28)
                .with_tick_secs(60)
                .with_peak_per_min(1.0 + (k % 5) as f64)
                .with_bursts_per_day(2)
                .with_burst_runs(6)
                .with_seed(k as u64 + 1)
        })
        .collect();
    let now = worlds[0].start() + Duration::days(28);
    let histories: Vec<Demand> = worlds
        .iter()
        .map(|w| {
            let mut h = Demand::new(210);
            for at in arrivals(w) {
                let epoch = (w.start() + Duration::seconds(at)).timestamp();
                h.add(epoch);
            }
            h
        })
        .collect();
    let starts = StartTimes::new(1.0, 0.9, 0.0);
    let bounds = Bounds::new((0, 24), Some((0, 12)), 200, None);
    let plan = |slices: &[u32]| objective::choose(slices, 0.95, &starts, &bounds, 0.05);
    let read = Instant::now();
    let tables: Vec<Vec<Vec<u32>>> = histories
        .iter()
        .map(|h| objective::by_hour(h, now, 4))
        .collect();
    for t in &tables {
        std::hint::black_box(objective::outlook(t, now, plan, 0.95, &starts, 24));
    }
    let hourly = read.elapsed().as_secs_f64() * 1000.0 / POOLS as f64;
    // A pass every ten seconds through a workday morning, each pool's.
    let passes = 36;
    let pass = Instant::now();
    for k in 0..passes {
        let at = now + Duration::hours(9) + Duration::seconds(10 * k);
        for t in &tables {
            std::hint::black_box(objective::at(t, at, Duration::seconds(210), plan));
        }
    }
    let per_pass = pass.elapsed().as_secs_f64() * 1e6 / (passes as usize * POOLS) as f64;
    println!(
        "| objective bench: its work for {POOLS} pools of four weeks' history each (runs a minute at peak 1 to 5, reserve 0–12): a pass's choice, mean per pool; the hourly reading (the table and the outlook), per pool | {per_pass:.0} µs; {hourly:.1} ms | well under a pass (5 ms) |"
    );
}
