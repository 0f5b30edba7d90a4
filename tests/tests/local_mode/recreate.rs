//! Recreate, with overlap off: the old pod is gone before the new one
//! starts, which settles, is Ready and registers.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_off_recreates_old_gone_before_new_starts() {
    let url = pg::Cluster::shared().migrated_db().await;
    let off = "  overlap: false\n";
    let mut local = LocalMode::new(&url, &scheduler("v1", "", off));
    local.start();
    local.wait_for("v1 runs", Duration::from_secs(30), |s| {
        s.revisions.len() == 1
    });
    let v1_pod = local.pods();
    local.apply(&scheduler("v2", "", off));
    local.wait_for("v2's pod only", Duration::from_secs(60), |s| {
        s.revisions.len() == 1 && s.revisions[0].image == "v2"
    });
    let out = local.output().join("\n");
    let recreate = out.find("Recreating").expect("a Recreating event");
    let v2_created = out.rfind("Creating: pod").expect("a Creating event for v2");
    assert!(recreate < v2_created, "{out}");
    assert!(!local.pods().iter().any(|p| v1_pod.contains(p)));
    let db = pg::connect(&url).await;
    let rows: i64 = db
        .query_one("select count(*) from orca.schedulers", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "with overlap off a scheduler has no row");
}

/// With overlap off the scheduler writes no row: the rollout does not wait
/// for one (no `JoinTimeout`), the new pod is up once it has run
/// settleSeconds, and the register step runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_off_recreate_settles_ready_and_registers() {
    let url = pg::Cluster::shared().migrated_db().await;
    // Inside `handover:`, then back at the spec's level.
    let off = "    settleSeconds: 2\n  overlap: false\n";
    let settled_with = |image: &'static str| {
        move |s: &orca_operator::crd::SchedulerStatus| {
            s.phase == Phase::Ready
                && s.current_image.as_deref() == Some(image)
                && s.revisions.len() == 1
                && s.leader.as_ref().is_some_and(|l| l.image == image)
                && s.conditions
                    .iter()
                    .any(|c| c.type_ == "Available" && c.status == "True")
        }
    };
    let mut local = LocalMode::new(&url, &scheduler("v1", "", off));
    local.start();
    local.wait_for(
        "v1 up and registered",
        Duration::from_secs(30),
        settled_with("v1"),
    );
    let v1_pods = local.pods();
    local.apply(&scheduler("v2", "", off));
    let s = local.wait_for(
        "v2 up and registered",
        Duration::from_secs(60),
        settled_with("v2"),
    );
    assert!(
        !s.conditions
            .iter()
            .any(|c| c.type_ == "Degraded" && c.status == "True"),
        "{:?}",
        s.conditions
    );
    assert_eq!(s.leader.map(|l| l.pod), Some(s.revisions[0].pod.clone()));
    assert!(!local.pods().iter().any(|p| v1_pods.contains(p)));

    let out = local.output().join("\n");
    // The old pod went before the new one started; the new one was up
    // before it registered.
    let recreate = out.find("Recreating").expect("a Recreating event");
    let created = out.rfind("Creating: pod").expect("a Creating event for v2");
    let up = out.rfind("Running: pod").expect("a Running event for v2");
    let registering = out.rfind("Registering").expect("a Registering event");
    assert!(
        recreate < created && created < up && up < registering,
        "{out}"
    );
    assert!(!out.contains("JoinTimeout"), "{out}");
    // The register Job ran with the new image.
    let registered = std::fs::read_dir(local.dir().join(".status/jobs"))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("log")).ok())
        .any(|log| log.contains("registered v2"));
    assert!(registered, "v2's register job ran:\n{out}");
    let db = pg::connect(&url).await;
    let rows: i64 = db
        .query_one("select count(*) from orca.schedulers", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "with overlap off a scheduler has no row");
}
