//! A rollout aborted at its join time-out, or overtaken by another spec.

use super::fixtures::*;

/// An abort keeps the old pod leading; a newer spec replaces the target.
pub(super) fn supersede_cases() -> Vec<Case> {
    let v1 = pod("v1", 1, 0, PodState::Running);
    let v2 = pod("v2", 2, 100, PodState::Running);
    let v3 = pod("v3", 3, 150, PodState::Running);
    let v1_leads = row(1, &v1, "leading");
    let v2_leads = row(2, &v2, "leading");
    // At 200, v2 aborted at its join time-out; pods up to `last_sequence`.
    let aborted_at_200 = |spec, pods, rows, last_sequence| {
        with_status(observed(spec, pods, vec![], rows, 200), |s| {
            s.aborted_revision = Some(rev("v2"));
            s.last_sequence = last_sequence;
        })
    };
    let aborted = aborted_at_200(spec("v2"), vec![v1.clone()], vec![v1_leads.clone()], 1);
    let aborted_then_v3 = aborted_at_200(spec("v3"), vec![v1.clone()], vec![v1_leads.clone()], 2);
    let v1_died = pod("v1", 1, 0, exited(1, 150));
    let mut stale_v1 = row(1, &v1_died, "leading");
    stale_v1 = stale_v1.with_live(false);
    stale_v1 = stale_v1.with_holds_lock(false);
    let aborted_old_gone = aborted_at_200(spec("v2"), vec![v1_died.clone()], vec![stale_v1], 2);
    let dying_v1_leads = row(1, &v1_died, "leading");
    let aborted_old_dying =
        aborted_at_200(spec("v2"), vec![v1_died.clone()], vec![dying_v1_leads], 2);

    vec![
        Case {
            name: "join time-out aborts: the new pod goes, the old keeps leading",
            observed: v1_to_v2(vec![], vec![v1_leads.clone()], 161),
            actions: vec![delete(&v2)],
            phase: Phase::Degraded,
            degraded: Some("JoinTimeout"),
        },
        Case {
            name: "an aborted revision is not tried again",
            observed: aborted,
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("JoinTimeout"),
        },
        Case {
            name: "after an abort, the old pod died but its row is live: wait",
            observed: aborted_old_dying,
            actions: vec![delete(&v1_died)],
            phase: Phase::Degraded,
            degraded: Some("JoinTimeout"),
        },
        Case {
            name: "after an abort, nothing older is left: the target again",
            observed: aborted_old_gone,
            actions: vec![create("v2", 3), delete(&v1_died)],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "a new spec after an abort rolls again",
            observed: aborted_then_v3,
            actions: vec![create("v3", 3)],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "a newer image mid-rollout: the unjoined one goes, the newest starts",
            observed: observed(
                spec("v3"),
                vec![v1.clone(), v2.clone()],
                vec![],
                vec![v1_leads.clone()],
                120,
            ),
            actions: vec![create("v3", 3), delete(&v2)],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "a newer image while the previous new one leads: it becomes old in turn",
            observed: observed(
                spec("v3"),
                vec![v1.clone(), v2.clone(), v3.clone()],
                vec![job("v2", JobState::Running)],
                vec![
                    draining(v1_leads.clone(), 105),
                    v2_leads.clone(),
                    row(3, &v3, "waiting"),
                ],
                155,
            ),
            actions: vec![
                Action::AskDrain { instance: 2 },
                Action::DeleteJob {
                    name: job_name("orca", &rev("v2")),
                },
            ],
            phase: Phase::HandingOver,
            degraded: None,
        },
        Case {
            name: "back to an earlier image after a handover is a new revision, never the draining pod",
            observed: observed(
                spec("v1"),
                vec![v1.clone(), v2.clone()],
                vec![],
                vec![draining(v1_leads.clone(), 105), v2_leads.clone()],
                130,
            ),
            actions: vec![create("v1", 3)],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "back to the earlier image before the new one joined: the rollout is undone",
            observed: observed(
                spec("v1"),
                vec![v1.clone(), v2.clone()],
                vec![registered("v1", 20)],
                vec![v1_leads.clone()],
                110,
            ),
            actions: vec![delete(&v2)],
            phase: Phase::Draining,
            degraded: None,
        },
    ]
}
