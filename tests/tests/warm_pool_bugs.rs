//! The pool loop's passes against moto's EC2 server and a real PostgreSQL,
//! the rows written by hand (no agents): demand of runs that no longer wait
//! (docs/protocol.md#demand), rows of instances EC2 no longer runs, and
//! busy instances whose run is over or whose heartbeat is stale.

use orca_operator::fence::Fence;
use std::time::Duration;

use chrono::Utc;
use orca_db::{pool::ask_for_instance, pool::Request, Db};
use orca_operator::warmpool::{Ec2State, PassReport, PoolLoop, Tuning};
use orca_tests::{pg, warm};

/// A run of `status` at `start`, its heartbeat `beat_ago` seconds old.
async fn run(db: &Db, status: &str, start: i32, beat_ago: f64) -> i64 {
    db.query_one(
        "insert into orca.runs (pipeline, status, start, heartbeat)
         values ('p', $1, $2, now() - make_interval(secs => $3)) returning id",
        &[&status, &start, &beat_ago],
    )
    .await
    .unwrap()
    .get(0)
}

/// A live row of `instance` in `pool`: idle (run `None`) or busy, made
/// `age` seconds ago.
async fn row(db: &Db, instance: &str, pool: &str, run: Option<i64>, age: f64) -> i64 {
    db.query_one(
        "insert into orca.instances
             (instance, pool, run, start, role, pooled, created, joined, idle, polled)
         select $1, $2, $3, coalesce((select start from orca.runs where id = $3), 0),
                case when $3::bigint is null then 'warm' else 'head' end, $3::bigint is not null,
                now() - make_interval(secs => $4), now(),
                case when $3::bigint is null then now() end, now()
         returning id",
        &[&instance, &pool, &run, &age],
    )
    .await
    .unwrap()
    .get(0)
}

/// `ended_by` of each row (`None`: live).
async fn ended_by(db: &Db, rows: &[i64]) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for r in rows {
        let by: Option<String> = db
            .query_one("select ended_by from orca.instances where id = $1", &[r])
            .await
            .unwrap()
            .get(0);
        out.push(by);
    }
    out
}

async fn pool_loop(
    pool: &str,
    spec: orca_operator::crd::WarmPoolSpec,
    url: &str,
    t: Tuning,
) -> PoolLoop {
    let (ns, name) = pool.split_once('/').unwrap();
    warm::aws_env();
    PoolLoop::new(ns, name, spec, url, t, Fence::always())
        .await
        .unwrap()
}

fn terminated_for(report: &PassReport, reason: &str) -> bool {
    report
        .events()
        .iter()
        .any(|e| e.reason() == "Terminated" && e.message().contains(reason))
}

#[tokio::test]
async fn demand_of_runs_no_longer_waiting_at_that_start_launches_nothing() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let pool = "gone-demand/pool";
    let db = pg::connect(&url).await;
    let cancelled = run(&db, "cancelled", 1, 0.0).await;
    let restarted = run(&db, "running", 2, 0.0).await;
    let finished = run(&db, "succeeded", 1, 0.0).await;
    let running = run(&db, "running", 1, 0.0).await;
    let queued = run(&db, "queued", 1, 0.0).await;
    for r in [cancelled, restarted, finished, running, queued, 999_999] {
        let req = Request::new(pool, r, 1, "head", "", true);
        ask_for_instance(&db, &req).await.unwrap();
    }
    let spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 0, 0, 10);
    let mut lp = pool_loop(pool, spec, &url, warm::tuning(Duration::from_secs(600))).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    assert_eq!(
        report.launched().len(),
        2,
        "one instance for each run still waiting at its start (running, queued)"
    );
    let present = ec2.describe(&warm::owner(pool)).await.unwrap();
    assert_eq!(present.len(), 2);
}

#[tokio::test]
async fn live_rows_of_terminated_and_unlisted_instances_are_ended() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let pool = "gone-rows/pool";
    let db = pg::connect(&url).await;
    let ids = warm::launch_by_hand(&ec2, pool, &subnets[0], 3, "gone-rows").await;
    let (dead, dead_busy, alive) = (&ids[0], &ids[1], &ids[2]);
    let r = run(&db, "running", 1, 0.0).await;
    let rows = [
        row(&db, dead, pool, None, 5.0).await,
        row(&db, dead_busy, pool, Some(r), 5.0).await,
        row(&db, alive, pool, None, 5.0).await,
        // Never listed: made long before the listing, and just now (an
        // instance EC2 may not list yet).
        row(&db, "i-0neverlisted", pool, None, 120.0).await,
        row(&db, "i-0notlistedyet", pool, None, 1.0).await,
    ];
    ec2.terminate(&[dead.clone(), dead_busy.clone()])
        .await
        .unwrap();
    let spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 0, 5, 10);
    let mut lp = pool_loop(pool, spec, &url, warm::tuning(Duration::from_secs(600))).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    let operator = Some("operator".to_string());
    assert_eq!(
        ended_by(&db, &rows).await,
        [operator.clone(), operator.clone(), None, operator, None]
    );
    assert!(report.terminated().is_empty(), "{:?}", report.terminated());
    let listed = ec2.describe(&warm::owner(pool)).await.unwrap();
    let state = listed.iter().find(|i| i.id() == alive).map(|i| i.state());
    assert_eq!(state, Some(Ec2State::Running));
}

