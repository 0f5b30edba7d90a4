//! Restarts: of the current pod, and of the operator itself mid-rollout.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_current_pod_killed_is_recreated_and_leads_again() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut local = LocalMode::new(&url, &scheduler("v1", "", ""));
    local.start();
    local.wait_for("v1 ready", Duration::from_secs(30), ready_with("v1"));
    let first = instance_of_image(&url, "v1").await;
    let db = pg::connect(&url).await;
    kill_instance(&db, first).await;
    let s = local.wait_for("a new v1 pod leads", Duration::from_secs(40), |s| {
        s.restarts == 1 && s.leader.as_ref().is_some_and(|l| l.instance != first)
    });
    assert_eq!(s.leader.unwrap().image, "v1");
    assert!(local.output().iter().any(|l| l.contains("PodRestarted")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_killed_mid_rollout_carries_on_when_restarted() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut local = LocalMode::new(&url, &scheduler("v1", "", ""));
    local.start();
    local.wait_for("v1 ready", Duration::from_secs(30), ready_with("v1"));
    let watch = LockSampler::start(&url).await;
    let mut seed = 0x9e37_79b9_u64;
    let mut random_ms = |max: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % max
    };
    let mut kills = 0;
    for image in ["v2", "v3", "v4", "v5"] {
        local.apply(&scheduler(image, "", ""));
        // Five kills at random moments of each rollout.
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(100 + random_ms(900))).await;
            local.kill();
            kills += 1;
            tokio::time::sleep(Duration::from_millis(random_ms(300))).await;
            local.start();
        }
        local.wait_for(
            &format!("{image} ready after the kills"),
            Duration::from_secs(60),
            |s| {
                s.phase == Phase::Ready
                    && s.leader.as_ref().is_some_and(|l| l.image == image)
                    && s.revisions.len() == 1
            },
        );
    }
    assert_eq!(kills, 20);
    watch.assert_leaders_held_the_lock().await;
    let db = pg::connect(&url).await;
    let live: i64 = db
        .query_one(
            "select count(*) from orca.schedulers where ended is null and image <> 'v5'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(live, 0, "every old instance ended its row");
}
