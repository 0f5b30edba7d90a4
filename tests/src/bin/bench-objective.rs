//! A time-to-start objective against what a user would set instead
//! (docs/architecture.md#benchmarks), as `| figure | value | target |`
//! rows: four weeks of synthetic demand (workday peaks, nights, weekends,
//! bursts of runs at once, and a week whose new image boots half as slow
//! again) on a simulated clock (`orca_tests::forecast_sim`: the operator's
//! own plan, schedules, forecast and objective each tick), after two weeks
//! that only build the history. Each policy's attainment (runs that waited
//! at most the target, and hours in which the objective's share did) and
//! cost (instance-hours warm — booting or idle, what a policy holds — and
//! in all, the busy hours being the same under any); the alternatives are the cheapest static
//! `idle.min` and the cheapest workday schedule that start as many runs
//! within the target over the four weeks, and the forecast warm-up with
//! its defaults. The target: the objective's warm instance-hours at most
//! 0.7 of the cheapest static floor's. No database, no EC2: scripts/bench runs it.

use std::time::Instant;

use chrono::Duration;
use orca_operator::pool::objective::{self, Bounds, History, StartTimes};
use orca_tests::forecast_sim::{
    arrivals, simulate, spec, with_forecast, with_objective, with_workday_schedule, Outcome, World,
};

const IDLE_MAX: i32 = 24;
const MAX_INSTANCES: i32 = 200;
/// The objective: 95 % of runs within 20 s.
const PERCENTILE: i32 = 95;
const SECONDS: i64 = 20;

fn main() {
    let w = World {
        days: 28,
        bursts_per_day: 2,
        burst_runs: 6,
        // The third measured week's image boots in 4.5 minutes, not 3
        // (within the spec's bootTimeoutSeconds, 300).
        slow_days: (14 + 14)..(14 + 21),
        slow_boot_secs: 270,
        ..World::default()
    };
    let arrivals = arrivals(&w);
    let goal = f64::from(PERCENTILE) / 100.0;
    let spec = |min| spec(min, IDLE_MAX, MAX_INSTANCES);
    let objective = simulate(&w, &with_objective(spec(0), PERCENTILE, SECONDS), &arrivals);
    let meets = |o: &Outcome| o.within(SECONDS) + 1e-9 >= goal;
    // The lowest floor that meets it, by bisection: a higher floor never
    // starts fewer runs in time.
    let cheapest = |name: &str, make: &dyn Fn(i32) -> Outcome| {
        let (mut low, mut high) = (0, IDLE_MAX);
        let mut found = None;
        while low <= high {
            let mid = (low + high) / 2;
            let o = make(mid);
            eprintln!(
                "{name} {mid}: {:.3} within, {:.0} h",
                o.within(SECONDS),
                o.instance_hours
            );
            if meets(&o) {
                found = Some((mid, o));
                high = mid - 1;
            } else {
                low = mid + 1;
            }
        }
        found
    };
    eprintln!(
        "objective: {:.3} within, {:.0} h",
        objective.within(SECONDS),
        objective.instance_hours
    );
    let fixed = cheapest("static", &|min| simulate(&w, &spec(min), &arrivals));
    let scheduled = cheapest("schedule", &|min| {
        simulate(&w, &with_workday_schedule(spec(0), min), &arrivals)
    });
    let forecast = simulate(&w, &with_forecast(spec(0), &w), &arrivals);

    println!("| figure | value | target |");
    println!("| --- | --- | --- |");
    let row = |name: &str, o: &Outcome| {
        println!(
            "| objective bench: {name}: runs within {SECONDS} s, hours meeting {PERCENTILE} %, instance-hours warm (booting or idle) and in all ({} runs, 28 days) | {:.1} %, {:.1} %, {:.0}, {:.0} | — |",
            o.runs,
            o.within(SECONDS) * 100.0,
            o.hours_met(SECONDS, goal) * 100.0,
            o.warm_hours,
            o.instance_hours
        );
    };
    row(
        &format!("objective ({PERCENTILE} % within {SECONDS} s)"),
        &objective,
    );
    match &fixed {
        Some((min, o)) => row(&format!("cheapest static idle.min meeting it ({min})"), o),
        None => {
            println!("| objective bench: no static idle.min up to {IDLE_MAX} meets it | — | — |")
        }
    }
    match &scheduled {
        Some((min, o)) => row(
            &format!("cheapest workday schedule meeting it (idle.min {min} 08:00–19:00)"),
            o,
        ),
        None => {
            println!("| objective bench: no workday schedule up to {IDLE_MAX} meets it | — | — |")
        }
    }
    row("forecast warm-up (percentile 90, lead one boot)", &forecast);
    if let Some((_, o)) = &fixed {
        println!(
            "| objective bench: the objective's warm instance-hours against the cheapest static floor's that meets it (in all: {:.2}) | {:.2} | ≤ 0.70 |",
            objective.instance_hours / o.instance_hours,
            objective.warm_hours / o.warm_hours
        );
    }
    println!(
        "| objective bench: the objective meets its target over the four weeks | {} | yes |",
        if meets(&objective) { "yes" } else { "no" }
    );
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
        .map(|k| World {
            warm_up_days: 0,
            days: 28,
            tick_secs: 60,
            peak_per_min: 1.0 + (k % 5) as f64,
            bursts_per_day: 2,
            burst_runs: 6,
            seed: k as u64 + 1,
            ..World::default()
        })
        .collect();
    let now = worlds[0].start + Duration::days(28);
    let histories: Vec<History> = worlds
        .iter()
        .map(|w| {
            let mut h = History {
                slice_secs: 210,
                ..History::default()
            };
            for at in arrivals(w) {
                let epoch = (w.start + Duration::seconds(at)).timestamp();
                *h.counts.entry(epoch.div_euclid(210)).or_default() += 1;
            }
            h
        })
        .collect();
    let starts = StartTimes {
        idle: 1.0,
        reserve: 0.9,
        cold: 0.0,
    };
    let bounds = Bounds {
        idle: (0, 24),
        stopped: Some((0, 12)),
        max_instances: 200,
        class: None,
    };
    let plan = |slices: &[u32]| objective::choose(slices, 0.95, &starts, &bounds, 0.05);
    let read = Instant::now();
    let tables: Vec<Vec<Vec<u32>>> = histories.iter().map(|h| h.by_hour(now, 4)).collect();
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
