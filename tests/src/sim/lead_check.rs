//! The lead-lock check: no `orca-sim` instance took a decision as leader
//! ([`super::decisions`]) without holding LEAD_LOCK at that moment
//! (docs/protocol.md#the-lead-lock), and no two instances decided in
//! overlapping lead periods.
//!
//! Postgres never grants LEAD_LOCK to two sessions, so counting its holders
//! proves nothing; what can go wrong is a scheduler acting as leader while
//! another session holds the lock, or while none does. [`LockSampler`]
//! watches `pg_locks` from outside every 50 ms, and [`judge`] checks the
//! decisions the instances recorded against what it saw. Rule 2 below is
//! the independent one: it needs nothing from the scheduler but the time and
//! session of each decision. Rules 1 and 3 read only the decisions' rows.
//!
//! # The rules
//!
//! A decision is `(instance i, session b, time t, holders)`: `b` the backend
//! (pid and start) whose statement decided, `t` its `clock_timestamp()`
//! inside that statement, `holders` the lock's holders as `pg_locks` showed
//! them inside that same statement. A sample is `(before, after, holders)`:
//! its `pg_locks` snapshot was taken at some instant between `before`
//! (`statement_timestamp()`) and `after` (`clock_timestamp()` once the
//! snapshot is read). All times are the one server's clock.
//!
//! 1. **The act's own view**: `holders` is exactly `[b]`.
//! 2. **The outside view**: let `p` be the last sample wholly before `t`
//!    (`p.after < t`) and `n` the first wholly after (`n.before > t`). It
//!    fails if `p` and `n` both show the same session `h` holding the lock
//!    and `h` is not `b` (same pid and same backend start: a pid may be
//!    reused). Then `h` held the lock across `t`, so `b` did not.
//! 3. **Lead periods**: a deciding session's period runs from its first
//!    decision to its last. Periods of sessions of different instances must
//!    not overlap.
//! 4. No sample shows two holders (Postgres' own guarantee, kept as a
//!    sanity check of the sampler's query).
//!
//! # Why a correct scheduler never fails them
//!
//! A correct leader's statement runs only if its own session holds the lock
//! (the statements' guard; `lead` is recorded just after `try_lead` got
//! it), and the session keeps the lock for the whole statement: rule 1.
//! Rules 2 and 3 rest on one more fact: **a session holds the lock in one
//! unbroken spell**. `orca-sim` takes it only in `try_lead` and gives it
//! up only when it steps down (draining is one-way) or with its session;
//! the only exception, `try_lead` giving the lock back at once for a row
//! that has ended or drains, never decides and stops at its next beat.
//! So a session seen holding at `p` and at `n` held it from `p` to `n`,
//! and nobody else could at `t` (rule 2); and a session's decisions lie
//! inside its spell, and two sessions' spells never overlap (rule 3).
//! Nothing in them depends on how often samples are taken: a handover
//! between two samples — the old leader's last decision, the unlock, the
//! new leader's lock and decisions all inside one 50 ms gap — shows the old
//! holder on one side of each decision and the new on the other, never the
//! same other session on both sides, so it passes.
//!
//! The price: a spell shorter than the gap between two samples is invisible
//! from outside. The rule "some sample next to `t` shows `b` holding" would
//! catch a leader deciding with nobody holding the lock, but it would also
//! fail a correct leader whose whole lead fell between two samples; that
//! case is left to rule 1, the database's own view at the act.

use std::{
    fmt::Write as _,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use chrono::{DateTime, Utc};
use orca_db::Db;

use super::decisions::lead_lock_row;
use crate::pg;

/// A backend: its pid, and its start (none where `pg_stat_activity` no
/// longer had it), since pids are reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Session {
    pid: i32,
    start: Option<DateTime<Utc>>,
}

impl Session {
    /// Backend `pid`, started at `start`.
    pub fn new(pid: i32, start: Option<DateTime<Utc>>) -> Self {
        Session { pid, start }
    }
}

impl Session {
    /// These, with `pid` set.
    pub fn with_pid(self, pid: i32) -> Self {
        Session { pid, ..self }
    }
}

impl Session {
    /// The backend's process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }
}

impl Session {
    /// Surely the same backend.
    fn same(&self, other: &Session) -> bool {
        self.pid == other.pid && self.start.is_some() && self.start == other.start
    }

    /// Perhaps the same backend.
    fn maybe(&self, other: &Session) -> bool {
        self.pid == other.pid
            && (self.start.is_none() || other.start.is_none() || self.start == other.start)
    }
}

/// A holder of LEAD_LOCK in a sample, and the instance whose row names its
/// backend (`orca.schedulers.backend_pid`), if any does.
#[derive(Clone, Debug, PartialEq)]
pub struct Holder {
    session: Session,
    instance: Option<i64>,
}

impl Holder {
    /// Session `session` holding the lock for `instance`.
    pub fn new(session: Session, instance: Option<i64>) -> Self {
        Holder { session, instance }
    }
}

/// One look at `pg_locks`, taken between `before` and `after`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    before: DateTime<Utc>,
    after: DateTime<Utc>,
    holders: Vec<Holder>,
}

