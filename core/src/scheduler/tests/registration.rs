//! The register Job: retried with a back-off, each failure said once, awaited by a handover.

use super::fixtures::*;

/// A register Job of attempt `attempt` for `image`, running `register`.
fn register_job(image: &str, attempt: u32, register: &Register, state: JobState) -> JobView {
    JobView::new(
        register_job_name("orca", &rev(image), attempt),
        rev(image),
        Some(register_hash(register)),
        at(10),
        state,
    )
}

fn register_attempt_action(image: &str, attempt: u32) -> Action {
    Action::CreateRegisterJob {
        name: register_job_name("orca", &rev(image), attempt),
        revision: rev(image),
        image: image.into(),
    }
}

/// `o` with the register status of v1's step `reg`: `attempts` made, the
/// last `failures` of them failed, the last failed one `failed_job`.
fn register_tried(
    o: Observed,
    reg: &Register,
    attempts: i32,
    failures: i32,
    failed_job: String,
) -> Observed {
    with_status(o, |s| {
        s.register = Some(crate::crd::RegisterStatus {
            revision: rev("v1"),
            hash: register_hash(reg),
            attempts,
            failures,
            failed_job: Some(failed_job),
        })
    })
}

fn succeeded(at_: i64) -> JobState {
    JobState::Succeeded { at: at(at_) }
}

fn failed(at_: i64) -> JobState {
    JobState::Failed {
        message: "BackoffLimitExceeded: Job has reached the specified backoff limit".into(),
        at: at(at_),
    }
}

/// A failed register Job is retried as a new Job, with a back-off; a new
/// register step registers again.
pub(super) fn register_cases() -> Vec<Case> {
    let v1 = pod("v1", 1, 0, PodState::Running);
    let v1_leads = row(1, &v1, "leading");
    let reg = spec("v1").register.unwrap_or_else(|| unreachable!());
    let mut again = spec("v1");
    if let Some(r) = again.register.as_mut() {
        r.args = vec!["--again".into()];
    }
    let mut legacy = job("v1", JobState::Succeeded { at: at(20) });
    legacy = legacy.with_register(None);
    let fourth_failed = |now: i64| {
        let jobs = vec![
            register_job("v1", 3, &reg, failed(10)),
            register_job("v1", 4, &reg, failed(100)),
        ];
        let fourth = register_job_name("orca", &rev("v1"), 4);
        register_tried(v1_leading(spec("v1"), jobs, now), &reg, 4, 4, fourth)
    };
    vec![
        Case {
            name: "a failed register job is retried as a new job after its back-off",
            observed: v1_leading(spec("v1"), vec![job("v1", failed(20))], 31),
            actions: vec![register_attempt_action("v1", 2)],
            phase: Phase::Degraded,
            degraded: Some("RegisterFailed"),
        },
        Case {
            name: "a failed register job: not before its back-off",
            observed: v1_leading(spec("v1"), vec![job("v1", failed(20))], 29),
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
                let o = fourth_failed(185);
                let mut jobs = o.jobs().to_vec();
                jobs.push(register_job("v1", 5, &reg, JobState::Running));
                o.with_jobs(jobs)
            },
            actions: vec![Action::DeleteJob {
                name: register_job_name("orca", &rev("v1"), 3),
            }],
            phase: Phase::Degraded,
            degraded: Some("RegisterFailed"),
        },
        Case {
            name: "a retry that runs is still Degraded: the last attempt failed",
            observed: register_tried(
                v1_leading(
                    spec("v1"),
                    vec![
                        job("v1", failed(20)),
                        register_job("v1", 2, &reg, JobState::Running),
                    ],
                    35,
                ),
                &reg,
                2,
                1,
                job_name("orca", &rev("v1")),
            ),
            actions: vec![],
            phase: Phase::Degraded,
            degraded: Some("RegisterFailed"),
        },
        Case {
            name: "a retry that succeeded is ready",
            observed: v1_leading(
                spec("v1"),
                vec![
                    job("v1", failed(20)),
                    register_job("v1", 2, &reg, succeeded(40)),
                ],
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
                vec![v1.clone()],
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
            observed: v1_leading(spec("v1"), vec![legacy], 500),
            actions: vec![],
            phase: Phase::Ready,
            degraded: None,
        },
    ]
}

