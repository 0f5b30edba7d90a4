//! Overlap off: the old pod goes first; the new one is up once settled.

use super::fixtures::*;

/// Overlap off, v1 → v2, step by step.
pub(super) fn overlap_off_cases() -> Vec<Case> {
    let v1 = pod("v1", 1, 0, PodState::Running);
    let mut overlap_off = spec("v2");
    overlap_off.overlap = false;
    let mut deleting_v1 = v1.clone();
    deleting_v1 = deleting_v1.with_deleting(true);
    // With overlap off, v2's pod (created at 102, once v1's was gone) has
    // no row: it is up once it has run settleSeconds (10).
    let v2_off = pod_of(&overlap_off, 2, 102, PodState::Running);
    let rev_off = revision_of(&overlap_off);
    let job_off = |state| {
        JobView::new(
            job_name("orca", &rev_off),
            rev_off.clone(),
            overlap_off.register.as_ref().map(register_hash),
            at(112),
            state,
        )
    };
    let register_off = Action::CreateRegisterJob {
        name: job_name("orca", &rev_off),
        revision: rev_off.clone(),
        image: "v2".into(),
    };
    let mut settle_zero = overlap_off.clone();
    settle_zero.handover.settle_seconds = 0;

    vec![
        Case {
            name: "overlap off: the old pod goes first",
            observed: observed(overlap_off.clone(), vec![v1.clone()], vec![], vec![], 100),
            actions: vec![delete(&v1)],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "overlap off: wait until the old pod is gone",
            observed: observed(overlap_off.clone(), vec![deleting_v1.clone()], vec![], vec![], 101),
            actions: vec![],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "overlap off: then the new one starts",
            observed: {
                let mut o = observed(overlap_off.clone(), vec![], vec![], vec![], 102);
                o = with_status(o, |s| s.last_sequence = 1);
                o
            },
            actions: vec![create_of(&revision_of(&overlap_off), "v2", 2)],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "overlap off: the old pod still runs while deleted: the new pod is not created",
            observed: observed(overlap_off.clone(), vec![deleting_v1.clone()], vec![], vec![], 300),
            actions: vec![],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "overlap off: before settleSeconds the new pod is not up, and no register job",
            observed: observed(overlap_off.clone(), vec![v2_off.clone()], vec![], vec![], 111),
            actions: vec![],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "overlap off: settled, it is up and the register job follows",
            observed: observed(overlap_off.clone(), vec![v2_off.clone()], vec![], vec![], 112),
            actions: vec![register_off.clone()],
            phase: Phase::Registering,
            degraded: None,
        },
        Case {
            name: "overlap off: settled and registered is ready",
            observed: observed(overlap_off.clone(), vec![v2_off.clone()], vec![job_off(JobState::Succeeded { at: at(114) })], vec![], 115),
            actions: vec![],
            phase: Phase::Ready,
            degraded: None,
        },
        Case {
            name: "overlap off: no row past the join time-out is no JoinTimeout",
            observed: observed(overlap_off.clone(), vec![v2_off.clone()], vec![job_off(JobState::Succeeded { at: at(114) })], vec![], 500),
            actions: vec![],
            phase: Phase::Ready,
            degraded: None,
        },
        Case {
            name: "overlap off: without a register step, settled is ready",
            observed: observed(
                SchedulerSpec { register: None, ..overlap_off.clone() },
                vec![v2_off.clone()],
                vec![],
                vec![],
                112,
            ),
            actions: vec![],
            phase: Phase::Ready,
            degraded: None,
        },
        Case {
            name: "overlap off: settling counts from the container's start, not the pod's creation",
            observed: observed(overlap_off.clone(), vec![v2_off.clone().with_started(Some(at(110)))], vec![], vec![], 115),
            actions: vec![],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "overlap off: a pod still pending is never up",
            observed: observed(overlap_off.clone(), vec![v2_off.clone().with_state(PodState::Pending)], vec![], vec![], 300),
            actions: vec![],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "overlap off: settleSeconds 0 is up as soon as it runs",
            observed: observed(settle_zero, vec![v2_off.clone()], vec![], vec![], 102),
            actions: vec![register_off.clone()],
            phase: Phase::Registering,
            degraded: None,
        },
        Case {
            name: "overlap off: the new pod died: recreated after its back-off, never a stop-the-world",
            observed: observed(overlap_off.clone(), vec![v2_off.clone().with_state(exited(75, 105))], vec![], vec![], 116),
            actions: vec![
                delete(&v2_off),
                create_of(&rev_off, "v2", 3),
            ],
            phase: Phase::Starting,
            degraded: None,
        },
    ]
}

