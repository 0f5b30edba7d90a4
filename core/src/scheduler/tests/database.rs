//! What the database shows: no Secret, stale rows, another Scheduler's rows.

use super::fixtures::*;

/// The database cannot be read, or a row looks stale.
pub(super) fn stale_cases() -> Vec<Case> {
    let (v1, v2, v1_leads) = v1_v2_pods();
    let v2_leads = row(2, &v2, "leading");
    let stale = |r: InstanceView| r.with_live(false);
    let mut unobserved = observed(spec("v1"), vec![], vec![], vec![], 0);
    unobserved = unobserved.with_instances(Err(Problem {
        reason: "SecretMissing".into(),
        message: "Secret default/orca-db not found".into(),
    }));

    vec![
        Case {
            name: "a missing Secret is Degraded with its reason, and nothing is done",
            observed: unobserved,
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("SecretMissing"),
        },
        Case {
            name: "the leader's row looks stale (a database blip): its pod is kept, never a join time-out",
            observed: v1_registered(vec![stale(v1_leads.clone())], 500),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("InstanceStale"),
        },
        Case {
            name: "the new leader's row looks stale while the old drains: nothing is deleted",
            observed: v1_to_v2(
                vec![registered("v2", 112)],
                vec![draining(v1_leads.clone(), 105), stale(v2_leads.clone())],
                300,
            ),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("InstanceStale"),
        },
        Case {
            name: "an old instance that looks stale keeps its pod: its runs are not cut short",
            observed: v1_to_v2(
                vec![registered("v2", 112)],
                vec![stale(draining(v1_leads.clone(), 105)), v2_leads.clone()],
                130,
            ),
            actions: vec![],
            phase: Phase::Draining,
            degraded: None,
        },
        Case {
            name: "an old instance never asked to drain (stale then) is bounded by the drain time-out from the rollout",
            observed: v1_to_v2(
                vec![registered("v2", 112)],
                vec![
                    v1_leads.clone().with_live(false).with_role("draining".into()).with_holds_lock(false),
                    v2_leads.clone(),
                ],
                701,
            ),
            actions: vec![delete(&v1)],
            phase: Phase::Ready,
            degraded: None,
        },
    ]
}

/// Another Scheduler's instances on this database are never touched.
pub(super) fn shared_database_cases() -> Vec<Case> {
    let (v1, v2, v1_leads) = v1_v2_pods();
    let gone_pod = pod("v0", 1, 0, PodState::Running);
    vec![
        Case {
            name: "another Scheduler's live instance on the database: no pod is created",
            observed: observed(spec("v1"), vec![], vec![], vec![foreign(1, "leading")], 0),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("DatabaseShared"),
        },
        Case {
            name: "another Scheduler's instance is never asked to drain",
            observed: v1_to_v2(
                vec![],
                vec![
                    v1_leads.clone(),
                    foreign(2, "waiting"),
                    row(3, &v2, "waiting"),
                ],
                105,
            ),
            actions: vec![Action::AskDrain { instance: 1 }],
            phase: Phase::Degraded,
            degraded: Some("DatabaseShared"),
        },
        Case {
            name: "another Scheduler's newer instance does not cost the current pod its place",
            observed: v1_registered(vec![v1_leads.clone(), foreign(2, "waiting")], 100),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("DatabaseShared"),
        },
        Case {
            name:
                "another Scheduler's instance is not the old instance a join time-out falls back to",
            observed: observed(
                spec("v1"),
                vec![v1.clone()],
                vec![],
                vec![foreign(1, "leading")],
                61,
            ),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("DatabaseShared"),
        },
        Case {
            name: "once the other Scheduler's instances are gone, its pod starts",
            observed: observed(
                spec("v1"),
                vec![],
                vec![],
                vec![foreign(1, "leading").with_live(false)],
                0,
            ),
            actions: vec![create("v1", 1)],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "an instance of its own pod already gone is its own, not another Scheduler's",
            observed: with_status(
                observed(
                    spec("v1"),
                    vec![],
                    vec![],
                    vec![row(1, &gone_pod, "leading")],
                    0,
                ),
                |s| s.last_sequence = 1,
            ),
            actions: vec![create("v1", 2)],
            phase: Phase::Starting,
            degraded: None,
        },
    ]
}
