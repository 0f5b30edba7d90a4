//! The warm pool's hand-out (docs/protocol.md#the-warm-pool-hand-out): the
//! scheduler hands an idle instance to a run ([`hand_out`]) or asks for one
//! ([`ask_for_instance`]); whoever ends an idle row for another reason does
//! it race-free ([`end_idle`]); and the instance's agent marks its row idle
//! ([`mark_idle`]), beats and looks for a new row ([`beat_and_look`]),
//! records that it joined ([`join`]), or watches a worker's run
//! ([`run_is_over`]). The operator's pool loop reads the demand that still
//! counts ([`open_demand`]) and what it needs to know of each live row
//! ([`clock`], [`check_rows`]), and ends the rows of instances EC2 no longer
//! runs ([`end_rows_of_gone`]); it lists the pool's live rows
//! ([`live_rows`]), ends idle rows race-free in bulk ([`end_idle_rows`]),
//! and claims an instance it terminates that has no live row ([`claim`]).
//!
//! Only the database clock judges time: every freshness and time-out test is
//! `now()` against a row, never this process's clock.

use std::{fmt, time::Duration};

use tokio_postgres::{
    types::{ToSql, Type},
    Row, Transaction,
};

use crate::{Db, DbError};

/// The race-free end's statement (docs/protocol.md#the-race-free-end): the
/// rows `$rows` selects are ended by `$2` only while they are live and idle,
/// so a hand-out that took one first wins; `returning id` says which.
macro_rules! end_idle {
    ($rows:literal) => {
        concat!(
            "update orca.instances set ended = now(), ended_by = $2 where ",
            $rows,
            " and ended is null and idle is not null returning id"
        )
    };
}

mod notice;
mod operator;

pub use notice::{record_notice, Notice};
pub use operator::{
    attainment, claim, claim_reserved, demand_history, end_busy_row, end_claim, end_idle_rows,
    had_rows, hand_outs_since, known, live_rows, reserve_idle_rows, unwake_rows, wake_rows,
    HandOut, PoolRow, Served, Source,
};

/// The client's bound on one of the agent's statements, a little beyond the
/// server's `statement_timeout` that the agent connects with: a connection
/// that died silently must not hold the agent.
const ONE_TRIP_LIMIT: Duration = Duration::from_secs(7);

/// One statement in one round trip and one transaction, with no separate
/// prepare (which the server would count as a transaction of its own): the
/// agent's statement every second costs the server one statement, and a
/// hand-out's `next` line one round trip less.
async fn one_trip(
    db: &Db,
    sql: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Option<Row>, DbError> {
    match tokio::time::timeout(ONE_TRIP_LIMIT, db.client().query_typed_opt(sql, params)).await {
        Ok(result) => result.map_err(|e| db.wrap(e)),
        Err(_) => Err(DbError::Timeout {
            what: "a statement",
            target: db.target().to_string(),
            after: ONE_TRIP_LIMIT,
        }),
    }
}

/// A run asking the pool for an instance (the row a hand-out inserts).
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// `namespace/name` of the WarmPool.
    pool: &'a str,
    run: i64,
    start: i32,
    /// `head` or `worker`.
    role: &'a str,
    head_address: &'a str,
    /// Whether the run may use new code (the last field of `next`).
    new_code: bool,
}

impl<'a> Request<'a> {
    /// A request of `pool` for `run`'s `start`, as a `role` (`head` or
    /// `worker`); a worker's `head_address` is its head's.
    pub fn new(
        pool: &'a str,
        run: i64,
        start: i32,
        role: &'a str,
        head_address: &'a str,
        new_code: bool,
    ) -> Self {
        Request {
            pool,
            run,
            start,
            role,
            head_address,
            new_code,
        }
    }

    /// `namespace/name` of the WarmPool asked.
    pub fn pool(&self) -> &'a str {
        self.pool
    }

    /// The run asking.
    pub fn run(&self) -> i64 {
        self.run
    }

    /// The run's start (its attempt).
    pub fn start(&self) -> i32 {
        self.start
    }
}

