//! The runs an instance's processes are, and the task that beats for them:
//! every tick, on a connection of its own (so a slow lead loop never looks
//! dead), it records the runs that finished, beats the instance's row with
//! the ones still going, and keeps their heartbeats fresh.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use orca_db::{schedulers, schedulers::Beat, DbError};
use tokio::sync::{watch, Notify};

use super::{args::Config, link::Link};

/// A run this process started, at its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    id: i64,
    start: i32,
}

impl Run {
    /// Run `id` at start `start`.
    pub fn new(id: i64, start: i32) -> Self {
        Run { id, start }
    }
}

impl Run {
    /// The run's id.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The run's start (its attempt).
    pub fn start(&self) -> i32 {
        self.start
    }
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    Failed,
}

impl Outcome {
    fn status(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
        }
    }
}

#[derive(Default)]
struct Book {
    going: BTreeMap<i64, i32>,
    finished: Vec<(Run, Outcome)>,
}

/// The runs going, shared by the lead loop (which adds them), the runs'
/// own tasks (which finish them) and the beat task (which records that).
#[derive(Clone, Default)]
pub struct Runs {
    book: Arc<Mutex<Book>>,
    wake: Arc<Notify>,
}

impl Runs {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        // A panicking holder leaves plain data behind: keep using it.
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn add(&self, run: Run) {
        self.book().going.insert(run.id, run.start);
    }

    /// A run's process ended: the beat task records it at once.
    pub fn finish(&self, run: Run, outcome: Outcome) {
        self.book().finished.push((run, outcome));
        self.wake.notify_one();
    }

    /// No run going and none waiting to be recorded.
    pub fn is_empty(&self) -> bool {
        let book = self.book();
        book.going.is_empty() && book.finished.is_empty()
    }

    fn going(&self) -> Vec<Run> {
        self.book()
            .going
            .iter()
            .map(|(&id, &start)| Run { id, start })
            .collect()
    }
}

/// Beats every tick until the process ends. `id` is the instance's row
/// (none with overlap off); what the beat finds goes to `found`.
pub async fn beat_task(config: Config, id: Option<i64>, runs: Runs, found: watch::Sender<Beat>) {
    let mut link = Link::new(&config, "orca-sim beat");
    loop {
        if let Some(db) = link.db().await {
            if let Err(e) = beat_once(db, &config, id, &runs, &found).await {
                link.failed(&e);
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(config.tick()) => {}
            _ = runs.wake.notified() => {}
        }
    }
}

async fn beat_once(
    db: &orca_db::Db,
    config: &Config,
    id: Option<i64>,
    runs: &Runs,
    found: &watch::Sender<Beat>,
) -> Result<(), DbError> {
    record_finished(db, config, id, runs).await?;
    let going = runs.going();
    if let Some(id) = id {
        let running: Vec<String> = going.iter().map(|r| r.id.to_string()).collect();
        let beat = schedulers::beat(db, id, &running.join(",")).await?;
        found.send_if_modified(|last| std::mem::replace(last, beat) != beat);
    }
    if !going.is_empty() {
        let ids: Vec<i64> = going.iter().map(|r| r.id).collect();
        db.execute(
            "update orca.runs set heartbeat = now()
             where id = any($1) and owner = $2 and status = 'running'",
            &[&ids, &config.owner()],
        )
        .await?;
    }
    Ok(())
}

/// Records each finished run as its start and owner, once; a run that was
/// taken from this process (requeued, started again) is left as it is.
async fn record_finished(
    db: &orca_db::Db,
    config: &Config,
    id: Option<i64>,
    runs: &Runs,
) -> Result<(), DbError> {
    let finished = std::mem::take(&mut runs.book().finished);
    for (i, &(run, outcome)) in finished.iter().enumerate() {
        let recorded = db
            .query_opt(
                "update orca.runs set status = $3, heartbeat = null
                 where id = $1 and start = $2 and owner = $4 and status = 'running'
                 returning id",
                &[&run.id, &run.start, &outcome.status(), &config.owner()],
            )
            .await;
        match recorded {
            Ok(Some(_)) => {
                tracing::info!(
                    run = run.id,
                    start = run.start,
                    status = outcome.status(),
                    id = id.unwrap_or(0),
                    "finished"
                )
            }
            Ok(None) => {
                tracing::warn!(
                    run = run.id,
                    start = run.start,
                    id = id.unwrap_or(0),
                    "lost run: it was no longer this process's"
                )
            }
            Err(e) => {
                // Record it (and the rest) on the next connection.
                runs.book().finished.extend_from_slice(&finished[i..]);
                return Err(e);
            }
        }
        runs.book().going.remove(&run.id);
    }
    Ok(())
}

/// The run's process: `sleep:N` succeeds after N seconds, `fail:N` fails
/// after N seconds; anything else fails at once.
pub fn spawn_pipeline(runs: &Runs, run: Run, pipeline: &str) {
    let (outcome, after) = match pipeline.split_once(':') {
        Some(("sleep", n)) => (Outcome::Succeeded, n.parse::<f64>().ok()),
        Some(("fail", n)) => (Outcome::Failed, n.parse::<f64>().ok()),
        _ => (Outcome::Failed, None),
    };
    let after = match after.filter(|n| n.is_finite() && *n >= 0.0) {
        Some(n) => Duration::from_secs_f64(n),
        None => {
            tracing::warn!(run = run.id, pipeline, "unknown pipeline: it fails");
            runs.finish(run, Outcome::Failed);
            return;
        }
    };
    let runs = runs.clone();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        runs.finish(run, outcome);
    });
}
