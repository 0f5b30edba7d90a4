//! The operator's side of the pool protocol: what its pool loop reads of
//! `orca.instances` and
//! `orca.pool_demand` (ages computed by the database clock,
//! docs/architecture.md#time-and-clocks), and
//! the operator's claim on an instance it terminates that has no live row.
//!
//! The claim closes the race the race-free end
//! (docs/protocol.md#the-race-free-end) closes for idle
//! rows: an instance without a live row may be booting late, and its agent
//! may write its `warm` row (and a scheduler hand it out) between the
//! observation and `TerminateInstances`. The claim is a live, never-idle
//! row: while it stands no agent can write one (one live row per instance)
//! and no hand-out can take it (a hand-out takes idle rows only). If the
//! agent got there first the claim fails and the instance is not touched.

use std::collections::HashSet;

pub use orca_core::rows::{HandOut, PoolRow, Served, Source};

use crate::{Db, DbError};

/// The most live rows the operator reads of one pool (a pool holds at most
/// 10 000 instances, each one live row).
pub const MAX_ROWS: usize = 20_000;

/// The pool's live rows. A claim is a `worker` row without a run, which no
/// scheduler or agent writes. `uses` is counted (one scan of the pool's
/// rows) only when `count_uses`: for `maxUses`.
pub async fn live_rows(db: &Db, pool: &str, count_uses: bool) -> Result<Vec<PoolRow>, DbError> {
    let rows = db
        .query_at_most(
            "with live as (
                 select * from orca.instances where pool = $1 and ended is null),
             uses as (
                 select instance, count(*) as n from orca.instances
                 where $2 and pool = $1 and run is not null
                   and instance in (select instance from live)
                 group by instance)
             select l.id, left(l.instance, 64), l.run,
                    extract(epoch from now() - l.idle)::float8,
                    extract(epoch from now() - l.polled)::float8,
                    coalesce(u.n, 0),
                    l.role = 'worker' and l.run is null,
                    l.reserved is not null,
                    case when l.idle is null
                         then extract(epoch from now() - l.woken)::float8 end,
                    l.notice is not null,
                    coalesce(l.notice = 'interruption', false)
             from live l left join uses u on u.instance = l.instance
             limit 20001",
            &[&pool, &count_uses],
            MAX_ROWS,
            "live rows of one pool",
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            PoolRow::new(r.get(0), r.get(1))
                .with_run(r.get(2))
                .with_idle_secs(r.get(3))
                .with_polled_secs(r.get(4))
                .with_uses(r.get(5))
                .with_claim(r.get(6))
                .with_reserved(r.get(7))
                .with_woken_secs(r.get(8))
                .with_noticed(r.get(9))
                .with_interrupted(r.get(10))
        })
        .collect())
}

