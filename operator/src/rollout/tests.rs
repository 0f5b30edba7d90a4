//! `decide` as a table: a snapshot in, the actions, phase and reason out.

use chrono::{TimeZone, Utc};

use super::*;
use crate::crd::{
    Database, Handover, Phase, Register, SchedulerSpec, SchedulerStatus, SecretKeyRef,
};

fn at(s: i64) -> Time {
    Utc.timestamp_opt(1_800_000_000 + s, 0).unwrap()
}

fn spec(image: &str) -> SchedulerSpec {
    SchedulerSpec {
        image: image.into(),
        command: vec!["orca-sim".into(), "scheduler".into()],
        args: vec![],
        env: vec![],
        resources: None,
        database: Database {
            url_secret_ref: SecretKeyRef {
                name: "orca-db".into(),
                key: "url".into(),
            },
        },
        overlap: true,
        register: Some(Register {
            command: vec!["orca".into(), "register".into()],
            args: vec![],
            timeout_seconds: 600,
        }),
        handover: Handover {
            join_timeout_seconds: 60,
            lead_timeout_seconds: 30,
            drain_timeout_seconds: 600,
            progress_deadline_seconds: 3600,
            stale_seconds: 10,
        },
        pod_template: None,
        paused: false,
    }
}

fn rev(image: &str) -> String {
    revision_of(&spec(image))
}

fn pod(image: &str, seq: u32, created: i64, state: PodState) -> PodView {
    PodView {
        name: pod_name("orca", &rev(image), seq),
        revision: rev(image),
        sequence: seq,
        image: image.into(),
        created: at(created),
        state,
        deleting: false,
    }
}

fn exited(code: i32, finished: i64) -> PodState {
    PodState::Exited {
        code,
        message: if code == 75 {
            "a live instance knows 3 migrations, below floor 4".into()
        } else {
            String::new()
        },
        finished: at(finished),
    }
}

/// An instance row of pod `p`.
fn row(id: i64, p: &PodView, role: &str) -> InstanceView {
    InstanceView {
        id,
        host: p.name.clone(),
        image: p.image.clone(),
        role: role.into(),
        live: true,
        ended: None,
        holds_lock: role == "leading",
        joined: at(p.created.timestamp() - 1_800_000_000 + 2),
        led: (role == "leading").then(|| at(p.created.timestamp() - 1_800_000_000 + 3)),
        drain_asked: None,
        runs: 0,
    }
}

fn draining(mut r: InstanceView, asked: i64) -> InstanceView {
    r.role = "draining".into();
    r.holds_lock = false;
    r.drain_asked = Some(at(asked));
    r
}

fn ended(mut r: InstanceView, when: i64) -> InstanceView {
    r = draining(r, when - 5);
    r.live = false;
    r.ended = Some(at(when));
    r
}

fn job(image: &str, state: JobState) -> JobView {
    JobView {
        name: job_name("orca", &rev(image)),
        revision: rev(image),
        created: at(0),
        state,
    }
}

fn observed(
    spec: SchedulerSpec,
    pods: Vec<PodView>,
    jobs: Vec<JobView>,
    rows: Vec<InstanceView>,
    now: i64,
) -> Observed {
    let last = pods.iter().map(|p| p.sequence).max().unwrap_or(0) as i64;
    Observed {
        name: "orca".into(),
        generation: Some(1),
        spec,
        status: SchedulerStatus {
            last_sequence: last,
            ..Default::default()
        },
        pods,
        jobs,
        instances: Ok(rows),
        now: at(now),
        clock_offset: chrono::TimeDelta::zero(),
    }
}

fn create(image: &str, seq: u32) -> Action {
    Action::CreatePod {
        name: pod_name("orca", &rev(image), seq),
        revision: rev(image),
        sequence: seq,
        image: image.into(),
    }
}

fn delete(p: &PodView) -> Action {
    Action::DeletePod {
        name: p.name.clone(),
    }
}

fn register(image: &str) -> Action {
    Action::CreateRegisterJob {
        name: job_name("orca", &rev(image)),
        revision: rev(image),
        image: image.into(),
    }
}

fn degraded_reason(d: &Decision) -> Option<String> {
    d.status
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded" && c.status == "True")
        .map(|c| c.reason.clone())
}

struct Case {
    name: &'static str,
    observed: Observed,
    actions: Vec<Action>,
    phase: Phase,
    degraded: Option<&'static str>,
}

