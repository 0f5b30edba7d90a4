//! No object can stop the operator for the others: `decide`, the pool's
//! `plan` and the schedule, driven over generated specs within the CRDs'
//! own bounds (and the snapshots they may meet), never panic and never take
//! long. A panic there once ended the controllers for every object of the
//! cluster (a schedule's `duration: 300000y`), and a schedule started every
//! minute for a year once walked half a million starts each pass.
//!
//! Each pass is timed against a generous bound (this is a debug build on a
//! busy machine): what it catches is a pass that walks, not one a little
//! slow. `scripts/bench` has the real figures.

use std::{collections::BTreeMap, time::Instant};

use chrono::{DateTime, Duration, TimeZone, Utc};
use proptest::prelude::*;

use crate::crd::{
    Database, Handover, IdleRange, IdleSchedule, Launch, OnDelete, Period, SchedulerSpec,
    SchedulerStatus, StoppedRange, WarmPoolSpec, MAX_SECONDS,
};
use crate::scheduler::{
    decide, host_name, pod_name, InstanceView, JobState, JobView, Observed, PodState, PodView,
    Problem,
};
use crate::warmpool::{plan, schedule, Ec2Instance, Ec2State, Limits, Offering, Snapshot};

/// A pass slower than this walks: far above any honest pass here.
const SLOW_MS: u128 = 250;

fn base() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap()
}

/// A time within a few days of the base, or one far off (year 1 to 4000).
fn time() -> impl Strategy<Value = DateTime<Utc>> {
    prop_oneof![
        8 => (-400_000i64..400_000).prop_map(|s| base() + Duration::seconds(s)),
        1 => (-62_000_000_000i64..64_000_000_000).prop_map(|s| Utc.timestamp_opt(s, 0).unwrap()),
    ]
}

/// A seconds field as the CRD admits it (min..=a year), often at an edge.
fn seconds(min: i64) -> impl Strategy<Value = i64> {
    prop_oneof![Just(min), Just(MAX_SECONDS), min..=MAX_SECONDS, min..120]
}

// --- the schedule --------------------------------------------------------

fn cron_field(max: u32) -> impl Strategy<Value = String> {
    prop_oneof![
        Just("*".to_string()),
        (0..=max).prop_map(|v| v.to_string()),
        (0..=max, 0..=max).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
        (1..=max.max(1)).prop_map(|s| format!("*/{s}")),
        (0..=max, 0..=max).prop_map(|(a, b)| format!("{a},{b}")),
    ]
}

fn cron() -> impl Strategy<Value = String> {
    (
        cron_field(59),
        cron_field(23),
        prop_oneof![
            cron_field(31),
            Just("31".to_string()),
            Just("L".to_string())
        ],
        prop_oneof![cron_field(12), Just("2".to_string())],
        prop_oneof![cron_field(7), Just("1-5".to_string())],
    )
        .prop_map(|(mi, h, d, mo, w)| {
            // Day and month fields start at 1.
            let one = |f: String| {
                if f == "0" {
                    "1".to_string()
                } else {
                    f.replace("0-", "1-")
                }
            };
            format!("{mi} {h} {} {} {w}", one(d), one(mo))
        })
}

fn duration() -> impl Strategy<Value = String> {
    prop_oneof![
        (1u32..=366).prop_map(|d| format!("{d}d")),
        (1u32..=8784).prop_map(|h| format!("{h}h")),
        (1u32..=59, 1u32..=59).prop_map(|(h, m)| format!("{h}h{m}m")),
        Just("366d".to_string()),
        Just("1s".to_string()),
        // Beyond the bounds, as an object stored before them may hold.
        Just("300000y".to_string()),
        Just("999999w".to_string()),
    ]
}

