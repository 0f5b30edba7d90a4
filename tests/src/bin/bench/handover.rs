//! `bench handover` (run by scripts/bench): the handover time, new instance
//! joined → leads, from the rows' `joined` and `led` (the database's clock),
//! over 20 handovers of real `orca-sim` processes, at a tick of 1000 ms and
//! of 200 ms; with LISTEN and with polling only. Target: within 2 ticks,
//! every time.

use std::time::Duration;

use orca_db::schedulers;
use orca_tests::{
    pg,
    sim::process::{Sim, SimOptions},
};

const HANDOVERS: usize = 20;

/// The handover times, in milliseconds, of `HANDOVERS` handovers in a row.
async fn handovers(tick_ms: u64, listen: bool) -> anyhow::Result<Vec<f64>> {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    let start = |n: usize| {
        let mut opts = SimOptions::new(&format!("v{n}"), tick_ms, 10.0);
        opts = opts.with_listen(listen);
        Sim::start(&url, &opts)
    };
    let mut current = start(1);
    let id = current.id().await;
    current
        .wait_for(&format!("leading id={id}"), Duration::from_secs(10))
        .await;
    let mut old = Vec::new();
    let mut times = Vec::new();
    for n in 2..=HANDOVERS + 1 {
        let mut next = start(n);
        let id = next.id().await;
        next.wait_for(&format!("leading id={id}"), Duration::from_secs(10))
            .await;
        let row = schedulers::observe(&db, Duration::from_secs(10), &[])
            .await?
            .into_iter()
            .find(|r| r.id() == id)
            .ok_or_else(|| anyhow::anyhow!("instance {id} has no row"))?;
        let led = row
            .led()
            .ok_or_else(|| anyhow::anyhow!("instance {id} leads but its row has no led"))?;
        let took = (led - row.joined())
            .num_microseconds()
            .ok_or_else(|| anyhow::anyhow!("instance {id}: joined → led overflows"))?;
        times.push(took as f64 / 1000.0);
        old.push(std::mem::replace(&mut current, next));
    }
    current.signal(libc::SIGTERM);
    for sim in old.iter_mut().chain([&mut current]) {
        sim.wait_exit(Duration::from_secs(10)).await;
    }
    Ok(times)
}

fn p50(sorted: &[f64]) -> f64 {
    sorted[sorted.len() / 2]
}

#[tokio::main]
pub async fn run() -> anyhow::Result<()> {
    // With LISTEN (as deployed), and polling only (as behind a
    // transaction-pooling proxy, where notifications don't arrive).
    for (tick_ms, listen) in [(1000, true), (200, true), (1000, false), (200, false)] {
        let how = if listen { "" } else { ", polling only" };
        let mut times = handovers(tick_ms, listen).await?;
        times.sort_by(f64::total_cmp);
        let max = times.last().copied().unwrap_or(f64::NAN);
        let target = 2 * tick_ms;
        let mark = |v: f64| if v <= target as f64 { "" } else { " MISSED" };
        println!(
            "| handover joined → leads, tick {tick_ms} ms{how}, p50 of {HANDOVERS} | {:.1} ms | ≤ {target} ms{} |",
            p50(&times),
            mark(p50(&times))
        );
        println!(
            "| handover joined → leads, tick {tick_ms} ms{how}, max of {HANDOVERS} | {max:.1} ms | ≤ {target} ms{} |",
            mark(max)
        );
    }
    Ok(())
}
