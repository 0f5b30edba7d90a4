//! Maintenance windows: a new revision starts only inside one, unless the
//! annotation names it; what is in motion, a first deployment and a dead
//! current pod never wait.

use super::fixtures::*;
use crate::crd::Period;

/// Every day 02:00–05:00 UTC. `at(0)` is 08:00 UTC, so the next window
/// starts at `at(NEXT)`.
fn nightly(timezone: &str) -> Period {
    Period {
        cron: "0 2 * * *".into(),
        timezone: timezone.into(),
        duration: "3h".into(),
    }
}

const NEXT: i64 = 18 * 3600;

fn v2_windowed() -> SchedulerSpec {
    let mut s = spec("v2");
    s.maintenance_windows = vec![nightly("UTC")];
    s
}

/// v1 settled and leading, the spec changed to v2 with a nightly window,
/// at `now`.
fn v1_settled_v2_asked(spec: SchedulerSpec, now: i64) -> Observed {
    let v1 = pod("v1", 1, 0, PodState::Running);
    with_status(
        observed(
            spec,
            vec![v1.clone()],
            vec![],
            vec![row(1, &v1, "leading")],
            now,
        ),
        |s| {
            s.phase = Phase::Ready;
            s.target_revision = Some(rev("v1"));
        },
    )
}

pub(super) fn window_cases() -> Vec<Case> {
    let v1 = pod("v1", 1, 0, PodState::Running);
    let v2 = pod("v2", 2, 100, PodState::Running);
    let mut named = v1_settled_v2_asked(v2_windowed(), 100);
    named = named.with_rollout_now(Some(rev("v2")));
    let mut named_other = v1_settled_v2_asked(v2_windowed(), 100);
    named_other = named_other.with_rollout_now(Some(rev("v3")));
    let mut unreadable = v2_windowed();
    unreadable.maintenance_windows = vec![nightly("Mars/Olympus")];
    let exited = PodState::Exited {
        code: 1,
        message: String::new(),
        finished: at(50),
    };
    let v1_exited = pod("v1", 1, 0, exited);
    vec![
        Case {
            name: "outside its windows a new revision waits",
            observed: v1_settled_v2_asked(v2_windowed(), 100),
            actions: vec![],
            phase: Phase::Ready,
            degraded: None,
        },
        Case {
            name: "inside a window it starts",
            observed: v1_settled_v2_asked(v2_windowed(), NEXT + 600),
            actions: vec![create("v2", 2)],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "in a window of its own time zone (02:00 Tokyo is 17:00 UTC)",
            observed: v1_settled_v2_asked(
                {
                    let mut s = v2_windowed();
                    s.maintenance_windows = vec![nightly("Asia/Tokyo")];
                    s
                },
                9 * 3600 + 600,
            ),
            actions: vec![create("v2", 2)],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "the annotation naming the revision starts it outside",
            observed: named,
            actions: vec![create("v2", 2)],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "the annotation naming another revision does not",
            observed: named_other,
            actions: vec![],
            phase: Phase::Ready,
            degraded: None,
        },
        Case {
            name: "a rollout in motion goes on past its window",
            observed: with_status(
                observed(
                    v2_windowed(),
                    vec![v1.clone(), v2.clone()],
                    vec![],
                    vec![row(1, &v1, "leading"), row(2, &v2, "waiting")],
                    120,
                ),
                |s| {
                    s.phase = Phase::HandingOver;
                    s.target_revision = Some(rev("v2"));
                },
            ),
            actions: vec![Action::AskDrain { instance: 1 }],
            phase: Phase::HandingOver,
            degraded: None,
        },
        Case {
            name: "a first deployment never waits",
            observed: observed(v2_windowed(), vec![], vec![], vec![], 100),
            actions: vec![create("v2", 1)],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "a current pod that exited is replaced by the new revision at once",
            observed: with_status(
                observed(v2_windowed(), vec![v1_exited.clone()], vec![], vec![], 100),
                |s| {
                    s.phase = Phase::Ready;
                    s.target_revision = Some(rev("v1"));
                },
            ),
            actions: vec![
                create("v2", 2),
                Action::DeletePod {
                    name: v1_exited.name().to_string(),
                },
            ],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "a window it cannot read holds the revision, Degraded",
            observed: v1_settled_v2_asked(unreadable, 100),
            actions: vec![],
            phase: Phase::Ready,
            degraded: Some("InvalidMaintenanceWindow"),
        },
    ]
}

#[test]
fn a_waiting_revision_says_until_when_and_looks_again_then() {
    let d = decide(&v1_settled_v2_asked(v2_windowed(), 100));
    assert_eq!(d.status().next_window, Some(rfc3339(at(NEXT))));
    let deferred = condition_of(&d, "Deferred").expect("a Deferred condition");
    assert_eq!(
        (deferred.status.as_str(), deferred.reason.as_str()),
        ("True", "OutsideMaintenanceWindow")
    );
    assert!(
        deferred.message.contains(&rev("v2"))
            && deferred.message.contains(&rfc3339(at(NEXT)))
            && deferred.message.contains(ROLLOUT_NOW),
        "{}",
        deferred.message
    );
    assert!(d.requeue() <= std::time::Duration::from_secs((NEXT - 100) as u64));
    assert!(d
        .events()
        .iter()
        .any(|e| e.reason() == "Deferred" && !e.is_warning()));
    // The status still says what runs: v1, leading; the target is v2.
    assert_eq!(d.status().target_revision, Some(rev("v1")));
    assert_eq!(d.status().target_image.as_deref(), Some("v2"));
    // Said once: the next pass, with that status, posts no second Event.
    let mut again = v1_settled_v2_asked(v2_windowed(), 200);
    again = again.with_status(d.status().clone());
    let d2 = decide(&again);
    assert!(d2.events().iter().all(|e| e.reason() != "Deferred"));
    // Inside the window: started, Deferred False, no next window.
    let mut open = v1_settled_v2_asked(v2_windowed(), NEXT + 60);
    open = open.with_status(d.status().clone());
    let d3 = decide(&open);
    assert_eq!(d3.status().next_window, None);
    let deferred =
        condition_of(&d3, "Deferred").expect("a Deferred condition while windows are set");
    assert_eq!(deferred.status, "False");
}
