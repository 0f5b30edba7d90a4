//! The database half of a rollout's snapshot, shared by the Kubernetes
//! mode and the local mode: the rows of `orca.schedulers` with what
//! `pg_locks` says of them, and the database's clock. An adapter: the
//! decision itself (`crate::scheduler`) reads only what this returns.

use std::time::Duration;

use orca_db::{schedulers, Db, DbError};

use crate::scheduler::{InstanceView, Problem, Time};

/// The instances (of the pods on `hosts`, and all others seen within the
/// hour: see [`schedulers::observe`]), and `now()` by the database clock.
/// A database the first scheduler has not migrated yet has no instances
/// (so the first pod can start and migrate it).
pub async fn observe_instances(
    db: &Db,
    stale: Duration,
    hosts: &[String],
) -> Result<(Vec<InstanceView>, Time), DbError> {
    let row = db
        .query_one(
            "select to_regclass('orca.schedulers') is not null, now()",
            &[],
        )
        .await?;
    let (exists, now): (bool, Time) = (row.get(0), row.get(1));
    if !exists {
        return Ok((Vec::new(), now));
    }
    let rows = schedulers::observe(db, stale, hosts).await?;
    Ok((
        rows.iter().map(schedulers::SchedulerRow::view).collect(),
        now,
    ))
}

/// A failed connect or statement as the `Degraded` reason it is.
pub fn db_problem(e: &DbError) -> Problem {
    if e.is_connection() {
        Problem {
            reason: "DatabaseUnreachable".into(),
            message: format!("cannot reach the database: {e}"),
        }
    } else {
        Problem {
            reason: "DatabaseError".into(),
            message: format!("reading orca.schedulers: {e}"),
        }
    }
}
