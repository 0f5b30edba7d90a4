//! The decisions an instance takes as leader — taking the lead, starting a
//! run, requeuing one — each recorded in `orca_sim.decisions`, a schema of
//! the reference scheduler's own (never the `orca` schema), for the tests'
//! lead-lock check ([`super::lead_check`]).
//!
//! A run's start or requeue is recorded by the very statement that makes
//! it (a data-modifying CTE), so its `at` is the act's own time. A row
//! holds:
//!
//! | column | meaning |
//! | --- | --- |
//! | `instance` | the deciding instance's `orca.schedulers` id |
//! | `at` | `clock_timestamp()` inside the deciding statement |
//! | `what` | `lead`, `start run=R start=S` or `requeue run=R start=S from=I` |
//! | `backend`, `backend_start` | the session that decided (`pg_backend_pid()` and its start) |
//! | `holders` | the backends `pg_locks` showed holding LEAD_LOCK inside that same statement |
//!
//! With overlap off there is no instance and no lock: nothing is recorded.

use orca_db::{schedulers::LEAD_LOCK, Db, DbError};

/// The transaction-scoped advisory lock ("orca_sim") that serialises
/// [`prepare`] between instances starting at once: concurrent `create
/// schema if not exists` can fail on the catalog's unique index.
const PREPARE_LOCK: i64 = 0x6f72_6361_5f73_696d;

/// Creates `orca_sim.decisions` if it is missing.
pub async fn prepare(db: &Db) -> Result<(), DbError> {
    db.batch(&format!(
        "select pg_advisory_xact_lock({PREPARE_LOCK});
         create schema if not exists orca_sim;
         create table if not exists orca_sim.decisions (
             instance bigint not null,
             at timestamptz not null,
             what text not null,
             backend integer not null,
             backend_start timestamptz,
             holders integer[] not null
         )"
    ))
    .await
}

/// SQL true for a `pg_locks` row (columns of `alias`, `"l."`) granting
/// LEAD_LOCK in this database (docs/protocol.md#the-lead-lock).
pub fn lead_lock_row(alias: &str) -> String {
    format!(
        "({alias}locktype = 'advisory' and {alias}granted \
         and {alias}classid = {}::oid and {alias}objid = {}::oid and {alias}objsubid = 1 \
         and {alias}database = (select oid from pg_database where datname = current_database()))",
        LEAD_LOCK >> 32,
        LEAD_LOCK & 0xffff_ffff
    )
}

/// The columns after `instance` and `what`: when, by which session, and who
/// held the lock, all read inside the statement that runs it.
fn observed() -> String {
    format!(
        "clock_timestamp(), pg_backend_pid(),
         (select a.backend_start from pg_stat_activity a where a.pid = pg_backend_pid()),
         array(select l.pid from pg_locks l where {} order by l.pid)",
        lead_lock_row("l.")
    )
}

/// `, decided as (insert … from r)`, to follow the CTE `r` of a leader's
/// statement: records a decision per row `r` returns, `what` an SQL text
/// expression over its columns. Empty without an instance (overlap off).
pub fn cte(id: Option<i64>, what: &str) -> String {
    match id {
        None => String::new(),
        Some(id) => format!(
            ", decided as (
                 insert into orca_sim.decisions (instance, what, at, backend, backend_start, holders)
                 select {id}, {what}, {observed} from r
             )",
            observed = observed()
        ),
    }
}

/// Records that instance `id` took the lead; run on the lock connection at
/// once after the lock was got (or, with `--unsafe-skip-lead-lock`, not).
pub async fn lead(db: &Db, id: i64) -> Result<(), DbError> {
    let sql = format!(
        "insert into orca_sim.decisions (instance, what, at, backend, backend_start, holders)
         select $1, 'lead', {}",
        observed()
    );
    db.execute(&sql, &[&id]).await?;
    Ok(())
}
