//! Overlap: a migration floor above a live instance refuses with 75,
//! `overlap_refusal` where it must be empty, and an instance with overlap
//! off running alone.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floor_above_a_live_instance_refuses_with_75_and_migrates_nothing() {
    let url = pg::Cluster::shared().fresh_db().await;
    // The database as a binary knowing only the first migration left it.
    let dir = std::env::temp_dir().join(format!("orca-first-migration-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let first = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../migrations/0001_schedulers_and_runs.sql");
    std::fs::copy(&first, dir.join("0001_schedulers_and_runs.sql")).unwrap();
    let mut db = pg::connect(&url).await;
    orca_db::migrate::migrate(
        &mut db,
        &orca_db::migrate::Migrations::from_dir(&dir).unwrap(),
    )
    .await
    .unwrap();
    let (_old, old_id) = fake_instance(&url, "old-pod", 1, true).await;

    let log = dir.join("termination-log");
    let mut opts = SimOptions::new("v2", TICK_MS, STALE_S);
    opts = opts.with_termination_log(Some(log.clone()));
    let mut b = Sim::start(&url, &opts);
    let status = b.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(75), "{:?}", b.lines());
    let reason = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        reason.contains(&format!("instance {old_id} on old-pod knows 1"))
            && reason.contains("floor"),
        "{reason}"
    );
    let count = |sql: &'static str| {
        let db = &db;
        async move { db.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    assert_eq!(
        count("select count(*) from orca.migrations").await,
        1,
        "nothing migrated"
    );
    assert_eq!(
        count("select count(*) from orca.schedulers").await,
        1,
        "no row joined"
    );

    // A floor the old instance meets: it starts beside it, and migrates.
    let mut opts = SimOptions::new("v2", TICK_MS, STALE_S);
    opts = opts.with_args(vec!["--floor".into(), "1".into()]);
    let mut c = Sim::start(&url, &opts);
    c.id().await;
    assert_eq!(
        count("select count(*) from orca.migrations").await,
        i64::from(orca_db::migrate::known())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_refusal_is_empty_where_it_must_be() {
    let url = pg::Cluster::shared().fresh_db().await;
    let db = pg::connect(&url).await;
    let refusal = |floor| schedulers::overlap_refusal(&db, floor, stale());
    // No orca.schedulers yet.
    assert_eq!(refusal(99).await.unwrap(), "");
    assert!(schedulers::live_older(&db, 99, stale())
        .await
        .unwrap()
        .is_empty());
    drop(db);
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    let refusal = |floor| schedulers::overlap_refusal(&db, floor, stale());
    // No instance at all.
    assert_eq!(refusal(99).await.unwrap(), "");
    // Instances below the floor that have ended, or are gone (unseen).
    let (_e, ended) = fake_instance(&url, "ended-pod", 1, false).await;
    schedulers::end(&db, ended).await.unwrap();
    let (_g, gone) = fake_instance(&url, "gone-pod", 1, false).await;
    db.execute(
        "update orca.schedulers set seen = now() - interval '1 hour' where id = $1",
        &[&gone],
    )
    .await
    .unwrap();
    assert_eq!(refusal(2).await.unwrap(), "");
    // A live leader that knows the floor.
    let (leader_db, leader) = fake_instance(&url, "leader-pod", 2, true).await;
    assert_eq!(refusal(2).await.unwrap(), "");
    // ... but not a higher one.
    assert_eq!(
        schedulers::live_older(&db, 3, stale())
            .await
            .unwrap()
            .iter()
            .map(|o| (o.id(), o.host(), o.migrations()))
            .collect::<Vec<_>>(),
        vec![(leader, "leader-pod", 2)]
    );
    assert!(refusal(3)
        .await
        .unwrap()
        .contains(&format!("instance {leader} on leader-pod knows 2")));
    // Live instances, none of which leads.
    schedulers::step_down(&leader_db, leader, true)
        .await
        .unwrap();
    let reason = refusal(2).await.unwrap();
    assert!(reason.contains("none of them leads"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_overlap_off_it_runs_alone_without_a_row_or_the_lock() {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    let mut opts = SimOptions::new("v1", TICK_MS, STALE_S);
    opts = opts.with_overlap(false);
    let mut a = Sim::start(&url, &opts);
    a.wait_for("running alone", Duration::from_secs(5)).await;
    let ids = queue(&db, "fail:0.1", 2).await;
    until("runs end", Duration::from_secs(5), || all_ended(&db, &ids)).await;
    for (run, r) in runs(&db, &ids).await {
        assert_eq!(
            (r.status(), r.start(), r.instance()),
            ("failed", 1, None),
            "run {run}"
        );
    }
    let rows: i64 = db
        .query_one("select count(*) from orca.schedulers", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0);
    assert!(holders(&db).await.is_empty());
    a.signal(libc::SIGTERM);
    assert!(a.wait_exit(Duration::from_secs(5)).await.success());
}
