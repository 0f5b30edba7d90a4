//! The database half of a rollout's snapshot, shared by the Kubernetes
//! mode and the local mode: the rows of `orca.schedulers` with what
//! `pg_locks` says of them, and the database's clock. An adapter: the
//! decision itself (`crate::scheduler`) reads only what this returns.

use std::time::Duration;

use orca_db::{schedulers, Db, DbError};

use crate::scheduler::{InstanceView, Observed, Problem, Time};

impl From<&schedulers::SchedulerRow> for InstanceView {
    fn from(row: &schedulers::SchedulerRow) -> Self {
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
}

/// The instances, and `now()` by the database clock. A database the first
/// scheduler has not migrated yet has no instances (so the first pod can
/// start and migrate it).
pub async fn observe_instances(
    db: &Db,
    stale: Duration,
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
    let rows = schedulers::observe(db, stale).await?;
    Ok((rows.iter().map(InstanceView::from).collect(), now))
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

impl Observed {
    /// Only the database clock judges the rows' times
    /// (docs/architecture.md#time-and-clocks): `now`
    /// becomes the database's, and the pods' and jobs' times, taken on this
    /// side's clock, are moved onto it by the difference.
    pub fn on_database_clock(mut self, db_now: Time) -> Self {
        let offset = db_now - self.now;
        for p in &mut self.pods {
            p.created += offset;
            if let Some(started) = &mut p.started {
                *started += offset;
            }
            if let crate::scheduler::PodState::Exited { finished, .. } = &mut p.state {
                *finished += offset;
            }
        }
        for j in &mut self.jobs {
            j.created += offset;
            match &mut j.state {
                crate::scheduler::JobState::Succeeded { at }
                | crate::scheduler::JobState::Failed { at, .. } => *at += offset,
                crate::scheduler::JobState::Running => {}
            }
        }
        self.now = db_now;
        self.clock_offset = offset;
        self
    }
}