/// The instance a hand-out took, and the id of its new row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandedOut {
    instance: String,
    row: i64,
}

impl HandedOut {
    /// The EC2 instance id handed out.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The id of the row the hand-out made.
    pub fn row(&self) -> i64 {
        self.row
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// A live idle row of pool `$1` that may be handed out: its agent beat
/// within `$2` seconds and it carries no spot notice (its agent is
/// leaving); `rest` orders, narrows or locks.
fn pick(rest: &str) -> String {
    format!(
        "select id, instance from orca.instances
         where pool = $1 and ended is null and idle is not null
           and polled > now() - make_interval(secs => $2) and notice is null
         {rest}"
    )
}

/// Hands one idle instance of `req.pool` to the run, in one transaction:
/// locks the longest-idle row that may be handed out (`polled` within
/// `fresh`, no spot notice), ends it (`ended_by='handout'`), inserts the
/// run's row (`pooled`), and marks the run's open demand served. `None`: no
/// idle instance.
///
/// The row is locked `for update skip locked`, so two hand-outs never wait
/// on each other while a row is free. None free, the rows locked for a
/// moment (an agent's beat, the operator reserving or retiring a row,
/// another hand-out) are waited for one at a time, each in a transaction
/// that holds nothing else while it waits; a row that no longer matches
/// once its holder commits is let go, with the lock its recheck took,
/// before the next is tried (docs/protocol.md#the-hand-out-transaction).
pub async fn hand_out(
    db: &mut Db,
    req: &Request<'_>,
    fresh: Duration,
) -> Result<Option<HandedOut>, DbError> {
    let target = db.target().to_string();
    let wrap = |source| DbError::Statement {
        target: target.clone(),
        source,
    };
    let fresh = secs(fresh);
    // The row lock serialises this with end_idle: whichever comes second
    // finds the row ended (the recheck of `for update` sees its commit).
    let tx = db.transaction().await?;
    let free = tx
        .query_opt(
            &pick("order by idle, id limit 1 for update skip locked"),
            &[&req.pool, &fresh],
        )
        .await
        .map_err(wrap)?;
    if let Some(idle) = free {
        return take(tx, &idle, req).await.map(Some).map_err(wrap);
    }
    tx.rollback().await.map_err(wrap)?;
    loop {
        let next = db
            .client()
            .query_opt(&pick("order by idle, id limit 1"), &[&req.pool, &fresh])
            .await
            .map_err(wrap)?;
        let Some(next) = next else {
            return Ok(None);
        };
        let id: i64 = next.get(0);
        let tx = db.transaction().await?;
        let locked = tx
            .query_opt(&pick("and id = $3 for update"), &[&req.pool, &fresh, &id])
            .await
            .map_err(wrap)?;
        if let Some(idle) = locked {
            return take(tx, &idle, req).await.map(Some).map_err(wrap);
        }
        // Ended (or gone stale, or noticed) by the holder: the next pick
        // no longer sees it.
        tx.rollback().await.map_err(wrap)?;
    }
}

/// The rest of the hand-out, `idle` locked by `tx`: ends it, inserts the
/// run's row, serves the demand and commits.
async fn take(
    tx: Transaction<'_>,
    idle: &Row,
    req: &Request<'_>,
) -> Result<HandedOut, tokio_postgres::Error> {
    let (old, instance): (i64, String) = (idle.get(0), idle.get(1));
    tx.execute(
        "update orca.instances set ended = now(), ended_by = 'handout' where id = $1",
        &[&old],
    )
    .await?;
    let row: i64 = tx
        .query_one(
            "insert into orca.instances
                 (instance, pool, run, start, role, head_address, new_code, pooled)
             values ($1, $2, $3, $4, $5, $6, $7, true)
             returning id",
            &[
                &instance,
                &req.pool,
                &req.run,
                &req.start,
                &req.role,
                &req.head_address,
                &req.new_code,
            ],
        )
        .await?
        .get(0);
    tx.execute(
        "update orca.pool_demand set served = now()
         where pool = $1 and run = $2 and start = $3 and role = $4 and served is null",
        &[&req.pool, &req.run, &req.start, &req.role],
    )
    .await?;
    tx.commit().await?;
    Ok(HandedOut { instance, row })
}

/// Records that the run found no idle instance, for the operator to launch
/// one. Asking again while the demand is open changes nothing (the partial
/// unique index `pool_demand_open`).
pub async fn ask_for_instance(db: &Db, req: &Request<'_>) -> Result<(), DbError> {
    db.execute(
        "insert into orca.pool_demand (pool, run, start, role) values ($1, $2, $3, $4)
         on conflict (pool, run, start, role) where served is null do nothing",
        &[&req.pool, &req.run, &req.start, &req.role],
    )
    .await?;
    Ok(())
}

/// The race-free end of an idle row (docs/protocol.md#the-race-free-end),
/// `by` being `agent`,
/// `operator` or `scheduler`: true only if this call ended it. False means a
/// hand-out (or another ender) got there first, and the caller must not act
/// as if the instance were idle.
pub async fn end_idle(db: &Db, row: i64, by: &str) -> Result<bool, DbError> {
    let ended = one_trip(
        db,
        end_idle!("id = $1"),
        &[(&row, Type::INT8), (&by, Type::TEXT)],
    )
    .await?;
    Ok(ended.is_some())
}

/// The row `pool-next` waits on. `run == 0 && start == 0` is a fresh
/// instance, or one started again from the stopped reserve: its live `warm`
/// row, or the row the reserve kept (the row of the last run it served, if
/// it had served one; out of the reserve: idle from now), created in `pool`
/// if it has none.
/// Otherwise the live row of the run it served. Either is marked idle (kept
/// if it already was: an agent started again keeps its time-out) and
/// polled. `None`: no such live row (ended, or the instance has another).
pub async fn mark_idle(
    db: &Db,
    instance: &str,
    run: i64,
    start: i32,
    pool: Option<&str>,
) -> Result<Option<i64>, DbError> {
    let row = if run == 0 && start == 0 {
        one_trip(
            db,
            "with mine as (
                 update orca.instances
                 set idle = coalesce(idle, now()), polled = now(), reserved = null
                 where instance = $1 and ended is null
                   and (role = 'warm' or reserved is not null or woken is not null)
                 returning id),
             made as (
                 insert into orca.instances (instance, pool, role, idle, polled)
                 select $1, $2, 'warm', now(), now()
                 where not exists (select 1 from mine) and $2::text is not null
                 on conflict (instance) where ended is null do nothing
                 returning id)
             select id from mine union all select id from made",
            &[(&instance, Type::TEXT), (&pool, Type::TEXT)],
        )
        .await?
    } else {
        one_trip(
            db,
            "update orca.instances set idle = coalesce(idle, now()), polled = now()
             where instance = $1 and run = $2 and start = $3 and ended is null
             returning id",
            &[
                (&instance, Type::TEXT),
                (&run, Type::INT8),
                (&start, Type::INT4),
            ],
        )
        .await?
    };
    Ok(row.map(|r| r.get(0)))
}

/// What [`beat_and_look`] found.
#[derive(Clone, Debug, PartialEq)]
pub enum Look {
    /// Its own row is live and idle; it gives up once `left` has passed.
    Idle { left: Duration },
    /// Its own row is live, and `seconds` have passed since it went idle.
    Expired,
    /// A live row that is not its own, made by a hand-out (`pooled`, with a
    /// run): take it.
    HandedOut { row: i64 },
    /// Its own row changed while the statement ran: look again at once.
    Changed,
    /// The instance has no live row: ended with no other.
    Ended,
    /// A live row that is neither its own idle row nor a hand-out (the
    /// agent was started for a run the instance no longer serves).
    Busy { row: i64 },
    /// The operator's claim (a live `worker` row without a run, never
    /// pooled): the instance is being retired, and no run comes.
    Claimed { row: i64 },
    /// Its own row, taken for the stopped reserve: the instance is about to
    /// be stopped. Wait for it; after the restart the agent comes back idle
    /// on the same row.
    Reserved,
}

/// The agent's one statement a second: beats `polled` of its own row
/// `mine` and looks at the instance's live row, which a hand-out replaces
/// (recognised by its id, never by a timestamp). `wait` is how long after
/// `idle` the agent gives up, judged by the database's clock.
pub async fn beat_and_look(
    db: &Db,
    instance: &str,
    mine: Option<i64>,
    wait: Duration,
) -> Result<Look, DbError> {
    let live = one_trip(
        db,
        "with beat as (
             update orca.instances set polled = now()
             where id = $2 and ended is null
             returning extract(epoch from idle + make_interval(secs => $3) - now())::float8
                 as remaining)
         select i.id, i.pooled and i.run is not null, i.joined is not null,
                i.role = 'worker' and i.run is null and not i.pooled,
                i.idle is not null, (select remaining from beat),
                i.reserved is not null
         from orca.instances i
         where i.instance = $1 and i.ended is null",
        &[
            (&instance, Type::TEXT),
            (&mine.unwrap_or(-1), Type::INT8),
            (&secs(wait), Type::FLOAT8),
        ],
    )
    .await?;
    let Some(live) = live else {
        return Ok(Look::Ended);
    };
    let made = match (live.get(1), live.get(3)) {
        (true, _) => Made::HandOut {
            joined: live.get(2),
        },
        (false, true) => Made::Claim,
        (false, false) => Made::Other,
    };
    if live.get::<_, bool>(6) && mine == Some(live.get(0)) {
        return Ok(Look::Reserved);
    }
    Ok(look(mine, live.get(0), made, live.get(4), live.get(5)))
}

