//! The instance's lead loop (docs/protocol.md#the-instance-state-machine),
//! every tick on its dedicated lock connection: the leader checks in
//! `pg_locks` that it still holds the lock; the newest live instance that
//! isn't draining takes the lead; an older one that sees a newer one, is
//! asked, or gets SIGTERM steps down and drains; once its runs have ended
//! it ends its row. A notification on [`schedulers::CHANNEL`] or a lost
//! connection wakes it before the tick.

use orca_db::{
    schedulers::{self, Beat},
    Db, DbError,
};
use tokio::{
    signal::unix::{signal, SignalKind},
    sync::watch,
};

use super::{
    args::Config,
    decisions,
    link::Link,
    pooled::spawn_pooled,
    supervise::{spawn_pipeline, Runs},
    work,
};

/// Why the loop ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Exit {
    /// Drained: its runs ended and so did its row (exit 0).
    Drained,
    /// Someone else ended its row: it stops at once (exit 1).
    EndedElsewhere,
}

#[derive(Default)]
struct State {
    leading: bool,
    /// Why it drains, once it does.
    draining: Option<String>,
    /// `step_down` recorded (and the lock given back).
    stepped_down: bool,
    /// The newest live instance, not leading yet: the lock is still held.
    waiting: bool,
}

pub struct Lead {
    config: Config,
    /// The instance's row; none with overlap off (no row, no lock).
    id: Option<i64>,
    link: Link,
    runs: Runs,
    beat: watch::Receiver<Beat>,
    state: State,
}

impl Lead {
    pub fn new(
        config: Config,
        id: Option<i64>,
        link: Link,
        runs: Runs,
        beat: watch::Receiver<Beat>,
    ) -> Self {
        Lead {
            config,
            id,
            link,
            runs,
            beat,
            state: State::default(),
        }
    }

    pub async fn run(mut self) -> Exit {
        let mut terms = [SignalKind::terminate(), SignalKind::interrupt()].map(|kind| {
            signal(kind)
                .map_err(|e| tracing::warn!(error = %e, "cannot watch for a signal"))
                .ok()
        });
        loop {
            if let Some(exit) = self.tick().await {
                return exit;
            }
            let [term, int] = &mut terms;
            tokio::select! {
                _ = tokio::time::sleep(self.next_look()) => {}
                Some(()) = recv(term) => self.state.drain(self.id, "SIGTERM"),
                Some(()) = recv(int) => self.state.drain(self.id, "SIGINT"),
                Ok(()) = self.beat.changed() => {}
                closed = notified(&mut self.link) => if closed { self.link.lost() },
            }
        }
    }

    /// A tick; a quarter of one while it is the newest instance and waits
    /// for the older to give the lock up, so that a handover takes two
    /// ticks at most even when no notification comes.
    fn next_look(&self) -> std::time::Duration {
        if self.state.waiting {
            self.config.tick() / 4
        } else {
            self.config.tick()
        }
    }

    async fn tick(&mut self) -> Option<Exit> {
        let id = self.id;
        match *self.beat.borrow_and_update() {
            Beat::Ended => {
                tracing::warn!(id = id.unwrap_or(0), "row ended by someone else; stopping");
                return Some(Exit::EndedElsewhere);
            }
            Beat::Going { drain_asked: true } => self.state.drain(id, "asked to drain"),
            Beat::Going { drain_asked: false } => {}
        }
        let up = self.link.db().await.is_some();
        let new = self.link.take_new();
        let (true, Some(db)) = (up, self.link.current()) else {
            self.state.waiting = false;
            self.state.lost(id, "connection lost");
            return None;
        };
        if new {
            // A new session holds nothing, and must LISTEN again.
            self.state.lost(id, "new connection");
            if self.config.listen() && id.is_some() {
                if let Err(e) = db.listen(schedulers::CHANNEL).await {
                    self.link.failed(&e);
                    return None;
                }
            }
        }
        let decided = match id {
            Some(id) => self.state.overlap(db, &self.config, id, &self.runs).await,
            None => self.state.alone(db, &self.config, &self.runs).await,
        };
        match decided {
            Ok(exit) => exit,
            Err(e) => {
                if self.link.failed(&e) {
                    self.state.lost(id, "connection lost");
                }
                None
            }
        }
    }
}

