//! `orca-operator instances`, `drain <id>` and `wait-for-lead`
//! (docs/protocol.md#the-calls): the driving half of the scheduler-instance
//! protocol, by hand.

use std::{process::ExitCode, time::Duration};

use orca_db::{schedulers, ConnectOptions, DatabaseUrl, Db};

async fn connect(url: &DatabaseUrl, what: &str) -> anyhow::Result<Db> {
    Ok(orca_db::connect(
        url,
        &ConnectOptions::named(&format!("orca-operator {what}")),
    )
    .await?)
}

/// Prints a line per instance not long gone, oldest first.
pub async fn instances(url: &DatabaseUrl, stale: Duration) -> anyhow::Result<ExitCode> {
    let db = connect(url, "instances").await?;
    let lines = schedulers::instances(&db, stale).await?;
    if lines.is_empty() {
        println!("no scheduler instance");
    }
    for line in lines {
        println!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Asks live instance `id` to drain; exit 1 if there is no such one.
pub async fn drain(url: &DatabaseUrl, id: i64, stale: Duration) -> anyhow::Result<ExitCode> {
    let db = connect(url, "drain").await?;
    if schedulers::ask_drain(&db, id, stale).await? {
        println!("asked instance {id} to drain");
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("orca-operator: no live scheduler instance {id} (ended, stale, or never joined)");
        Ok(ExitCode::FAILURE)
    }
}

/// Waits for the newest live instance to lead (verified in `pg_locks`):
/// exit 0 once the handover is over, 1 on timeout, saying who leads and who
/// should.
pub async fn wait_for_lead(
    url: &DatabaseUrl,
    timeout: Duration,
    stale: Duration,
) -> anyhow::Result<ExitCode> {
    let mut db = connect(url, "wait-for-lead").await?;
    let state = schedulers::wait_for_lead(&mut db, timeout, stale).await?;
    if state.is_over() {
        println!("handover over: {state}");
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("orca-operator: no handover within {timeout:?}: {state}");
        Ok(ExitCode::FAILURE)
    }
}
