//! `pool-watch <instance>` (docs/protocol.md#spot-notices): beside a run,
//! for as long as its command runs, records on the instance's live row the
//! spot notices EC2 gives it, so that the scheduler and the operator see
//! that the instance is about to go (or should be left). It ends nothing:
//! what to do with a busy instance is theirs to decide.

use std::process::ExitCode;

use orca_db::pool::{self, Notice};

use crate::{
    imds::{self, Endpoint},
    session::{until_done, Session, Source},
};

pub async fn pool_watch(db: Source, instance: &str, endpoint: Option<Endpoint>) -> ExitCode {
    if endpoint.is_none() {
        tracing::info!(
            instance,
            "the instance metadata service is disabled; no notices to watch"
        );
        return ExitCode::SUCCESS;
    }
    let mut notices = imds::watch(endpoint);
    // No channels: it only writes, and connects only once there is a
    // notice, so a run costs the database no session of its own.
    let mut s = Session::new(db, &[]);
    loop {
        imds::changed(&mut notices).await;
        let Some(notice) = *notices.borrow_and_update() else {
            continue;
        };
        match until_done!(s, |db| pool::record_notice(db, instance, notice)) {
            Some(row) => tracing::info!(instance, row, %notice, "notice recorded"),
            None => tracing::info!(instance, %notice, "no live row to record the notice on"),
        }
        // An interruption is the last word; a rebalance may still be
        // followed by one.
        if notice == Notice::Interruption {
            return ExitCode::SUCCESS;
        }
    }
}