/// Of `ids` (instances without a live row when the rows were read), those
/// that had a row once and still have no live one: an agent that reported
/// since is not taken for one whose row ended.
pub async fn known(db: &Db, ids: &[String]) -> Result<HashSet<String>, DbError> {
    if ids.is_empty() {
        return Ok(HashSet::new());
    }
    let rows = db
        .query(
            "select instance from orca.instances where instance = any($1)
             group by instance having bool_and(ended is not null)",
            &[&ids],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Of `ids`, the instances that ever had a row of `pool` — whose agents
/// reported to this database: this pool's, whoever else's tags they carry.
pub async fn had_rows(db: &Db, pool: &str, ids: &[String]) -> Result<HashSet<String>, DbError> {
    if ids.is_empty() {
        return Ok(HashSet::new());
    }
    let rows = db
        .query(
            "select distinct instance from orca.instances where pool = $1 and instance = any($2)",
            &[&pool, &ids],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The race-free end (docs/protocol.md#the-race-free-end) of many idle rows
/// in one statement, by the operator: [`super::end_idle`]'s statement over a
/// set of ids. Each row is locked and rechecked on its own, so a hand-out
/// holding one makes this skip it once the hand-out commits. Returns the
/// ids it ended: only their instances may be terminated.
pub async fn end_idle_rows(db: &Db, rows: &[i64]) -> Result<HashSet<i64>, DbError> {
    if rows.is_empty() {
        return Ok(HashSet::new());
    }
    let ended = db
        .query(end_idle!("id = any($1)"), &[&rows, &"operator"])
        .await?;
    Ok(ended.iter().map(|r| r.get(0)).collect())
}

/// Of `pool`'s hand-outs in the last `hours` hours, how many started
/// their run within `secs` (a run handed an instance at once waited
/// nothing) and how many there were, joined as [`hand_outs_since`] joins
/// them.
pub async fn attainment(db: &Db, pool: &str, secs: f64, hours: i32) -> Result<(u64, u64), DbError> {
    let row = db
        .query_one(
            "select count(*) filter (where coalesce(waited, 0) <= $2), count(*)
             from (select extract(epoch from h.created - (
                          select d.asked from orca.pool_demand d
                          where d.pool = $1 and d.run = h.run and d.start = h.start
                            and d.served = h.created
                          order by d.asked limit 1))::float8 as waited
                   from orca.instances w
                   join orca.instances h
                     on h.instance = w.instance and h.pooled and h.created = w.ended
                   where w.pool = $1 and w.ended_by = 'handout'
                     and w.ended > now() - make_interval(hours => $3)) starts",
            &[&pool, &secs, &hours],
        )
        .await?;
    let n = |i: usize| u64::try_from(row.get::<_, i64>(i)).unwrap_or(0);
    Ok((n(0), n(1)))
}

/// The hand-outs of `pool` whose idle row ended after `after` (the
/// database's epoch seconds), oldest first: 10 000 at most, the next
/// call going on from the last one's. A hand-out ends the idle row
/// and makes the run's row at the same `now()`, and marks the run's demand
/// served at it too: that is how the three are joined.
pub async fn hand_outs_since(db: &Db, pool: &str, after: f64) -> Result<Vec<HandOut>, DbError> {
    let rows = db
        .query(
            "select w.woken is not null,
                    extract(epoch from h.created - (
                        select d.asked from orca.pool_demand d
                        where d.pool = $1 and d.run = h.run and d.start = h.start
                          and d.served = h.created
                        order by d.asked limit 1))::float8,
                    extract(epoch from w.ended)::float8,
                    w.instance
             from orca.instances w
             join orca.instances h
               on h.instance = w.instance and h.pooled and h.created = w.ended
             where w.pool = $1 and w.ended_by = 'handout'
               and w.ended > to_timestamp($2)
             order by w.ended
             limit 10000",
            &[&pool, &after],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            let waited: Option<f64> = r.get(1);
            let source = match (r.get::<_, bool>(0), waited) {
                (true, _) => Source::Reserve,
                (false, Some(_)) => Source::Cold,
                (false, None) => Source::Idle,
            };
            HandOut::new(r.get(3), source, waited.unwrap_or(0.0).max(0.0), r.get(2))
        })
        .collect())
}

/// The runs of `pool` that needed an instance in the last `weeks` weeks,
/// counted by slice of `slice_secs` (slice `k` is `[k * slice_secs,
/// (k + 1) * slice_secs)` in epoch seconds): each hand-out at the run's
/// first ask if it had to ask (it waited), else at the hand-out. Runs that
/// gave up before a hand-out are not counted.
pub async fn demand_history(
    db: &Db,
    pool: &str,
    slice_secs: i64,
    weeks: i32,
) -> Result<Vec<(i64, u32)>, DbError> {
    let rows = db
        .query(
            "select floor(extract(epoch from coalesce(
                        (select min(d.asked) from orca.pool_demand d
                         where d.pool = $1 and d.run = h.run and d.start = h.start
                           and d.served = h.created),
                        w.ended))::float8 / $2::float8)::int8,
                    count(*)
             from orca.instances w
             join orca.instances h
               on h.instance = w.instance and h.pooled and h.created = w.ended
             where w.pool = $1 and w.ended_by = 'handout'
               and w.ended > now() - make_interval(weeks => $3)
             group by 1
             limit 100000",
            &[&pool, &(slice_secs.max(1) as f64), &weeks],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            (
                r.get(0),
                r.get::<_, i64>(1).clamp(0, i64::from(u32::MAX)) as u32,
            )
        })
        .collect())
}