impl Sample {
    /// A sample read between `before` and `after`, seeing `holders`.
    pub fn new(before: DateTime<Utc>, after: DateTime<Utc>, holders: Vec<Holder>) -> Self {
        Sample {
            before,
            after,
            holders,
        }
    }
}

/// A row of `orca_sim.decisions`.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    instance: i64,
    at: DateTime<Utc>,
    what: String,
    session: Session,
    /// The backends holding LEAD_LOCK inside the deciding statement.
    holders: Vec<i32>,
}

impl Decision {
    /// Instance `instance` deciding `what` at `at` on `session`, its own
    /// statement seeing `holders`.
    pub fn new(
        instance: i64,
        at: DateTime<Utc>,
        what: String,
        session: Session,
        holders: Vec<i32>,
    ) -> Self {
        Decision {
            instance,
            at,
            what,
            session,
            holders,
        }
    }
}

impl Decision {
    /// These, with `session` set.
    pub fn with_session(self, session: Session) -> Self {
        Decision { session, ..self }
    }

    /// These, with `holders` set.
    pub fn with_holders(self, holders: Vec<i32>) -> Self {
        Decision { holders, ..self }
    }
}

impl Decision {
    /// The session it decided on.
    pub fn session(&self) -> Session {
        self.session
    }

    /// The backends holding LEAD_LOCK inside the deciding statement.
    pub fn holders(&self) -> &Vec<i32> {
        &self.holders
    }
}

/// What a passing check looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checked {
    samples: usize,
    decisions: usize,
    /// Decisions with a sample wholly before and one wholly after.
    bracketed: usize,
}

impl Checked {
    /// How many decisions were judged.
    pub fn decisions(&self) -> usize {
        self.decisions
    }

    /// Decisions with a sample wholly before and one wholly after.
    pub fn bracketed(&self) -> usize {
        self.bracketed
    }
}

fn hms(t: DateTime<Utc>) -> String {
    t.format("%H:%M:%S%.6f").to_string()
}

fn who(h: &Holder) -> String {
    match h.instance {
        Some(i) => format!("backend {} (instance {i})", h.session.pid),
        None => format!("backend {} (no instance's)", h.session.pid),
    }
}

fn decided(d: &Decision) -> String {
    format!(
        "instance {} decided {:?} at {} on backend {}",
        d.instance,
        d.what,
        hms(d.at),
        d.session.pid
    )
}

/// The rules of this module's documentation; `Err` lists what broke them.
pub fn judge(samples: &[Sample], decisions: &[Decision]) -> Result<Checked, String> {
    let mut samples: Vec<&Sample> = samples.iter().collect();
    samples.sort_by_key(|s| s.before);
    let mut wrong = Vec::new();
    for s in &samples {
        if s.holders.len() > 1 {
            let all: Vec<String> = s.holders.iter().map(who).collect();
            wrong.push(format!(
                "pg_locks at {} showed two holders of the lead lock: {}",
                hms(s.before),
                all.join(", ")
            ));
        }
    }
    let mut bracketed = 0;
    for d in decisions {
        if d.holders != [d.session.pid] {
            let seen = match d.holders.as_slice() {
                [] => "nobody".to_string(),
                pids => {
                    let each: Vec<String> = pids.iter().map(|p| format!("backend {p}")).collect();
                    each.join(" and ")
                }
            };
            wrong.push(format!(
                "{}, but pg_locks in that statement showed the lead lock held by {seen}",
                decided(d)
            ));
        }
        let before = samples.iter().rev().find(|s| s.after < d.at);
        let after = samples.iter().find(|s| s.before > d.at);
        let (Some(p), Some(n)) = (before, after) else {
            continue;
        };
        bracketed += 1;
        if let ([h], [k]) = (p.holders.as_slice(), n.holders.as_slice()) {
            if h.session.same(&k.session) && !h.session.maybe(&d.session) {
                wrong.push(format!(
                    "{}, while {} held the lead lock: the pg_locks samples just before ({}) \
                     and just after ({}) both show it",
                    decided(d),
                    who(h),
                    hms(p.after),
                    hms(n.before)
                ));
            }
        }
    }
    wrong.extend(overlapping_periods(decisions));
    if wrong.is_empty() {
        return Ok(Checked {
            samples: samples.len(),
            decisions: decisions.len(),
            bracketed,
        });
    }
    let mut said = format!(
        "the lead-lock check failed ({} decisions, {} samples):",
        decisions.len(),
        samples.len()
    );
    for w in wrong.iter().take(12) {
        let _ = write!(said, "\n  {w}");
    }
    if wrong.len() > 12 {
        let _ = write!(said, "\n  … and {} more", wrong.len() - 12);
    }
    Err(said)
}

