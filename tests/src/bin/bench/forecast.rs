//! The forecast warm-up against a static idle floor
//! (docs/architecture.md#benchmarks), as `| figure | value | target |`
//! rows: a month of synthetic demand with a daily and weekly cycle on a
//! simulated clock (`orca_tests::forecast_sim`, the operator's own plan and
//! forecast each tick), after two weeks that only build the history. The
//! static floor compared is the lowest `idle.min` that spends at least the
//! forecast's instance-hours; the target is at most half its cold starts.
//! No database, no EC2: scripts/bench runs it.

use orca_tests::forecast_sim::{arrivals, simulate, spec, with_forecast, Outcome, World};

/// The pool's idle.max and maxInstances, the same for both.
const IDLE_MAX: i32 = 16;
const MAX_INSTANCES: i32 = 200;

pub fn run() {
    let w = World::default();
    let arrivals = arrivals(&w);
    let spec = |min| spec(min, IDLE_MAX, MAX_INSTANCES);
    let forecast = simulate(&w, &with_forecast(spec(0), &w), &arrivals);
    let mut statics: Vec<(i32, Outcome)> = Vec::new();
    for min in 0..=IDLE_MAX {
        let o = simulate(&w, &spec(min), &arrivals);
        let enough = o.instance_hours() >= forecast.instance_hours();
        statics.push((min, o));
        if enough {
            break;
        }
    }
    let (min, same) = statics.last().cloned().expect("at least idle.min 0");
    let days = w.days();
    let runs = forecast.runs();
    println!(
        "| forecast: runs that waited for a cold launch ({runs} runs in {days} simulated days, boot {} s) | {} | ≤ {} (half the static's) |",
        w.boot_secs(),
        forecast.cold(),
        same.cold() / 2
    );
    println!(
        "| forecast: instance-hours | {:.0} | ≤ {:.0} (the static's) |",
        forecast.instance_hours(),
        same.instance_hours()
    );
    println!(
        "| static idle.min {min} (the lowest with as many instance-hours): runs that waited for a cold launch | {} | — |",
        same.cold()
    );
    println!(
        "| static idle.min {min}: instance-hours | {:.0} | — |",
        same.instance_hours()
    );
    if let Some((below, o)) = statics.iter().rev().nth(1) {
        println!(
            "| static idle.min {below} (fewer instance-hours): runs that waited, instance-hours | {}, {:.0} | — |",
            o.cold(), o.instance_hours()
        );
    }
    let ratio = forecast.cold() as f64 / same.cold().max(1) as f64;
    println!("| forecast's cold starts / the static's | {ratio:.2} | ≤ 0.50 |");
}