/// Who made an instance's live row, as the agent tells them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Made {
    /// A hand-out (`pooled`, with a run); `joined` once an agent took it.
    HandOut { joined: bool },
    /// The operator's claim on an instance it retires.
    Claim,
    /// Anything else: the agent's own rows, or a row of a run it was not
    /// handed.
    Other,
}

/// What the instance's live row `row` means to an agent whose own row is
/// `mine`: `made` says who made it, `idle` whether the row is idle, `left`
/// the time left to its own row if the beat updated it. Only a hand-out's
/// row is a run for the instance: anything else (the operator's claim
/// above all) must never print a `next` line.
fn look(mine: Option<i64>, row: i64, made: Made, idle: bool, left: Option<f64>) -> Look {
    match (mine, left) {
        (Some(m), Some(left)) if m == row && left > 0.0 => Look::Idle {
            left: Duration::try_from_secs_f64(left).unwrap_or(Duration::MAX),
        },
        (Some(m), Some(_)) if m == row => Look::Expired,
        // The statement's snapshot shows its idle row live, but the beat
        // found it ended: a hand-out (or an end) committed meanwhile.
        (Some(m), None) if m == row && idle => Look::Changed,
        // Its own row, live but no longer idle: someone else took it over.
        (Some(m), None) if m == row => Look::Busy { row },
        (Some(_), _) if matches!(made, Made::HandOut { .. }) => Look::HandedOut { row },
        (None, _) if made == (Made::HandOut { joined: false }) => Look::HandedOut { row },
        _ if made == Made::Claim => Look::Claimed { row },
        _ => Look::Busy { row },
    }
}

