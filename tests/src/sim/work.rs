//! What only the leader does each tick: requeue the runs of gone
//! instances once their heartbeats are stale too, and start queued runs.
//! Both statements carry their own guard, so a leader that has just lost
//! the lock, or an instance that a newer one has just joined beside, changes
//! nothing. Each records what it decided in the same statement
//! ([`decisions`]).

use std::time::Duration;

use orca_db::{schedulers, Db, DbError};

use super::{args::Config, decisions, supervise::Run};

/// A run the leader started, with its pipeline.
pub struct Started {
    run: Run,
    pipeline: String,
}

impl Started {
    /// The run started.
    pub fn run(&self) -> Run {
        self.run
    }

    /// Its pipeline.
    pub fn pipeline(&self) -> &str {
        &self.pipeline
    }
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// With overlap on (`id` given): this session holds the lead, and no live
/// instance newer than `id` is there to take it. With
/// `--unsafe-skip-lead-lock` (tests only) the lock is not asked for.
fn lead_guard(config: &Config, id: Option<i64>) -> String {
    match id {
        None => "true".into(),
        Some(id) => format!(
            "{held} and not exists (select 1 from orca.schedulers s
                 where s.id > {id} and s.role <> 'draining' and {live})",
            held = if config.unsafe_skip_lead_lock() {
                "true".into()
            } else {
                schedulers::lead_held_cond()
            },
            live = schedulers::live_cond(config.stale()),
        ),
    }
}

/// Queues again the runs whose instance is gone (or that have none) and
/// whose heartbeat is stale, unless a live instance lists them in its
/// `running`. Nobody is judged gone for an outage of the judge's own: the
/// judging session must have been connected for the stale limit, so every
/// live instance has had the time to beat since the server came back.
pub async fn requeue_orphans(
    db: &Db,
    config: &Config,
    id: Option<i64>,
) -> Result<Vec<(Run, Option<i64>)>, DbError> {
    let stale = ms(config.stale());
    let live = schedulers::live_cond(config.stale());
    let sql = format!(
        "with r as (
         update orca.runs r
         set status = 'queued', owner = null, heartbeat = null, instance = null
         where r.status = 'running'
           and (r.heartbeat is null or r.heartbeat < now() - interval '{stale} milliseconds')
           and r.owner is distinct from $1
           and not exists (select 1 from orca.schedulers s where s.id = r.instance and {live})
           and not exists (select 1 from orca.schedulers s
                           where {live} and r.id::text = any (string_to_array(s.running, ',')))
           and (select backend_start from pg_stat_activity where pid = pg_backend_pid())
               < now() - interval '{stale} milliseconds'
           and {guard}
         returning r.id, r.start, (select instance from orca.runs o where o.id = r.id) as instance
         ){decided}
         select id, start, instance from r",
        guard = lead_guard(config, id),
        decided = decisions::cte(
            id,
            "'requeue run=' || r.id || ' start=' || r.start || ' from=' || coalesce(r.instance::text, 'none')"
        ),
    );
    let rows = db.query(&sql, &[&config.owner()]).await?;
    Ok(rows
        .iter()
        .map(|r| (Run::new(r.get(0), r.get(1)), r.get(2)))
        .collect())
}

/// Starts the queued runs, oldest first: `running`, `start`+1, this
/// instance, owner and a fresh heartbeat.
pub async fn start_queued(
    db: &Db,
    config: &Config,
    id: Option<i64>,
) -> Result<Vec<Started>, DbError> {
    let sql = format!(
        "with r as (
         update orca.runs r
         set status = 'running', start = r.start + 1, instance = $1, owner = $2, heartbeat = now()
         where r.id in (select q.id from orca.runs q where q.status = 'queued'
                        order by q.id limit 100 for update skip locked)
           and {guard}
         returning r.id, r.start, r.pipeline
         ){decided}
         select id, start, pipeline from r",
        guard = lead_guard(config, id),
        decided = decisions::cte(id, "'start run=' || r.id || ' start=' || r.start"),
    );
    let rows = db.query(&sql, &[&id, &config.owner()]).await?;
    let mut started: Vec<Started> = rows
        .iter()
        .map(|r| Started {
            run: Run::new(r.get(0), r.get(1)),
            pipeline: r.get(2),
        })
        .collect();
    started.sort_by_key(|s| s.run.id());
    Ok(started)
}
