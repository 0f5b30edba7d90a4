//! A pod that died: recreated after a back-off that a stable run resets.

use super::fixtures::*;

/// The current pod died.
pub(super) fn died_cases() -> Vec<Case> {
    let v1 = pod("v1", 1, 0, PodState::Running);

    vec![
        Case {
            name: "the current pod died: recreated after its back-off",
            observed: observed(
                spec("v1"),
                vec![pod("v1", 1, 0, exited(1, 50))],
                vec![],
                vec![],
                61,
            ),
            actions: vec![delete(&v1), create("v1", 2)],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "the current pod died: not before its back-off",
            observed: observed(
                spec("v1"),
                vec![pod("v1", 1, 0, exited(1, 50))],
                vec![],
                vec![],
                55,
            ),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("PodFailed"),
        },
    ]
}

/// The restart back-off doubles only for pods that did not run stably.
pub(super) fn restart_cases() -> Vec<Case> {
    let quick = pod("v1", 1, 0, exited(1, 50));
    let mut pulled_long = pod("v1", 1, 0, exited(1, 1050));
    pulled_long = pulled_long.with_started(Some(at(500)));
    vec![
        Case {
            name: "after a stable run the back-off starts again at 10 s",
            observed: with_status(
                observed(spec("v1"), vec![quick.clone()], vec![], vec![], 61),
                |s| s.restarts = 5,
            ),
            actions: vec![delete(&quick), create("v1", 2)],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "a pod that ran ten minutes only counting its image pull did not run stably",
            observed: with_status(
                observed(spec("v1"), vec![pulled_long.clone()], vec![], vec![], 1061),
                |s| {
                    s.restarts = 3;
                    s.recent_restarts = 3;
                    s.target_revision = Some(rev("v1"));
                },
            ),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("PodFailed"),
        },
    ]
}

/// The restart back-off doubles with each quick death, and starts again at
/// 10 s after a pod ran ten minutes (from its container's start).
#[test]
fn the_restart_back_off_resets_after_a_stable_run() {
    let mut stable = pod("v1", 1, 0, exited(1, 1000));
    stable = stable.with_started(Some(at(5)));
    let mut o = with_status(
        observed(spec("v1"), vec![stable.clone()], vec![], vec![], 1010),
        |s| {
            s.restarts = 4;
            s.recent_restarts = 4;
        },
    );
    let d = decide(&o);
    assert_eq!(d.actions(), vec![delete(&stable), create("v1", 2)]);
    assert_eq!((d.status().restarts, d.status().recent_restarts), (5, 1));
    o = o.with_status(d.status().clone());

    // The new pod dies at once: 20 s now, not 320 s.
    let quick = pod("v1", 2, 1010, exited(1, 1020));
    o = o.with_pods(vec![quick.clone()]);
    o = o.with_now(at(1039));
    let d = decide(&o);
    assert_eq!(d.actions(), vec![]);
    assert_eq!(degraded_reason(&d).as_deref(), Some("PodFailed"));
    o = o.with_status(d.status().clone());
    o = o.with_now(at(1040));
    let d = decide(&o);
    assert_eq!(d.actions(), vec![delete(&quick), create("v1", 3)]);
    assert_eq!((d.status().restarts, d.status().recent_restarts), (6, 2));
}