/// Rule 3: each deciding session's period, first decision to last; two of
/// different instances that overlap.
fn overlapping_periods(decisions: &[Decision]) -> Vec<String> {
    // (session, instance) → (first, last)
    let mut periods: Vec<(Session, i64, DateTime<Utc>, DateTime<Utc>)> = Vec::new();
    for d in decisions {
        match periods
            .iter_mut()
            .find(|(s, i, ..)| *i == d.instance && s.same(&d.session))
        {
            Some((_, _, first, last)) => {
                *first = (*first).min(d.at);
                *last = (*last).max(d.at);
            }
            None => periods.push((d.session, d.instance, d.at, d.at)),
        }
    }
    let mut wrong = Vec::new();
    for (n, a) in periods.iter().enumerate() {
        for b in &periods[n + 1..] {
            if a.1 != b.1 && a.2 <= b.3 && b.2 <= a.3 {
                wrong.push(format!(
                    "instances {} and {} decided in overlapping lead periods: {} from {} to {} \
                     on backend {}, {} from {} to {} on backend {}",
                    a.1,
                    b.1,
                    a.1,
                    hms(a.2),
                    hms(a.3),
                    a.0.pid,
                    b.1,
                    hms(b.2),
                    hms(b.3),
                    b.0.pid
                ));
            }
        }
    }
    wrong
}

/// One sample: `pg_locks`' holders of LEAD_LOCK, each with its backend's
/// start and the instance naming it, between two clock readings (the outer
/// `clock_timestamp()` is taken once the aggregate has read `pg_locks`).
async fn sample(db: &Db) -> Result<Sample, orca_db::DbError> {
    let sql = format!(
        "select statement_timestamp(), clock_timestamp(), x.pids, x.starts, x.instances
         from (select coalesce(array_agg(l.pid order by l.pid), '{{}}') as pids,
                      coalesce(array_agg(a.backend_start order by l.pid), '{{}}') as starts,
                      coalesce(array_agg((select max(s.id) from orca.schedulers s
                                          where s.backend_pid = l.pid) order by l.pid), '{{}}')
                          as instances
               from pg_locks l left join pg_stat_activity a on a.pid = l.pid
               where {}) x",
        lead_lock_row("l.")
    );
    let row = db.query_one(&sql, &[]).await?;
    let pids: Vec<i32> = row.get(2);
    let starts: Vec<Option<DateTime<Utc>>> = row.get(3);
    let instances: Vec<Option<i64>> = row.get(4);
    Ok(Sample {
        before: row.get(0),
        after: row.get(1),
        holders: pids
            .into_iter()
            .zip(starts)
            .zip(instances)
            .map(|((pid, start), instance)| Holder {
                session: Session { pid, start },
                instance,
            })
            .collect(),
    })
}

/// Every decision recorded in this database, in time order.
pub async fn decisions(db: &Db) -> Result<Vec<Decision>, String> {
    let rows = db
        .query(
            "select instance, at, what, backend, backend_start, holders
             from orca_sim.decisions order by at",
            &[],
        )
        .await
        .map_err(|e| {
            format!(
                "cannot read orca_sim.decisions ({e}): has no orca-sim with overlap on run here?"
            )
        })?;
    Ok(rows
        .iter()
        .map(|r| Decision {
            instance: r.get(0),
            at: r.get(1),
            what: r.get(2),
            session: Session {
                pid: r.get(3),
                start: r.get(4),
            },
            holders: r.get(5),
        })
        .collect())
}

/// Samples `pg_locks` every 50 ms on its own connection until it is asked
/// for its verdict ([`LockSampler::check`]).
pub struct LockSampler {
    url: String,
    samples: Arc<Mutex<Vec<Sample>>>,
    failed: Arc<Mutex<Option<String>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl LockSampler {
    pub async fn start(url: &str) -> Self {
        let db = pg::connect(url).await;
        let samples = Arc::new(Mutex::new(Vec::new()));
        let failed = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let (into, fail, s) = (samples.clone(), failed.clone(), stop.clone());
        let task = tokio::spawn(async move {
            while !s.load(Ordering::Relaxed) {
                match sample(&db).await {
                    Ok(one) => into.lock().unwrap().push(one),
                    // A missing sample only widens a gap; say it anyway.
                    Err(e) => *fail.lock().unwrap() = Some(e.to_string()),
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        LockSampler {
            url: url.into(),
            samples,
            failed,
            stop,
            task,
        }
    }

    /// Stops sampling and judges every decision recorded in the database
    /// against the samples ([`judge`]).
    pub async fn check(self) -> Result<Checked, String> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.map_err(|e| format!("the sampler: {e}"))?;
        let samples = std::mem::take(&mut *self.samples.lock().unwrap());
        if samples.is_empty() {
            let why = self.failed.lock().unwrap().take();
            return Err(format!("the pg_locks sampler took no sample ({why:?})"));
        }
        let db = pg::connect(&self.url).await;
        judge(&samples, &decisions(&db).await?)
    }

    /// [`LockSampler::check`], failing the test on an error, or if no
    /// decision fell between two samples (then it proved nothing).
    pub async fn assert_leaders_held_the_lock(self) -> Checked {
        let checked = self.check().await.unwrap_or_else(|e| panic!("{e}"));
        assert!(
            checked.bracketed > 0,
            "the lead-lock check saw no decision between two samples: {checked:?}"
        );
        checked
    }
}
