//! Scheduler instances (`orca.schedulers`;
//! docs/protocol.md#scheduler-instances): two schedulers of different
//! images overlapping on one Postgres during a deploy.
//!
//! The instance half ([`join`], [`beat`], [`newer`], [`try_lead`],
//! [`holds_lead`], [`step_down`], [`end`], [`overlap_refusal`]) is what a
//! scheduler calls; the driving half ([`instances`], [`ask_drain`],
//! [`observe`], [`lead_state`], [`wait_for_lead`]) is the operator's. Only
//! the database clock judges time: every freshness test is `now()` against a
//! row.

use std::{fmt, time::Duration};

use crate::{Db, DbError};

mod driving;

pub use driving::{instances, lead_state, observe, wait_for_lead, LeadState, SchedulerRow};

/// The session advisory lock the leading instance holds
/// (docs/protocol.md#the-lead-lock).
pub const LEAD_LOCK: i64 = 1869767525;

/// The channel [`join`], [`try_lead`], [`step_down`], [`end`] and
/// [`ask_drain`] notify, so that instances and [`wait_for_lead`] wake at
/// once instead of at their next poll (a speed-up only: they poll as well).
pub const CHANNEL: &str = "orca_schedulers";

/// SQL true for a row of `orca.schedulers` that is live: not ended, and seen
/// within `stale` (docs/protocol.md#liveness).
pub fn live_cond(stale: Duration) -> String {
    live_of("", stale)
}

/// [`live_cond`] for the columns of `alias` (`"s."`).
pub(crate) fn live_of(alias: &str, stale: Duration) -> String {
    format!(
        "({alias}ended is null and {alias}seen > now() - interval '{} milliseconds')",
        stale.as_millis()
    )
}

/// SQL true for a `pg_locks` row that grants [`LEAD_LOCK`] in this database
/// (advisory locks are per database; a bigint key is split into `classid`,
/// the high half, and `objid`, the low half).
pub(crate) fn lead_lock_granted(alias: &str) -> String {
    format!(
        "({alias}locktype = 'advisory' and {alias}classid = '{}'::oid and {alias}objid = '{}'::oid \
         and {alias}objsubid = 1 and {alias}granted \
         and {alias}database = (select oid from pg_database where datname = current_database()))",
        (LEAD_LOCK >> 32) as u32,
        (LEAD_LOCK & 0xffff_ffff) as u32
    )
}

/// What an instance does at a time (`orca.schedulers.role`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Waiting,
    Leading,
    Draining,
}

impl Role {
    pub fn parse(text: &str) -> Option<Role> {
        match text {
            "waiting" => Some(Role::Waiting),
            "leading" => Some(Role::Leading),
            "draining" => Some(Role::Draining),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Waiting => "waiting",
            Role::Leading => "leading",
            Role::Draining => "draining",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The process that joins (`join`).
#[derive(Clone, Copy, Debug)]
pub struct Joining<'a> {
    /// The host name (the pod's name in Kubernetes).
    host: &'a str,
    pid: i32,
    /// `ORCA_IMAGE`.
    image: &'a str,
    /// How many migrations this binary knows.
    migrations: i32,
}

impl<'a> Joining<'a> {
    /// The process on `host` (its pod's name) as `pid`, of `image`,
    /// knowing `migrations` migrations.
    pub fn new(host: &'a str, pid: i32, image: &'a str, migrations: i32) -> Self {
        Joining {
            host,
            pid,
            image,
            migrations,
        }
    }
}

/// Adds this process's row, `waiting`; returns its id. Run it on the
/// connection that will take the lead: the row's `backend_pid` is that
/// session's, which is what [`wait_for_lead`] looks for in `pg_locks`.
pub async fn join(db: &Db, me: &Joining<'_>) -> Result<i64, DbError> {
    let row = db
        .query_one(
            "with r as (
                 insert into orca.schedulers (host, pid, backend_pid, image, migrations)
                 values ($1, $2, pg_backend_pid(), $3, $4) returning id
             )
             select id, pg_notify($5, 'join ' || id) from r",
            &[&me.host, &me.pid, &me.image, &me.migrations, &CHANNEL],
        )
        .await?;
    Ok(row.get(0))
}

/// What a [`beat`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Beat {
    /// The row is there; whether someone asked the instance to drain.
    Going { drain_asked: bool },
    /// The row has ended (someone else ended it): the instance must stop.
    Ended,
}

