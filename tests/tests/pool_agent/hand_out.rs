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
    assert_eq!(handed.instance, "i-idle");
    assert_eq!(db.query_one(open, &[]).await.unwrap().get::<_, i64>(0), 0);
    let row = db
        .query_one(
            "select run, start, role, head_address, new_code, pooled, ended is null from orca.instances where id = $1",
            &[&handed.row],
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
        handed.unwrap().map(|h| h.instance).as_deref(),
        Some("i-beating"),
        "the hand-out that met the beat found no instance"
    );
}