/// The run a hand-out gave the instance: the `next` line
/// (docs/protocol.md#the-next-line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Next {
    run: i64,
    start: i32,
    head_address: String,
    new_code: bool,
}

impl Next {
    /// The run handed out.
    pub fn run(&self) -> i64 {
        self.run
    }

    /// The run's start (its attempt).
    pub fn start(&self) -> i32 {
        self.start
    }
}

impl fmt::Display for Next {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "next {} {} {} {}",
            self.run,
            self.start,
            self.head_address,
            u8::from(self.new_code)
        )
    }
}

/// Records that the instance `joined` its new row (the first time only:
/// an agent started again keeps the first) and returns the run it was
/// handed. `None`: the row does not exist, or no hand-out made it (only a
/// `pooled` row with a run is a run for the instance).
pub async fn join(db: &Db, row: i64) -> Result<Option<Next>, DbError> {
    let joined = one_trip(
        db,
        "update orca.instances set joined = coalesce(joined, now())
             where id = $1 and pooled and run is not null
             returning run, start, head_address, new_code",
        &[(&row, Type::INT8)],
    )
    .await?;
    Ok(joined.map(|r| Next {
        run: r.get(0),
        start: r.get(1),
        head_address: r.get(2),
        new_code: r.get(3),
    }))
}