/// Marks instance `id` seen, with `running` (run ids, comma-separated) the
/// runs its processes are; says whether it was asked to drain, or that its
/// row has ended.
pub async fn beat(db: &Db, id: i64, running: &str) -> Result<Beat, DbError> {
    let row = db
        .query_opt(
            "update orca.schedulers set seen = now(), running = $2
             where id = $1 and ended is null
             returning drain_asked is not null",
            &[&id, &running],
        )
        .await?;
    Ok(match row {
        Some(row) => Beat::Going {
            drain_asked: row.get(0),
        },
        None => Beat::Ended,
    })
}

/// The newest live instance after `id` that isn't draining, or 0.
pub async fn newer(db: &Db, id: i64, stale: Duration) -> Result<i64, DbError> {
    let sql = format!(
        "select coalesce(max(id), 0) from orca.schedulers
         where id > $1 and role <> 'draining' and {}",
        live_cond(stale)
    );
    Ok(db.query_one(&sql, &[&id]).await?.get(0))
}

/// Takes the lead for instance `id` if no one holds it, and records it
/// (`role`, `backend_pid`, `led`). Call it on the instance's dedicated lock
/// connection, and only when that session doesn't hold the lock already
/// (session locks count). A draining or ended instance never leads: the
/// lock is given back at once.
pub async fn try_lead(db: &Db, id: i64) -> Result<bool, DbError> {
    let got: bool = db
        .query_one("select pg_try_advisory_lock($1)", &[&LEAD_LOCK])
        .await?
        .get(0);
    if !got {
        return Ok(false);
    }
    let recorded = db
        .query_opt(
            "with r as (
                 update orca.schedulers
                 set role = 'leading', backend_pid = pg_backend_pid(), led = now()
                 where id = $1 and ended is null and role <> 'draining'
                 returning id
             )
             select id, pg_notify($2, 'lead ' || id) from r",
            &[&id, &CHANNEL],
        )
        .await;
    match recorded {
        Ok(Some(_)) => Ok(true),
        Ok(None) => {
            db.query_one("select pg_advisory_unlock($1)", &[&LEAD_LOCK])
                .await?;
            Ok(false)
        }
        Err(e) => {
            // The session may still be good: don't keep a lock nobody knows of.
            let _ = db
                .query_one("select pg_advisory_unlock($1)", &[&LEAD_LOCK])
                .await;
            Err(e)
        }
    }
}

/// SQL true when this session's backend holds [`LEAD_LOCK`], to guard a
/// leader's statement with the lead itself.
pub fn lead_held_cond() -> String {
    format!(
        "exists (select 1 from pg_locks where pid = pg_backend_pid() and {})",
        lead_lock_granted("")
    )
}

/// The leader's self-check, every tick: whether this session's backend still
/// holds [`LEAD_LOCK`] in `pg_locks`.
pub async fn holds_lead(db: &Db) -> Result<bool, DbError> {
    let sql = format!("select {}", lead_held_cond());
    Ok(db.query_one(&sql, &[]).await?.get(0))
}

/// Records that a leader found it no longer holds the lock (its `role` goes
/// back to `waiting`; a draining or ended row is left as it is).
pub async fn lost_lead(db: &Db, id: i64) -> Result<(), DbError> {
    db.execute(
        "update orca.schedulers set role = 'waiting' where id = $1 and role = 'leading'",
        &[&id],
    )
    .await?;
    Ok(())
}

/// Instance `id` drains: gives up the lead if it held it (`leading`, on the
/// lock connection), and records that it drains.
pub async fn step_down(db: &Db, id: i64, leading: bool) -> Result<(), DbError> {
    db.query_one(
        "with r as (
             update orca.schedulers set role = 'draining', drained = coalesce(drained, now())
             where id = $1 and ended is null returning id
         )
         select pg_notify($2, 'drain ' || $1::bigint) from (select 1) one",
        &[&id, &CHANNEL],
    )
    .await?;
    if leading {
        db.query_one("select pg_advisory_unlock($1)", &[&LEAD_LOCK])
            .await?;
    }
    Ok(())
}