async fn recv(sig: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match sig {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

/// Wakes on a notification of the lock connection; true if it has closed.
async fn notified(link: &mut Link) -> bool {
    match link.current() {
        Some(db) => db.notification().await.is_none(),
        None => std::future::pending().await,
    }
}

impl State {
    fn drain(&mut self, id: Option<i64>, reason: &str) {
        if self.draining.is_none() {
            tracing::info!(id = id.unwrap_or(0), %reason, "draining");
            self.draining = Some(reason.into());
            // It starts nothing from now on; the lock goes at step_down.
            self.leading = false;
        }
    }

    fn lost(&mut self, id: Option<i64>, reason: &str) {
        if self.leading {
            tracing::warn!(id = id.unwrap_or(0), %reason, "lost the lead");
            self.leading = false;
        }
    }

    async fn overlap(
        &mut self,
        db: &Db,
        config: &Config,
        id: i64,
        runs: &Runs,
    ) -> Result<Option<Exit>, DbError> {
        // With --unsafe-skip-lead-lock (tests only) there is no lock to lose.
        if self.leading && !config.unsafe_skip_lead_lock() && !schedulers::holds_lead(db).await? {
            self.lost(Some(id), "not in pg_locks");
            schedulers::lost_lead(db, id).await?;
        }
        let newer = match self.draining {
            None => schedulers::newer(db, id, config.stale()).await?,
            Some(_) => 0,
        };
        if newer != 0 {
            self.drain(Some(id), &format!("newer instance {newer}"));
        }
        if self.draining.is_some() && !self.stepped_down {
            // Ask pg_locks rather than trust memory: the lock must go.
            let held = schedulers::holds_lead(db).await?;
            schedulers::step_down(db, id, held).await?;
            self.stepped_down = true;
            tracing::info!(id, "stepped down");
        }
        self.waiting = false;
        if self.draining.is_none() && !self.leading {
            if config.unsafe_skip_lead_lock() {
                // Tests only: a broken leader, for the lock check to catch.
                self.leading = true;
                tracing::warn!(id, "leading without the lock (--unsafe-skip-lead-lock)");
                decisions::lead(db, id).await?;
            } else if schedulers::try_lead(db, id).await? {
                self.leading = true;
                tracing::info!(id, "leading");
                decisions::lead(db, id).await?;
            } else {
                self.waiting = true;
            }
        }
        if self.leading {
            work_once(db, config, Some(id), runs).await?;
        }
        if self.stepped_down && runs.is_empty() {
            schedulers::end(db, id).await?;
            tracing::info!(id, "ended");
            return Ok(Some(Exit::Drained));
        }
        Ok(None)
    }

    /// Overlap off: no row, no lock; it runs alone, as morca does.
    async fn alone(
        &mut self,
        db: &Db,
        config: &Config,
        runs: &Runs,
    ) -> Result<Option<Exit>, DbError> {
        if self.draining.is_none() {
            work_once(db, config, None, runs).await?;
        } else if runs.is_empty() {
            tracing::info!("stopped: its runs have ended");
            return Ok(Some(Exit::Drained));
        }
        Ok(None)
    }
}

async fn work_once(db: &Db, config: &Config, id: Option<i64>, runs: &Runs) -> Result<(), DbError> {
    for (run, instance) in work::requeue_orphans(db, config, id).await? {
        tracing::info!(
            run = run.id(),
            start = run.start(),
            instance = instance.unwrap_or(0),
            "requeued"
        );
    }
    for s in work::start_queued(db, config, id).await? {
        runs.add(s.run());
        tracing::info!(run = s.run().id(), start = s.run().start(), id = id.unwrap_or(0), pipeline = %s.pipeline(), "started");
        match config.pool() {
            Some(pool) => spawn_pooled(config, runs, s.run(), pool.to_string()),
            None => spawn_pipeline(runs, s.run(), s.pipeline()),
        }
    }
    Ok(())
}