/// `pool-wait`'s check: whether the run is over for the instance, i.e. the
/// run is not `running` at `start` any more (status or start changed, or
/// there is no such run), or the instance's row for it has ended.
pub async fn run_is_over(db: &Db, instance: &str, run: i64, start: i32) -> Result<bool, DbError> {
    let over = one_trip(
        db,
        "select not coalesce((select status = 'running' and start = $3
                                  from orca.runs where id = $2), false)
                 or not exists (select 1 from orca.instances
                                where instance = $1 and run = $2 and start = $3
                                  and ended is null)",
        &[
            (&instance, Type::TEXT),
            (&run, Type::INT8),
            (&start, Type::INT4),
        ],
    )
    .await?;
    // A select without from: always exactly one row.
    Ok(over.is_some_and(|r| r.get(0)))
}

/// The database's clock, in seconds since the epoch. The operator's pool
/// loop reads it just before it lists EC2, so that a row can be told made
/// before the listing or after it by the database's clock alone
/// ([`check_rows`]).
pub async fn clock(db: &Db) -> Result<f64, DbError> {
    let now = db
        .query_one("select extract(epoch from now())::float8", &[])
        .await?;
    Ok(now.get(0))
}

/// The open demand of `pool` that still counts: how many rows. Only demand
/// whose run still waits at that start — the run is `queued` or `running`
/// with that `start` — counts; demand whose run was cancelled, finished,
/// deferred, restarted (its `start` moved on) or is gone is dropped.
/// `orca.pool_demand` has no column to record the drop, so such a row stays
/// unserved and is counted no more.
pub async fn open_demand(db: &Db, pool: &str) -> Result<i64, DbError> {
    let r = db
        .query_one(
            "select count(*)
             from orca.pool_demand d join orca.runs r on r.id = d.run
             where d.pool = $1 and d.served is null
               and r.start = d.start and r.status in ('queued', 'running')",
            &[&pool],
        )
        .await?;
    Ok(r.get(0))
}

/// What [`check_rows`] says of a live row of the pool.
#[derive(Clone, Debug, PartialEq)]
pub struct RowCheck {
    row: i64,
    /// Seconds the row was made before `listed` (negative: after), by the
    /// database's clock.
    made_before_listing: f64,
    /// A busy row (with a run, not idle) whose run is not `running` at the
    /// row's start any more (or is no more), or whose heartbeat — or the
    /// row's `created`, if that is later — is older than `stale`.
    hung: bool,
}

impl RowCheck {
    /// The row's id.
    pub fn row(&self) -> i64 {
        self.row
    }

    /// Seconds the row was made before the listing (negative: after).
    pub fn made_before_listing(&self) -> f64 {
        self.made_before_listing
    }

    /// Busy with a run that has ended or whose heartbeat is stale.
    pub fn hung(&self) -> bool {
        self.hung
    }
}

