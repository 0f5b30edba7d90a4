//! The driving half of the scheduler-instance protocol
//! (docs/protocol.md#the-calls), the operator's: a snapshot of the rows
//! with what only the database can say (live, holding the lead lock), the
//! `instances` lines, and `wait_for_lead`.

use std::{fmt, time::Duration};

use chrono::{DateTime, Utc};
use orca_core::scheduler::InstanceView;
use tokio_postgres::Row;

use super::{lead_lock_granted, live_of, Role, CHANNEL};
use crate::{Db, DbError};

/// Instances last seen or ended longer ago than this are left out of
/// [`instances`] (they are "long gone").
const LONG_GONE: &str = "1 hour";

/// One row of `orca.schedulers` as the operator sees it, with what only the
/// database can say: whether it is live and whether its backend holds the
/// lead lock.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerRow {
    id: i64,
    host: String,
    pid: i32,
    backend_pid: Option<i32>,
    image: String,
    migrations: i32,
    role: Role,
    /// The runs its processes are (`running`, parsed).
    running: Vec<i64>,
    drain_asked: Option<DateTime<Utc>>,
    joined: DateTime<Utc>,
    seen: DateTime<Utc>,
    led: Option<DateTime<Utc>>,
    drained: Option<DateTime<Utc>>,
    ended: Option<DateTime<Utc>>,
    /// Not ended and seen within the stale limit.
    live: bool,
    /// Its `backend_pid` holds [`LEAD_LOCK`](super::LEAD_LOCK) (`pg_locks`).
    holds_lock: bool,
    /// Seconds since it was last seen, by the database clock.
    seen_ago: f64,
}

impl SchedulerRow {
    pub fn id(&self) -> i64 {
        self.id
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    pub fn backend_pid(&self) -> Option<i32> {
        self.backend_pid
    }

    pub fn image(&self) -> &str {
        &self.image
    }

    pub fn migrations(&self) -> i32 {
        self.migrations
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// The runs its processes are (`running`, parsed).
    pub fn running(&self) -> &[i64] {
        &self.running
    }

    pub fn drain_asked(&self) -> Option<DateTime<Utc>> {
        self.drain_asked
    }

    pub fn joined(&self) -> DateTime<Utc> {
        self.joined
    }

    pub fn seen(&self) -> DateTime<Utc> {
        self.seen
    }

    pub fn led(&self) -> Option<DateTime<Utc>> {
        self.led
    }

    pub fn drained(&self) -> Option<DateTime<Utc>> {
        self.drained
    }

    pub fn ended(&self) -> Option<DateTime<Utc>> {
        self.ended
    }

    /// Not ended and seen within the stale limit.
    pub fn live(&self) -> bool {
        self.live
    }

    /// Its `backend_pid` holds [`LEAD_LOCK`](super::LEAD_LOCK) (`pg_locks`).
    pub fn holds_lock(&self) -> bool {
        self.holds_lock
    }

    /// Seconds since it was last seen, by the database clock.
    pub fn seen_ago(&self) -> f64 {
        self.seen_ago
    }

    /// Leading as `pg_locks` says, not only as its `role` says.
    pub fn leads(&self) -> bool {
        self.live && self.role == Role::Leading && self.holds_lock
    }

    /// The row as the Scheduler's decision sees it.
    pub fn view(&self) -> InstanceView {
        InstanceView::new(
            self.id,
            self.host.clone(),
            self.image.clone(),
            self.role.as_str().to_string(),
            self.joined,
        )
        .with_live(self.live)
        .with_ended(self.ended)
        .with_holds_lock(self.holds_lock)
        .with_led(self.led)
        .with_drain_asked(self.drain_asked)
        .with_runs(self.running.len().try_into().unwrap_or(i32::MAX))
    }
}

/// Each text at most so long: a pod's name, an image reference, a role,
/// and the runs going (dropped whole if longer, never cut inside an id).
const COLUMNS: &str = "s.id, left(s.host, 512), s.pid, s.backend_pid, left(s.image, 1024), \
     s.migrations, left(s.role, 32), \
     case when length(s.running) <= 65536 then s.running else '' end, \
     s.drain_asked, s.joined, s.seen, s.led, s.drained, s.ended";

/// The most instance rows read (not long gone: an hour's).
pub const MAX_INSTANCES: usize = 1000;

fn to_row(row: &Row) -> Result<SchedulerRow, DbError> {
    let id: i64 = row.get(0);
    let role: String = row.get(6);
    let running: String = row.get(7);
    Ok(SchedulerRow {
        id,
        host: row.get(1),
        pid: row.get(2),
        backend_pid: row.get(3),
        image: row.get(4),
        migrations: row.get(5),
        role: Role::parse(&role).ok_or_else(|| {
            DbError::Migration(format!(
                "orca.schedulers row {id} has role {role:?}, which this binary doesn't know"
            ))
        })?,
        running: running
            .split(',')
            .filter_map(|r| r.trim().parse().ok())
            .collect(),
        drain_asked: row.get(8),
        joined: row.get(9),
        seen: row.get(10),
        led: row.get(11),
        drained: row.get(12),
        ended: row.get(13),
        live: row.get(14),
        holds_lock: row.get(15),
        seen_ago: row.get(16),
    })
}

async fn rows(
    db: &Db,
    filter: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    stale: Duration,
) -> Result<Vec<SchedulerRow>, DbError> {
    let sql = format!(
        "select {COLUMNS}, {live} as live,
                exists (select 1 from pg_locks l where l.pid = s.backend_pid and {lock}) as holds,
                extract(epoch from now() - s.seen)::float8 as seen_ago
         from orca.schedulers s where {filter} order by s.id limit {limit}",
        live = live_of("s.", stale),
        lock = lead_lock_granted("l."),
        limit = MAX_INSTANCES + 1,
    );
    db.query_at_most(
        &sql,
        params,
        MAX_INSTANCES,
        "scheduler instances not long gone",
    )
    .await?
    .iter()
    .map(to_row)
    .collect()
}

/// The instances a reconcile decides on, oldest first: those that ended
/// within the last hour, and those that have not ended — but one not seen
/// for an hour only if a pod of `hosts` runs it or it holds the lead lock.
/// A scheduler that died without ending its row (killed past its drain
/// time-out, its node gone, out of memory) leaves that row for ever, and
/// the years of them an installation gathers would fill the read
/// (a thousand rows at most) and stop every handover.
pub async fn observe(
    db: &Db,
    stale: Duration,
    hosts: &[String],
) -> Result<Vec<SchedulerRow>, DbError> {
    let filter = format!(
        "s.ended > now() - interval '{LONG_GONE}' or (s.ended is null and (
             s.seen > now() - interval '{LONG_GONE}' or s.host = any($1)
             or exists (select 1 from pg_locks l where l.pid = s.backend_pid and {lock})))",
        lock = lead_lock_granted("l."),
    );
    rows(db, &filter, &[&hosts], stale).await
}

