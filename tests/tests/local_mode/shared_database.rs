//! Two Schedulers on one database: the second touches nothing until the
//! first is gone.

use super::*;

/// The status the local mode wrote for Scheduler `default/<name>`.
fn status_of(local: &LocalMode, name: &str) -> orca_operator::crd::SchedulerStatus {
    std::fs::read_to_string(
        local
            .dir()
            .join(format!(".status/scheduler-default-{name}.yaml")),
    )
    .ok()
    .and_then(|t| serde_yaml::from_str(&t).ok())
    .unwrap_or_default()
}

/// A second Scheduler on the database of the first touches none of its
/// instances and starts nothing (`DatabaseShared`); once the first is gone,
/// it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_scheduler_on_the_same_database_touches_nothing() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut local = LocalMode::new(&url, &scheduler("v1", "", ""));
    local.start();
    let s = local.wait_for("orca ready", Duration::from_secs(30), ready_with("v1"));
    let orca_pod = s.leader.clone().expect("orca leads").pod;
    let v1 = instance_of_image(&url, "v1").await;

    local.write(
        "other.yaml",
        &scheduler("w1", "", "").replace("metadata:\n  name: orca\n", "metadata:\n  name: other\n"),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let held = loop {
        let s = status_of(&local, "other");
        if s.conditions
            .iter()
            .any(|c| c.type_ == "Degraded" && c.status == "True" && c.reason == "DatabaseShared")
        {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "other is not DatabaseShared: {s:#?}\n{}",
            local.output().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let message = held
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(message.contains(&orca_pod), "names the host: {message}");
    // A few passes more: still nothing started, nothing asked.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !local.pods().iter().any(|p| p.starts_with("other-")),
        "no pod of other: {:?}",
        local.pods()
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
    assert!(asked.is_none(), "orca's instance was never asked to drain");
    assert!(ready_with("v1")(&local.status()), "orca keeps leading");
    let out = local.output().join("\n");
    assert_eq!(
        out.matches("scheduler default/other: Warning DatabaseShared")
            .count(),
        1,
        "said once:\n{out}"
    );

    // orca goes (its file removed: its pods drain and end their rows);
    // other starts. The removal is the whole edit, though other's file is
    // the newer one.
    std::fs::remove_file(local.dir().join("scheduler.yaml")).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let s = status_of(&local, "other");
        if ready_with("w1")(&s) {
            assert!(
                !s.conditions
                    .iter()
                    .any(|c| c.type_ == "Degraded" && c.status == "True"),
                "{s:#?}"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "other did not start once orca was gone: {s:#?}\n{}",
            local.output().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A removed Scheduler has no status: orca's last one (Ready, v1
    // leading) does not stand for it while it is gone.
    let orca_status = local.dir().join(".status/scheduler-default-orca.yaml");
    assert!(
        !orca_status.exists(),
        "the removed Scheduler's status is still there: {}",
        std::fs::read_to_string(&orca_status).unwrap_or_default()
    );
}
