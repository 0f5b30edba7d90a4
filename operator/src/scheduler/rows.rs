//! The database half of a rollout's snapshot, shared by the Kubernetes
//! mode and the local mode: the rows of `orca.schedulers` with what
//! `pg_locks` says of them, and the database's clock. An adapter: the
//! decision itself (`crate::scheduler`) reads only what this returns.

use std::time::Duration;

use orca_db::{schedulers, Db, DbError};

use crate::scheduler::{InstanceView, Problem, Time};

/// A row of `orca.schedulers` as the decision sees it.
fn instance_view(row: &schedulers::SchedulerRow) -> InstanceView {
    InstanceView {
        id: row.id,
        host: row.host.clone(),
        image: row.image.clone(),
        role: row.role.as_str().to_string(),
        live: row.live,
        ended: row.ended,
        holds_lock: row.holds_lock,
        joined: row.joined,
        led: row.led,
        drain_asked: row.drain_asked,
        runs: row.running.len().try_into().unwrap_or(i32::MAX),
    }
}

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
    Ok((rows.iter().map(instance_view).collect(), now))
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
