//! End to end: `orca-operator local` rolling `orca-sim` schedulers on a
//! real PostgreSQL — the handover in order, the aborts, stop-the-world,
//! recreate, restarts of the pod and of the operator itself.

use std::time::Duration;

use orca_operator::crd::Phase;
use orca_tests::{
    local::LocalMode,
    pg,
    sim::probe::{self, LockSampler},
};

const TICK_MS: u64 = 200;

/// A Scheduler running `orca-sim` with image `image` and `extra` args.
fn scheduler(image: &str, extra: &str, more_spec: &str) -> String {
    format!(
        r#"apiVersion: orca.dev/v1alpha1
kind: Scheduler
metadata:
  name: orca
spec:
  image: {image}
  command: ["orca-sim", "scheduler"]
  args: ["--tick-ms", "{TICK_MS}", "--stale-seconds", "2"{extra}]
  database:
    urlSecretRef: {{name: orca-db, key: url}}
  register:
    command: ["sh", "-c", "echo registered $ORCA_IMAGE"]
  handover:
    staleSeconds: 2
    joinTimeoutSeconds: 20
{more_spec}"#
    )
}

async fn instance_of_image(url: &str, image: &str) -> i64 {
    let db = pg::connect(url).await;
    db.query_one(
        "select max(id) from orca.schedulers where image = $1",
        &[&image],
    )
    .await
    .unwrap()
    .get::<_, Option<i64>>(0)
    .unwrap_or_else(|| panic!("no instance of {image}"))
}

fn ready_with(image: &'static str) -> impl Fn(&orca_operator::crd::SchedulerStatus) -> bool {
    move |s| s.phase == Phase::Ready && s.leader.as_ref().is_some_and(|l| l.image == image)
}

async fn wait_runs_done(url: &str, ids: &[i64], limit: Duration) {
    let db = pg::connect(url).await;
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let left: i64 = db
            .query_one("select count(*) from orca.runs where id = any($1) and status not in ('succeeded', 'failed')", &[&ids])
            .await
            .unwrap()
            .get(0);
        if left == 0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{left} runs still not finished"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// SIGKILL to the scheduler process of instance `id`, as its row names it.
async fn kill_instance(db: &orca_db::Db, id: i64) {
    let pid: i32 = db
        .query_one("select pid from orca.schedulers where id = $1", &[&id])
        .await
        .unwrap()
        .get(0);
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

mod aborts;
mod ending;
mod handover;
mod moves;
mod recreate;
mod register;
mod restarts;
mod shared_database;
