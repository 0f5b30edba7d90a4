//! `pool-next <instance> <run> <start> <seconds>`
//! (docs/protocol.md#the-agents-commands): idle until a hand-out, then
//! `next …` on stdout and exit 0; exit 1 when the instance's row ends with
//! no other, the operator claims the instance, or the time is up. Only a
//! row a hand-out made (`pooled`, with a run) is a run. A spot notice while
//! idle ends the idle row race-free and exits 1, unless a hand-out won the
//! row first: then its run is taken as any other
//! (docs/protocol.md#spot-notices).
//!
//! The time is up at `seconds` plus the minute on the database's clock
//! (from `idle`), and also on the agent's own monotonic clock (from its
//! start), so that an agent whose database is gone still powers off: the
//! operator needs that same database to terminate the instance.

use std::{io::Write, process::ExitCode, time::Duration};

use orca_db::pool::{self, Look, Notice};
use tokio::{sync::watch, time::Instant};

use crate::{
    imds,
    session::{until_done, until_done_by, Session, Source},
};

/// How often the agent beats `polled` and looks without a notification.
const TICK: Duration = Duration::from_secs(1);

/// How long the agent keeps trying to end its idle row once its time is
/// up, before it powers off anyway: a few seconds, about one connect's or
/// one statement's limit (`Session`), so that a database that just
/// blinked still has its row ended, and one that is gone costs little.
const LAST_TRY: Duration = Duration::from_secs(5);

/// Said once on stderr when the agent powers off without ending its row.
const UNREACHABLE: &str = "the database could not be reached by the deadline: powering off without ending the row; no hand-out can take a row whose polled is stale";

/// How long the agent may still wait, on its own clock.
struct Limit {
    /// `seconds` plus the minute, from the agent's start.
    deadline: Instant,
    /// Once the time is up (by either clock): until when it tries to end
    /// its row, and to take a hand-out that won the row first.
    ending: Option<Instant>,
    /// Its last look found its row taken for the stopped reserve. The
    /// operator is stopping the instance, and the stop ends this process;
    /// no time-out applies meanwhile (nor did one before the own clock
    /// counted: the database's clock never expires a reserved row).
    reserved: bool,
}

impl Limit {
    fn new(wait: Duration) -> Self {
        Limit {
            deadline: Instant::now() + wait,
            ending: None,
            reserved: false,
        }
    }

    /// Until when a statement may be tried; `None`: for ever.
    fn by(&self) -> Option<Instant> {
        (!self.reserved).then(|| self.ending.unwrap_or(self.deadline))
    }

    /// Whether the time is up and the agent has not begun to end its row.
    fn due(&self) -> bool {
        !self.reserved && self.ending.is_none() && Instant::now() >= self.deadline
    }

    /// The time is up: the agent tries for [`LAST_TRY`] more.
    fn give_up(&mut self) {
        self.ending = Some(Instant::now() + LAST_TRY);
    }

    /// The database's clock says the time is up (it may run ahead of the
    /// agent's: `idle` kept from an earlier start of the agent).
    fn expired(&mut self) {
        self.deadline = self.deadline.min(Instant::now());
    }

    fn saw(&mut self, look: &Look) {
        let reserved = *look == Look::Reserved;
        if self.reserved && !reserved {
            // Out of the reserve (never seen in practice: the stop ends
            // the process): a time already up is up at once, tried anew.
            self.ending = None;
        }
        self.reserved = reserved;
    }
}

