//! `pool-wait <instance> <run> <start>`
//! (docs/protocol.md#the-agents-commands): beside a worker's processes,
//! until the run is over for the instance. Dista workers don't end with
//! their head, so this is how a worker knows to stop.

use std::{process::ExitCode, time::Duration};

use orca_db::pool;

use crate::session::{Session, Source};

pub async fn pool_wait(db: Source, instance: &str, run: i64, start: i32) -> ExitCode {
    // A change of the run's status or start, or the end of the row.
    let channels = [format!("orca_run_{run}"), format!("orca_i_{instance}")];
    let mut s = Session::new(db, &channels);
    tracing::info!(instance, run, start, "waiting for the run to end");
    loop {
        let db = s.db().await;
        db.drain_notifications();
        match pool::run_is_over(db, instance, run, start).await {
            Ok(true) => {
                tracing::info!(instance, run, start, "run over");
                return ExitCode::SUCCESS;
            }
            Ok(false) => {
                s.succeeded();
                s.wait(Duration::from_secs(1)).await;
            }
            Err(e) => s.failed(e).await,
        }
    }
}