/// Overlap off, v1 → v2: the old pod goes, then the new one starts; it
/// writes no row, and is up (leads, registers, `Available`) once it has run
/// settleSeconds.
#[test]
fn overlap_off_recreates_then_settles_and_registers() {
    let mut off = spec("v2");
    off.overlap = false;
    let v1 = pod("v1", 1, 0, PodState::Running);
    let mut o = observed(off.clone(), vec![v1.clone()], vec![], vec![], 100);

    let d = decide(&o);
    assert_eq!(d.actions(), vec![delete(&v1)], "the old pod goes first");
    o = o.with_status(d.status().clone());

    // Deleted, still running (draining its runs): nothing new starts.
    o = o.with_pods(vec![v1.clone().with_deleting(true)]);
    o = o.with_now(at(101));
    let d = decide(&o);
    assert_eq!(d.actions(), vec![], "no new pod while the old one runs");
    o = o.with_status(d.status().clone());

    // Gone: the new pod.
    o = o.with_pods(vec![]);
    o = o.with_now(at(102));
    let d = decide(&o);
    let Some(Action::CreatePod { name, .. }) = d.actions().first().cloned() else {
        panic!(
            "the new pod is created once the old is gone: {:?}",
            d.actions()
        )
    };
    o = o.with_status(d.status().clone());

    // Its container started at 104 (after an image pull, say).
    let v2 = pod_of(&off, 2, 102, PodState::Running).with_started(Some(at(104)));
    assert_eq!(v2.name(), name);
    o = o.with_pods(vec![v2.clone()]);
    o = o.with_now(at(113));
    let d = decide(&o);
    assert_eq!(d.actions(), vec![], "9s since the start: not settled");
    assert_ne!(d.status().phase, Phase::Ready);
    assert_eq!(
        condition(&d, "Available"),
        Some(("False".into(), "NoLeader".into()))
    );
    assert_eq!(degraded_reason(&d), None);
    o = o.with_status(d.status().clone());

    o = o.with_now(at(114));
    let d = decide(&o);
    let job = job_name("orca", &revision_of(&off));
    assert_eq!(
        d.actions(),
        vec![Action::CreateRegisterJob {
            name: job.clone(),
            revision: revision_of(&off),
            image: "v2".into(),
        }]
    );
    assert!(
        d.events().iter().any(|e| e.reason() == "Running"),
        "{:?}",
        d.events()
    );
    assert_eq!(
        condition(&d, "Available"),
        Some(("True".into(), "Running".into()))
    );
    let leader = d.status().leader.clone().expect("the settled pod leads");
    assert_eq!(
        (leader.instance, leader.pod.as_str(), leader.image.as_str()),
        (0, v2.name(), "v2")
    );
    assert_eq!(d.status().current_image.as_deref(), Some("v2"));
    o = o.with_status(d.status().clone());

    o = o.with_jobs(vec![JobView::new(
        job,
        revision_of(&off),
        off.register.as_ref().map(register_hash),
        at(114),
        JobState::Succeeded { at: at(116) },
    )]);
    o = o.with_now(at(117));
    let d = decide(&o);
    assert_eq!(d.actions(), vec![]);
    assert_eq!(d.status().phase, Phase::Ready);
    assert!(
        !d.events().iter().any(|e| e.reason() == "Running"),
        "said once: {:?}",
        d.events()
    );
    assert_eq!(
        condition(&d, "Available"),
        Some(("True".into(), "Running".into()))
    );
    assert_eq!(
        condition(&d, "Progressing"),
        Some(("False".into(), "Settled".into()))
    );

    // Steady: the same status pass after pass, whatever the clock offset.
    let pass = |status: SchedulerStatus, offset_ms: i64| {
        let mut again = o.clone();
        again = again.with_status(status);
        let local = again.now();
        again = again.on_database_clock(local + chrono::TimeDelta::milliseconds(offset_ms));
        decide(&again).status().clone()
    };
    let first = pass(d.status().clone(), 3);
    assert_eq!(pass(first.clone(), -4), first);
    assert_eq!(first.phase, Phase::Ready);
}

/// Overlap off, the running pod deleted by hand (its scheduler drains on
/// SIGTERM for its grace): no second scheduler starts beside it. Once it is
/// long past its deletion's grace the Scheduler says so; once it has ended,
/// the next starts.
#[test]
fn overlap_off_a_pod_deleted_by_hand_is_never_two() {
    let mut off = spec("v1");
    off.overlap = false;
    let settled = pod_of(&off, 1, 0, PodState::Running).with_started(Some(at(0)));
    let mut o = observed(off.clone(), vec![settled.clone()], vec![], vec![], 100);
    let status = decide(&o).status().clone();
    o = o.with_status(status);

    // Deleted by hand at 100 with a grace of 60 s: due gone by 160.
    let going = settled
        .clone()
        .with_deleting(true)
        .with_deletion_due(Some(at(160)));
    o = o.with_pods(vec![going.clone()]);
    for now in [101, 150, 200, 220] {
        o = o.with_now(at(now));
        let d = decide(&o);
        assert_eq!(
            d.actions(),
            vec![],
            "at {now}: no pod beside one still running"
        );
        assert_eq!(
            degraded_reason(&d),
            None,
            "at {now}: within its grace and a minute"
        );
        o = o.with_status(d.status().clone());
    }
    o = o.with_now(at(221));
    let d = decide(&o);
    assert_eq!(d.actions(), vec![]);
    assert_eq!(degraded_reason(&d).as_deref(), Some("PodNotGone"));
    assert_eq!(warnings(&d, "PodNotGone"), 1, "said once, as a Warning");
    o = o.with_status(d.status().clone());
    o = o.with_now(at(222));
    assert_eq!(warnings(&decide(&o), "PodNotGone"), 0, "and not again");

    // Its scheduler has ended (the pod object may linger): the next starts.
    o = o.with_pods(vec![going.with_state(exited(0, 230))]);
    o = o.with_now(at(231));
    let d = decide(&o);
    assert_eq!(d.actions(), vec![create_of(&revision_of(&off), "v1", 2)]);
}