/// Instance `id` has ended: gone at once, for the leader's requeue. Its
/// role becomes `draining` (an ended instance never leads again); if someone
/// else ends it, its next [`beat`] finds [`Beat::Ended`] and it stops.
pub async fn end(db: &Db, id: i64) -> Result<(), DbError> {
    db.query_one(
        "with r as (
             update orca.schedulers set ended = now(), role = 'draining'
             where id = $1 and ended is null returning id
         )
         select pg_notify($2, 'end ' || $1::bigint) from (select 1) one",
        &[&id, &CHANNEL],
    )
    .await?;
    Ok(())
}

/// Asks live instance `id` to drain; false if there's no such one.
pub async fn ask_drain(db: &Db, id: i64, stale: Duration) -> Result<bool, DbError> {
    let sql = format!(
        "with r as (
             update orca.schedulers set drain_asked = coalesce(drain_asked, now())
             where id = $1 and {} returning id
         )
         select id, pg_notify($2, 'ask ' || id) from r",
        live_cond(stale)
    );
    Ok(db.query_opt(&sql, &[&id, &CHANNEL]).await?.is_some())
}

/// A live instance that knows fewer migrations than a floor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Older {
    id: i64,
    host: String,
    migrations: i32,
}

impl Older {
    pub fn id(&self) -> i64 {
        self.id
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn migrations(&self) -> i32 {
        self.migrations
    }
}

/// The instances still going (live) that know fewer than `floor` migrations;
/// none where `orca.schedulers` doesn't exist yet.
pub async fn live_older(db: &Db, floor: i32, stale: Duration) -> Result<Vec<Older>, DbError> {
    if !schedulers_exist(db).await? {
        return Ok(Vec::new());
    }
    let sql = format!(
        "select id, host, migrations from orca.schedulers
         where migrations < $1 and {} order by id",
        live_cond(stale)
    );
    Ok(db
        .query(&sql, &[&floor])
        .await?
        .iter()
        .map(|r| Older {
            id: r.get(0),
            host: r.get(1),
            migrations: r.get(2),
        })
        .collect())
}

async fn schedulers_exist(db: &Db) -> Result<bool, DbError> {
    Ok(db
        .query_one("select to_regclass('orca.schedulers') is not null", &[])
        .await?
        .get(0))
}

/// Why this binary can't start beside the scheduler going now, or empty if
/// it can: with instances live, one of them leads, and none knows fewer
/// migrations than `floor`, which this binary's migrations would raise past
/// it. Empty with no live instance, or no `orca.schedulers` yet. Doesn't
/// migrate.
pub async fn overlap_refusal(db: &Db, floor: i32, stale: Duration) -> Result<String, DbError> {
    if !schedulers_exist(db).await? {
        return Ok(String::new());
    }
    let older = live_older(db, floor, stale).await?;
    if !older.is_empty() {
        let who: Vec<String> = older
            .iter()
            .map(|o| format!("instance {} on {} knows {}", o.id, o.host, o.migrations))
            .collect();
        return Ok(format!(
            "overlap refused: {} migrations, fewer than this binary's floor of {floor}, which its migrations would raise the schema past; drain it first",
            who.join(", ")
        ));
    }
    let sql = format!(
        "select id, role = 'leading' from orca.schedulers where {} order by id",
        live_cond(stale)
    );
    let live = db.query(&sql, &[]).await?;
    if live.is_empty() || live.iter().any(|r| r.get::<_, bool>(1)) {
        return Ok(String::new());
    }
    let ids: Vec<String> = live
        .iter()
        .map(|r| r.get::<_, i64>(0).to_string())
        .collect();
    Ok(format!(
        "overlap refused: instances {} are live and none of them leads; start once one leads or they have ended",
        ids.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_cond_is_the_stale_limit_in_milliseconds() {
        assert_eq!(
            live_cond(Duration::from_millis(2500)),
            "(ended is null and seen > now() - interval '2500 milliseconds')"
        );
    }

    #[test]
    fn the_lock_key_is_split_as_pg_locks_shows_it() {
        assert!(lead_lock_granted("").contains("classid = '0'::oid"));
        assert!(lead_lock_granted("l.").contains("l.objid = '1869767525'::oid"));
    }

    #[test]
    fn roles_round_trip() {
        for role in [Role::Waiting, Role::Leading, Role::Draining] {
            assert_eq!(Role::parse(role.as_str()), Some(role));
        }
        assert_eq!(Role::parse("boss"), None);
    }
}
