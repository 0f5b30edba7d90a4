//! The operator's commands on the database: wait-for-lead, instances and
//! drain.

use super::*;

fn operator(url: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(bins::path("orca-operator"))
        .args(args)
        .env("ORCA_DATABASE_URL", url)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_lead_is_true_at_once_with_no_live_instance_and_false_on_timeout() {
    let url = pg::Cluster::shared().migrated_db().await;
    let started = std::time::Instant::now();
    let out = operator(
        &url,
        &["wait-for-lead", "--timeout", "30", "--stale-seconds", "2"],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "not at once: {:?}",
        started.elapsed()
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("no instance is live"));

    let mut a = sim(&url, "v1");
    let a_id = a.id().await;
    a.wait_for(&format!("leading id={a_id}"), Duration::from_secs(5))
        .await;
    // The newest instance never tries to lead.
    let (_stuck, stuck) = fake_instance(&url, "stuck-pod", 2, false).await;
    let out = operator(
        &url,
        &["wait-for-lead", "--timeout", "1", "--stale-seconds", "2"],
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "instance {stuck} (stuck-pod pid 1, image old) should"
        )),
        "{said}"
    );
    // A saw a newer live instance: it drained and ended.
    assert!(a.wait_exit(Duration::from_secs(5)).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_lists_instances_and_asks_one_to_drain() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut a = sim(&url, "v1");
    let id = a.id().await;
    a.wait_for(&format!("leading id={id}"), Duration::from_secs(5))
        .await;
    let out = operator(&url, &["instances", "--stale-seconds", "2"]);
    let listed = String::from_utf8_lossy(&out.stdout);
    let expected = format!(
        "{id} sim-v1 pid {} leading image v1 migrations {} runs - seen",
        a.pid(),
        orca_db::migrate::known()
    );
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(&expected) && l.ends_with("(live, holds the lead)")),
        "{listed}"
    );

    let out = operator(&url, &["drain", "987654"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no live scheduler instance 987654"));

    let out = operator(&url, &["drain", &id.to_string()]);
    assert!(out.status.success(), "{out:?}");
    a.wait_for(
        &format!("draining id={id} reason=asked to drain"),
        Duration::from_secs(2),
    )
    .await;
    assert!(a.wait_exit(Duration::from_secs(5)).await.success());
    let out = operator(&url, &["instances"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("(ended)"),
        "{out:?}"
    );
    let out = operator(&url, &["drain", &id.to_string()]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "an ended instance can't be asked"
    );
}
