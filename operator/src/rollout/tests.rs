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
            settle_seconds: 10,
        },
        pod_template: None,
        paused: false,
    }
}

fn rev(image: &str) -> String {
    revision_of(&spec(image))
}

fn pod(image: &str, seq: u32, created: i64, state: PodState) -> PodView {
    pod_of(&spec(image), seq, created, state)
}

/// A pod of the revision of `spec`, created at `created`; its container's
/// start is not known (the creation time stands for it).
fn pod_of(spec: &SchedulerSpec, seq: u32, created: i64, state: PodState) -> PodView {
    let revision = revision_of(spec);
    PodView {
        name: pod_name("orca", &revision, seq),
        revision,
        sequence: seq,
        image: spec.image.clone(),
        created: at(created),
        started: None,
        state,
        waiting: None,
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
        register: spec(image).register.as_ref().map(register_hash),
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
    // With overlap off, v2's pod (created at 102, once v1's was gone) has
    // no row: it is up once it has run settleSeconds (10).
    let v2_off = pod_of(&overlap_off, 2, 102, PodState::Running);
    let rev_off = revision_of(&overlap_off);
    let job_off = |state| JobView {
        name: job_name("orca", &rev_off),
        revision: rev_off.clone(),
        register: overlap_off.register.as_ref().map(register_hash),
        created: at(112),
        state,
    };
    let register_off = Action::CreateRegisterJob {
        name: job_name("orca", &rev_off),
        revision: rev_off.clone(),
        image: "v2".into(),
    };
    let mut settle_zero = overlap_off.clone();
    settle_zero.handover.settle_seconds = 0;
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
            observed: observed(spec("v1"), vec![v1.clone()], vec![job("v1", JobState::Failed { message: "BackoffLimitExceeded".into(), at: at(25) })], vec![v1_leads.clone()], 30),
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
            observed: observed(overlap_off.clone(), vec![PodView { started: Some(at(110)), ..v2_off.clone() }], vec![], vec![], 115),
            actions: vec![],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "overlap off: a pod still pending is never up",
            observed: observed(overlap_off.clone(), vec![PodView { state: PodState::Pending, ..v2_off.clone() }], vec![], vec![], 300),
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
            observed: observed(overlap_off.clone(), vec![PodView { state: exited(75, 105), ..v2_off.clone() }], vec![], vec![], 116),
            actions: vec![
                delete(&v2_off),
                Action::CreatePod {
                    name: pod_name("orca", &rev_off, 3),
                    revision: rev_off.clone(),
                    sequence: 3,
                    image: "v2".into(),
                },
            ],
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
    .into_iter()
    .chain(deadline_cases())
    .chain(register_cases())
    .chain(restart_cases())
    .chain(shared_database_cases())
    .collect()
}

/// `o` with its status changed by `f`.
fn with_status(mut o: Observed, f: impl FnOnce(&mut SchedulerStatus)) -> Observed {
    f(&mut o.status);
    o
}

fn rfc3339(t: Time) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The progress deadline counts from the rollout's own start, the join
/// time-out from the container's start, and an image that cannot run is
/// said at once.
fn deadline_cases() -> Vec<Case> {
    let v1 = pod("v1", 1, 0, PodState::Running);
    let v2 = pod("v2", 2, 100, PodState::Running);
    let v1_leads = row(1, &v1, "leading");
    // A v2 pod created at 3000 (its first one was replaced), leading,
    // registered, while v1 drains: the rollout began at 100.
    let v2_late = pod("v2", 3, 3000, PodState::Running);
    let v2_late_leads = row(2, &v2_late, "leading");
    let mut v2_late_job = job("v2", JobState::Succeeded { at: at(3010) });
    v2_late_job.created = at(3005);
    let pending = |reason: &str, message: &str| PodView {
        state: PodState::Pending,
        waiting: Some(Waiting {
            reason: reason.into(),
            message: message.into(),
        }),
        ..v2.clone()
    };
    vec![
        Case {
            name: "back to v1 while v1's old pod still drains: the progress deadline counts from this rollout",
            observed: observed(spec("v1"), vec![v1.clone(), v2.clone()], vec![], vec![draining(v1_leads.clone(), 3950), row(2, &v2, "leading")], 4000),
            actions: vec![create("v1", 3)],
            phase: Phase::Starting,
            degraded: None,
        },
        Case {
            name: "a rollout past its deadline counted from its start, though its pod is younger",
            observed: with_status(
                observed(spec("v2"), vec![v1.clone(), v2_late.clone()], vec![v2_late_job.clone()], vec![draining(v1_leads.clone(), 3650), v2_late_leads.clone()], 3701),
                |s| {
                    s.target_revision = Some(rev("v2"));
                    s.rollout_started = Some(rfc3339(at(100)));
                },
            ),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("ProgressDeadlineExceeded"),
        },
        Case {
            name: "a rollout within its deadline is not degraded",
            observed: with_status(
                observed(spec("v2"), vec![v1.clone(), v2_late.clone()], vec![v2_late_job.clone()], vec![draining(v1_leads.clone(), 3650), v2_late_leads.clone()], 3699),
                |s| {
                    s.target_revision = Some(rev("v2"));
                    s.rollout_started = Some(rfc3339(at(100)));
                },
            ),
            actions: vec![],
            phase: Phase::Draining,
            degraded: None,
        },
        Case {
            name: "the join time-out counts from the container's start, not the pod's creation",
            observed: observed(spec("v2"), vec![v1.clone(), PodView { started: Some(at(150)), ..v2.clone() }], vec![], vec![v1_leads.clone()], 170),
            actions: vec![],
            phase: Phase::HandingOver,
            degraded: None,
        },
        Case {
            name: "the join time-out is over once the container has run that long",
            observed: observed(spec("v2"), vec![v1.clone(), PodView { started: Some(at(150)), ..v2.clone() }], vec![], vec![v1_leads.clone()], 211),
            actions: vec![delete(&v2)],
            phase: Phase::Degraded,
            degraded: Some("JoinTimeout"),
        },
        Case {
            name: "a pod still pulling its image has not begun its join time-out",
            observed: observed(spec("v2"), vec![v1.clone(), pending("ContainerCreating", "")], vec![], vec![v1_leads.clone()], 300),
            actions: vec![],
            phase: Phase::HandingOver,
            degraded: None,
        },
        Case {
            name: "an image that cannot be pulled is Degraded with the kubelet's reason",
            observed: observed(spec("v2"), vec![v1.clone(), pending("ErrImagePull", "manifest for v2 not found")], vec![], vec![v1_leads.clone()], 105),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("ErrImagePull"),
        },
        Case {
            name: "a pull in back-off is Degraded too",
            observed: observed(spec("v2"), vec![v1.clone(), pending("ImagePullBackOff", "Back-off pulling image \"v2\"")], vec![], vec![v1_leads.clone()], 105),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("ImagePullBackOff"),
        },
        Case {
            name: "an image name that is not one is Degraded",
            observed: observed(spec("v1"), vec![PodView { state: PodState::Pending, waiting: Some(Waiting { reason: "InvalidImageName".into(), message: "couldn't parse image name".into() }), ..v1.clone() }], vec![], vec![], 5),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("InvalidImageName"),
        },
        Case {
            name: "a container whose config cannot be made (a missing key) is Degraded",
            observed: observed(spec("v2"), vec![v1.clone(), pending("CreateContainerConfigError", "secret \"orca-db\" not found")], vec![], vec![v1_leads.clone()], 105),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("CreateContainerConfigError"),
        },
    ]
}

/// A register Job of attempt `attempt` for `image`, running `register`.
fn register_job(image: &str, attempt: u32, register: &Register, state: JobState) -> JobView {
    JobView {
        name: register_job_name("orca", &rev(image), attempt),
        revision: rev(image),
        register: Some(register_hash(register)),
        created: at(10),
        state,
    }
}

fn register_attempt_action(image: &str, attempt: u32) -> Action {
    Action::CreateRegisterJob {
        name: register_job_name("orca", &rev(image), attempt),
        revision: rev(image),
        image: image.into(),
    }
}

fn failed(at_: i64) -> JobState {
    JobState::Failed {
        message: "BackoffLimitExceeded: Job has reached the specified backoff limit".into(),
        at: at(at_),
    }
}

/// A failed register Job is retried as a new Job, with a back-off; a new
/// register step registers again.
fn register_cases() -> Vec<Case> {
    let v1 = pod("v1", 1, 0, PodState::Running);
    let v1_leads = row(1, &v1, "leading");
    let reg = spec("v1").register.unwrap_or_else(|| unreachable!());
    let mut again = spec("v1");
    if let Some(r) = again.register.as_mut() {
        r.args = vec!["--again".into()];
    }
    let mut legacy = job("v1", JobState::Succeeded { at: at(20) });
    legacy.register = None;
    let fourth_failed = |now: i64| {
        with_status(
            observed(
                spec("v1"),
                vec![v1.clone()],
                vec![
                    register_job("v1", 3, &reg, failed(10)),
                    register_job("v1", 4, &reg, failed(100)),
                ],
                vec![v1_leads.clone()],
                now,
            ),
            |s| {
                s.register = Some(crate::crd::RegisterStatus {
                    revision: rev("v1"),
                    hash: register_hash(&reg),
                    attempts: 4,
                    failures: 4,
                    failed_job: Some(register_job_name("orca", &rev("v1"), 4)),
                })
            },
        )
    };
    vec![
        Case {
            name: "a failed register job is retried as a new job after its back-off",
            observed: observed(
                spec("v1"),
                vec![v1.clone()],
                vec![job("v1", failed(20))],
                vec![v1_leads.clone()],
                31,
            ),
            actions: vec![register_attempt_action("v1", 2)],
            phase: Phase::Degraded,
            degraded: Some("RegisterFailed"),
        },
        Case {
            name: "a failed register job: not before its back-off",
            observed: observed(
                spec("v1"),
                vec![v1.clone()],
                vec![job("v1", failed(20))],
                vec![v1_leads.clone()],
                29,
            ),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("RegisterFailed"),
        },
        Case {
            name: "the fourth failure in a row waits 80 s",
            observed: fourth_failed(179),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("RegisterFailed"),
        },
        Case {
            name: "after 80 s the fifth attempt",
            observed: fourth_failed(181),
            actions: vec![register_attempt_action("v1", 5)],
            phase: Phase::Degraded,
            degraded: Some("RegisterFailed"),
        },
        Case {
            name: "while the fifth runs, the third goes: the last two attempts are kept",
            observed: {
                let mut o = fourth_failed(185);
                o.jobs.push(register_job("v1", 5, &reg, JobState::Running));
                o
            },
            actions: vec![Action::DeleteJob {
                name: register_job_name("orca", &rev("v1"), 3),
            }],
            phase: Phase::Degraded,
            degraded: Some("RegisterFailed"),
        },
        Case {
            name: "a retry that runs is still Degraded: the last attempt failed",
            observed: with_status(
                observed(
                    spec("v1"),
                    vec![v1.clone()],
                    vec![
                        job("v1", failed(20)),
                        register_job("v1", 2, &reg, JobState::Running),
                    ],
                    vec![v1_leads.clone()],
                    35,
                ),
                |s| {
                    s.register = Some(crate::crd::RegisterStatus {
                        revision: rev("v1"),
                        hash: register_hash(&reg),
                        attempts: 2,
                        failures: 1,
                        failed_job: Some(job_name("orca", &rev("v1"))),
                    })
                },
            ),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("RegisterFailed"),
        },
        Case {
            name: "a retry that succeeded is ready",
            observed: observed(
                spec("v1"),
                vec![v1.clone()],
                vec![
                    job("v1", failed(20)),
                    register_job("v1", 2, &reg, JobState::Succeeded { at: at(40) }),
                ],
                vec![v1_leads.clone()],
                45,
            ),
            actions: vec![],
            phase: Phase::Ready,
            degraded: None,
        },
        Case {
            name: "a changed register step registers again, as a new job",
            observed: observed(
                again.clone(),
                vec![PodView { ..v1.clone() }],
                vec![job("v1", JobState::Succeeded { at: at(20) })],
                vec![v1_leads.clone()],
                500,
            ),
            actions: vec![
                Action::DeleteJob {
                    name: job_name("orca", &rev("v1")),
                },
                register_attempt_action("v1", 2),
            ],
            phase: Phase::Registering,
            degraded: None,
        },
        Case {
            name: "a job from before register hashes counts as the current step",
            observed: observed(
                spec("v1"),
                vec![v1.clone()],
                vec![legacy],
                vec![v1_leads.clone()],
                500,
            ),
            actions: vec![],
            phase: Phase::Ready,
            degraded: None,
        },
    ]
}

/// The restart back-off doubles only for pods that did not run stably.
fn restart_cases() -> Vec<Case> {
    let quick = pod("v1", 1, 0, exited(1, 50));
    let mut pulled_long = pod("v1", 1, 0, exited(1, 1050));
    pulled_long.started = Some(at(500));
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

/// A live instance of Scheduler `other` on this Scheduler's database.
fn foreign(id: i64, role: &str) -> InstanceView {
    InstanceView {
        id,
        host: pod_name("other", &rev("v1"), 1),
        image: "v1".into(),
        role: role.into(),
        live: true,
        ended: None,
        holds_lock: role == "leading",
        joined: at(0),
        led: None,
        drain_asked: None,
        runs: 0,
    }
}

/// Another Scheduler's instances on this database are never touched.
fn shared_database_cases() -> Vec<Case> {
    let v1 = pod("v1", 1, 0, PodState::Running);
    let v2 = pod("v2", 2, 100, PodState::Running);
    let v1_leads = row(1, &v1, "leading");
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
            observed: observed(
                spec("v2"),
                vec![v1.clone(), v2.clone()],
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
            observed: observed(
                spec("v1"),
                vec![v1.clone()],
                vec![job("v1", JobState::Succeeded { at: at(20) })],
                vec![v1_leads.clone(), foreign(2, "waiting")],
                100,
            ),
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
                vec![InstanceView {
                    live: false,
                    ..foreign(1, "leading")
                }],
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

/// Every case is run, and every case that does not hold is named.
#[test]
fn decide_table() {
    let all = cases();
    assert!(all.len() >= 30, "the table keeps at least 30 cases");
    let mut wrong = Vec::new();
    for case in all {
        let d = decide(&case.observed);
        let reason = degraded_reason(&d);
        let got = (d.actions, d.status.phase, reason);
        let want = (case.actions, case.phase, case.degraded.map(String::from));
        if got != want {
            wrong.push(format!("{}:\n  want {want:?}\n  got  {got:?}", case.name));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} case(s):\n{}",
        wrong.len(),
        wrong.join("\n")
    );
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

fn condition(d: &Decision, type_: &str) -> Option<(String, String)> {
    d.status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
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
    assert_eq!(d.actions, vec![delete(&v1)], "the old pod goes first");
    o.status = d.status;

    // Deleted, still running (draining its runs): nothing new starts.
    o.pods = vec![PodView {
        deleting: true,
        ..v1.clone()
    }];
    o.now = at(101);
    let d = decide(&o);
    assert_eq!(d.actions, vec![], "no new pod while the old one runs");
    o.status = d.status;

    // Gone: the new pod.
    o.pods = vec![];
    o.now = at(102);
    let d = decide(&o);
    let Some(Action::CreatePod { name, .. }) = d.actions.first().cloned() else {
        panic!(
            "the new pod is created once the old is gone: {:?}",
            d.actions
        )
    };
    o.status = d.status;

    // Its container started at 104 (after an image pull, say).
    let v2 = PodView {
        started: Some(at(104)),
        ..pod_of(&off, 2, 102, PodState::Running)
    };
    assert_eq!(v2.name, name);
    o.pods = vec![v2.clone()];
    o.now = at(113);
    let d = decide(&o);
    assert_eq!(d.actions, vec![], "9s since the start: not settled");
    assert_ne!(d.status.phase, Phase::Ready);
    assert_eq!(
        condition(&d, "Available"),
        Some(("False".into(), "NoLeader".into()))
    );
    assert_eq!(degraded_reason(&d), None);
    o.status = d.status;

    o.now = at(114);
    let d = decide(&o);
    let job = job_name("orca", &revision_of(&off));
    assert_eq!(
        d.actions,
        vec![Action::CreateRegisterJob {
            name: job.clone(),
            revision: revision_of(&off),
            image: "v2".into(),
        }]
    );
    assert!(
        d.events.iter().any(|e| e.reason == "Running"),
        "{:?}",
        d.events
    );
    assert_eq!(
        condition(&d, "Available"),
        Some(("True".into(), "Running".into()))
    );
    let leader = d.status.leader.clone().expect("the settled pod leads");
    assert_eq!(
        (leader.instance, leader.pod.as_str(), leader.image.as_str()),
        (0, v2.name.as_str(), "v2")
    );
    assert_eq!(d.status.current_image.as_deref(), Some("v2"));
    o.status = d.status;

    o.jobs = vec![JobView {
        name: job,
        revision: revision_of(&off),
        register: off.register.as_ref().map(register_hash),
        created: at(114),
        state: JobState::Succeeded { at: at(116) },
    }];
    o.now = at(117);
    let d = decide(&o);
    assert_eq!(d.actions, vec![]);
    assert_eq!(d.status.phase, Phase::Ready);
    assert!(
        !d.events.iter().any(|e| e.reason == "Running"),
        "said once: {:?}",
        d.events
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
        again.status = status;
        let local = again.now;
        again = again.on_database_clock(local + chrono::TimeDelta::milliseconds(offset_ms));
        decide(&again).status
    };
    let first = pass(d.status.clone(), 3);
    assert_eq!(pass(first.clone(), -4), first);
    assert_eq!(first.phase, Phase::Ready);
}

/// A DNS-1123 label: 1–63 characters of a-z, 0-9 and '-', alphanumeric at
/// both ends (a pod's host name; also a Job's name, which becomes a label).
fn is_dns_label(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    (1..=63).contains(&s.len())
        && s.chars().all(|c| alnum(c) || c == '-')
        && s.starts_with(alnum)
        && s.ends_with(alnum)
}

/// A label value: at most 63 characters, empty or
/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn is_label_value(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    s.len() <= 63
        && (s.is_empty()
            || (s.chars().all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
                && s.starts_with(alnum)
                && s.ends_with(alnum)))
}

/// Every name the CRD accepts (a DNS subdomain, up to 253 characters)
/// gives valid pod, host and Job names and a valid label value, and
/// distinct Schedulers never share one.
#[test]
fn every_scheduler_name_gives_valid_distinct_names() {
    let long_dotted = format!(
        "{}.{}.{}.{}",
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(61)
    );
    assert_eq!(long_dotted.len(), 253);
    let mut long_dotted_other = long_dotted.clone();
    long_dotted_other.replace_range(252.., "e");
    // The room a plain name has beside `-<revision>-<one digit>`.
    let room = 63 - format!("-{}-1", rev("v1")).len();
    let names: Vec<String> = vec![
        "a".into(),
        "orca".into(),
        "team.pipelines".into(),
        "team-pipelines".into(),
        "team.pipelines.prod".into(),
        long_dotted.clone(),
        long_dotted_other.clone(),
        format!("{}-one", "p".repeat(60)),
        format!("{}-two", "p".repeat(60)),
        format!("{}.x", "q".repeat(room)),
        format!("{}.y", "q".repeat(room)),
        "team--pipelines".into(),
        "xn--bcher-kva".into(),
        "a.-b".into(),
        "1st".into(),
        "0".into(),
        "42.7".into(),
        "l".repeat(63),
        format!("{}.{}", "m".repeat(31), "n".repeat(31)),
        "r".repeat(room),
        "r".repeat(room + 1),
        "s".repeat(64),
    ];
    let revision = rev("v1");
    let mut pods = std::collections::BTreeMap::new();
    let mut jobs = std::collections::BTreeMap::new();
    let mut labels = std::collections::BTreeMap::new();
    for name in &names {
        for sequence in [1, 12, 4_000, u32::MAX] {
            let pod = pod_name(name, &revision, sequence);
            assert!(is_dns_label(&pod), "{name}: pod {pod}");
            assert!(
                pod.ends_with(&format!("-{revision}-{sequence}")),
                "{name}: pod {pod}"
            );
            assert!(
                pods.insert((pod.clone(), sequence), name).is_none(),
                "{name}: pod {pod} is another Scheduler's too"
            );
        }
        let job = job_name(name, &revision);
        assert!(is_dns_label(&job), "{name}: job {job}");
        assert!(
            jobs.insert(job.clone(), name).is_none(),
            "{name}: job {job} is another Scheduler's too"
        );
        let label = scheduler_label(name);
        assert!(is_label_value(&label), "{name}: label {label}");
        assert!(
            labels.insert(label.clone(), name).is_none(),
            "{name}: label {label} is another Scheduler's too"
        );
        // Readable: what the name starts with survives.
        let head: String = name
            .chars()
            .take(5)
            .map(|c| if c == '.' { '-' } else { c })
            .collect();
        let head = head.trim_end_matches('-');
        assert!(pod_name(name, &revision, 1).starts_with(head), "{name}");
    }

    // A name that already fits is kept as it was: existing pods, Jobs and
    // label selectors keep working.
    assert_eq!(pod_name("orca", &revision, 7), format!("orca-{revision}-7"));
    assert_eq!(
        job_name("orca", &revision),
        format!("orca-register-{revision}")
    );
    assert_eq!(scheduler_label("orca"), "orca");
    let edge = "r".repeat(room);
    assert_eq!(
        pod_name(&edge, &revision, 1),
        format!("{edge}-{revision}-1")
    );
    assert_eq!(scheduler_label("team.pipelines"), "team.pipelines");
    assert_eq!(scheduler_label(&"l".repeat(63)), "l".repeat(63));
    // One that had to change: dots to '-', and a short hash of the name.
    let dotted = pod_name("team.pipelines", &revision, 1);
    let hash = dotted
        .strip_prefix("team-pipelines-")
        .and_then(|rest| rest.strip_suffix(&format!("-{revision}-1")))
        .unwrap_or_else(|| panic!("{dotted}"));
    assert!(
        hash.len() == 6 && hash.chars().all(|c| c.is_ascii_hexdigit()),
        "{dotted}"
    );
    assert_eq!(pod_name("team.pipelines", &revision, 1), dotted, "stable");
}

fn warnings(d: &Decision, reason: &str) -> usize {
    d.events
        .iter()
        .filter(|e| e.reason == reason && e.warning)
        .count()
}

/// A `Degraded` reason that has no step of its own to say it is posted as a
/// Warning when the condition turns True with it — once, not every pass.
#[test]
fn a_condition_turning_degraded_is_said_once_as_a_warning() {
    let v1 = pod("v1", 1, 0, PodState::Running);
    let v2 = pod("v2", 2, 100, PodState::Running);
    let v1_leads = row(1, &v1, "leading");
    let v2_late = pod("v2", 3, 3000, PodState::Running);
    let cases: Vec<(&str, Observed)> = vec![
        (
            "LeadTimeout",
            observed(
                spec("v2"),
                vec![v1.clone(), v2.clone()],
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
                    vec![job("v2", JobState::Succeeded { at: at(3010) })],
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
                    PodView {
                        state: PodState::Pending,
                        waiting: Some(Waiting {
                            reason: "ErrImagePull".into(),
                            message: "manifest for v2 not found".into(),
                        }),
                        ..v2.clone()
                    },
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
        assert_eq!(degraded_reason(&first).as_deref(), Some(reason));
        assert_eq!(
            warnings(&first, reason),
            1,
            "{reason}: said when it turns True: {:?}",
            first.events
        );
        o.status = first.status;
        o.now += chrono::TimeDelta::seconds(1);
        let second = decide(&o);
        assert_eq!(degraded_reason(&second).as_deref(), Some(reason));
        assert_eq!(
            warnings(&second, reason),
            0,
            "{reason}: said once: {:?}",
            second.events
        );
    }
}

/// The kubelet's message reaches the condition and the event.
#[test]
fn an_image_that_cannot_be_pulled_says_the_kubelets_message() {
    let v1 = pod("v1", 1, 0, PodState::Running);
    let mut stuck = pod("v2", 2, 100, PodState::Pending);
    stuck.waiting = Some(Waiting {
        reason: "ImagePullBackOff".into(),
        message: "Back-off pulling image \"registry/orca:v2\"".into(),
    });
    let o = observed(
        spec("v2"),
        vec![v1.clone(), stuck.clone()],
        vec![],
        vec![row(1, &v1, "leading")],
        105,
    );
    let d = decide(&o);
    let degraded = d
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .expect("a Degraded condition");
    assert!(
        degraded.message.contains(&stuck.name)
            && degraded.message.contains("Back-off pulling image"),
        "{}",
        degraded.message
    );
    let event = d
        .events
        .iter()
        .find(|e| e.reason == "ImagePullBackOff")
        .expect("an event");
    assert!(event.warning && event.message.contains("Back-off pulling image"));
}

/// Each failed register Job is said once (a Warning and the condition),
/// and counted in the status; the retries are new Jobs.
#[test]
fn each_register_failure_is_said_once_and_counted() {
    let v1 = pod("v1", 1, 0, PodState::Running);
    let reg = spec("v1").register.unwrap_or_else(|| unreachable!());
    let mut o = observed(
        spec("v1"),
        vec![v1.clone()],
        vec![job("v1", failed(20))],
        vec![row(1, &v1, "leading")],
        25,
    );
    let d = decide(&o);
    assert_eq!(warnings(&d, "RegisterFailed"), 1, "{:?}", d.events);
    assert_eq!(d.actions, vec![], "10 s of back-off first");
    assert!(
        d.requeue <= std::time::Duration::from_secs(5),
        "{:?}",
        d.requeue
    );
    let r = d.status.register.clone().expect("the register status");
    assert_eq!((r.failures, r.attempts), (1, 1), "{r:?}");
    o.status = d.status;

    o.now = at(27);
    let d = decide(&o);
    assert_eq!(
        warnings(&d, "RegisterFailed"),
        0,
        "said once: {:?}",
        d.events
    );
    assert_eq!(degraded_reason(&d).as_deref(), Some("RegisterFailed"));
    o.status = d.status;

    o.now = at(30);
    let d = decide(&o);
    assert_eq!(d.actions, vec![register_attempt_action("v1", 2)]);
    assert_eq!(warnings(&d, "RegisterFailed"), 0, "{:?}", d.events);
    assert_eq!(d.status.register.as_ref().map(|r| r.attempts), Some(2));
    o.status = d.status;

    // The second attempt fails too: said again; 20 s of back-off now.
    o.jobs.push(register_job("v1", 2, &reg, failed(40)));
    o.now = at(41);
    let d = decide(&o);
    assert_eq!(warnings(&d, "RegisterFailed"), 1, "{:?}", d.events);
    assert_eq!(d.actions, vec![]);
    assert_eq!(d.status.register.as_ref().map(|r| r.failures), Some(2));
    o.status = d.status;
    o.now = at(60);
    let d = decide(&o);
    assert_eq!(d.actions, vec![register_attempt_action("v1", 3)]);
    o.status = d.status;

    // The third succeeds: ready, the failures forgotten.
    o.jobs.push(register_job(
        "v1",
        3,
        &reg,
        JobState::Succeeded { at: at(70) },
    ));
    o.now = at(71);
    let d = decide(&o);
    assert_eq!(d.status.phase, Phase::Ready);
    assert_eq!(degraded_reason(&d), None);
    assert_eq!(d.status.register.as_ref().map(|r| r.failures), Some(0));
    assert_eq!(
        d.actions,
        vec![Action::DeleteJob {
            name: job_name("orca", &rev("v1"))
        }],
        "only the last two attempts are kept"
    );
}

/// `HandoverComplete` waits for the registration: a failed register Job is
/// no complete handover.
#[test]
fn a_handover_completes_only_once_registered() {
    let v1 = pod("v1", 1, 0, PodState::Running);
    let v2 = pod("v2", 2, 100, PodState::Running);
    let v1_leads = row(1, &v1, "leading");
    let reg = spec("v2").register.unwrap_or_else(|| unreachable!());
    let mut o = observed(
        spec("v2"),
        vec![v1.clone()],
        vec![],
        vec![v1_leads.clone()],
        100,
    );
    let d = decide(&o);
    o.status = d.status;
    o.pods = vec![v1.clone(), v2.clone()];
    o.instances = Ok(vec![
        draining(v1_leads.clone(), 102),
        row(2, &v2, "leading"),
    ]);
    o.now = at(104);
    let d = decide(&o);
    assert_eq!(d.actions, vec![register("v2")]);
    o.status = d.status;

    // The register Job failed; v1 has ended and its pod is gone.
    o.pods = vec![v2.clone()];
    o.jobs = vec![job("v2", failed(110))];
    o.instances = Ok(vec![ended(v1_leads.clone(), 112), row(2, &v2, "leading")]);
    for now in [115, 118] {
        o.now = at(now);
        let d = decide(&o);
        assert!(
            !d.events.iter().any(|e| e.reason == "HandoverComplete"),
            "at {now}: {:?}",
            d.events
        );
        assert_eq!(degraded_reason(&d).as_deref(), Some("RegisterFailed"));
        o.status = d.status;
    }
    assert_eq!(
        o.status
            .last_handover
            .as_ref()
            .and_then(|h| h.drained.clone()),
        None
    );

    o.now = at(121);
    let d = decide(&o);
    assert_eq!(d.actions, vec![register_attempt_action("v2", 2)]);
    o.status = d.status;
    o.jobs.push(register_job(
        "v2",
        2,
        &reg,
        JobState::Succeeded { at: at(125) },
    ));
    o.now = at(126);
    let d = decide(&o);
    let reasons: Vec<&str> = d.events.iter().map(|e| e.reason.as_str()).collect();
    assert!(
        reasons.contains(&"Registered") && reasons.contains(&"HandoverComplete"),
        "{reasons:?}"
    );
    assert_eq!(d.status.phase, Phase::Ready);
}

/// The restart back-off doubles with each quick death, and starts again at
/// 10 s after a pod ran ten minutes (from its container's start).
#[test]
fn the_restart_back_off_resets_after_a_stable_run() {
    let mut stable = pod("v1", 1, 0, exited(1, 1000));
    stable.started = Some(at(5));
    let mut o = with_status(
        observed(spec("v1"), vec![stable.clone()], vec![], vec![], 1010),
        |s| {
            s.restarts = 4;
            s.recent_restarts = 4;
        },
    );
    let d = decide(&o);
    assert_eq!(d.actions, vec![delete(&stable), create("v1", 2)]);
    assert_eq!((d.status.restarts, d.status.recent_restarts), (5, 1));
    o.status = d.status;

    // The new pod dies at once: 20 s now, not 320 s.
    let quick = pod("v1", 2, 1010, exited(1, 1020));
    o.pods = vec![quick.clone()];
    o.now = at(1039);
    let d = decide(&o);
    assert_eq!(d.actions, vec![]);
    assert_eq!(degraded_reason(&d).as_deref(), Some("PodFailed"));
    o.status = d.status;
    o.now = at(1040);
    let d = decide(&o);
    assert_eq!(d.actions, vec![delete(&quick), create("v1", 3)]);
    assert_eq!((d.status.restarts, d.status.recent_restarts), (6, 2));
}

#[test]
fn register_job_names_are_labels_and_name_their_attempt() {
    for name in ["orca", "team.pipelines", &"s".repeat(64), &"a.b".repeat(80)] {
        let revision = rev("v1");
        assert_eq!(
            register_job_name(name, &revision, 1),
            job_name(name, &revision)
        );
        for attempt in [1, 2, 17, u32::MAX] {
            let job = register_job_name(name, &revision, attempt);
            assert!(is_dns_label(&job), "{name}: {job}");
            assert_eq!(register_attempt(&job, &revision), attempt, "{job}");
        }
        assert_ne!(
            register_job_name(name, &revision, 2),
            register_job_name(name, &revision, 3)
        );
    }
    let mut other = spec("v1").register.unwrap_or_else(|| unreachable!());
    let first = register_hash(&other);
    assert!(is_label_value(&first) && first.len() == 10, "{first}");
    other.timeout_seconds += 1;
    assert_eq!(register_hash(&other), first, "the time-out is no new step");
    other.args.push("--again".into());
    assert_ne!(register_hash(&other), first);
}

#[test]
fn a_scheduler_knows_its_own_pod_names() {
    let revision = rev("v1");
    for name in ["orca", "team.pipelines", &"s".repeat(64)] {
        for sequence in [1, 42, u32::MAX] {
            assert!(is_pod_of(name, &pod_name(name, &revision, sequence)));
        }
        assert!(!is_pod_of(name, &pod_name("other", &revision, 1)));
        assert!(!is_pod_of(
            name,
            &pod_name(&format!("{name}-x"), &revision, 1)
        ));
    }
    assert!(!is_pod_of("orca", &format!("orca-{revision}-01")));
    assert!(!is_pod_of("orca", "orca-zzzzzzzzzz-1"));
    assert!(!is_pod_of("orca", "orca"));
    assert!(!is_pod_of("orca", "ip-10-0-0-1"));
    // `orca-x`'s pods are not `orca`'s, though they start alike.
    assert!(!is_pod_of("orca", &pod_name("orca-x", &revision, 1)));
}

/// Deleting the last failed register Job runs the next attempt at once; the
/// failure before it, already said, is not said again.
#[test]
fn deleting_the_failed_register_job_runs_the_next_at_once() {
    let v1 = pod("v1", 1, 0, PodState::Running);
    let reg = spec("v1").register.unwrap_or_else(|| unreachable!());
    let o = with_status(
        observed(
            spec("v1"),
            vec![v1.clone()],
            // Attempt 2 failed at 40 and was deleted; attempt 1 is left.
            vec![job("v1", failed(20))],
            vec![row(1, &v1, "leading")],
            45,
        ),
        |s| {
            s.register = Some(crate::crd::RegisterStatus {
                revision: rev("v1"),
                hash: register_hash(&reg),
                attempts: 2,
                failures: 2,
                failed_job: Some(register_job_name("orca", &rev("v1"), 2)),
            })
        },
    );
    let d = decide(&o);
    assert_eq!(d.actions, vec![register_attempt_action("v1", 3)]);
    assert_eq!(warnings(&d, "RegisterFailed"), 0, "{:?}", d.events);
    assert_eq!(d.status.register.as_ref().map(|r| r.failures), Some(2));
}