#[tokio::test]
async fn a_busy_instance_whose_run_is_over_or_whose_heartbeat_is_stale_is_retired() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let pool = "hung/pool";
    let db = pg::connect(&url).await;
    let ids = warm::launch_by_hand(&ec2, pool, &subnets[0], 5, "hung").await;
    let over = run(&db, "cancelled", 1, 0.0).await;
    let restarted = run(&db, "running", 1, 0.0).await;
    let stale = run(&db, "running", 1, 3600.0).await;
    let healthy = run(&db, "running", 1, 0.0).await;
    let rows = [
        row(&db, &ids[0], pool, Some(over), 5.0).await,
        row(&db, &ids[1], pool, Some(restarted), 5.0).await,
        row(&db, &ids[2], pool, Some(stale), 5.0).await,
        row(&db, &ids[3], pool, Some(healthy), 5.0).await,
        // Over, but its agent has marked the row idle: not hung.
        row(&db, &ids[4], pool, Some(over), 5.0).await,
    ];
    db.execute(
        "update orca.instances set idle = now() where id = $1",
        &[&rows[4]],
    )
    .await
    .unwrap();
    db.execute(
        "update orca.runs set start = 2 where id = $1",
        &[&restarted],
    )
    .await
    .unwrap();
    let spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 0, 5, 10);
    let tuning = warm::tuning(Duration::from_secs(600)).with_stale(Duration::from_secs(1));
    let mut lp = pool_loop(pool, spec, &url, tuning).await;
    // Seen hung for the first time: not yet.
    let first = lp.pass(Utc::now()).await.unwrap();
    assert!(first.terminated().is_empty(), "{:?}", first.terminated());
    tokio::time::sleep(Duration::from_millis(2500)).await;
    db.execute(
        "update orca.runs set heartbeat = now() where id = $1",
        &[&healthy],
    )
    .await
    .unwrap();
    db.execute(
        "update orca.instances set polled = now() where id = $1",
        &[&rows[4]],
    )
    .await
    .unwrap();
    let second = lp.pass(Utc::now()).await.unwrap();
    let mut terminated = second.terminated().to_vec();
    terminated.sort();
    let mut want = ids[..3].to_vec();
    want.sort();
    assert_eq!(terminated, want);
    assert!(terminated_for(&second, "Hung"), "{:#?}", second.events());
    let operator = Some("operator".to_string());
    assert_eq!(
        ended_by(&db, &rows).await,
        [operator.clone(), operator.clone(), operator, None, None]
    );
}

/// The `Hung` check judges a run's heartbeat by the stale limit of the
/// Scheduler the pool serves, never by a constant of its own: a scheduler
/// that beats every 20 s has its busy instances left to their runs. Once,
/// a fixed 30 s limit had them terminated mid-run.
#[tokio::test]
async fn a_run_is_hung_by_the_schedulers_stale_limit_not_the_loops() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let pool = "slowbeat/pool";
    let db = pg::connect(&url).await;
    let ids = warm::launch_by_hand(&ec2, pool, &subnets[0], 1, "slowbeat").await;
    // Its last beat 5 s ago: stale by the loop's own 1 s, fresh by the
    // Scheduler's 60 s.
    let beating = run(&db, "running", 1, 5.0).await;
    let rows = [row(&db, &ids[0], pool, Some(beating), 5.0).await];
    let spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 0, 5, 10);
    let tuning = warm::tuning(Duration::from_secs(600)).with_stale(Duration::from_secs(1));
    let mut lp = pool_loop(pool, spec, &url, tuning).await;
    lp.set_run_stale(Duration::from_secs(60));
    let first = lp.pass(Utc::now()).await.unwrap();
    assert!(first.terminated().is_empty(), "{:?}", first.terminated());
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let second = lp.pass(Utc::now()).await.unwrap();
    assert!(
        second.terminated().is_empty() && !terminated_for(&second, "Hung"),
        "a run beating within its Scheduler's stale limit was taken for hung: {:#?}",
        second.events()
    );
    assert_eq!(ended_by(&db, &rows).await, [None]);
    assert_eq!(second.status().busy, 1);
}
