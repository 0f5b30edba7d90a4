//! What the cases of the decide table are made of: a Scheduler's spec and
//! snapshot, its pods and rows, the actions and conditions to compare.

pub(super) use chrono::{TimeZone, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

pub(super) use super::super::*;
pub(super) use crate::crd::{Database, Handover, Phase, Register, SchedulerSpec, SchedulerStatus};

/// The namespace of the Scheduler `orca` the tables decide for.
pub(super) const NS: &str = "pipelines";

pub(super) fn at(s: i64) -> Time {
    Utc.timestamp_opt(1_800_000_000 + s, 0).unwrap()
}

pub(super) fn spec(image: &str) -> SchedulerSpec {
    SchedulerSpec {
        image: image.into(),
        command: vec!["orca-sim".into(), "scheduler".into()],
        args: vec![],
        env: vec![],
        resources: None,
        database: Database::in_secret("orca-db", "url"),
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
        maintenance_windows: vec![],
    }
}

pub(super) fn rev(image: &str) -> String {
    revision_of(&spec(image))
}

pub(super) fn pod(image: &str, seq: u32, created: i64, state: PodState) -> PodView {
    pod_of(&spec(image), seq, created, state)
}

/// A pod of the revision of `spec`, created at `created`; its container's
/// start is not known (the creation time stands for it).
pub(super) fn pod_of(spec: &SchedulerSpec, seq: u32, created: i64, state: PodState) -> PodView {
    let revision = revision_of(spec);
    PodView::new(
        pod_name("orca", &revision, seq),
        host_name(NS, "orca", &revision, seq),
        revision,
        seq,
        spec.image.clone(),
        at(created),
        state,
    )
}

pub(super) fn exited(code: i32, finished: i64) -> PodState {
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
pub(super) fn row(id: i64, p: &PodView, role: &str) -> InstanceView {
    InstanceView::new(
        id,
        p.host().to_string(),
        p.image().to_string(),
        role.into(),
        at(p.created().timestamp() - 1_800_000_000 + 2),
    )
    .with_holds_lock(role == "leading")
    .with_led((role == "leading").then(|| at(p.created().timestamp() - 1_800_000_000 + 3)))
}

pub(super) fn draining(mut r: InstanceView, asked: i64) -> InstanceView {
    r = r.with_role("draining".into());
    r = r.with_holds_lock(false);
    r = r.with_drain_asked(Some(at(asked)));
    r
}

pub(super) fn ended(mut r: InstanceView, when: i64) -> InstanceView {
    r = draining(r, when - 5);
    r = r.with_live(false);
    r = r.with_ended(Some(at(when)));
    r
}

pub(super) fn job(image: &str, state: JobState) -> JobView {
    JobView::new(
        job_name("orca", &rev(image)),
        rev(image),
        spec(image).register.as_ref().map(register_hash),
        at(0),
        state,
    )
}

/// The register Job of `image`, succeeded at `done`.
pub(super) fn registered(image: &str, done: i64) -> JobView {
    job(image, JobState::Succeeded { at: at(done) })
}

/// v1's first pod, running since 0 and leading alone (instance 1), under
/// `spec`, with `jobs`, at `now`.
pub(super) fn v1_leading(spec: SchedulerSpec, jobs: Vec<JobView>, now: i64) -> Observed {
    let v1 = pod("v1", 1, 0, PodState::Running);
    observed(
        spec,
        vec![v1.clone()],
        jobs,
        vec![row(1, &v1, "leading")],
        now,
    )
}

/// v1's first pod, running since 0, its register Job done at 20, under
/// `spec("v1")`, with the instance `rows`, at `now`.
pub(super) fn v1_registered(rows: Vec<InstanceView>, now: i64) -> Observed {
    let v1 = pod("v1", 1, 0, PodState::Running);
    observed(spec("v1"), vec![v1], vec![registered("v1", 20)], rows, now)
}

/// A rollout from v1 to v2 under way: v1's first pod and v2's (sequence
/// 2, created at 100), both running, under `spec("v2")`, with `jobs` and
/// the instance `rows`, at `now`.
/// v1's first pod (running since 0), v2's (running since 100), and v1's
/// instance, leading: what a handover starts from.
pub(super) fn v1_v2_pods() -> (PodView, PodView, InstanceView) {
    let v1 = pod("v1", 1, 0, PodState::Running);
    let v2 = pod("v2", 2, 100, PodState::Running);
    let v1_leads = row(1, &v1, "leading");
    (v1, v2, v1_leads)
}

pub(super) fn v1_to_v2(jobs: Vec<JobView>, rows: Vec<InstanceView>, now: i64) -> Observed {
    let v1 = pod("v1", 1, 0, PodState::Running);
    let v2 = pod("v2", 2, 100, PodState::Running);
    observed(spec("v2"), vec![v1, v2], jobs, rows, now)
}

pub(super) fn observed(
    spec: SchedulerSpec,
    pods: Vec<PodView>,
    jobs: Vec<JobView>,
    rows: Vec<InstanceView>,
    now: i64,
) -> Observed {
    let last = pods.iter().map(|p| p.sequence()).max().unwrap_or(0) as i64;
    Observed::new(
        NS.into(),
        "orca".into(),
        spec,
        SchedulerStatus {
            last_sequence: last,
            ..Default::default()
        },
        at(now),
    )
    .with_generation(Some(1))
    .with_pods(pods)
    .with_jobs(jobs)
    .with_instances(Ok(rows))
}

pub(super) fn create(image: &str, seq: u32) -> Action {
    create_of(&rev(image), image, seq)
}

/// The pod of revision `revision` running `image`, number `seq`.
pub(super) fn create_of(revision: &str, image: &str, seq: u32) -> Action {
    Action::CreatePod {
        name: pod_name("orca", revision, seq),
        host: host_name(NS, "orca", revision, seq),
        revision: revision.into(),
        sequence: seq,
        image: image.into(),
    }
}

pub(super) fn delete(p: &PodView) -> Action {
    Action::DeletePod {
        name: p.name().to_string(),
    }
}

pub(super) fn register(image: &str) -> Action {
    Action::CreateRegisterJob {
        name: job_name("orca", &rev(image)),
        revision: rev(image),
        image: image.into(),
    }
}

pub(super) fn degraded_reason(d: &Decision) -> Option<String> {
    d.status()
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded" && c.status == "True")
        .map(|c| c.reason.clone())
}

pub(super) fn condition(d: &Decision, type_: &str) -> Option<(String, String)> {
    condition_of(d, type_).map(|c| (c.status.clone(), c.reason.clone()))
}

/// The condition of type `type_` a decision's status holds, if any.
pub(super) fn condition_of<'a>(d: &'a Decision, type_: &str) -> Option<&'a Condition> {
    d.status().conditions.iter().find(|c| c.type_ == type_)
}

pub(super) fn warnings(d: &Decision, reason: &str) -> usize {
    d.events()
        .iter()
        .filter(|e| e.reason() == reason && e.is_warning())
        .count()
}

/// `o` with its status changed by `f`.
pub(super) fn with_status(o: Observed, f: impl FnOnce(&mut SchedulerStatus)) -> Observed {
    let mut status = o.status().clone();
    f(&mut status);
    o.with_status(status)
}

pub(super) fn rfc3339(t: Time) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A live instance of Scheduler `other` on this Scheduler's database.
pub(super) fn foreign(id: i64, role: &str) -> InstanceView {
    InstanceView::new(
        id,
        host_name(NS, "other", &rev("v1"), 1),
        "v1".into(),
        role.into(),
        at(0),
    )
    .with_holds_lock(role == "leading")
}

pub(super) struct Case {
    pub(super) name: &'static str,
    pub(super) observed: Observed,
    pub(super) actions: Vec<Action>,
    pub(super) phase: Phase,
    pub(super) degraded: Option<&'static str>,
}
