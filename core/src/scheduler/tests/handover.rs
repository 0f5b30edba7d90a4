//! An overlapping handover: join, drain, lead, register, the old pod goes.

use super::fixtures::*;

/// Overlap on, v1 → v2, step by step; and the stop-the-world of exit 75.
pub(super) fn handover_cases() -> Vec<Case> {
    let (v1, v2, v1_leads) = v1_v2_pods();
    let v2_joined = row(2, &v2, "waiting");
    let v2_leads = row(2, &v2, "leading");
    // The rows as the handover goes: v1 asked to drain at 105 while v2
    // waits, then while v2 leads; v1's row ended at 129.
    let drain_asked = vec![draining(v1_leads.clone(), 105), v2_joined.clone()];
    let v2_took_over = vec![draining(v1_leads.clone(), 105), v2_leads.clone()];
    let v1_ended = vec![ended(v1_leads.clone(), 129), v2_leads.clone()];
    // v2 registered at 112; v1's pod has exited as `state` says.
    let v1_pod_gone = |state, rows, now| {
        let pods = vec![pod("v1", 1, 0, state), v2.clone()];
        observed(spec("v2"), pods, vec![registered("v2", 112)], rows, now)
    };
    // v2's pod exited 75 at 101 (stop-the-world); v1's pod as `v1`.
    let after_exit_75 = |v1: PodView, rows, now| {
        let pods = vec![v1, pod("v2", 2, 100, exited(75, 101))];
        observed(spec("v2"), pods, vec![], rows, now)
    };

    vec![
        Case {
            name: "a new image starts a pod beside the leader",
            observed: v1_leading(spec("v2"), vec![registered("v1", 20)], 100),
            actions: vec![
                create("v2", 2),
                Action::DeleteJob {
                    name: job_name("orca", &rev("v1")),
                },
            ],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "the new pod has not joined yet: nobody is asked to drain",
            observed: v1_to_v2(vec![], vec![v1_leads.clone()], 120),
            actions: vec![],
            phase: Phase::HandingOver,
            degraded: None,
        },
        Case {
            name: "the new instance joined: the old is asked to drain",
            observed: v1_to_v2(vec![], vec![v1_leads.clone(), v2_joined.clone()], 105),
            actions: vec![Action::AskDrain { instance: 1 }],
            phase: Phase::HandingOver,
            degraded: None,
        },
        Case {
            name: "drain asked, the new one does not lead yet",
            observed: v1_to_v2(vec![], drain_asked.clone(), 110),
            actions: vec![],
            phase: Phase::HandingOver,
            degraded: None,
        },
        Case {
            name: "lead time-out is degraded, and it keeps waiting",
            observed: v1_to_v2(vec![], drain_asked, 136),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("LeadTimeout"),
        },
        Case {
            name: "a role that says leading without the lock in pg_locks is not a lead",
            observed: v1_to_v2(
                vec![],
                vec![
                    draining(v1_leads.clone(), 105),
                    v2_leads.clone().with_holds_lock(false),
                ],
                110,
            ),
            actions: vec![],
            phase: Phase::HandingOver,
            degraded: None,
        },
        Case {
            name: "the new one leads: register, only now",
            observed: v1_to_v2(vec![], v2_took_over.clone(), 110),
            actions: vec![register("v2")],
            phase: Phase::Registering,
            degraded: None,
        },
        Case {
            name: "registered; the old drains its runs",
            observed: v1_to_v2(vec![registered("v2", 112)], v2_took_over.clone(), 120),
            actions: vec![],
            phase: Phase::Draining,
            degraded: None,
        },
        Case {
            name: "the old row ended and its pod exited: the pod is deleted",
            observed: v1_pod_gone(exited(0, 130), v1_ended.clone(), 131),
            actions: vec![delete(&v1)],
            phase: Phase::Draining,
            degraded: None,
        },
        Case {
            name: "the old row ended, its pod still exiting: wait",
            observed: v1_to_v2(vec![registered("v2", 112)], v1_ended.clone(), 140),
            actions: vec![],
            phase: Phase::Draining,
            degraded: None,
        },
        Case {
            name: "the old row ended long ago, the pod lingers: deleted",
            observed: v1_to_v2(vec![registered("v2", 112)], v1_ended, 170),
            actions: vec![delete(&v1)],
            phase: Phase::Draining,
            degraded: None,
        },
        Case {
            name: "drain time-out deletes the old pod",
            observed: v1_to_v2(vec![registered("v2", 112)], v2_took_over.clone(), 706),
            actions: vec![delete(&v1)],
            phase: Phase::Ready,
            degraded: None,
        },
        Case {
            name: "an old pod that exited while its row is live (a crash) is deleted",
            observed: v1_pod_gone(exited(137, 108), v2_took_over, 110),
            actions: vec![delete(&v1)],
            phase: Phase::Draining,
            degraded: None,
        },
        Case {
            name: "exit 75: stop-the-world asks the old to drain first",
            observed: after_exit_75(v1.clone(), vec![v1_leads.clone()], 102),
            actions: vec![Action::AskDrain { instance: 1 }],
            phase: Phase::HandingOver,
            degraded: None,
        },
        Case {
            name: "exit 75: the new waits while the old still has a live row",
            observed: after_exit_75(v1.clone(), vec![draining(v1_leads.clone(), 102)], 110),
            actions: vec![],
            phase: Phase::HandingOver,
            degraded: None,
        },
        Case {
            name: "exit 75: the old row ended, the new starts again",
            observed: after_exit_75(
                pod("v1", 1, 0, exited(0, 120)),
                vec![ended(v1_leads.clone(), 119)],
                121,
            ),
            actions: vec![delete(&v2), create("v2", 3), delete(&v1)],
            phase: Phase::HandingOver,
            degraded: None,
        },
    ]
}

