//! The handover: in order with runs going, and a third image while the
//! second hands over.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_start_then_a_handover_with_runs_going() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut local = LocalMode::new(&url, &scheduler("v1", "", ""));
    local.start();
    let s = local.wait_for(
        "v1 leads and is registered",
        Duration::from_secs(30),
        ready_with("v1"),
    );
    assert_eq!(s.revisions.len(), 1);
    assert!(local.output().iter().any(|l| l.contains("Registering")));

    let watch = LockSampler::start(&url).await;
    let v1 = instance_of_image(&url, "v1").await;
    let before = probe::queue(&pg::connect(&url).await, "sleep:4", 4).await;
    // The runs are started by v1 before v2 exists.
    let db = pg::connect(&url).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let started: i64 = db
            .query_one(
                "select count(*) from orca.runs where id = any($1) and status = 'running'",
                &[&before],
            )
            .await
            .unwrap()
            .get(0);
        if started == before.len() as i64 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "v1 did not start its runs"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    local.apply(&scheduler("v2", "", ""));
    local.wait_for("v2 leads", Duration::from_secs(30), |s| {
        s.leader.as_ref().is_some_and(|l| l.image == "v2")
    });
    let after = probe::queue(&pg::connect(&url).await, "sleep:1", 3).await;
    let s = local.wait_for("the handover completes", Duration::from_secs(60), |s| {
        ready_with("v2")(s)
            && s.last_handover
                .as_ref()
                .is_some_and(|h| h.drained.is_some())
    });
    wait_runs_done(&url, &after, Duration::from_secs(30)).await;
    watch.assert_leaders_held_the_lock().await;

    let h = s.last_handover.expect("the handover is recorded");
    assert_eq!((h.from.as_str(), h.to.as_str()), ("v1", "v2"));
    // Register only after the lead: both are database/exit times in order.
    assert!(h.registered.as_deref() >= h.led.as_deref(), "{h:?}");
    // v1's runs finished under v1, started once; the later ones under v2.
    let v2 = instance_of_image(&url, "v2").await;
    for row in db
        .query(
            "select id, status, start, instance from orca.runs where id = any($1)",
            &[&before],
        )
        .await
        .unwrap()
    {
        assert_eq!(row.get::<_, String>(1), "succeeded");
        assert_eq!(
            row.get::<_, i32>(2),
            1,
            "run {} was started again",
            row.get::<_, i64>(0)
        );
        assert_eq!(row.get::<_, Option<i64>>(3), Some(v1));
    }
    for row in db
        .query(
            "select instance from orca.runs where id = any($1)",
            &[&after],
        )
        .await
        .unwrap()
    {
        assert_eq!(row.get::<_, Option<i64>>(0), Some(v2));
    }
    let ended: Option<chrono::DateTime<chrono::Utc>> = db
        .query_one("select ended from orca.schedulers where id = $1", &[&v1])
        .await
        .unwrap()
        .get(0);
    assert!(ended.is_some(), "v1 ended its row");
    assert_eq!(
        local.pods().len(),
        1,
        "only v2's pod is left: {:?}",
        local.pods()
    );
    let out = local.output().join("\n");
    let order = [
        "HandoverStarted",
        "AskedDrain",
        "Leading",
        "Registering",
        "Removed",
        "HandoverComplete",
    ];
    let mut from = 0;
    for reason in order {
        let at = out[from..]
            .find(reason)
            .unwrap_or_else(|| panic!("no {reason} event after the ones before it:\n{out}"));
        from += at + reason.len();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_image_while_the_second_hands_over() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut local = LocalMode::new(&url, &scheduler("v1", "", ""));
    local.start();
    local.wait_for("v1 ready", Duration::from_secs(30), ready_with("v1"));
    let watch = LockSampler::start(&url).await;
    local.apply(&scheduler("v2", "", ""));
    local.wait_for("v2's pod exists", Duration::from_secs(10), |s| {
        s.revisions.len() == 2
    });
    local.apply(&scheduler("v3", "", ""));
    local.wait_for("v3 ready, all drained", Duration::from_secs(60), |s| {
        ready_with("v3")(s) && s.revisions.len() == 1
    });
    watch.assert_leaders_held_the_lock().await;
    let db = pg::connect(&url).await;
    let live_old: i64 = db
        .query_one(
            "select count(*) from orca.schedulers where image <> 'v3' and ended is null",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(live_old, 0, "v1 and any v2 have ended their rows");
}
