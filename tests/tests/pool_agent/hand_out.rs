//! The scheduler's side alone: `hand_out` takes only fresh idle rows and
//! serves the demand.

use super::*;

#[tokio::test]
async fn hand_out_takes_only_fresh_idle_rows_and_serves_the_demand() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut db = pg::connect(&url).await;
    let req = request("ns/d", 3, 1, "worker", "10.4.4.4:1", false);
    pool::ask_for_instance(&db, &req).await.unwrap();
    pool::ask_for_instance(&db, &req).await.unwrap();
    let open = "select count(*) from orca.pool_demand where served is null";
    assert_eq!(db.query_one(open, &[]).await.unwrap().get::<_, i64>(0), 1);
    // Stale (a dead agent), busy (not idle), another pool: none is handed out.
    db.batch(
        "insert into orca.instances (instance, pool, role, idle, polled) values
             ('i-stale', 'ns/d', 'warm', now(), now() - interval '1 minute'),
             ('i-other', 'ns/e', 'warm', now(), now());
         insert into orca.instances (instance, pool, run, role, polled) values ('i-busy', 'ns/d', 1, 'head', now())",
    )
    .await
    .unwrap();
    assert_eq!(pool::hand_out(&mut db, &req, FRESH).await.unwrap(), None);
    assert_eq!(db.query_one(open, &[]).await.unwrap().get::<_, i64>(0), 1);
    let busy: i64 = db
        .query_one(
            "select id from orca.instances where instance = 'i-busy'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        !pool::end_idle(&db, busy, "operator").await.unwrap(),
        "a busy row is not idle"
    );

    let idle: i64 = db
        .query_one(
            "insert into orca.instances (instance, pool, role, idle, polled) values ('i-idle', 'ns/d', 'warm', now(), now()) returning id",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let handed = pool::hand_out(&mut db, &req, FRESH)
        .await
        .unwrap()
        .expect("i-idle");
    assert_eq!(handed.instance(), "i-idle");
    assert_eq!(db.query_one(open, &[]).await.unwrap().get::<_, i64>(0), 0);
    let row = db
        .query_one(
            "select run, start, role, head_address, new_code, pooled, ended is null from orca.instances where id = $1",
            &[&handed.row()],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 3);
    assert_eq!(row.get::<_, i32>(1), 1);
    assert_eq!(row.get::<_, String>(2), "worker");
    assert_eq!(row.get::<_, String>(3), "10.4.4.4:1");
    assert!(!row.get::<_, bool>(4) && row.get::<_, bool>(5) && row.get::<_, bool>(6));
    // The handed-out row is no longer idle: the race-free end leaves it be.
    assert!(!pool::end_idle(&db, idle, "operator").await.unwrap());
    assert_eq!(pool::hand_out(&mut db, &req, FRESH).await.unwrap(), None);
}

/// An idle row locked a moment by its agent's beat (or by the operator
/// reserving it) is still handed out: the run does not wait for a cold
/// launch because the beat and the hand-out met.
#[tokio::test]
async fn a_hand_out_meeting_the_agents_beat_still_takes_the_instance() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut db = pg::connect(&url).await;
    let mut beat = pg::connect(&url).await;
    db.batch(
        "insert into orca.instances (instance, pool, role, idle, polled)
         values ('i-beating', 'ns/beat', 'warm', now(), now())",
    )
    .await
    .unwrap();
    // The beat's update, held open for 300 ms.
    let tx = beat.transaction().await.unwrap();
    tx.execute(
        "update orca.instances set polled = now() where instance = 'i-beating'",
        &[],
    )
    .await
    .unwrap();
    let commit = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        tx.commit().await.unwrap();
    };
    let req = request("ns/beat", 4, 0, "worker", "10.4.4.5:1", false);
    let (handed, ()) = tokio::join!(pool::hand_out(&mut db, &req, FRESH), commit);
    assert_eq!(
        handed.unwrap().map(|h| h.instance().to_string()).as_deref(),
        Some("i-beating"),
        "the hand-out that met the beat found no instance"
    );
}

/// A hand-out waiting for a locked row holds no other row meanwhile: the
/// operator's retirement (one statement ending several idle rows) that has
/// one row and reaches for the row the hand-out waited on is never
/// deadlocked with it, and the hand-out still takes an instance.
#[tokio::test]
async fn a_hand_out_waiting_for_a_row_never_deadlocks_the_operators_retirement() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut db = pg::connect(&url).await;
    let mut taker = pg::connect(&url).await;
    let mut retirer = pg::connect(&url).await;
    let watcher = pg::connect(&url).await;
    db.batch(
        "insert into orca.instances (instance, pool, role, idle, polled) values
             ('i-first', 'ns/dl', 'warm', now() - interval '1 second', now()),
             ('i-second', 'ns/dl', 'warm', now(), now())",
    )
    .await
    .unwrap();
    // Another hand-out is taking the first row; the retirement has the
    // second and will reach for the first next.
    let took = taker.transaction().await.unwrap();
    took.execute(
        "update orca.instances set ended = now(), ended_by = 'handout' where instance = 'i-first'",
        &[],
    )
    .await
    .unwrap();
    let retiring = retirer.transaction().await.unwrap();
    let retirer_pid: i32 = retiring
        .query_one(
            "select pg_backend_pid() from orca.instances where instance = 'i-second' for update",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let taker_pid: i32 = took
        .query_one("select pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let req = request("ns/dl", 5, 0, "worker", "10.4.4.6:1", false);
    let handing = tokio::spawn(async move {
        let handed = pool::hand_out(&mut db, &req, FRESH).await;
        handed.map(|h| h.map(|h| h.instance().to_string()))
    });
    let blocked_by = |pid: i32| {
        let watcher = &watcher;
        async move {
            for _ in 0..500 {
                let waiting: i64 = watcher
                    .query_one(
                        "select count(*) from pg_stat_activity where $1 = any(pg_blocking_pids(pid))",
                        &[&pid],
                    )
                    .await
                    .unwrap()
                    .get(0);
                if waiting > 0 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("the hand-out never waited for session {pid}");
        }
    };
    blocked_by(taker_pid).await;
    took.commit().await.unwrap();
    blocked_by(retirer_pid).await;
    let reached = tokio::time::timeout(
        Duration::from_secs(5),
        retiring.query_opt(
            "select id from orca.instances where instance = 'i-first' for update",
            &[],
        ),
    )
    .await
    .expect("the retirement waited 5 s for a row the hand-out held");
    assert!(
        reached.is_ok(),
        "the retirement reaching for the first row: {reached:?}"
    );
    retiring.commit().await.unwrap();
    let handed = handing.await.unwrap();
    assert_eq!(
        handed.as_ref().ok().cloned().flatten().as_deref(),
        Some("i-second"),
        "the hand-out: {handed:?}"
    );
}