#[test]
fn a_handover_records_each_step_and_says_so() {
    let (v1, v2, v1_leads) = v1_v2_pods();
    let mut o = v1_leading(spec("v2"), vec![], 100);
    type Step<'a> = (Vec<PodView>, Vec<JobView>, Vec<InstanceView>, i64, &'a str);
    let steps: Vec<Step> = vec![
        (
            vec![v1.clone()],
            vec![],
            vec![v1_leads.clone()],
            100,
            "HandoverStarted",
        ),
        (
            vec![v1.clone(), v2.clone()],
            vec![],
            vec![v1_leads.clone(), row(2, &v2, "waiting")],
            102,
            "Joined",
        ),
        (
            vec![v1.clone(), v2.clone()],
            vec![],
            vec![draining(v1_leads.clone(), 102), row(2, &v2, "leading")],
            104,
            "Leading",
        ),
        (
            vec![v1.clone(), v2.clone()],
            vec![registered("v2", 106)],
            vec![draining(v1_leads.clone(), 102), row(2, &v2, "leading")],
            107,
            "Registered",
        ),
        (
            vec![v2.clone()],
            vec![registered("v2", 106)],
            vec![ended(v1_leads.clone(), 120), row(2, &v2, "leading")],
            125,
            "HandoverComplete",
        ),
    ];
    for (pods, jobs, rows, now, reason) in steps {
        o = o.with_pods(pods);
        o = o.with_jobs(jobs);
        o = o.with_instances(Ok(rows));
        o = o.with_now(at(now));
        let d = decide(&o);
        assert!(
            d.events().iter().any(|e| e.reason() == reason),
            "{reason} expected at {now}, got {:?}",
            d.events()
        );
        o = o.with_status(d.status().clone());
    }
    let h = o
        .status()
        .last_handover
        .clone()
        .expect("a handover is recorded");
    assert_eq!((h.from.as_str(), h.to.as_str()), ("v1", "v2"));
    assert!(
        h.started.is_some()
            && h.joined.is_some()
            && h.led.is_some()
            && h.registered.is_some()
            && h.drained.is_some(),
        "{h:?}"
    );
    assert_eq!(o.status().phase, Phase::Ready);
    assert_eq!(o.status().leader.as_ref().map(|l| l.instance), Some(2));
}