/// Takes idle rows into the stopped reserve, race-free as
/// [`end_idle_rows`] ends them: a row a hand-out took first is skipped.
/// The row stays live (its agent waits, and comes back on it after the
/// restart) but is no longer idle, so no hand-out takes it. Returns the ids
/// it took: only their instances may be stopped.
pub async fn reserve_idle_rows(db: &Db, rows: &[i64]) -> Result<HashSet<i64>, DbError> {
    if rows.is_empty() {
        return Ok(HashSet::new());
    }
    let taken = db
        .query(
            "update orca.instances set idle = null, reserved = now()
             where id = any($1) and ended is null and idle is not null
             returning id",
            &[&rows],
        )
        .await?;
    Ok(taken.iter().map(|r| r.get(0)).collect())
}

/// Marks reserved rows woken, before their instances are started: a pass
/// that then sees the instance running does not take it for one still to
/// be stopped. Returns the ids it marked.
pub async fn wake_rows(db: &Db, rows: &[i64]) -> Result<HashSet<i64>, DbError> {
    if rows.is_empty() {
        return Ok(HashSet::new());
    }
    let woken = db
        .query(
            "update orca.instances set reserved = null, woken = now()
             where id = any($1) and ended is null and reserved is not null
             returning id",
            &[&rows],
        )
        .await?;
    Ok(woken.iter().map(|r| r.get(0)).collect())
}

/// Puts woken rows back into the reserve: their instances could not be
/// started. A row whose agent came back meanwhile (idle) is left alone.
pub async fn unwake_rows(db: &Db, rows: &[i64]) -> Result<(), DbError> {
    if rows.is_empty() {
        return Ok(());
    }
    db.execute(
        "update orca.instances set reserved = now(), woken = null
         where id = any($1) and ended is null and woken is not null and idle is null",
        &[&rows],
    )
    .await?;
    Ok(())
}

/// Retires a reserve instance: its reserved or woken row becomes the
/// operator's claim in one statement, so its agent (if the instance boots
/// meanwhile) finds the claim, never a row to mark idle. `None`: the row is
/// no longer reserved or woken (its agent marked it idle first).
pub async fn claim_reserved(db: &Db, row: i64) -> Result<Option<i64>, DbError> {
    let claim = db
        .query_opt(
            "with ended as (
                 update orca.instances set ended = now(), ended_by = 'operator'
                 where id = $1 and ended is null and idle is null
                   and (reserved is not null or woken is not null)
                 returning instance, pool)
             insert into orca.instances (instance, pool, role)
             select instance, pool, 'worker' from ended
             returning id",
            &[&row],
        )
        .await?;
    Ok(claim.map(|r| r.get(0)))
}

/// Claims an instance that has no live row; `None` if it has one now.
pub async fn claim(db: &Db, instance: &str, pool: &str) -> Result<Option<i64>, DbError> {
    let row = db
        .query_opt(
            "insert into orca.instances (instance, pool, role)
             values ($1, $2, 'worker')
             on conflict (instance) where ended is null do nothing
             returning id",
            &[&instance, &pool],
        )
        .await?;
    Ok(row.map(|r| r.get(0)))
}

/// Ends a claim once its instance is terminated (or gone).
pub async fn end_claim(db: &Db, row: i64) -> Result<(), DbError> {
    db.execute(
        "update orca.instances set ended = now(), ended_by = 'operator'
         where id = $1 and ended is null and role = 'worker' and run is null",
        &[&row],
    )
    .await?;
    Ok(())
}

/// Ends the busy row of an instance a deleted pool terminates past its
/// drain time-out, only while it is still that busy row: a run that just
/// ended made it idle (then it is retired as idle, by the race-free end).
/// Whether it ended it: only then may the instance be terminated.
pub async fn end_busy_row(db: &Db, row: i64) -> Result<bool, DbError> {
    let ended = db
        .query_opt(
            "update orca.instances set ended = now(), ended_by = 'operator'
             where id = $1 and ended is null and idle is null
             returning id",
            &[&row],
        )
        .await?;
    Ok(ended.is_some())
}