/// Checks each live row of `pool` against `listed` (the database's
/// [`clock`] read just before EC2 was listed) and against its run.
pub async fn check_rows(
    db: &Db,
    pool: &str,
    listed: f64,
    stale: Duration,
) -> Result<Vec<RowCheck>, DbError> {
    let rows = db
        .query_at_most(
            "select i.id, extract(epoch from to_timestamp($2) - i.created)::float8,
                    i.idle is null and i.run is not null
                    and not coalesce((select r.status = 'running' and r.start = i.start
                                             and greatest(r.heartbeat, i.created)
                                                 > now() - make_interval(secs => $3)
                                      from orca.runs r where r.id = i.run), false)
             from orca.instances i
             where i.pool = $1 and i.ended is null
             limit 20001",
            &[&pool, &listed, &secs(stale)],
            operator::MAX_ROWS,
            "live rows of one pool",
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| RowCheck {
            row: r.get(0),
            made_before_listing: r.get(1),
            hung: r.get(2),
        })
        .collect())
}

/// The operator's end of the live rows `rows` of instances EC2 no longer
/// runs: by id and whatever the row (idle, busy, a claim), `ended_by =
/// 'operator'`, so that no hand-out takes a dead instance. Each row is
/// locked and rechecked on its own (`ended is null`): one a hand-out ended
/// meanwhile is left alone, and the hand-out's new row is another id.
/// Returns the ids it ended.
pub async fn end_rows_of_gone(db: &Db, rows: &[i64]) -> Result<Vec<i64>, DbError> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let ended = db
        .query(
            "update orca.instances set ended = now(), ended_by = 'operator'
             where id = any($1) and ended is null
             returning id",
            &[&rows],
        )
        .await?;
    Ok(ended.iter().map(|r| r.get(0)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_live_row_means_to_the_agent() {
        let idle = |ms| Look::Idle {
            left: Duration::from_millis(ms),
        };
        let (own, claim, other) = (Made::Other, Made::Claim, Made::Other);
        let fresh = Made::HandOut { joined: false };
        let joined = Made::HandOut { joined: true };
        for (mine, row, made, is_idle, left, want) in [
            (Some(5), 5, own, true, Some(0.25), idle(250)),
            (Some(5), 5, own, true, Some(0.0), Look::Expired),
            (Some(5), 5, own, true, Some(-3.0), Look::Expired),
            // Ended by a hand-out that committed while the beat ran.
            (Some(5), 5, own, true, None, Look::Changed),
            (Some(5), 5, own, false, None, Look::Busy { row: 5 }),
            // A new row, recognised by its id alone, and made by a hand-out.
            (Some(5), 9, fresh, false, None, Look::HandedOut { row: 9 }),
            (Some(5), 9, joined, false, None, Look::HandedOut { row: 9 }),
            // The operator's claim, or any other row, is no run: never a
            // `next` line.
            (Some(5), 9, claim, false, None, Look::Claimed { row: 9 }),
            (Some(5), 9, other, false, None, Look::Busy { row: 9 }),
            // An agent without a row of its own takes only an unjoined
            // hand-out.
            (None, 9, fresh, false, None, Look::HandedOut { row: 9 }),
            (None, 9, joined, false, None, Look::Busy { row: 9 }),
            (None, 9, other, true, None, Look::Busy { row: 9 }),
            (None, 9, claim, false, None, Look::Claimed { row: 9 }),
        ] {
            assert_eq!(
                look(mine, row, made, is_idle, left),
                want,
                "{mine:?} {row} {made:?} {left:?}"
            );
        }
    }

    #[test]
    fn the_next_line() {
        let next = Next {
            run: 12,
            start: 3,
            head_address: "10.0.0.7:6379".into(),
            new_code: true,
        };
        assert_eq!(next.to_string(), "next 12 3 10.0.0.7:6379 1");
    }
}
