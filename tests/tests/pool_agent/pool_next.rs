//! `pool-next`: a fresh instance waits idle and takes a hand-out; its row
//! ended, no hand-out in time, or the operator's claim ends it.

use super::*;

#[tokio::test]
async fn a_fresh_instance_waits_idle_then_takes_a_hand_out_and_so_on() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut db = pg::connect(&url).await;
    let mut agent = Agent::fresh(&url, "i-0fresh", "ns/fresh", "600", "");
    let warm = idle_row(&db, "i-0fresh").await;
    let row = db
        .query_one(
            "select pool, role, run, pooled from orca.instances where id = $1",
            &[&warm],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "ns/fresh");
    assert_eq!(row.get::<_, String>(1), "warm");
    assert_eq!(row.get::<_, Option<i64>>(2), None);
    assert!(!row.get::<_, bool>(3));
    // It waits, beating `polled`.
    let polled = "select extract(epoch from polled)::float8 from orca.instances where id = $1";
    let before: f64 = db.query_one(polled, &[&warm]).await.unwrap().get(0);
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert!(agent.is_running(), "{}", agent.stderr());
    let after: f64 = db.query_one(polled, &[&warm]).await.unwrap().get(0);
    assert!(after > before, "polled was not beaten");

    let req = request("ns/fresh", 41, 2, "head", "10.0.0.7:6379", true);
    let handed = pool::hand_out(&mut db, &req, FRESH)
        .await
        .unwrap()
        .expect("an idle instance");
    assert_eq!(handed.instance(), "i-0fresh");
    let (code, out, _) = agent.exit_within(Duration::from_secs(5)).await;
    assert_eq!((code, out.as_str()), (0, "next 41 2 10.0.0.7:6379 1\n"));
    let row = db
        .query_one(
            "select joined is not null, pooled, ended is null from orca.instances where id = $1",
            &[&handed.row()],
        )
        .await
        .unwrap();
    assert_eq!((row.get(0), row.get(1), row.get(2)), (true, true, true));
    let ended_by: String = db
        .query_one(
            "select ended_by from orca.instances where id = $1",
            &[&warm],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(ended_by, "handout");

    // After the run: pool-next for the run it served marks that row idle.
    let agent = Agent::spawn(&url, &["pool-next", "i-0fresh", "41", "2", "600"], &[]);
    assert_eq!(idle_row(&db, "i-0fresh").await, handed.row());
    let req = request("ns/fresh", 42, 0, "worker", "10.0.0.9:6379", false);
    pool::hand_out(&mut db, &req, FRESH)
        .await
        .unwrap()
        .expect("idle again");
    let (code, out, _) = agent.exit_within(Duration::from_secs(5)).await;
    assert_eq!((code, out.as_str()), (0, "next 42 0 10.0.0.9:6379 0\n"));
}

#[tokio::test]
async fn a_row_ended_with_no_other_ends_the_agent_within_a_second() {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    let agent = Agent::fresh(&url, "i-0shut", "ns/p", "600", "");
    let row = idle_row(&db, "i-0shut").await;
    // Let the agent settle into its wait, so the exit is the notification's.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(pool::end_idle(&db, row, "scheduler").await.unwrap());
    let started = Instant::now();
    let (code, out, _) = agent.exit_within(Duration::from_secs(5)).await;
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn no_hand_out_in_time_ends_the_idle_row_and_exits_1() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut db = pg::connect(&url).await;
    let started = Instant::now();
    // 1 s, and a grace of 1 s instead of the minute (test-only setting).
    let agent = Agent::fresh(&url, "i-0late", "ns/late", "1", "1000");
    let row = idle_row(&db, "i-0late").await;
    let (code, out, _) = agent.exit_within(Duration::from_secs(10)).await;
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "gave up after {:?}",
        started.elapsed()
    );
    let ended_by: Option<String> = db
        .query_one("select ended_by from orca.instances where id = $1", &[&row])
        .await
        .unwrap()
        .get(0);
    assert_eq!(ended_by.as_deref(), Some("agent"));
    let req = request("ns/late", 7, 0, "worker", "h:1", false);
    assert_eq!(pool::hand_out(&mut db, &req, FRESH).await.unwrap(), None);
}

#[tokio::test]
async fn the_operators_claim_is_no_hand_out_and_the_agent_gives_up() {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    let agent = Agent::fresh(&url, "i-0claimed", "ns/claim", "600", "");
    let warm = idle_row(&db, "i-0claimed").await;
    // Let the agent settle into its wait, so the exit is the notification's.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Its row ended and the operator's claim (a live worker row without a
    // run) in its place, in one transaction: the instance is being retired.
    db.batch(&format!(
        "begin;
         update orca.instances set ended = now(), ended_by = 'operator' where id = {warm};
         insert into orca.instances (instance, pool, role) values ('i-0claimed', 'ns/claim', 'worker');
         commit;"
    ))
    .await
    .unwrap();
    let (code, out, _) = agent.exit_within(Duration::from_secs(5)).await;
    assert_eq!((code, out.as_str()), (1, ""), "a claim is not a run");
    let joined: bool = db
        .query_one(
            "select joined is not null from orca.instances
             where instance = 'i-0claimed' and ended is null",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!joined, "the agent joined the operator's claim");
}
