//! The scheduler-instance protocol (docs/protocol.md#scheduler-instances)
//! with real `orca-sim` processes on a real PostgreSQL: lead, handover, 50
//! handovers, a killed leader, a killed lock session, a server outage, an
//! ended row, overlap_refusal and the operator's instances / drain /
//! wait-for-lead.
//!
//! A short tick and stale limit keep it quick; the only timed assertions are
//! the bounds, measured with the database's clock where it can.

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use orca_db::{
    schedulers::{self, Joining, Role, SchedulerRow},
    Db,
};
use orca_tests::{
    bins, pg,
    sim::{
        probe::{all_ended, db_now, finishes, holders, queue, runs, LockSampler},
        process::{Sim, SimOptions},
    },
};

const TICK_MS: u64 = 200;
const STALE_S: f64 = 2.0;

fn tick() -> Duration {
    Duration::from_millis(TICK_MS)
}

fn stale() -> Duration {
    Duration::from_secs_f64(STALE_S)
}

fn sim(url: &str, image: &str) -> Sim {
    Sim::start(url, &SimOptions::new(image, TICK_MS, STALE_S))
}

async fn row(db: &Db, id: i64) -> SchedulerRow {
    schedulers::observe(db, stale(), &[])
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.id() == id)
        .unwrap_or_else(|| panic!("no orca.schedulers row {id}"))
}

/// Seconds from `a` to `b`.
fn secs(a: DateTime<Utc>, b: DateTime<Utc>) -> f64 {
    (b - a).num_microseconds().unwrap() as f64 / 1e6
}

/// Polls `check` every 50 ms until it is true; fails the test after `within`.
async fn until<F, Fut>(what: &str, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The leader's row led within `ticks` ticks of `since` (database clock).
fn led_within(r: &SchedulerRow, since: DateTime<Utc>, ticks: f64, what: &str) {
    let led = r
        .led()
        .unwrap_or_else(|| panic!("{what}: instance {} never led", r.id()));
    let took = secs(since, led);
    assert!(
        took <= ticks * TICK_MS as f64 / 1000.0,
        "{what}: instance {} led {took:.3}s after, more than {ticks} ticks of {TICK_MS} ms",
        r.id()
    );
}

/// Every run succeeded at `start` under `instance`.
async fn assert_ran(db: &Db, ids: &[i64], start: i32, instance: i64) {
    for (run, r) in runs(db, ids).await {
        assert_eq!(
            (r.status(), r.start(), r.instance()),
            ("succeeded", start, Some(instance)),
            "run {run}"
        );
    }
}

/// A live instance held by the test itself: joined (and leading if asked)
/// on a connection of its own, as an older binary would be.
async fn fake_instance(url: &str, host: &str, migrations: i32, lead: bool) -> (Db, i64) {
    let db = pg::connect(url).await;
    let me = Joining::new(host, 1, "old", migrations);
    let id = schedulers::join(&db, &me).await.unwrap();
    if lead {
        assert!(schedulers::try_lead(&db, id).await.unwrap());
    }
    (db, id)
}

mod failures;
mod leading;
mod operator_commands;
mod overlap;
mod pool_runs;
