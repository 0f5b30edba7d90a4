//! `pool-next <instance> <run> <start> <seconds>`
//! (docs/protocol.md#the-agents-commands): idle until a hand-out, then
//! `next …` on stdout and exit 0; exit 1 when the instance's row ends with
//! no other, the operator claims the instance, or the time is up. Only a
//! row a hand-out made (`pooled`, with a run) is a run. A spot notice while
//! idle ends the idle row race-free and exits 1, unless a hand-out won the
//! row first: then its run is taken as any other
//! (docs/protocol.md#spot-notices).

use std::{io::Write, process::ExitCode, time::Duration};

use orca_db::{
    pool::{self, Look, Notice},
    DatabaseUrl,
};
use tokio::sync::watch;

use crate::{
    imds,
    session::{until_done, Session},
};

/// How often the agent beats `polled` and looks without a notification.
const TICK: Duration = Duration::from_secs(1);

pub async fn pool_next(
    url: DatabaseUrl,
    instance: &str,
    run: i64,
    start: i32,
    wait: Duration,
    pool_name: Option<&str>,
    mut notices: watch::Receiver<Option<Notice>>,
) -> ExitCode {
    let mut s = Session::new(url, &[format!("orca_i_{instance}")]);
    let mine = until_done!(s, |db| pool::mark_idle(db, instance, run, start, pool_name));
    match mine {
        Some(row) => tracing::info!(instance, run, start, row, "idle"),
        None => tracing::info!(instance, run, start, "no live row of that run to mark idle"),
    }
    // Whether it tried to leave for a notice: once is enough, as its idle
    // row is then ended, by it or by whoever came first.
    let mut left_for_notice = false;
    loop {
        if !left_for_notice {
            if let Some(notice) = *notices.borrow_and_update() {
                left_for_notice = true;
                if let Some(code) = leave(&mut s, instance, mine, notice).await {
                    return code;
                }
            }
        }
        let db = s.db().await;
        // Notifications already here are answered by the look that follows.
        db.drain_notifications();
        let look = match pool::beat_and_look(db, instance, mine, wait).await {
            Ok(look) => {
                s.succeeded();
                look
            }
            Err(e) => {
                s.failed(e).await;
                continue;
            }
        };
        match look {
            Look::Idle { left } => tokio::select! {
                _ = s.wait(left.min(TICK)) => {}
                _ = imds::changed(&mut notices), if !left_for_notice => {}
            },
            // No time-out while reserved: the stop ends this process, and the
            // boot after the restart runs pool-next for the warm row again.
            Look::Reserved => s.wait(TICK).await,
            Look::Expired => {
                let row = mine.expect("invariant: only its own row expires");
                if until_done!(s, |db| pool::end_idle(db, row, "agent")) {
                    tracing::info!(instance, row, "no hand-out in time; idle row ended");
                    return ExitCode::from(1);
                }
                // A hand-out ended it first: the next look finds its row.
                tracing::info!(instance, row, "handed out while giving up");
            }
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

/// A spot notice while idle: records it on the instance's live row, then
/// ends its idle row race-free, so that the instance leaves the pool before
/// EC2 takes it. `Some(1)`: ended; the instance powers off. `None`: a
/// hand-out (or another end) came first, or it has no row of its own; the
/// looks that follow tell which, and a hand-out's run is taken, never lost.
async fn leave(
    s: &mut Session,
    instance: &str,
    mine: Option<i64>,
    notice: Notice,
) -> Option<ExitCode> {
    let row = mine?;
    until_done!(s, |db| pool::record_notice(db, instance, notice));
    if until_done!(s, |db| pool::end_idle(db, row, "agent")) {
        tracing::info!(instance, row, %notice, "spot notice; idle row ended");
        return Some(ExitCode::from(1));
    }
    tracing::info!(
        instance,
        row,
        %notice,
        "spot notice, but the idle row was handed out or ended first"
    );
    None
}

/// Records `joined`, then prints the `next` line: once it is printed the
/// run is the instance's, so it must be recorded first.
async fn take(s: &mut Session, instance: &str, row: i64) -> ExitCode {
    match until_done!(s, |db| pool::join(db, row)) {
        Some(next) => {
            tracing::info!(instance, row, run = next.run, start = next.start, "joined");
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