fn idle_schedule() -> impl Strategy<Value = IdleSchedule> {
    (
        cron(),
        prop_oneof![
            Just("UTC"),
            Just("Europe/Berlin"),
            Just("America/New_York"),
            Just("Australia/Lord_Howe"),
            Just("Pacific/Kiritimati"),
        ],
        duration(),
        0i32..=10_000,
    )
        .prop_map(|(cron, tz, duration, min)| IdleSchedule {
            period: Period {
                cron,
                timezone: tz.into(),
                duration,
            },
            idle: IdleRange { min, max: min },
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn a_schedule_never_panics_nor_walks(
        schedules in prop::collection::vec(idle_schedule(), 0..6),
        now in time(),
    ) {
        let t = Instant::now();
        let _ = schedule::active(&schedules, now);
        let ms = t.elapsed().as_millis();
        prop_assert!(ms < SLOW_MS, "{ms} ms for {schedules:?} at {now}");
    }
}

// --- the rollout's decide ------------------------------------------------

fn scheduler_spec() -> impl Strategy<Value = SchedulerSpec> {
    (
        prop_oneof![Just("orca:v1"), Just("orca:v2")],
        any::<bool>(),
        any::<bool>(),
        (seconds(1), seconds(1), seconds(1), seconds(1)),
        (seconds(1), seconds(0)),
        any::<bool>(),
    )
        .prop_map(
            |(image, overlap, register, (join, lead, drain, progress), (stale, settle), paused)| {
                SchedulerSpec {
                    image: image.into(),
                    command: vec!["orca".into()],
                    args: vec![],
                    env: vec![],
                    resources: None,
                    database: Database::in_secret("db", "url"),
                    overlap,
                    register: register.then(|| {
                        serde_json::from_value(serde_json::json!({"command": ["register"]}))
                            .expect("a register step")
                    }),
                    handover: Handover {
                        join_timeout_seconds: join,
                        lead_timeout_seconds: lead,
                        drain_timeout_seconds: drain,
                        progress_deadline_seconds: progress,
                        stale_seconds: stale,
                        settle_seconds: settle,
                    },
                    pod_template: None,
                    paused,
                    maintenance_windows: vec![],
                }
            },
        )
}

fn pod(spec: SchedulerSpec) -> impl Strategy<Value = PodView> {
    (
        1u32..6,
        time(),
        prop::option::of(time()),
        0u8..3,
        -1i32..256,
        time(),
        any::<bool>(),
        prop::option::of(time()),
    )
        .prop_map(
            move |(seq, created, started, state, code, finished, deleting, due)| {
                let revision = crate::scheduler::revision_of(&spec);
                PodView::new(
                    pod_name("orca", &revision, seq),
                    host_name("ns", "orca", &revision, seq),
                    revision,
                    seq,
                    spec.image.clone(),
                    created,
                    match state {
                        0 => PodState::Pending,
                        1 => PodState::Running,
                        _ => PodState::Exited {
                            code,
                            message: "exit".into(),
                            finished,
                        },
                    },
                )
                .with_started(started)
                .with_deleting(deleting)
                .with_deletion_due(due.filter(|_| deleting))
            },
        )
}

fn instance() -> impl Strategy<Value = InstanceView> {
    (
        1i64..8,
        1u32..6,
        prop_oneof![Just("waiting"), Just("leading"), Just("draining")],
        any::<bool>(),
        prop::option::of(time()),
        any::<bool>(),
        time(),
        prop::option::of(time()),
        -1i32..1000,
    )
        .prop_map(
            |(id, seq, role, live, ended, holds_lock, joined, asked, runs)| {
                InstanceView::new(
                    id,
                    host_name("ns", "orca", "0123456789", seq),
                    "orca:v1".into(),
                    role.into(),
                    joined,
                )
                .with_live(live)
                .with_ended(ended)
                .with_holds_lock(holds_lock)
                .with_drain_asked(asked)
                .with_runs(runs)
            },
        )
}

fn status() -> impl Strategy<Value = SchedulerStatus> {
    (
        -5i64..10,
        -3i32..40,
        prop::option::of(time()),
        prop::option::of(Just("0123456789".to_string())),
    )
        .prop_map(|(last, recent, started, aborted)| SchedulerStatus {
            last_sequence: last,
            recent_restarts: recent,
            rollout_started: started.map(|t| t.to_rfc3339()),
            aborted_revision: aborted,
            ..Default::default()
        })
}

fn observed() -> impl Strategy<Value = Observed> {
    (scheduler_spec(), scheduler_spec()).prop_flat_map(|(spec, old)| {
        (
            Just(spec.clone()),
            prop::collection::vec(prop_oneof![pod(spec.clone()), pod(old)], 0..4),
            prop_oneof![
                3 => prop::collection::vec(instance(), 0..4).prop_map(Ok),
                1 => Just(Err(Problem { reason: "SecretMissing".into(), message: "gone".into() })),
            ],
            prop::collection::vec(
                (time(), 0u8..3).prop_map(|(at, s)| {
                    JobView::new(
                        "orca-register-0123456789".into(),
                        "0123456789".into(),
                        None,
                        at,
                        match s {
                            0 => JobState::Running,
                            1 => JobState::Succeeded { at },
                            _ => JobState::Failed {
                                message: "failed".into(),
                                at,
                            },
                        },
                    )
                }),
                0..2,
            ),
            status(),
            time(),
        )
            .prop_map(|(spec, pods, instances, jobs, status, now)| {
                Observed::new("ns".into(), "orca".into(), spec, status, now)
                    .with_generation(Some(2))
                    .with_pods(pods)
                    .with_jobs(jobs)
                    .with_instances(instances)
                    .with_clock_offset(Duration::zero())
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn decide_never_panics_nor_walks(o in observed()) {
        let t = Instant::now();
        let d = decide(&o);
        let ms = t.elapsed().as_millis();
        prop_assert!(ms < SLOW_MS, "{ms} ms");
        // And a second pass over its own status, as the next reconcile does.
        let next = o.with_status(d.status().clone());
        let _ = decide(&next);
    }
}

// --- the pool's plan -----------------------------------------------------

fn pool_spec() -> impl Strategy<Value = WarmPoolSpec> {
    (
        1i32..=10_000,
        (0u32..=100, 0u32..=100),
        prop::option::of((0i32..=10_000, prop::option::of(0i32..=10_000))),
        (seconds(1), seconds(1), seconds(0)),
        0i32..5,
        prop::collection::vec(idle_schedule(), 0..3),
    )
        .prop_map(
            |(max_instances, (a, b), stopped, (idle_s, boot, drain), max_uses, schedules)| {
                // idle.min <= idle.max <= maxInstances, as the CEL rules say.
                let max = (max_instances as i64 * a as i64 / 100) as i32;
                let min = (max as i64 * b as i64 / 100) as i32;
                let schedules = schedules
                    .into_iter()
                    .map(|mut s| {
                        s.idle.min = s.idle.min.min(max_instances);
                        s.idle.max = s.idle.min;
                        s
                    })
                    .collect();
                WarmPoolSpec {
                    scheduler: "orca".into(),
                    ssm_endpoint: None,
                    class_ref: None,
                    region: "us-east-1".into(),
                    endpoint: None,
                    idle: IdleRange { min, max },
                    schedules,
                    forecast: None,
                    objective: None,
                    stopped: stopped.map(|(m, x)| StoppedRange {
                        min: m.min(max_instances),
                        max: x.map(|x| x.max(m.min(max_instances))),
                    }),
                    max_instances,
                    idle_seconds: idle_s,
                    max_uses,
                    boot_timeout_seconds: boot,
                    launch: Launch {
                        launch_template: None,
                        image_id: Some("ami-1".into()),
                        instance_types: vec!["t3.small".into(), "t3.medium".into()],
                        subnet_ids: vec!["subnet-a".into()],
                        security_group_ids: vec![],
                        iam_instance_profile: None,
                        tags: Default::default(),
                        agent_path: "/usr/local/bin/orca-pool-agent".into(),
                        run_command: "run".into(),
                        database_url_file: None,
                        database_url_in: Default::default(),
                        capacity_type: Default::default(),
                    },
                    paused: false,
                    on_delete: OnDelete::Terminate,
                    drain_timeout_seconds: drain,
                    disruption: crate::crd::Disruption { max_drifted: 2 },
                    maintenance_windows: vec![],
                }
            },
        )
}

fn ec2_instance() -> impl Strategy<Value = Ec2Instance> {
    (0u32..40, 0u8..6, time(), any::<bool>()).prop_map(|(n, state, launched, old)| {
        let state = match state {
            0 => Ec2State::Pending,
            1 => Ec2State::Running,
            2 => Ec2State::Stopping,
            3 => Ec2State::Stopped,
            4 => Ec2State::ShuttingDown,
            _ => Ec2State::Terminated,
        };
        Ec2Instance::bare(&format!("i-{n}"), state, launched)
            .with_offering(Offering::new("t3.small".into(), "subnet-a".into(), false))
            // Some of another launch spec: drifted.
            .with_launch(old.then(|| "0123456789ab".into()))
    })
}

fn pool_row() -> impl Strategy<Value = crate::rows::PoolRow> {
    (
        (1i64..60, 0u32..40, prop::option::of(1i64..9)),
        (
            prop::option::of(-10.0f64..1e9),
            prop::option::of(-10.0f64..1e9),
        ),
        (
            0i64..10,
            any::<bool>(),
            any::<bool>(),
            prop::option::of(0.0f64..1e9),
        ),
        (any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |(
                (id, n, run),
                (idle, polled),
                (uses, claim, reserved, woken),
                (noticed, interrupted),
            )| {
                crate::rows::PoolRow::new(id, format!("i-{n}"))
                    .with_run(run)
                    .with_idle_secs(idle)
                    .with_polled_secs(polled)
                    .with_uses(uses)
                    .with_claim(claim)
                    .with_reserved(reserved)
                    .with_woken_secs(woken)
                    .with_noticed(noticed)
                    .with_interrupted(interrupted)
            },
        )
}

fn pool_snapshot() -> impl Strategy<Value = Snapshot> {
    (
        prop::collection::vec(ec2_instance(), 0..30),
        prop::collection::vec(pool_row(), 0..30),
        0i64..20_000,
        prop::option::of(time()),
        prop::collection::vec((1i64..60, -100.0f64..1e6), 0..10),
    )
        .prop_map(|(instances, rows, demand, deleting, hung)| {
            Snapshot::default()
                .with_known(
                    instances
                        .iter()
                        .step_by(3)
                        .map(|i| i.id().to_string())
                        .collect(),
                )
                .with_ours(
                    instances
                        .iter()
                        .step_by(4)
                        .map(|i| i.id().to_string())
                        .collect(),
                )
                .with_drain(
                    instances
                        .iter()
                        .skip(1)
                        .step_by(5)
                        .map(|i| i.id().to_string())
                        .collect(),
                )
                .with_made_before_listing(rows.iter().map(|r| (r.id(), 1.0)).collect())
                .with_hung(hung.into_iter().collect())
                .with_instances(instances)
                .with_rows(rows)
                .with_demand(demand)
                .with_deleting(deleting)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn the_plan_never_panics_nor_walks(
        spec in pool_spec(),
        snap in pool_snapshot(),
        now in time(),
    ) {
        let t = Instant::now();
        let _ = plan(&spec, &snap, &BTreeMap::new(), &Limits::default(), now);
        let ms = t.elapsed().as_millis();
        prop_assert!(ms < SLOW_MS, "{ms} ms");
    }
}
