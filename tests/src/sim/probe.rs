//! What the handover tests and the benchmark look at from outside: who
//! holds LEAD_LOCK in `pg_locks` (sampled every 50 ms through a handover by
//! [`LockSampler`], the lead-lock check of [`super::lead_check`]), the runs'
//! rows, and the `finished` lines the schedulers print.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use orca_db::{schedulers::LEAD_LOCK, Db};

pub use super::lead_check::LockSampler;
use super::process::{field, Sim};

/// The backends holding LEAD_LOCK in this database, per `pg_locks`.
pub async fn holders(db: &Db) -> Vec<i32> {
    db.query(
        "select pid from pg_locks where locktype = 'advisory' and granted
           and classid = ($1::bigint >> 32)::oid and objid = ($1::bigint & 4294967295)::oid
           and objsubid = 1
           and database = (select oid from pg_database where datname = current_database())",
        &[&LEAD_LOCK],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

pub async fn db_now(db: &Db) -> DateTime<Utc> {
    db.query_one("select clock_timestamp()", &[])
        .await
        .unwrap()
        .get(0)
}

/// Queues `n` runs of `pipeline`; their ids.
pub async fn queue(db: &Db, pipeline: &str, n: usize) -> Vec<i64> {
    let mut ids = Vec::new();
    for _ in 0..n {
        let id: i64 = db
            .query_one(
                "insert into orca.runs (pipeline) values ($1) returning id",
                &[&pipeline],
            )
            .await
            .unwrap()
            .get(0);
        ids.push(id);
    }
    ids
}

/// A run's row as the tests look at it.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRow {
    status: String,
    start: i32,
    instance: Option<i64>,
    heartbeat: Option<DateTime<Utc>>,
}

impl RunRow {
    /// The run's status.
    pub fn status(&self) -> &str {
        &self.status
    }

    /// The run's start (its attempt).
    pub fn start(&self) -> i32 {
        self.start
    }

    /// The scheduler instance that holds or held it.
    pub fn instance(&self) -> Option<i64> {
        self.instance
    }

    /// Its last heartbeat.
    pub fn heartbeat(&self) -> Option<DateTime<Utc>> {
        self.heartbeat
    }
}

impl RunRow {
    pub fn ended(&self) -> bool {
        self.status == "succeeded" || self.status == "failed"
    }
}

pub async fn runs(db: &Db, ids: &[i64]) -> BTreeMap<i64, RunRow> {
    db.query(
        "select id, status, start, instance, heartbeat from orca.runs where id = any($1)",
        &[&ids],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| {
        (
            r.get(0),
            RunRow {
                status: r.get(1),
                start: r.get(2),
                instance: r.get(3),
                heartbeat: r.get(4),
            },
        )
    })
    .collect()
}

pub async fn all_ended(db: &Db, ids: &[i64]) -> bool {
    runs(db, ids).await.values().all(RunRow::ended)
}

/// A `finished run=R start=S status=X id=I` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finish {
    start: i32,
    status: String,
    instance: i64,
}

impl Finish {
    /// The scheduler instance that holds or held it.
    pub fn instance(&self) -> i64 {
        self.instance
    }
}

/// Every `finished` line of these schedulers, by run.
pub fn finishes(sims: &[&Sim]) -> BTreeMap<i64, Vec<Finish>> {
    let mut all: BTreeMap<i64, Vec<Finish>> = BTreeMap::new();
    for s in sims {
        for line in s.matching(" finished run=") {
            let run: i64 = field(&line, "run").unwrap();
            all.entry(run).or_default().push(Finish {
                start: field(&line, "start").unwrap(),
                status: field(&line, "status").unwrap(),
                instance: field(&line, "id").unwrap(),
            });
        }
    }
    all
}