/// Each failed register Job is said once (a Warning and the condition),
/// and counted in the status; the retries are new Jobs.
#[test]
fn each_register_failure_is_said_once_and_counted() {
    let reg = spec("v1").register.unwrap_or_else(|| unreachable!());
    let mut o = v1_leading(spec("v1"), vec![job("v1", failed(20))], 25);
    let d = decide(&o);
    assert_eq!(warnings(&d, "RegisterFailed"), 1, "{:?}", d.events());
    assert_eq!(d.actions(), vec![], "10 s of back-off first");
    assert!(
        d.requeue() <= std::time::Duration::from_secs(5),
        "{:?}",
        d.requeue()
    );
    let r = d.status().register.clone().expect("the register status");
    assert_eq!((r.failures, r.attempts), (1, 1), "{r:?}");
    o = o.with_status(d.status().clone());

    o = o.with_now(at(27));
    let d = decide(&o);
    assert_eq!(
        warnings(&d, "RegisterFailed"),
        0,
        "said once: {:?}",
        d.events()
    );
    assert_eq!(degraded_reason(&d).as_deref(), Some("RegisterFailed"));
    o = o.with_status(d.status().clone());

    o = o.with_now(at(30));
    let d = decide(&o);
    assert_eq!(d.actions(), vec![register_attempt_action("v1", 2)]);
    assert_eq!(warnings(&d, "RegisterFailed"), 0, "{:?}", d.events());
    assert_eq!(d.status().register.as_ref().map(|r| r.attempts), Some(2));
    o = o.with_status(d.status().clone());

    // The second attempt fails too: said again; 20 s of back-off now.
    let mut more = o.jobs().to_vec();
    more.push(register_job("v1", 2, &reg, failed(40)));
    o = o.with_jobs(more);
    o = o.with_now(at(41));
    let d = decide(&o);
    assert_eq!(warnings(&d, "RegisterFailed"), 1, "{:?}", d.events());
    assert_eq!(d.actions(), vec![]);
    assert_eq!(d.status().register.as_ref().map(|r| r.failures), Some(2));
    o = o.with_status(d.status().clone());
    o = o.with_now(at(60));
    let d = decide(&o);
    assert_eq!(d.actions(), vec![register_attempt_action("v1", 3)]);
    o = o.with_status(d.status().clone());

    // The third succeeds: ready, the failures forgotten.
    let mut more = o.jobs().to_vec();
    more.push(register_job("v1", 3, &reg, succeeded(70)));
    o = o.with_jobs(more);
    o = o.with_now(at(71));
    let d = decide(&o);
    assert_eq!(d.status().phase, Phase::Ready);
    assert_eq!(degraded_reason(&d), None);
    assert_eq!(d.status().register.as_ref().map(|r| r.failures), Some(0));
    assert_eq!(
        d.actions(),
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
    let (v1, v2, v1_leads) = v1_v2_pods();
    let mut o = v1_leading(spec("v2"), vec![], 100);
    let d = decide(&o);
    o = o.with_status(d.status().clone());
    o = o.with_pods(vec![v1.clone(), v2.clone()]);
    o = o.with_instances(Ok(vec![
        draining(v1_leads.clone(), 102),
        row(2, &v2, "leading"),
    ]));
    o = o.with_now(at(104));
    let d = decide(&o);
    assert_eq!(d.actions(), vec![register("v2")]);
    o = o.with_status(d.status().clone());

    // The register Job failed; v1 has ended and its pod is gone.
    o = o.with_pods(vec![v2.clone()]);
    o = o.with_jobs(vec![job("v2", failed(110))]);
    o = o.with_instances(Ok(vec![
        ended(v1_leads.clone(), 112),
        row(2, &v2, "leading"),
    ]));
    for now in [115, 118] {
        o = o.with_now(at(now));
        let d = decide(&o);
        assert!(
            !d.events().iter().any(|e| e.reason() == "HandoverComplete"),
            "at {now}: {:?}",
            d.events()
        );
        assert_eq!(degraded_reason(&d).as_deref(), Some("RegisterFailed"));
        o = o.with_status(d.status().clone());
    }
    assert_eq!(
        o.status()
            .last_handover
            .as_ref()
            .and_then(|h| h.drained.clone()),
        None
    );

    o = o.with_now(at(121));
    let d = decide(&o);
    assert_eq!(d.actions(), vec![register_attempt_action("v2", 2)]);
    o = o.with_status(d.status().clone());
    let reg = spec("v2").register.unwrap_or_else(|| unreachable!());
    let mut more = o.jobs().to_vec();
    more.push(register_job("v2", 2, &reg, succeeded(125)));
    o = o.with_jobs(more);
    o = o.with_now(at(126));
    let d = decide(&o);
    let reasons: Vec<&str> = d.events().iter().map(|e| e.reason()).collect();
    assert!(
        reasons.contains(&"Registered") && reasons.contains(&"HandoverComplete"),
        "{reasons:?}"
    );
    assert_eq!(d.status().phase, Phase::Ready);
}

/// Deleting the last failed register Job runs the next attempt at once; the
/// failure before it, already said, is not said again.
#[test]
fn deleting_the_failed_register_job_runs_the_next_at_once() {
    let reg = spec("v1").register.unwrap_or_else(|| unreachable!());
    // Attempt 2 failed at 40 and was deleted; attempt 1 is left.
    let o = v1_leading(spec("v1"), vec![job("v1", failed(20))], 45);
    let second = register_job_name("orca", &rev("v1"), 2);
    let o = register_tried(o, &reg, 2, 2, second);
    let d = decide(&o);
    assert_eq!(d.actions(), vec![register_attempt_action("v1", 3)]);
    assert_eq!(warnings(&d, "RegisterFailed"), 0, "{:?}", d.events());
    assert_eq!(d.status().register.as_ref().map(|r| r.failures), Some(2));
}