pub async fn pool_next(
    db: Source,
    instance: &str,
    run: i64,
    start: i32,
    wait: Duration,
    pool_name: Option<&str>,
    mut notices: watch::Receiver<Option<Notice>>,
) -> ExitCode {
    // From here, whether or not the database answers.
    let mut limit = Limit::new(wait);
    let mut s = Session::new(db, &[format!("orca_i_{instance}")]);
    let Some(mine) = until_done_by!(s, limit.by(), |db| pool::mark_idle(
        db, instance, run, start, pool_name
    )) else {
        // No row marked idle by this agent: none it beat is fresh.
        return powering_off(instance, None);
    };
    match mine {
        Some(row) => tracing::info!(instance, run, start, row, "idle"),
        None => tracing::info!(instance, run, start, "no live row of that run to mark idle"),
    }
    // Whether it tried to leave for a notice: once is enough, as its idle
    // row is then ended, by it or by whoever came first.
    let mut left_for_notice = false;
    loop {
        if limit.due() {
            limit.give_up();
            if let Some(row) = mine {
                match until_done_by!(s, limit.by(), |db| pool::end_idle(db, row, "agent")) {
                    Some(true) => {
                        tracing::info!(instance, row, "no hand-out in time; idle row ended");
                        return ExitCode::from(1);
                    }
                    // A hand-out ended it first: the next look finds its row.
                    Some(false) => tracing::info!(instance, row, "handed out while giving up"),
                    None => return powering_off(instance, Some(row)),
                }
            }
        }
        if !left_for_notice && limit.ending.is_none() {
            if let Some(notice) = *notices.borrow_and_update() {
                left_for_notice = true;
                match leave(&mut s, instance, mine, notice, limit.by()).await {
                    Left::Ended => return ExitCode::from(1),
                    Left::NotMine => {}
                    // The time is up: the loop's top ends the row, as the
                    // notice would have.
                    Left::OutOfTime => continue,
                }
            }
        }
        let look = until_done_by!(s, limit.by(), |db| async {
            // Notifications already here are answered by this look.
            db.drain_notifications();
            pool::beat_and_look(db, instance, mine, wait).await
        });
        let Some(look) = look else {
            if limit.ending.is_some() {
                return powering_off(instance, mine);
            }
            // The time is up on its own clock: the loop's top ends the row.
            continue;
        };
        limit.saw(&look);
        match look {
            Look::Idle { left } => {
                let nap = left
                    .min(TICK)
                    .min(limit.deadline.saturating_duration_since(Instant::now()));
                tokio::select! {
                    // Bounded itself: a wait that must connect first might
                    // not end.
                    _ = tokio::time::timeout(nap, s.wait(nap)) => {}
                    _ = imds::changed(&mut notices), if !left_for_notice => {}
                }
            }
            // No time-out while reserved: the stop ends this process, and the
            // boot after the restart runs pool-next for the warm row again.
            Look::Reserved => s.wait(TICK).await,
            // Up on the database's clock: the loop's top ends the row.
            Look::Expired => limit.expired(),
            // A hand-out or an end committed while it looked: the next
            // look tells which.
            Look::Changed => {}
            Look::HandedOut { row } => return take(&mut s, instance, row).await,
            Look::Ended => {
                tracing::info!(instance, "row ended with no other");
                return ExitCode::from(1);
            }
            // The operator is retiring the instance: no run comes.
            Look::Claimed { row } => {
                tracing::info!(instance, row, "claimed by the operator; no run comes");
                return ExitCode::from(1);
            }
            Look::Busy { row } => {
                tracing::error!(
                    instance,
                    row,
                    "the instance's live row is neither its idle row nor a hand-out; nothing to wait for"
                );
                return ExitCode::from(1);
            }
        }
    }
}

/// The time is up and the database could not be reached to end the row
/// `row`: exit 1 all the same, so that the instance powers off. Safe, as
/// a hand-out takes only a row whose `polled` is fresh, and nobody beats
/// it any more (docs/protocol.md#the-agents-commands).
fn powering_off(instance: &str, row: Option<i64>) -> ExitCode {
    tracing::error!(instance, row, "{UNREACHABLE}");
    ExitCode::from(1)
}

/// How [`leave`] went.
enum Left {
    /// Its idle row ended: the instance powers off.
    Ended,
    /// A hand-out (or another end) came first, or it has no row of its
    /// own; the looks that follow tell which.
    NotMine,
    /// The database did not answer before `by`.
    OutOfTime,
}

/// A spot notice while idle: records it on the instance's live row, then
/// ends its idle row race-free, so that the instance leaves the pool before
/// EC2 takes it. A hand-out's run is never lost: if the hand-out came
/// first, the looks that follow find its row, and the run is taken.
async fn leave(
    s: &mut Session,
    instance: &str,
    mine: Option<i64>,
    notice: Notice,
    by: Option<Instant>,
) -> Left {
    let Some(row) = mine else {
        return Left::NotMine;
    };
    if until_done_by!(s, by, |db| pool::record_notice(db, instance, notice)).is_none() {
        return Left::OutOfTime;
    }
    match until_done_by!(s, by, |db| pool::end_idle(db, row, "agent")) {
        Some(true) => {
            tracing::info!(instance, row, %notice, "spot notice; idle row ended");
            Left::Ended
        }
        Some(false) => {
            tracing::info!(
                instance,
                row,
                %notice,
                "spot notice, but the idle row was handed out or ended first"
            );
            Left::NotMine
        }
        None => Left::OutOfTime,
    }
}

/// Records `joined`, then prints the `next` line: once it is printed the
/// run is the instance's, so it must be recorded first.
async fn take(s: &mut Session, instance: &str, row: i64) -> ExitCode {
    match until_done!(s, |db| pool::join(db, row)) {
        Some(next) => {
            tracing::info!(
                instance,
                row,
                run = next.run(),
                start = next.start(),
                "joined"
            );
            let mut stdout = std::io::stdout().lock();
            match writeln!(stdout, "{next}").and_then(|_| stdout.flush()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    // Nobody reads the line: the script that would run it
                    // has gone, and so has the run's chance on this instance.
                    tracing::error!(instance, row, error = %e, "cannot print the next line");
                    ExitCode::from(1)
                }
            }
        }
        None => {
            tracing::error!(
                instance,
                row,
                "the handed-out row has vanished or is no hand-out"
            );
            ExitCode::from(1)
        }
    }
}
