//! `--pool ns/name`: each run is placed on an instance of the warm pool. It
//! gets one by a hand-out, or asks through `orca.pool_demand` and tries
//! again every tick; it finishes when its pooled row has gone idle again
//! (the instance's agent marks it so once the run's command has ended).

use orca_db::{
    pool::{self, HandedOut, Request},
    Db, DbError,
};

use super::{
    args::Config,
    link::Link,
    supervise::{Outcome, Run, Runs},
};

/// Places `run` on an instance of `pool` and waits for it there, on a
/// connection of its own.
pub fn spawn_pooled(config: &Config, runs: &Runs, run: Run, pool: String) {
    let config = config.clone();
    let runs = runs.clone();
    tokio::spawn(async move {
        let mut link = Link::new(&config, "orca-sim pooled run");
        let req = Request::new(&pool, run.id(), run.start(), "head", "", true);
        let mut placed: Option<HandedOut> = None;
        let mut asked = false;
        loop {
            if let Some(db) = link.db().await {
                match step(db, &config, &req, &mut placed, &mut asked).await {
                    Ok(Some(outcome)) => {
                        runs.finish(run, outcome);
                        return;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        link.failed(&e);
                    }
                }
            }
            tokio::time::sleep(config.tick()).await;
        }
    });
}

/// One look: hand-out (or ask) until placed, then whether the pooled row
/// went idle (succeeded) or ended without (failed).
async fn step(
    db: &mut Db,
    config: &Config,
    req: &Request<'_>,
    placed: &mut Option<HandedOut>,
    asked: &mut bool,
) -> Result<Option<Outcome>, DbError> {
    let Some(at) = placed else {
        match pool::hand_out(db, req, config.stale()).await? {
            Some(h) => {
                tracing::info!(run = req.run(), start = req.start(), instance = %h.instance(), row = h.row(), pool = %req.pool(), "handed out");
                *placed = Some(h);
            }
            None => {
                pool::ask_for_instance(db, req).await?;
                if !*asked {
                    tracing::info!(run = req.run(), start = req.start(), pool = %req.pool(), "asked for an instance");
                    *asked = true;
                }
            }
        }
        return Ok(None);
    };
    let row = db
        .query_opt(
            "select idle is not null, ended is not null from orca.instances where id = $1",
            &[&at.row()],
        )
        .await?;
    Ok(match row {
        Some(r) if r.get::<_, bool>(0) => Some(Outcome::Succeeded),
        Some(r) if r.get::<_, bool>(1) => Some(Outcome::Failed),
        Some(_) => None,
        None => Some(Outcome::Failed),
    })
}
