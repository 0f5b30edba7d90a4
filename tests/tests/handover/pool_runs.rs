//! Runs on a warm pool: a run asks for an instance and ends once the
//! instance is idle again.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_pool_a_run_asks_for_an_instance_and_ends_when_it_is_idle_again() {
    use orca_db::pool;
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    let mut opts = SimOptions::new("v1", TICK_MS, STALE_S);
    opts = opts.with_args(vec!["--pool".into(), "default/p".into()]);
    let mut a = Sim::start(&url, &opts);
    let id = a.id().await;
    a.wait_for(&format!("leading id={id}"), Duration::from_secs(5))
        .await;
    let ids = queue(&db, "sleep:0", 1).await;
    let run = ids[0];
    a.wait_for(
        &format!("asked for an instance run={run}"),
        Duration::from_secs(5),
    )
    .await;
    // An instance comes up idle, as its agent's first pool-next makes it.
    pool::mark_idle(&db, "i-1", 0, 0, Some("default/p"))
        .await
        .unwrap()
        .unwrap();
    a.wait_for(
        &format!("handed out run={run} start=1 instance=i-1"),
        Duration::from_secs(5),
    )
    .await;
    assert!(
        !all_ended(&db, &[run]).await,
        "the run waits for its instance"
    );
    // The agent ran the run's command; its row goes idle again.
    pool::mark_idle(&db, "i-1", run, 1, None)
        .await
        .unwrap()
        .unwrap();
    until("the run ends", Duration::from_secs(5), || {
        all_ended(&db, &ids)
    })
    .await;
    assert_eq!(runs(&db, &ids).await[&run].status(), "succeeded");
    let unserved: i64 = db
        .query_one(
            "select count(*) from orca.pool_demand where served is null",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(unserved, 0, "the hand-out served the demand");
}
