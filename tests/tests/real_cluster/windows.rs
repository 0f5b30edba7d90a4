//! Maintenance windows on the real cluster: a Scheduler's first deployment
//! never waits, a new image outside its windows waits (`Deferred`,
//! `status.nextWindow`, no pod made) and `kubectl orca rollout now` starts
//! it at once, the handover then done as any.

use std::time::Duration;

use orca_tests::on_cluster::OnCluster;

use super::{kubectl_orca::kubectl_orca, ready_with, scheduler};

/// Deferred's (status, reason), if the status has the condition.
fn deferred(s: &orca_operator::crd::SchedulerStatus) -> Option<(String, String)> {
    s.conditions
        .iter()
        .find(|c| c.type_ == "Deferred")
        .map(|c| (c.status.clone(), c.reason.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_image_outside_its_windows_waits_until_rolled_out_now() {
    let stage = OnCluster::new("windows").await;
    // New Year's first minute: never under way while the test runs.
    let windows = "  maintenanceWindows:\n  - {cron: \"0 0 1 1 *\", timezone: UTC, duration: 1m}\n";
    stage
        .apply_scheduler(&scheduler("orca", "v1", &[], windows))
        .await;
    stage
        .wait_scheduler(
            "orca",
            "v1 Ready: a first deployment never waits",
            Duration::from_secs(60),
            ready_with("v1"),
        )
        .await;

    stage
        .apply_scheduler(&scheduler("orca", "v2", &[], windows))
        .await;
    let waiting = stage
        .wait_scheduler(
            "orca",
            "v2 deferred to the next window",
            Duration::from_secs(30),
            |s| deferred(s).is_some_and(|(status, _)| status == "True"),
        )
        .await;
    assert_eq!(
        deferred(&waiting),
        Some(("True".into(), "OutsideMaintenanceWindow".into()))
    );
    let next = waiting.next_window.clone().expect("status.nextWindow");
    assert!(next.contains("-01-01T00:00:00"), "{next}");
    assert_eq!(waiting.leader.map(|l| l.image).as_deref(), Some("v1"));
    // Nothing of v2 was made, pass after pass.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let images: Vec<String> = stage
        .scheduler_pods("orca")
        .await
        .iter()
        .filter_map(|p| p.spec.as_ref()?.containers.first()?.image.clone())
        .collect();
    assert_eq!(images, vec!["v1".to_string()]);
    let events = stage.events("orca").await;
    assert!(
        events.iter().any(|e| e.starts_with("Deferred:")),
        "{events:#?}"
    );
    let (ok, out, err) = kubectl_orca(&stage, &["status", "scheduler", "orca"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("OutsideMaintenanceWindow")
            && out.contains("Waiting for the next maintenance window"),
        "{out}"
    );

    // Overridden once, for this revision: the handover runs now.
    let (ok, out, err) = kubectl_orca(&stage, &["rollout", "now", "scheduler", "orca"]);
    assert!(ok, "{err}");
    assert!(out.contains("rolls out now"), "{out}");
    let done = stage
        .wait_scheduler(
            "orca",
            "v2 Ready after rollout now",
            Duration::from_secs(90),
            ready_with("v2"),
        )
        .await;
    assert_eq!(deferred(&done), Some(("False".into(), "NotWaiting".into())));
    assert_eq!(done.next_window, None);
}
