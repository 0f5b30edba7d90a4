//! The progress deadline, the join time-out, and an image that cannot run.

use super::fixtures::*;

/// The progress deadline counts from the rollout's own start, the join
/// time-out from the container's start, and an image that cannot run is
/// said at once.
pub(super) fn deadline_cases() -> Vec<Case> {
    let (v1, v2, v1_leads) = v1_v2_pods();
    // A v2 pod created at 3000 (its first one was replaced), leading,
    // registered, while v1 drains: the rollout began at 100.
    let v2_late = pod("v2", 3, 3000, PodState::Running);
    let v2_late_leads = row(2, &v2_late, "leading");
    let mut v2_late_job = registered("v2", 3010);
    v2_late_job = v2_late_job.with_created(at(3005));
    // At `now`, the rollout to v2 that began at 100, as above.
    let v2_late_at = |now| {
        with_status(
            observed(
                spec("v2"),
                vec![v1.clone(), v2_late.clone()],
                vec![v2_late_job.clone()],
                vec![draining(v1_leads.clone(), 3650), v2_late_leads.clone()],
                now,
            ),
            |s| {
                s.target_revision = Some(rev("v2"));
                s.rollout_started = Some(rfc3339(at(100)));
            },
        )
    };
    // v2's pod, its container started at 150, at `now`.
    let v2_started_150 = |now| {
        let started = v2.clone().with_started(Some(at(150)));
        let pods = vec![v1.clone(), started];
        observed(spec("v2"), pods, vec![], vec![v1_leads.clone()], now)
    };
    let pending = |reason: &str, message: &str| {
        v2.clone()
            .with_state(PodState::Pending)
            .with_waiting(Some(Waiting::new(reason.into(), message.into())))
    };
    // v2's pod waiting for `reason`, at `now`.
    let v2_waiting = |reason: &str, message: &str, now| {
        let pods = vec![v1.clone(), pending(reason, message)];
        observed(spec("v2"), pods, vec![], vec![v1_leads.clone()], now)
    };
    vec![
        Case {
            name: "back to v1 while v1's old pod still drains: the progress deadline counts from this rollout",
            observed: observed(
                spec("v1"),
                vec![v1.clone(), v2.clone()],
                vec![],
                vec![draining(v1_leads.clone(), 3950), row(2, &v2, "leading")],
                4000,
            ),
            actions: vec![create("v1", 3)],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "a rollout past its deadline counted from its start, though its pod is younger",
            observed: v2_late_at(3701),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("ProgressDeadlineExceeded"),
        },
        Case {
            name: "a rollout within its deadline is not degraded",
            observed: v2_late_at(3699),
            actions: vec![],
            phase: Phase::Draining,
            degraded: None,
        },
        Case {
            name: "the join time-out counts from the container's start, not the pod's creation",
            observed: v2_started_150(170),
            actions: vec![],
            phase: Phase::HandingOver,
            degraded: None,
        },
        Case {
            name: "the join time-out is over once the container has run that long",
            observed: v2_started_150(211),
            actions: vec![delete(&v2)],
            phase: Phase::Degraded,
            degraded: Some("JoinTimeout"),
        },
        Case {
            name: "a pod still pulling its image has not begun its join time-out",
            observed: v2_waiting("ContainerCreating", "", 300),
            actions: vec![],
            phase: Phase::HandingOver,
            degraded: None,
        },
        Case {
            name: "an image that cannot be pulled is Degraded with the kubelet's reason",
            observed: v2_waiting("ErrImagePull", "manifest for v2 not found", 105),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("ErrImagePull"),
        },
        Case {
            name: "a pull in back-off is Degraded too",
            observed: v2_waiting("ImagePullBackOff", "Back-off pulling image \"v2\"", 105),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("ImagePullBackOff"),
        },
        Case {
            name: "an image name that is not one is Degraded",
            observed: observed(
                spec("v1"),
                vec![v1.clone().with_state(PodState::Pending).with_waiting(Some(Waiting::new("InvalidImageName".into(), "couldn't parse image name".into())))],
                vec![],
                vec![],
                5,
            ),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("InvalidImageName"),
        },
        Case {
            name: "a container whose config cannot be made (a missing key) is Degraded",
            observed: v2_waiting("CreateContainerConfigError", "secret \"orca-db\" not found", 105),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("CreateContainerConfigError"),
        },
    ]
}

/// The kubelet's message reaches the condition and the event.
#[test]
fn an_image_that_cannot_be_pulled_says_the_kubelets_message() {
    let v1 = pod("v1", 1, 0, PodState::Running);
    let mut stuck = pod("v2", 2, 100, PodState::Pending);
    stuck = stuck.with_waiting(Some(Waiting::new(
        "ImagePullBackOff".into(),
        "Back-off pulling image \"registry/orca:v2\"".into(),
    )));
    let o = observed(
        spec("v2"),
        vec![v1.clone(), stuck.clone()],
        vec![],
        vec![row(1, &v1, "leading")],
        105,
    );
    let d = decide(&o);
    let degraded = condition_of(&d, "Degraded").expect("a Degraded condition");
    assert!(
        degraded.message.contains(stuck.name())
            && degraded.message.contains("Back-off pulling image"),
        "{}",
        degraded.message
    );
    let event = d
        .events()
        .iter()
        .find(|e| e.reason() == "ImagePullBackOff")
        .expect("an event");
    assert!(event.is_warning() && event.message().contains("Back-off pulling image"));
}
