//! A first start, from the first pod to `Ready`; pausing; pod names never reused.

use super::fixtures::*;

/// The first pod of a new Scheduler, from its creation to `Ready`; a paused
/// Scheduler; the sequence of the next pod.
pub(super) fn first_start_cases() -> Vec<Case> {
    let v1 = pod("v1", 1, 0, PodState::Running);
    let mut no_register = spec("v1");
    no_register.register = None;
    let mut paused = spec("v2");
    paused.paused = true;
    let mut status_seq = observed(spec("v1"), vec![], vec![], vec![], 0);
    status_seq = with_status(status_seq, |s| s.last_sequence = 5);
    let register_failed = job(
        "v1",
        JobState::Failed {
            message: "BackoffLimitExceeded".into(),
            at: at(25),
        },
    );

    vec![
        Case {
            name: "first start creates the first pod",
            observed: observed(spec("v1"), vec![], vec![], vec![], 0),
            actions: vec![create("v1", 1)],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "first start waits for the pod to join",
            observed: observed(spec("v1"), vec![v1.clone()], vec![], vec![], 10),
            actions: vec![],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "first start: joined, not yet leading",
            observed: observed(
                spec("v1"),
                vec![v1.clone()],
                vec![],
                vec![row(1, &v1, "waiting")],
                10,
            ),
            actions: vec![],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "first start: leads, so the register job runs",
            observed: v1_leading(spec("v1"), vec![], 10),
            actions: vec![register("v1")],
            phase: Phase::Registering,
            degraded: None,
        },
        Case {
            name: "register job running",
            observed: v1_leading(spec("v1"), vec![job("v1", JobState::Running)], 10),
            actions: vec![],
            phase: Phase::Registering,
            degraded: None,
        },
        Case {
            name: "registered and leading is ready",
            observed: v1_leading(spec("v1"), vec![registered("v1", 20)], 30),
            actions: vec![],
            phase: Phase::Ready,
            degraded: None,
        },
        Case {
            name: "no register command: leading is ready",
            observed: v1_leading(no_register, vec![], 30),
            actions: vec![],
            phase: Phase::Ready,
            degraded: None,
        },
        Case {
            name: "register job failed is degraded",
            observed: v1_leading(spec("v1"), vec![register_failed], 30),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("RegisterFailed"),
        },
        Case {
            name: "first start past the join time-out is degraded but kept",
            observed: observed(spec("v1"), vec![v1.clone()], vec![], vec![], 61),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("JoinTimeout"),
        },
        Case {
            name: "paused: nothing is done",
            observed: v1_leading(paused, vec![], 100),
            actions: vec![],
            phase: Phase::Paused,
            degraded: None,
        },
        Case {
            name: "pod names are never reused",
            observed: status_seq,
            actions: vec![create("v1", 6)],
            phase: Phase::Starting,
            degraded: None,
        },
    ]
}