fn cases() -> Vec<Case> {
    let v1 = pod("v1", 1, 0, PodState::Running);
    let v2 = pod("v2", 2, 100, PodState::Running);
    let v3 = pod("v3", 3, 150, PodState::Running);
    let v1_leads = row(1, &v1, "leading");
    let v2_joined = row(2, &v2, "waiting");
    let v2_leads = row(2, &v2, "leading");
    let mut no_register = spec("v1");
    no_register.register = None;
    let mut overlap_off = spec("v2");
    overlap_off.overlap = false;
    let mut paused = spec("v2");
    paused.paused = true;
    let mut deleting_v1 = v1.clone();
    deleting_v1.deleting = true;
    let mut unobserved = observed(spec("v1"), vec![], vec![], vec![], 0);
    unobserved.instances = Err(Problem {
        reason: "SecretMissing".into(),
        message: "Secret default/orca-db not found".into(),
    });
    let mut status_seq = observed(spec("v1"), vec![], vec![], vec![], 0);
    status_seq.status.last_sequence = 5;
    let mut aborted = observed(
        spec("v2"),
        vec![v1.clone()],
        vec![],
        vec![v1_leads.clone()],
        200,
    );
    aborted.status.aborted_revision = Some(rev("v2"));
    let mut aborted_then_v3 = observed(
        spec("v3"),
        vec![v1.clone()],
        vec![],
        vec![v1_leads.clone()],
        200,
    );
    aborted_then_v3.status.aborted_revision = Some(rev("v2"));
    aborted_then_v3.status.last_sequence = 2;
    let v1_died = pod("v1", 1, 0, exited(1, 150));
    let mut stale_v1 = row(1, &v1_died, "leading");
    stale_v1.live = false;
    stale_v1.holds_lock = false;
    let mut aborted_old_gone = observed(
        spec("v2"),
        vec![v1_died.clone()],
        vec![],
        vec![stale_v1],
        200,
    );
    aborted_old_gone.status.aborted_revision = Some(rev("v2"));
    aborted_old_gone.status.last_sequence = 2;
    let mut aborted_old_dying = observed(
        spec("v2"),
        vec![v1_died.clone()],
        vec![],
        vec![row(1, &v1_died, "leading")],
        200,
    );
    aborted_old_dying.status.aborted_revision = Some(rev("v2"));
    aborted_old_dying.status.last_sequence = 2;

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
            observed: observed(spec("v1"), vec![v1.clone()], vec![], vec![row(1, &v1, "waiting")], 10),
            actions: vec![],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "first start: leads, so the register job runs",
            observed: observed(spec("v1"), vec![v1.clone()], vec![], vec![v1_leads.clone()], 10),
            actions: vec![register("v1")],
            phase: Phase::Registering,
            degraded: None,
        },
        Case {
            name: "register job running",
            observed: observed(spec("v1"), vec![v1.clone()], vec![job("v1", JobState::Running)], vec![v1_leads.clone()], 10),
            actions: vec![],
            phase: Phase::Registering,
            degraded: None,
        },
        Case {
            name: "registered and leading is ready",
            observed: observed(spec("v1"), vec![v1.clone()], vec![job("v1", JobState::Succeeded { at: at(20) })], vec![v1_leads.clone()], 30),
            actions: vec![],
            phase: Phase::Ready,
            degraded: None,
        },
        Case {
            name: "no register command: leading is ready",
            observed: observed(no_register, vec![v1.clone()], vec![], vec![v1_leads.clone()], 30),
            actions: vec![],
            phase: Phase::Ready,
            degraded: None,
        },
        Case {
            name: "register job failed is degraded",
            observed: observed(spec("v1"), vec![v1.clone()], vec![job("v1", JobState::Failed { message: "BackoffLimitExceeded".into() })], vec![v1_leads.clone()], 30),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("RegisterFailed"),
        },
        Case {
            name: "a new image starts a pod beside the leader",
            observed: observed(spec("v2"), vec![v1.clone()], vec![job("v1", JobState::Succeeded { at: at(20) })], vec![v1_leads.clone()], 100),
            actions: vec![create("v2", 2), Action::DeleteJob { name: job_name("orca", &rev("v1")) }],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "the new pod has not joined yet: nobody is asked to drain",
            observed: observed(spec("v2"), vec![v1.clone(), v2.clone()], vec![], vec![v1_leads.clone()], 120),
            actions: vec![],
            phase: Phase::HandingOver,
            degraded: None,
        },
        Case {
            name: "join time-out aborts: the new pod goes, the old keeps leading",
            observed: observed(spec("v2"), vec![v1.clone(), v2.clone()], vec![], vec![v1_leads.clone()], 161),
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
            name: "first start past the join time-out is degraded but kept",
            observed: observed(spec("v1"), vec![v1.clone()], vec![], vec![], 61),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("JoinTimeout"),
        },
        Case {
            name: "the new instance joined: the old is asked to drain",
            observed: observed(spec("v2"), vec![v1.clone(), v2.clone()], vec![], vec![v1_leads.clone(), v2_joined.clone()], 105),
            actions: vec![Action::AskDrain { instance: 1 }],
            phase: Phase::HandingOver,
            degraded: None,
        },
        Case {
            name: "drain asked, the new one does not lead yet",
            observed: observed(spec("v2"), vec![v1.clone(), v2.clone()], vec![], vec![draining(v1_leads.clone(), 105), v2_joined.clone()], 110),
            actions: vec![],
            phase: Phase::HandingOver,
            degraded: None,
        },
        Case {
            name: "lead time-out is degraded, and it keeps waiting",
            observed: observed(spec("v2"), vec![v1.clone(), v2.clone()], vec![], vec![draining(v1_leads.clone(), 105), v2_joined.clone()], 136),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("LeadTimeout"),
        },
        Case {
            name: "a role that says leading without the lock in pg_locks is not a lead",
            observed: observed(spec("v2"), vec![v1.clone(), v2.clone()], vec![], vec![draining(v1_leads.clone(), 105), InstanceView { holds_lock: false, ..v2_leads.clone() }], 110),
            actions: vec![],
            phase: Phase::HandingOver,
            degraded: None,
        },
        Case {
            name: "the new one leads: register, only now",
            observed: observed(spec("v2"), vec![v1.clone(), v2.clone()], vec![], vec![draining(v1_leads.clone(), 105), v2_leads.clone()], 110),
            actions: vec![register("v2")],
            phase: Phase::Registering,
            degraded: None,
        },
        Case {
            name: "registered; the old drains its runs",
            observed: observed(spec("v2"), vec![v1.clone(), v2.clone()], vec![job("v2", JobState::Succeeded { at: at(112) })], vec![draining(v1_leads.clone(), 105), v2_leads.clone()], 120),
            actions: vec![],
            phase: Phase::Draining,
            degraded: None,
        },
        Case {
            name: "the old row ended and its pod exited: the pod is deleted",
            observed: observed(spec("v2"), vec![pod("v1", 1, 0, exited(0, 130)), v2.clone()], vec![job("v2", JobState::Succeeded { at: at(112) })], vec![ended(v1_leads.clone(), 129), v2_leads.clone()], 131),
            actions: vec![delete(&v1)],
            phase: Phase::Draining,
            degraded: None,
        },
        Case {
            name: "the old row ended, its pod still exiting: wait",
            observed: observed(spec("v2"), vec![v1.clone(), v2.clone()], vec![job("v2", JobState::Succeeded { at: at(112) })], vec![ended(v1_leads.clone(), 129), v2_leads.clone()], 140),
            actions: vec![],
            phase: Phase::Draining,
            degraded: None,
        },
        Case {
            name: "the old row ended long ago, the pod lingers: deleted",
            observed: observed(spec("v2"), vec![v1.clone(), v2.clone()], vec![job("v2", JobState::Succeeded { at: at(112) })], vec![ended(v1_leads.clone(), 129), v2_leads.clone()], 170),
            actions: vec![delete(&v1)],
            phase: Phase::Draining,
            degraded: None,
        },
        Case {
            name: "drain time-out deletes the old pod",
            observed: observed(spec("v2"), vec![v1.clone(), v2.clone()], vec![job("v2", JobState::Succeeded { at: at(112) })], vec![draining(v1_leads.clone(), 105), v2_leads.clone()], 706),
            actions: vec![delete(&v1)],
            phase: Phase::Ready,
            degraded: None,
        },
        Case {
            name: "an old pod that exited while its row is live (a crash) is deleted",
            observed: observed(spec("v2"), vec![pod("v1", 1, 0, exited(137, 108)), v2.clone()], vec![job("v2", JobState::Succeeded { at: at(112) })], vec![draining(v1_leads.clone(), 105), v2_leads.clone()], 110),
            actions: vec![delete(&v1)],
            phase: Phase::Draining,
            degraded: None,
        },
        Case {
            name: "exit 75: stop-the-world asks the old to drain first",
            observed: observed(spec("v2"), vec![v1.clone(), pod("v2", 2, 100, exited(75, 101))], vec![], vec![v1_leads.clone()], 102),
            actions: vec![Action::AskDrain { instance: 1 }],
            phase: Phase::HandingOver,
            degraded: None,
        },
        Case {
            name: "exit 75: the new waits while the old still has a live row",
            observed: observed(spec("v2"), vec![v1.clone(), pod("v2", 2, 100, exited(75, 101))], vec![], vec![draining(v1_leads.clone(), 102)], 110),
            actions: vec![],
            phase: Phase::HandingOver,
            degraded: None,
        },
        Case {
            name: "exit 75: the old row ended, the new starts again",
            observed: observed(spec("v2"), vec![pod("v1", 1, 0, exited(0, 120)), pod("v2", 2, 100, exited(75, 101))], vec![], vec![ended(v1_leads.clone(), 119)], 121),
            actions: vec![delete(&v2), create("v2", 3), delete(&v1)],
            phase: Phase::HandingOver,
            degraded: None,
        },
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
                o.status.last_sequence = 1;
                o
            },
            actions: vec![Action::CreatePod {
                name: pod_name("orca", &revision_of(&overlap_off), 2),
                revision: revision_of(&overlap_off),
                sequence: 2,
                image: "v2".into(),
            }],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "a newer image mid-rollout: the unjoined one goes, the newest starts",
            observed: observed(spec("v3"), vec![v1.clone(), v2.clone()], vec![], vec![v1_leads.clone()], 120),
            actions: vec![create("v3", 3), delete(&v2)],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "a newer image while the previous new one leads: it becomes old in turn",
            observed: observed(spec("v3"), vec![v1.clone(), v2.clone(), v3.clone()], vec![job("v2", JobState::Running)], vec![draining(v1_leads.clone(), 105), v2_leads.clone(), row(3, &v3, "waiting")], 155),
            actions: vec![Action::AskDrain { instance: 2 }, Action::DeleteJob { name: job_name("orca", &rev("v2")) }],
            phase: Phase::HandingOver,
            degraded: None,
        },
        Case {
            name: "back to an earlier image after a handover is a new revision, never the draining pod",
            observed: observed(spec("v1"), vec![v1.clone(), v2.clone()], vec![], vec![draining(v1_leads.clone(), 105), v2_leads.clone()], 130),
            actions: vec![create("v1", 3)],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "back to the earlier image before the new one joined: the rollout is undone",
            observed: observed(spec("v1"), vec![v1.clone(), v2.clone()], vec![job("v1", JobState::Succeeded { at: at(20) })], vec![v1_leads.clone()], 110),
            actions: vec![delete(&v2)],
            phase: Phase::Draining,
            degraded: None,
        },
        Case {
            name: "the current pod died: recreated after its back-off",
            observed: observed(spec("v1"), vec![pod("v1", 1, 0, exited(1, 50))], vec![], vec![], 61),
            actions: vec![delete(&v1), create("v1", 2)],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "the current pod died: not before its back-off",
            observed: observed(spec("v1"), vec![pod("v1", 1, 0, exited(1, 50))], vec![], vec![], 55),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("PodFailed"),
        },
        Case {
            name: "paused: nothing is done",
            observed: observed(paused, vec![v1.clone()], vec![], vec![v1_leads.clone()], 100),
            actions: vec![],
            phase: Phase::Paused,
            degraded: None,
        },
        Case {
            name: "a missing Secret is Degraded with its reason, and nothing is done",
            observed: unobserved,
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("SecretMissing"),
        },
        Case {
            name: "the leader's row looks stale (a database blip): its pod is kept, never a join time-out",
            observed: observed(spec("v1"), vec![v1.clone()], vec![job("v1", JobState::Succeeded { at: at(20) })], vec![InstanceView { live: false, ..v1_leads.clone() }], 500),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("InstanceStale"),
        },
        Case {
            name: "the new leader's row looks stale while the old drains: nothing is deleted",
            observed: observed(spec("v2"), vec![v1.clone(), v2.clone()], vec![job("v2", JobState::Succeeded { at: at(112) })], vec![draining(v1_leads.clone(), 105), InstanceView { live: false, ..v2_leads.clone() }], 300),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("InstanceStale"),
        },
        Case {
            name: "an old instance that looks stale keeps its pod: its runs are not cut short",
            observed: observed(spec("v2"), vec![v1.clone(), v2.clone()], vec![job("v2", JobState::Succeeded { at: at(112) })], vec![InstanceView { live: false, ..draining(v1_leads.clone(), 105) }, v2_leads.clone()], 130),
            actions: vec![],
            phase: Phase::Draining,
            degraded: None,
        },
        Case {
            name: "an old instance never asked to drain (stale then) is bounded by the drain time-out from the rollout",
            observed: observed(spec("v2"), vec![v1.clone(), v2.clone()], vec![job("v2", JobState::Succeeded { at: at(112) })], vec![InstanceView { live: false, role: "draining".into(), holds_lock: false, ..v1_leads.clone() }, v2_leads.clone()], 701),
            actions: vec![delete(&v1)],
            phase: Phase::Ready,
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

#[test]
fn decide_table() {
    let all = cases();
    assert!(all.len() >= 30, "the table keeps at least 30 cases");
    for case in all {
        let d = decide(&case.observed);
        assert_eq!(d.actions, case.actions, "{}: actions", case.name);
        assert_eq!(d.status.phase, case.phase, "{}: phase", case.name);
        assert_eq!(
            degraded_reason(&d).as_deref(),
            case.degraded,
            "{}: degraded",
            case.name
        );
    }
}

#[test]
fn a_handover_records_each_step_and_says_so() {
    let v1 = pod("v1", 1, 0, PodState::Running);
    let v2 = pod("v2", 2, 100, PodState::Running);
    let v1_leads = row(1, &v1, "leading");
    let mut o = observed(
        spec("v2"),
        vec![v1.clone()],
        vec![],
        vec![v1_leads.clone()],
        100,
    );
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
            vec![job("v2", JobState::Succeeded { at: at(106) })],
            vec![draining(v1_leads.clone(), 102), row(2, &v2, "leading")],
            107,
            "Registered",
        ),
        (
            vec![v2.clone()],
            vec![job("v2", JobState::Succeeded { at: at(106) })],
            vec![ended(v1_leads.clone(), 120), row(2, &v2, "leading")],
            125,
            "HandoverComplete",
        ),
    ];
    for (pods, jobs, rows, now, reason) in steps {
        o.pods = pods;
        o.jobs = jobs;
        o.instances = Ok(rows);
        o.now = at(now);
        let d = decide(&o);
        assert!(
            d.events.iter().any(|e| e.reason == reason),
            "{reason} expected at {now}, got {:?}",
            d.events
        );
        o.status = d.status;
    }
    let h = o.status.last_handover.expect("a handover is recorded");
    assert_eq!((h.from.as_str(), h.to.as_str()), ("v1", "v2"));
    assert!(
        h.started.is_some()
            && h.joined.is_some()
            && h.led.is_some()
            && h.registered.is_some()
            && h.drained.is_some(),
        "{h:?}"
    );
    assert_eq!(o.status.phase, Phase::Ready);
    assert_eq!(o.status.leader.map(|l| l.instance), Some(2));
}