/// A line for each instance not long gone (ended or unseen within the last
/// hour), oldest first: id, host and pid, role, image, migrations known, runs
/// going, and when it was last seen.
pub async fn instances(db: &Db, stale: Duration) -> Result<Vec<String>, DbError> {
    let filter = format!(
        "(s.ended is null or s.ended > now() - interval '{LONG_GONE}') and s.seen > now() - interval '{LONG_GONE}'"
    );
    Ok(rows(db, &filter, &[], stale)
        .await?
        .iter()
        .map(instance_line)
        .collect())
}

fn instance_line(r: &SchedulerRow) -> String {
    let state = if r.ended.is_some() {
        "ended"
    } else if r.live {
        if r.leads() {
            "live, holds the lead"
        } else {
            "live"
        }
    } else {
        "gone"
    };
    let runs = if r.running.is_empty() {
        "-".to_string()
    } else {
        r.running
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        "{} {} pid {} {} image {} migrations {} runs {} seen {:.1}s ago ({state})",
        r.id, r.host, r.pid, r.role, r.image, r.migrations, runs, r.seen_ago
    )
}

/// Who leads and who should: the newest live instance, and the instance
/// whose backend holds [`LEAD_LOCK`](super::LEAD_LOCK) in `pg_locks`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LeadState {
    /// The newest live instance, none with no instance live.
    newest: Option<SchedulerRow>,
    /// The instance whose `backend_pid` holds the lock (live or not).
    leader: Option<SchedulerRow>,
}

impl LeadState {
    /// The handover is over: no instance is live, or the newest live one
    /// holds the lock (what `wait_for_lead` waits for).
    pub fn is_over(&self) -> bool {
        match &self.newest {
            None => true,
            Some(n) => n.holds_lock && n.role == Role::Leading,
        }
    }
}

impl fmt::Display for LeadState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |r: &SchedulerRow| {
            format!(
                "instance {} ({} pid {}, image {})",
                r.id, r.host, r.pid, r.image
            )
        };
        match (&self.leader, &self.newest) {
            (_, None) => write!(f, "no instance is live"),
            (Some(l), Some(n)) if l.id == n.id => write!(f, "{} leads", name(l)),
            (Some(l), Some(n)) => write!(f, "{} leads; {} should", name(l), name(n)),
            (None, Some(n)) => write!(f, "no instance leads; {} should", name(n)),
        }
    }
}

/// A non-waiting look at the lead, for the operator's every reconcile: of
/// the live instances and the one holding the lead lock (not the rows of
/// schedulers long dead, which would fill the read).
pub async fn lead_state(db: &Db, stale: Duration) -> Result<LeadState, DbError> {
    let filter = format!(
        "{live} or exists (select 1 from pg_locks l where l.pid = s.backend_pid and {lock})",
        live = live_of("s.", stale),
        lock = lead_lock_granted("l."),
    );
    let rows = rows(db, &filter, &[], stale).await?;
    Ok(LeadState {
        newest: rows.iter().rev().find(|r| r.live).cloned(),
        leader: rows.iter().find(|r| r.holds_lock).cloned(),
    })
}

/// Waits, up to `timeout`, for the newest live instance to lead (verified in
/// `pg_locks`): a handover over. Returns the last [`LeadState`] seen: its
/// [`LeadState::is_over`] is the seed's answer (true at once with no instance
/// live), and it says who leads and who should. LISTENs on `db`.
pub async fn wait_for_lead(
    db: &mut Db,
    timeout: Duration,
    stale: Duration,
) -> Result<LeadState, DbError> {
    db.listen(CHANNEL).await?;
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let state = lead_state(db, stale).await?;
        let now = tokio::time::Instant::now();
        if state.is_over() || now >= deadline {
            return Ok(state);
        }
        // A notification wakes it early; polling stays the rule.
        let nap = (deadline - now).min(Duration::from_millis(100));
        let _ = tokio::time::timeout(nap, db.notification()).await;
    }
}
