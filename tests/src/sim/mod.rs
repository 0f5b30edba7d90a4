//! `orca-sim scheduler`, the reference scheduler
//! (docs/architecture.md#the-reference-scheduler-orca-sim): it follows the
//! instance half of the scheduler-instance protocol
//! (docs/protocol.md#scheduler-instances) as morca's scheduler does, so
//! that the tests, the local mode and the benchmarks run without morca. Its
//! pipelines are `sleep:N` and `fail:N`.
//!
//! Start-up: [`overlap_refusal`](orca_db::schedulers::overlap_refusal) (a
//! reason → the termination log, exit 75, nothing migrated), migrate, create
//! `orca_sim.decisions` ([`decisions`]), join, then the beat task
//! (`supervise`) and the lead loop (`lead`).

pub mod args;
pub mod decisions;
mod lead;
pub mod lead_check;
mod link;
mod pooled;
pub mod probe;
pub mod process;
mod supervise;
mod work;

use std::time::Duration;

use orca_db::{
    connect, migrate,
    schedulers::{self, Beat, Joining},
    ConnectOptions, DbError,
};
use tokio::sync::watch;

use self::{args::Config, lead::Lead, link::Link, supervise::Runs};

/// The exit code of a refused overlap (docs/protocol.md#stop-the-world).
pub const EXIT_REFUSED: u8 = 75;

/// Runs `$call` (a future using `$db`) until the database answers it, one
/// attempt a tick; any error is tried again (start-up has nothing better to
/// do), a lost connection on a new one.
macro_rules! until_answered {
    ($config:expr, $link:expr, |$db:ident| $call:expr) => {
        loop {
            if let Some($db) = $link.db().await {
                match $call.await {
                    Ok(v) => break v,
                    Err(e) => {
                        $link.failed(&e);
                    }
                }
            }
            tokio::time::sleep($config.tick()).await;
        }
    };
}

/// Runs the scheduler until it has drained; its exit code.
pub async fn scheduler(config: Config) -> u8 {
    let mut link = Link::new(&config, "orca-sim lead");
    if config.overlap() {
        let refusal = until_answered!(config, link, |db| schedulers::overlap_refusal(
            db,
            config.floor(),
            config.stale()
        ));
        if !refusal.is_empty() {
            tracing::error!(reason = %refusal, "overlap refused; nothing migrated");
            if let Err(e) = std::fs::write(config.termination_log(), &refusal) {
                tracing::warn!(path = %config.termination_log().display(), error = %e, "cannot write the termination log");
            }
            return EXIT_REFUSED;
        }
    }
    if let Err(e) = migrate_now(&config).await {
        tracing::error!(error = %e, "cannot migrate");
        return 1;
    }
    if config.overlap() {
        if let Err(e) = prepare_decisions(&config, &mut link).await {
            tracing::error!(error = %e, "cannot create orca_sim.decisions");
            return 1;
        }
    }
    let id = if config.overlap() {
        let me = Joining::new(
            config.host(),
            config.pid(),
            config.image(),
            config.migrations(),
        );
        let id = until_answered!(config, link, |db| schedulers::join(db, &me));
        tracing::info!(id, host = %config.host(), pid = config.pid(), image = %config.image(), migrations = config.migrations(), "joined");
        Some(id)
    } else {
        tracing::info!(host = %config.host(), pid = config.pid(), image = %config.image(), "running alone (overlap off)");
        None
    };
    let runs = Runs::default();
    let (found, beat) = watch::channel(Beat::Going { drain_asked: false });
    let beating = tokio::spawn(supervise::beat_task(
        config.clone(),
        id,
        runs.clone(),
        found,
    ));
    let exit = Lead::new(config, id, link, runs, beat).run().await;
    beating.abort();
    match exit {
        lead::Exit::Drained => 0,
        lead::Exit::EndedElsewhere => 1,
    }
}

/// Creates the table its decisions as leader are recorded in
/// ([`decisions`]), retrying while the database can't be reached.
async fn prepare_decisions(config: &Config, link: &mut Link) -> Result<(), DbError> {
    loop {
        if let Some(db) = link.db().await {
            match decisions::prepare(db).await {
                Ok(()) => return Ok(()),
                Err(e) if e.is_connection() => {
                    link.failed(&e);
                }
                Err(e) => return Err(e),
            }
        }
        tokio::time::sleep(config.tick()).await;
    }
}

/// Applies the migrations it has, on a connection with room for slow DDL,
/// retrying while the database can't be reached.
async fn migrate_now(config: &Config) -> Result<(), DbError> {
    let opts =
        ConnectOptions::named("orca-sim migrate").with_statement_timeout(Duration::from_secs(600));
    let mut said = false;
    loop {
        let attempt = async {
            let mut db = connect(config.url(), &opts).await?;
            migrate::migrate(&mut db, &migrate::Migrations::embedded()).await
        };
        match attempt.await {
            Ok(applied) => {
                if !applied.is_empty() {
                    tracing::info!(applied = %applied.join(","), "migrated");
                }
                return Ok(());
            }
            Err(e) if e.is_connection() => {
                if !said {
                    tracing::warn!(error = %e, "database unreachable; trying again every tick");
                    said = true;
                }
                tokio::time::sleep(config.tick()).await;
            }
            Err(e) => return Err(e),
        }
    }
}
