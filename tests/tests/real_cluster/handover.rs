//! A v1 → v2 handover with runs going, on the real cluster: join, drain
//! asked, lead verified, the register Job only after the lead, the old pod
//! gone, no run lost; and the status written by server-side apply.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kube::{api::ListParams, Api};
use orca_tests::{on_cluster::OnCluster, pg, sim::probe};

use super::{handed_over_to, ready_with, scheduler};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_to_v2_hands_over_with_runs_going_and_no_run_lost() {
    let stage = OnCluster::new("handover").await;
    stage
        .apply_scheduler(&scheduler("orca", "v1", &[], ""))
        .await;
    let s = stage
        .wait_scheduler(
            "orca",
            "v1 leads, Ready",
            Duration::from_secs(60),
            ready_with("v1"),
        )
        .await;
    assert_eq!(s.revisions.len(), 1, "{s:?}");
    let v1_pod = s.leader.clone().expect("a leader").pod;

    let db = pg::connect(stage.url()).await;
    let before = probe::queue(&db, "sleep:4", 4).await;
    stage
        .apply_scheduler(&scheduler("orca", "v2", &[], ""))
        .await;
    stage
        .wait_scheduler("orca", "v2 leads", Duration::from_secs(60), |s| {
            s.leader.as_ref().is_some_and(|l| l.image == "v2")
        })
        .await;
    let after = probe::queue(&db, "sleep:1", 3).await;
    let s = stage
        .wait_scheduler(
            "orca",
            "the handover completes",
            Duration::from_secs(90),
            handed_over_to("v2"),
        )
        .await;

    // Every run, from before and after the handover, finished once.
    let all: Vec<i64> = before.iter().chain(&after).copied().collect();
    orca_tests::eventually::eventually("every run finishes", Duration::from_secs(60), || async {
        let runs = probe::runs(&db, &all).await;
        let open: Vec<_> = runs.values().filter(|r| !r.ended()).collect();
        if open.is_empty() {
            Ok(())
        } else {
            Err(format!("{open:?}"))
        }
    })
    .await;
    for (id, run) in probe::runs(&db, &all).await {
        assert_eq!(run.status(), "succeeded", "run {id}: {run:?}");
        assert_eq!(
            run.start(),
            1,
            "run {id} was started more than once: {run:?}"
        );
    }

    // The steps, in order, as Events a user sees with kubectl describe.
    let events = stage
        .wait_event("orca", "HandoverComplete", Duration::from_secs(30))
        .await;
    let at = |reason: &str| {
        events
            .iter()
            .position(|e| e.starts_with(&format!("{reason}:")))
            .unwrap_or_else(|| panic!("no {reason} event among {events:#?}"))
    };
    assert!(at("HandoverStarted") < at("Joined"), "{events:#?}");
    assert!(at("Joined") < at("Leading"), "{events:#?}");
    assert!(at("Leading") < at("HandoverComplete"), "{events:#?}");
    // v1 drains: asked by the operator (unless it saw v2 and stepped down
    // first, as the protocol lets it), never before v2 joined.
    if events.iter().any(|e| e.starts_with("AskedDrain:")) {
        assert!(at("Joined") < at("AskedDrain"), "{events:#?}");
        assert!(at("AskedDrain") < at("Leading"), "{events:#?}");
    }
    let v1_drained: i64 = db
        .query_one(
            "select count(*) from orca.schedulers where image = 'v1' and drained is not null and ended is not null",
            &[],
        )
        .await
        .expect("v1's row")
        .get(0);
    assert_eq!(v1_drained, 1, "v1 drained and ended its row");

    // The register Job of v2 was created after v2 led.
    let h = s.last_handover.clone().expect("the handover is recorded");
    assert_eq!((h.from.as_str(), h.to.as_str()), ("v1", "v2"));
    assert!(h.registered.as_deref() >= h.led.as_deref(), "{h:?}");
    let jobs = Api::<Job>::namespaced(stage.client().clone(), stage.ns())
        .list(&ListParams::default())
        .await
        .expect("listing Jobs")
        .items;
    let v2_job = jobs
        .iter()
        .find(|j| {
            j.spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .is_some_and(|p| {
                    p.containers
                        .iter()
                        .any(|c| c.image.as_deref() == Some("v2"))
                })
        })
        .unwrap_or_else(|| panic!("no register Job of v2 among {jobs:#?}"));
    let job_created = v2_job
        .metadata
        .creation_timestamp
        .as_ref()
        .expect("created")
        .0;
    let led: k8s_openapi::jiff::Timestamp = h
        .led
        .as_deref()
        .expect("led is recorded")
        .parse()
        .expect("led is a time");
    assert!(
        job_created.as_second() >= led.as_second(),
        "Job {job_created} before the lead {led}"
    );

    // The old pod is gone.
    let pods: Vec<String> = stage
        .scheduler_pods("orca")
        .await
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert!(
        !pods.contains(&v1_pod),
        "v1's pod {v1_pod} is still there: {pods:?}"
    );
    assert_eq!(pods.len(), 1, "{pods:?}");

    // Prometheus sees the handover and the phase.
    let metrics = stage.replicas()[0].scrape();
    let scope = format!(r#"namespace="{}",scheduler="orca""#, stage.ns());
    assert!(
        metrics.contains(&format!(
            "orca_scheduler_handover_duration_seconds_count{{{scope}}} 1"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            r#"orca_scheduler_phase{{{scope},phase="Ready"}} 1"#
        )),
        "{metrics}"
    );
    // It says that it leads.
    assert!(
        metrics.lines().any(|l| l == "orca_operator_leader 1"),
        "{metrics}"
    );

    // The status is the operator's, by server-side apply.
    let object = stage.schedulers().get("orca").await.expect("the Scheduler");
    let managers: Vec<(String, String, String)> = object
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default(),
                m.subresource.unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        managers.contains(&("orca-operator".into(), "Apply".into(), "status".into())),
        "the status is not applied by orca-operator: {managers:?}"
    );
}
