//! The stopped reserve on the instance: an agent whose row the operator
//! takes for the reserve waits for the stop instead of powering off, and
//! after the start its agent comes back idle on the row the reserve kept —
//! its warm row, or the row of the last run it served.

use super::*;

/// The agent of `instance` idle on `row`: the operator takes the row for
/// the reserve (the agent keeps waiting), stops the instance (the agent is
/// killed), wakes the row and starts it; the agent of the new boot marks
/// the same row idle and takes the next hand-out.
async fn stopped_and_started(
    url: &str,
    db: &mut orca_db::Db,
    instance: &str,
    pool: &str,
    mut agent: Agent,
    row: i64,
    run: i64,
) {
    let taken = pool::reserve_idle_rows(db, &[row]).await.unwrap();
    assert_eq!(taken, [row].into());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        agent.child.try_wait().unwrap().is_none(),
        "a reserved agent exited (the instance would power off); stderr:\n{}",
        agent.stderr()
    );
    // The stop.
    agent.child.start_kill().unwrap();
    let _ = agent.child.wait().await;
    assert_eq!(pool::wake_rows(db, &[row]).await.unwrap(), [row].into());
    // The boot after the start: the user-data loop from the top.
    let again = Agent::fresh(url, instance, pool, "600", "");
    again.logged(" idle", Duration::from_secs(10)).await;
    assert_eq!(idle_row(db, instance).await, row, "back on the row it had");
    let req = request(pool, run, 1, "head", "10.9.9.9:1", true);
    let handed = pool::hand_out(db, &req, FRESH).await.unwrap();
    assert_eq!(
        handed.map(|h| h.instance().to_string()).as_deref(),
        Some(instance)
    );
    let (code, out, err) = again.exit_within(Duration::from_secs(10)).await;
    assert_eq!(
        (code, out.as_str()),
        (0, format!("next {run} 1 10.9.9.9:1 1\n").as_str()),
        "{err}"
    );
}

#[tokio::test]
async fn a_reserve_instance_comes_back_idle_on_its_row_whether_or_not_it_served_a_run() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut db = pg::connect(&url).await;
    let pool_name = "ns/reserve";

    // Never handed a run: its warm row.
    let agent = Agent::fresh(&url, "i-res1", pool_name, "600", "");
    let row = idle_row(&db, "i-res1").await;
    stopped_and_started(&url, &mut db, "i-res1", pool_name, agent, row, 71).await;

    // Served a run first: the row of that run, idle after it.
    let agent = Agent::fresh(&url, "i-res2", pool_name, "600", "");
    idle_row(&db, "i-res2").await;
    let req = request(pool_name, 72, 1, "head", "10.9.9.9:1", true);
    pool::hand_out(&mut db, &req, FRESH)
        .await
        .unwrap()
        .expect("an idle instance");
    let (code, _, err) = agent.exit_within(Duration::from_secs(10)).await;
    assert_eq!(code, 0, "{err}");
    let after_run = Agent::spawn(&url, &["pool-next", "i-res2", "72", "1", "600"], &[]);
    after_run.logged(" idle", Duration::from_secs(10)).await;
    let row = idle_row(&db, "i-res2").await;
    stopped_and_started(&url, &mut db, "i-res2", pool_name, after_run, row, 73).await;
}

#[tokio::test]
async fn a_reserved_agent_waits_for_the_stop_past_its_deadline() {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    // 1 s and a grace of 1 s instead of the minute: its deadline, on its
    // own clock and on the database's, is 2 s away.
    let mut agent = Agent::fresh(&url, "i-res3", "ns/reserve3", "1", "1000");
    let row = idle_row(&db, "i-res3").await;
    assert_eq!(
        pool::reserve_idle_rows(&db, &[row]).await.unwrap(),
        [row].into()
    );
    // Well past the deadline, and past the few seconds an agent whose time
    // is up still tries to end its row: the operator is stopping the
    // instance, and an agent that powered off now would make it terminate
    // instead.
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert!(
        agent.is_running(),
        "a reserved agent gave up at its deadline; stderr:\n{}",
        agent.stderr()
    );
    let reserved: bool = db
        .query_one(
            "select ended is null and reserved is not null from orca.instances where id = $1",
            &[&row],
        )
        .await
        .unwrap()
        .get(0);
    assert!(reserved, "the reserved row was ended");
}