#[test]
fn pod_names_fit_a_host_name() {
    let long = "a".repeat(80);
    let name = pod_name(&long, &rev("v1"), 123);
    assert!(name.len() <= 63, "{name}");
    assert!(name.ends_with(&format!("-{}-123", rev("v1"))));
}

/// v1 registered and leading, at 10 s.
fn v1_settled() -> Observed {
    let v1 = pod("v1", 1, 0, PodState::Running);
    observed(
        spec("v1"),
        vec![v1.clone()],
        vec![job("v1", JobState::Succeeded { at: at(5) })],
        vec![row(1, &v1, "leading")],
        10,
    )
}

#[test]
fn conditions_keep_their_transition_time_while_unchanged() {
    let mut o = v1_settled();
    let first = decide(&o);
    o.status = first.status.clone();
    o.now = at(50);
    let second = decide(&o);
    let since = |d: &Decision| {
        d.status
            .conditions
            .iter()
            .find(|c| c.type_ == "Available")
            .map(|c| c.last_transition_time.clone())
    };
    assert_eq!(since(&first), since(&second));
}

/// Each pass measures the offset to the database clock anew; a steady
/// Scheduler must still come out with the very same status, or every pass
/// would write it again.
#[test]
fn a_steady_status_does_not_move_with_the_clock_offset() {
    let pass = |status: SchedulerStatus, offset_ms: i64| {
        let mut o = v1_settled();
        o.status = status;
        let local = o.now;
        o = o.on_database_clock(local + chrono::TimeDelta::milliseconds(offset_ms));
        decide(&o).status
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
