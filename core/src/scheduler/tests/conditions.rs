//! The status conditions: stable while unchanged, Degraded said once.

use super::fixtures::*;

/// v1 registered and leading, at 10 s.
fn v1_settled() -> Observed {
    v1_leading(spec("v1"), vec![registered("v1", 5)], 10)
}

#[test]
fn conditions_keep_their_transition_time_while_unchanged() {
    let mut o = v1_settled();
    let first = decide(&o);
    o = o.with_status(first.status().clone());
    o = o.with_now(at(50));
    let second = decide(&o);
    let since = |d: &Decision| condition_of(d, "Available").map(|c| c.last_transition_time.clone());
    assert_eq!(since(&first), since(&second));
}

/// Each pass measures the offset to the database clock anew; a steady
/// Scheduler must still come out with the very same status, or every pass
/// would write it again.
#[test]
fn a_steady_status_does_not_move_with_the_clock_offset() {
    let pass = |status: SchedulerStatus, offset_ms: i64| {
        let mut o = v1_settled();
        o = o.with_status(status);
        let local = o.now();
        o = o.on_database_clock(local + chrono::TimeDelta::milliseconds(offset_ms));
        decide(&o).status().clone()
    };
    let first = pass(SchedulerStatus::default(), 3);
    let second = pass(first.clone(), -4);
    assert_eq!(first, second);
    assert_eq!(
        first.revisions[0].since.as_deref(),
        Some("2027-01-15T08:00:00.000Z"),
        "a revision shows its pod's own creation time"
    );
}

/// A `Degraded` reason that has no step of its own to say it is posted as a
/// Warning when the condition turns True with it — once, not every pass.
#[test]
fn a_condition_turning_degraded_is_said_once_as_a_warning() {
    let (v1, v2, v1_leads) = v1_v2_pods();
    let v2_late = pod("v2", 3, 3000, PodState::Running);
    let cases: Vec<(&str, Observed)> = vec![
        (
            "LeadTimeout",
            v1_to_v2(
                vec![],
                vec![draining(v1_leads.clone(), 105), row(2, &v2, "waiting")],
                136,
            ),
        ),
        (
            "ProgressDeadlineExceeded",
            with_status(
                observed(
                    spec("v2"),
                    vec![v1.clone(), v2_late.clone()],
                    vec![registered("v2", 3010)],
                    vec![
                        draining(v1_leads.clone(), 3650),
                        row(2, &v2_late, "leading"),
                    ],
                    3701,
                ),
                |s| {
                    s.target_revision = Some(rev("v2"));
                    s.rollout_started = Some(rfc3339(at(100)));
                },
            ),
        ),
        (
            "ErrImagePull",
            observed(
                spec("v2"),
                vec![
                    v1.clone(),
                    v2.clone()
                        .with_state(PodState::Pending)
                        .with_waiting(Some(Waiting::new(
                            "ErrImagePull".into(),
                            "manifest for v2 not found".into(),
                        ))),
                ],
                vec![],
                vec![v1_leads.clone()],
                105,
            ),
        ),
        (
            "DatabaseShared",
            observed(spec("v1"), vec![], vec![], vec![foreign(1, "leading")], 0),
        ),
    ];
    for (reason, mut o) in cases {
        let first = decide(&o);
        degraded_and_warned(&first, reason, 1, "said when it turns True");
        o = o.with_status(first.status().clone());
        o = o.clone().with_now(o.now() + chrono::TimeDelta::seconds(1));
        let second = decide(&o);
        degraded_and_warned(&second, reason, 0, "said once");
    }
}

/// `d` is Degraded for `reason` and posts `warned` Warnings for it; `when`
/// says which pass it is.
#[track_caller]
fn degraded_and_warned(d: &Decision, reason: &str, warned: usize, when: &str) {
    assert_eq!(degraded_reason(d).as_deref(), Some(reason));
    assert_eq!(
        warnings(d, reason),
        warned,
        "{reason}: {when}: {:?}",
        d.events()
    );
}
