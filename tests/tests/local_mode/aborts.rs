//! Rollouts that cannot overlap: a revision that never joins is aborted,
//! and exit 75 stops the world.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_that_never_joins_is_aborted_and_the_old_keeps_leading() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut local = LocalMode::new(&url, &scheduler("v1", "", ""));
    local.start();
    local.wait_for("v1 ready", Duration::from_secs(30), ready_with("v1"));
    let v1 = instance_of_image(&url, "v1").await;
    // v2's "scheduler" never joins.
    let never = r#"apiVersion: orca.dev/v1alpha1
kind: Scheduler
metadata:
  name: orca
spec:
  image: v2
  command: ["sleep", "600"]
  database:
    urlSecretRef: {name: orca-db, key: url}
  handover:
    staleSeconds: 2
    joinTimeoutSeconds: 3
"#;
    local.apply(never);
    let s = local.wait_for("the rollout is aborted", Duration::from_secs(20), |s| {
        s.phase == Phase::Degraded
            && s.conditions
                .iter()
                .any(|c| c.type_ == "Degraded" && c.reason == "JoinTimeout")
    });
    assert_eq!(
        s.leader.as_ref().map(|l| l.instance),
        Some(v1),
        "v1 keeps leading"
    );
    let db = pg::connect(&url).await;
    let asked: Option<chrono::DateTime<chrono::Utc>> = db
        .query_one(
            "select drain_asked from orca.schedulers where id = $1",
            &[&v1],
        )
        .await
        .unwrap()
        .get(0);
    assert!(asked.is_none(), "v1 was never asked to drain");
    local.wait_for("v2's pod is gone", Duration::from_secs(10), |s| {
        s.revisions.len() == 1
    });

    // v1 dies too: with nothing older left to lead, v2 is tried again (an
    // old revision is never restarted), rather than no scheduler at all.
    kill_instance(&db, v1).await;
    let s = local.wait_for("v2 is tried again", Duration::from_secs(20), |s| {
        s.revisions.iter().any(|r| r.image == "v2")
    });
    assert!(
        s.revisions.iter().all(|r| r.image == "v2"),
        "v1 is not restarted: {:?}",
        s.revisions
    );
    let out = local.output().join("\n");
    assert!(out.contains("RetryingAborted"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_75_stops_the_world_old_row_ends_before_the_new_starts() {
    let url = pg::Cluster::shared().migrated_db().await;
    // v1 says it knows 1 migration; v2's floor is 2: it must not overlap.
    let mut local = LocalMode::new(&url, &scheduler("v1", r#", "--migrations", "1""#, ""));
    local.start();
    local.wait_for("v1 ready", Duration::from_secs(30), ready_with("v1"));
    let v1 = instance_of_image(&url, "v1").await;
    let runs = probe::queue(&pg::connect(&url).await, "sleep:2", 2).await;
    local.apply(&scheduler("v2", r#", "--floor", "2""#, ""));
    local.wait_for(
        "v2 leads after stop-the-world",
        Duration::from_secs(60),
        ready_with("v2"),
    );
    let out = local.output().join("\n");
    assert!(out.contains("OverlapRefused"), "{out}");
    let db = pg::connect(&url).await;
    let v1_ended: Option<chrono::DateTime<chrono::Utc>> = db
        .query_one("select ended from orca.schedulers where id = $1", &[&v1])
        .await
        .unwrap()
        .get(0);
    let v2_joined: chrono::DateTime<chrono::Utc> = db
        .query_one(
            "select min(joined) from orca.schedulers where image = 'v2'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        v1_ended.expect("v1's row ended") <= v2_joined,
        "v2 joined before v1's row ended"
    );
    wait_runs_done(&url, &runs, Duration::from_secs(20)).await;
}
