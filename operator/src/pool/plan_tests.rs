//! Tables of (snapshot → plan) for the pool policy.

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Duration, TimeZone, Utc};

use super::*;
use crate::crd::{IdleRange, Launch, OnDelete, WarmPoolSpec};

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap()
}

pub(in crate::pool) fn spec(min: i32, max: i32, max_instances: i32) -> WarmPoolSpec {
    WarmPoolSpec {
        scheduler: "sched".into(),
        region: "us-east-1".into(),
        endpoint: None,
        idle: IdleRange { min, max },
        max_instances,
        idle_seconds: 600,
        max_uses: 0,
        boot_timeout_seconds: 300,
        launch: Launch {
            launch_template: None,
            image_id: Some("ami-1".into()),
            instance_types: vec!["t3.small".into(), "t3.medium".into()],
            subnet_ids: vec!["subnet-a".into(), "subnet-b".into()],
            security_group_ids: vec![],
            iam_instance_profile: None,
            tags: Default::default(),
            agent_path: "/usr/local/bin/orca-pool-agent".into(),
            run_command: "run".into(),
            database_url_file: None,
        },
        paused: false,
        on_delete: OnDelete::Terminate,
        drain_timeout_seconds: 3600,
    }
}

fn off(t: &str, s: &str) -> Offering {
    Offering {
        instance_type: t.into(),
        subnet: s.into(),
    }
}

/// An instance `age` seconds old.
fn inst(id: &str, age: i64) -> Ec2Instance {
    Ec2Instance {
        id: id.into(),
        state: Ec2State::Running,
        launched: now() - Duration::seconds(age),
        offering: off("t3.small", "subnet-a"),
    }
}

fn idle_row(id: i64, instance: &str, idle: f64) -> PoolRow {
    PoolRow {
        id,
        instance: instance.into(),
        run: None,
        idle_secs: Some(idle),
        polled_secs: Some(0.5),
        uses: 0,
        claim: false,
    }
}

fn busy_row(id: i64, instance: &str) -> PoolRow {
    PoolRow {
        idle_secs: None,
        run: Some(7),
        uses: 1,
        ..idle_row(id, instance, 0.0)
    }
}

fn snap(instances: Vec<Ec2Instance>, rows: Vec<PoolRow>) -> Snapshot {
    Snapshot {
        instances,
        rows,
        ..Default::default()
    }
}

fn run(spec: &WarmPoolSpec, snap: &Snapshot) -> PoolPlan {
    plan(spec, snap, &BTreeMap::new(), &Limits::default(), now())
}

fn retired(p: &PoolPlan) -> Vec<(&str, Reason)> {
    p.retirements
        .iter()
        .map(|r| (r.instance.as_str(), r.reason))
        .collect()
}

#[test]
fn offerings_try_each_type_in_every_subnet_then_the_next_type() {
    let s = spec(0, 0, 1);
    assert_eq!(
        offerings(&s.launch),
        [
            off("t3.small", "subnet-a"),
            off("t3.small", "subnet-b"),
            off("t3.medium", "subnet-a"),
            off("t3.medium", "subnet-b"),
        ]
    );
    let mut t = s.launch.clone();
    t.instance_types.clear();
    t.subnet_ids.clear();
    assert_eq!(offerings(&t), [off("", "")]);
}

/// (idle.min, idle.max, maxInstances, idle, busy, booting, demand) →
/// (launches, short).
type LaunchCase = (i32, i32, i32, usize, usize, usize, i64, u32, u32);

#[test]
fn launches_table() {
    let cases: &[LaunchCase] = &[
        (0, 0, 10, 0, 0, 0, 0, 0, 0),
        (2, 4, 10, 0, 0, 0, 0, 2, 0),
        (2, 4, 10, 1, 0, 0, 0, 1, 0),
        (2, 4, 10, 2, 0, 0, 0, 0, 0),
        (2, 4, 10, 1, 0, 1, 0, 0, 0), // booting counts
        (2, 4, 10, 0, 0, 2, 0, 0, 0),
        (2, 4, 10, 2, 3, 0, 3, 3, 0), // demand beyond idle.min
        (2, 4, 5, 2, 3, 0, 3, 0, 3),  // maxInstances reached
        (2, 4, 6, 0, 3, 0, 5, 3, 4),  // capped by maxInstances
        (0, 0, 50, 0, 0, 0, 50, 50, 0),
        (0, 0, 20, 0, 0, 5, 50, 15, 30),
        (1, 1, 1, 0, 1, 0, 0, 0, 1), // a busy instance fills the pool
        (3, 3, 10, 4, 0, 0, 0, 0, 0),
    ];
    for (n, &(min, max, cap, idle, busy, booting, demand, want, short)) in cases.iter().enumerate()
    {
        let s = spec(min, max, cap);
        let mut instances = Vec::new();
        let mut rows = Vec::new();
        for k in 0..idle {
            let id = format!("i-idle{k}");
            instances.push(inst(&id, 100));
            rows.push(idle_row(k as i64, &id, 10.0 + k as f64));
        }
        for k in 0..busy {
            let id = format!("i-busy{k}");
            instances.push(inst(&id, 100));
            rows.push(busy_row(100 + k as i64, &id));
        }
        let mut ours = HashSet::new();
        for k in 0..booting {
            let id = format!("i-boot{k}");
            instances.push(inst(&id, 5));
            ours.insert(id);
        }
        let sn = Snapshot {
            instances,
            rows,
            ours,
            demand,
            ..Default::default()
        };
        let p = run(&s, &sn);
        assert_eq!(p.launch_count(), want, "case {n}: launches");
        assert_eq!(p.short, short, "case {n}: short");
        assert_eq!(p.counts.launching, booting as u32, "case {n}");
        assert!(
            sn.instances.len() as u32 + p.launch_count() - p.retirements.len() as u32
                <= cap.max(sn.instances.len() as i32) as u32,
            "case {n}: never past maxInstances"
        );
    }
}

#[test]
fn launches_go_to_the_first_available_offering_in_batches() {
    let s = spec(250, 250, 1000);
    let limits = Limits {
        max_batch: 100,
        ..Limits::default()
    };
    let mut unavailable = BTreeMap::new();
    unavailable.insert(off("t3.small", "subnet-a"), now() + Duration::seconds(60));
    unavailable.insert(off("t3.medium", "subnet-a"), now() - Duration::seconds(1)); // expired
    let p = plan(&s, &Snapshot::default(), &unavailable, &limits, now());
    assert_eq!(
        p.launches.iter().map(|b| b.count).collect::<Vec<_>>(),
        [100, 100, 50]
    );
    assert!(p
        .launches
        .iter()
        .all(|b| b.offering == off("t3.small", "subnet-b")));
    assert_eq!(
        p.fallback,
        [off("t3.medium", "subnet-a"), off("t3.medium", "subnet-b")]
    );
}

#[test]
fn no_offering_available_launches_nothing_and_says_how_many_are_short() {
    let s = spec(2, 2, 10);
    let unavailable: BTreeMap<_, _> = offerings(&s.launch)
        .into_iter()
        .map(|o| (o, now() + Duration::seconds(100)))
        .collect();
    let p = plan(
        &s,
        &Snapshot::default(),
        &unavailable,
        &Limits::default(),
        now(),
    );
    assert!(p.launches.is_empty());
    assert_eq!(p.short, 2);
}

#[test]
fn idle_beyond_max_retires_the_longest_idle_first() {
    let s = spec(1, 2, 10);
    let sn = snap(
        vec![
            inst("i-a", 100),
            inst("i-b", 100),
            inst("i-c", 100),
            inst("i-d", 100),
        ],
        vec![
            idle_row(1, "i-a", 5.0),
            idle_row(2, "i-b", 50.0),
            idle_row(3, "i-c", 20.0),
            idle_row(4, "i-d", 1.0),
        ],
    );
    let p = run(&s, &sn);
    assert_eq!(
        retired(&p),
        [
            ("i-b", Reason::IdleBeyondMax),
            ("i-c", Reason::IdleBeyondMax)
        ]
    );
    assert_eq!(p.retirements[0].end, End::Idle(2));
    assert_eq!(p.counts.idle, 2);
    assert_eq!(p.launch_count(), 0);
}

#[test]
fn unserved_demand_keeps_idle_instances_beyond_idle_max() {
    let s = spec(0, 1, 10);
    let sn = Snapshot {
        instances: vec![inst("i-a", 100), inst("i-b", 100), inst("i-c", 100)],
        rows: vec![
            idle_row(1, "i-a", 5.0),
            idle_row(2, "i-b", 6.0),
            idle_row(3, "i-c", 7.0),
        ],
        demand: 1,
        ..Default::default()
    };
    let p = run(&s, &sn);
    assert_eq!(retired(&p), [("i-c", Reason::IdleBeyondMax)]);
    assert_eq!(p.launch_count(), 0);
}

#[test]
fn retirement_table() {
    // (description, instance age, row, known, ours, max_uses, boot timeout) → reason
    let stale = PoolRow {
        polled_secs: Some(31.0),
        ..idle_row(1, "i-x", 40.0)
    };
    let never_polled = PoolRow {
        polled_secs: None,
        ..idle_row(1, "i-x", 40.0)
    };
    let used = PoolRow {
        uses: 3,
        run: Some(9),
        ..idle_row(1, "i-x", 1.0)
    };
    let busy_used = PoolRow {
        uses: 3,
        ..busy_row(1, "i-x")
    };
    let claim = PoolRow {
        claim: true,
        idle_secs: None,
        ..idle_row(1, "i-x", 0.0)
    };
    type Case<'a> = (
        &'a str,
        i64,
        Option<PoolRow>,
        bool,
        bool,
        i32,
        Option<(Reason, End)>,
    );
    let cases: Vec<Case> = vec![
        (
            "fresh idle",
            100,
            Some(idle_row(1, "i-x", 1.0)),
            false,
            false,
            0,
            None,
        ),
        (
            "stale polled",
            100,
            Some(stale),
            false,
            false,
            0,
            Some((Reason::Stale, End::Idle(1))),
        ),
        (
            "never polled",
            100,
            Some(never_polled),
            false,
            false,
            0,
            Some((Reason::Stale, End::Idle(1))),
        ),
        (
            "max uses idle",
            100,
            Some(used.clone()),
            false,
            false,
            3,
            Some((Reason::MaxUses, End::Idle(1))),
        ),
        ("under max uses", 100, Some(used), false, false, 4, None),
        (
            "max uses but busy",
            100,
            Some(busy_used),
            false,
            false,
            3,
            None,
        ),
        ("busy", 100, Some(busy_row(1, "i-x")), false, false, 0, None),
        (
            "row ended by scheduler",
            100,
            None,
            true,
            false,
            0,
            Some((Reason::NoLiveRow, End::Claim)),
        ),
        ("ours booting", 299, None, false, true, 0, None),
        (
            "ours past boot timeout",
            300,
            None,
            false,
            true,
            0,
            Some((Reason::BootTimeout, End::Claim)),
        ),
        (
            "unknown younger than grace",
            299,
            None,
            false,
            false,
            0,
            None,
        ),
        (
            "leaked",
            301,
            None,
            false,
            false,
            0,
            Some((Reason::Leaked, End::Claim)),
        ),
        (
            "claimed earlier",
            100,
            Some(claim),
            false,
            false,
            0,
            Some((Reason::NoLiveRow, End::Claimed(1))),
        ),
    ];
    for (what, age, row, known, ours, max_uses, want) in cases {
        let mut s = spec(0, 5, 10);
        s.max_uses = max_uses;
        let sn = Snapshot {
            instances: vec![inst("i-x", age)],
            rows: row.into_iter().collect(),
            known: known.then(|| "i-x".to_string()).into_iter().collect(),
            ours: ours.then(|| "i-x".to_string()).into_iter().collect(),
            demand: 0,
            deleting: None,
            ..Default::default()
        };
        let p = run(&s, &sn);
        let got = p.retirements.first().map(|r| (r.reason, r.end));
        assert_eq!(got, want, "{what}");
        assert!(p.retirements.len() <= 1, "{what}");
    }
}

#[test]
fn a_retired_instance_is_replaced_up_to_idle_min() {
    let s = spec(2, 2, 2);
    let stale = PoolRow {
        polled_secs: Some(99.0),
        ..idle_row(1, "i-a", 40.0)
    };
    let p = run(
        &s,
        &snap(
            vec![inst("i-a", 100), inst("i-b", 100)],
            vec![stale, idle_row(2, "i-b", 3.0)],
        ),
    );
    assert_eq!(retired(&p), [("i-a", Reason::Stale)]);
    assert_eq!(p.room, 1);
    assert_eq!(p.launch_count(), 1);
}

#[test]
fn terminated_and_shutting_down_instances_are_not_counted() {
    let s = spec(2, 2, 2);
    let mut gone = inst("i-a", 100);
    gone.state = Ec2State::Terminated;
    let mut going = inst("i-b", 100);
    going.state = Ec2State::ShuttingDown;
    let p = run(&s, &snap(vec![gone, going], vec![]));
    assert_eq!(p.launch_count(), 2);
    assert_eq!(p.counts.terminating, 1);
    assert!(p.retirements.is_empty());
}

#[test]
fn claim_rows_of_gone_instances_are_ended() {
    let s = spec(0, 0, 2);
    let claim = PoolRow {
        claim: true,
        idle_secs: None,
        ..idle_row(8, "i-gone", 0.0)
    };
    let mut gone = inst("i-gone", 100);
    gone.state = Ec2State::Terminated;
    let p = run(&s, &snap(vec![gone], vec![claim]));
    assert_eq!(p.ends, [8]);
    assert!(p.retirements.is_empty());
}

#[test]
fn paused_changes_nothing_but_still_counts() {
    let mut s = spec(3, 3, 10);
    s.paused = true;
    let stale = PoolRow {
        polled_secs: Some(99.0),
        ..idle_row(1, "i-a", 40.0)
    };
    let p = run(
        &s,
        &snap(
            vec![inst("i-a", 100), inst("i-b", 100), inst("i-c", 1000)],
            vec![stale, busy_row(2, "i-b")],
        ),
    );
    assert!(p.launches.is_empty() && p.retirements.is_empty());
    assert_eq!(p.counts.busy, 1);
}

#[test]
fn retirements_and_launches_together_never_exceed_max_instances() {
    // Every combination of a small pool: whatever the plan does, the
    // instances left plus those launched stay within maxInstances.
    for cap in 1..6 {
        for idle in 0..6usize {
            for busy in 0..4usize {
                for demand in 0..6i64 {
                    let s = spec(2, 3, cap);
                    let mut instances = Vec::new();
                    let mut rows = Vec::new();
                    for k in 0..idle {
                        let id = format!("i-i{k}");
                        instances.push(inst(&id, 100));
                        rows.push(idle_row(k as i64, &id, k as f64));
                    }
                    for k in 0..busy {
                        let id = format!("i-b{k}");
                        instances.push(inst(&id, 100));
                        rows.push(busy_row(50 + k as i64, &id));
                    }
                    let sn = Snapshot {
                        instances,
                        rows,
                        demand,
                        ..Default::default()
                    };
                    let p = run(&s, &sn);
                    let after = (idle + busy) as i64 - p.retirements.len() as i64
                        + i64::from(p.launch_count());
                    assert!(
                        after <= i64::from(cap).max((idle + busy) as i64),
                        "cap {cap} idle {idle} busy {busy} demand {demand}: {after}"
                    );
                    assert!(i64::from(p.counts.idle) <= 3 + demand);
                }
            }
        }
    }
}

#[test]
fn ten_thousand_instances_plan_quickly_enough_to_matter_only_in_the_bench() {
    // Correctness at scale; the timing is bench-pool's job.
    let s = spec(100, 200, 20_000);
    let mut instances = Vec::new();
    let mut rows = Vec::new();
    for k in 0..10_000 {
        let id = format!("i-{k:017x}");
        instances.push(inst(&id, 1000));
        if k % 2 == 0 {
            rows.push(idle_row(k, &id, k as f64));
        } else {
            rows.push(busy_row(k, &id));
        }
    }
    let p = run(&s, &snap(instances, rows));
    assert_eq!(p.counts.idle, 200);
    assert_eq!(p.counts.busy, 5000);
    assert_eq!(p.retirements.len(), 4800);
    // The longest idle go: the rows with the largest idle_secs.
    assert!(p
        .retirements
        .iter()
        .all(|r| r.instance.as_str() >= "i-00000000000000190"));
}

/// A pool deleted `ago` seconds before `now()` (onDelete Terminate).
fn deleted(instances: Vec<Ec2Instance>, rows: Vec<PoolRow>, ago: i64) -> Snapshot {
    Snapshot {
        deleting: Some(now() - Duration::seconds(ago)),
        ..snap(instances, rows)
    }
}

#[test]
fn deletion_table() {
    /// The one instance of the case: with a live row, or without one.
    enum I {
        Row(PoolRow),
        /// Launched by this loop 5 s ago, its agent not reported yet.
        Ours,
        /// Not launched by this loop, 5 s old: younger than the leak grace.
        Unknown,
        /// No live row, but rows once.
        Known,
    }
    let idle = idle_row(1, "i-x", 1.0);
    let stale = PoolRow {
        polled_secs: Some(99.0),
        ..idle_row(1, "i-x", 40.0)
    };
    let busy = busy_row(1, "i-x");
    let claim = PoolRow {
        claim: true,
        idle_secs: None,
        ..idle_row(1, "i-x", 0.0)
    };
    // (description, the instance, paused, seconds since the deletion) →
    // how it is retired (always PoolDeleted); None: left to its run.
    let cases: Vec<(&str, I, bool, i64, Option<End>)> = vec![
        ("idle", I::Row(idle.clone()), false, 0, Some(End::Idle(1))),
        ("stale idle", I::Row(stale), false, 0, Some(End::Idle(1))),
        ("ours booting", I::Ours, false, 0, Some(End::Claim)),
        (
            "younger than the leak grace",
            I::Unknown,
            false,
            0,
            Some(End::Claim),
        ),
        (
            "row ended by the scheduler",
            I::Known,
            false,
            0,
            Some(End::Claim),
        ),
        (
            "claimed earlier",
            I::Row(claim),
            false,
            0,
            Some(End::Claimed(1)),
        ),
        (
            "busy, drain time left",
            I::Row(busy.clone()),
            false,
            3599,
            None,
        ),
        (
            "busy past the drain time-out",
            I::Row(busy),
            false,
            3600,
            Some(End::Busy(1)),
        ),
        ("idle, paused", I::Row(idle), true, 0, Some(End::Idle(1))),
        ("booting, paused", I::Ours, true, 0, Some(End::Claim)),
    ];
    for (what, instance, paused, ago, want) in cases {
        let mut s = spec(3, 5, 10);
        s.paused = paused;
        let (age, rows, ours, known) = match instance {
            I::Row(row) => (100, vec![row], false, false),
            I::Ours => (5, vec![], true, false),
            I::Unknown => (5, vec![], false, false),
            I::Known => (100, vec![], false, true),
        };
        let sn = Snapshot {
            ours: ours.then(|| "i-x".to_string()).into_iter().collect(),
            known: known.then(|| "i-x".to_string()).into_iter().collect(),
            demand: 2,
            ..deleted(vec![inst("i-x", age)], rows, ago)
        };
        let p = run(&s, &sn);
        let got: Vec<(Reason, End)> = p.retirements.iter().map(|r| (r.reason, r.end)).collect();
        let want: Vec<(Reason, End)> = want.map(|e| (Reason::PoolDeleted, e)).into_iter().collect();
        assert_eq!(got, want, "{what}");
        assert_eq!(p.counts.busy, u32::from(want.is_empty()), "{what}");
        assert!(
            p.launches.is_empty() && p.room == 0 && p.short == 0,
            "{what}: {p:?}"
        );
    }
}

#[test]
fn a_deleted_pool_launches_nothing_and_counts_what_is_left() {
    let s = spec(3, 5, 10);
    let mut going = inst("i-going", 100);
    going.state = Ec2State::ShuttingDown;
    let mut gone = inst("i-gone", 100);
    gone.state = Ec2State::Terminated;
    let claim_of_gone = PoolRow {
        claim: true,
        idle_secs: None,
        ..idle_row(9, "i-gone", 0.0)
    };
    let sn = Snapshot {
        ours: ["i-boot".to_string()].into(),
        demand: 4,
        ..deleted(
            vec![
                inst("i-a", 100),
                inst("i-b", 100),
                inst("i-busy", 100),
                inst("i-boot", 5),
                going,
                gone,
            ],
            vec![
                idle_row(1, "i-a", 1.0),
                idle_row(2, "i-b", 2.0),
                busy_row(3, "i-busy"),
                claim_of_gone,
            ],
            10,
        )
    };
    let p = run(&s, &sn);
    assert_eq!(
        retired(&p),
        [
            ("i-a", Reason::PoolDeleted),
            ("i-b", Reason::PoolDeleted),
            ("i-boot", Reason::PoolDeleted)
        ]
    );
    assert_eq!(p.ends, [9]);
    assert!(p.launches.is_empty() && p.fallback.is_empty());
    assert_eq!((p.room, p.short), (0, 0));
    assert_eq!(
        p.counts,
        Counts {
            launching: 0,
            idle: 0,
            busy: 1,
            terminating: 4,
        }
    );
    // Nothing left: an empty plan.
    let p = run(&s, &deleted(vec![], vec![], 10));
    assert_eq!(p, PoolPlan::default());
}

#[test]
fn busy_instances_hung_past_the_grace_are_retired() {
    // (seconds seen hung, or never) → retired as Hung
    let limits = Limits::default();
    for (hung, want) in [
        (None, false),
        (Some(0.0), false),
        (Some(limits.hung_grace_secs - 0.5), false),
        (Some(limits.hung_grace_secs), true),
        (Some(limits.hung_grace_secs * 10.0), true),
    ] {
        let mut sn = snap(
            vec![inst("i-x", 100), inst("i-y", 100)],
            vec![busy_row(1, "i-x"), busy_row(2, "i-y")],
        );
        sn.hung.extend(hung.map(|secs| (1, secs)));
        let p = run(&spec(0, 5, 10), &sn);
        let got = p
            .retirements
            .iter()
            .map(|r| (r.instance.as_str(), r.reason, r.end));
        let want_retired = want.then_some(("i-x", Reason::Hung, End::Busy(1)));
        assert_eq!(
            got.collect::<Vec<_>>(),
            want_retired.into_iter().collect::<Vec<_>>(),
            "{hung:?}"
        );
        assert_eq!(p.counts.busy, if want { 1 } else { 2 }, "{hung:?}");
    }
    // An idle row is never hung, whatever the snapshot says of it.
    let mut sn = snap(vec![inst("i-x", 100)], vec![idle_row(1, "i-x", 1.0)]);
    sn.hung.insert(1, 1e6);
    assert!(run(&spec(0, 5, 10), &sn).retirements.is_empty());
}

#[test]
fn rows_of_instances_ec2_no_longer_runs_are_ended() {
    let grace = Limits::default().unlisted_grace_secs;
    let with_state = |state| Ec2Instance {
        state,
        ..inst("i-x", 100)
    };
    // (EC2's view of the row's instance, the row made how long before the
    // listing (None: no entry), claim) → ended as gone
    type Case = (&'static str, Option<Ec2Instance>, Option<f64>, bool, bool);
    let cases: Vec<Case> = vec![
        (
            "running",
            Some(with_state(Ec2State::Running)),
            Some(999.0),
            false,
            false,
        ),
        (
            "pending",
            Some(with_state(Ec2State::Pending)),
            Some(999.0),
            false,
            false,
        ),
        (
            "stopping",
            Some(with_state(Ec2State::Stopping)),
            Some(999.0),
            false,
            false,
        ),
        (
            "stopped",
            Some(with_state(Ec2State::Stopped)),
            Some(1.0),
            false,
            true,
        ),
        (
            "shutting down",
            Some(with_state(Ec2State::ShuttingDown)),
            Some(1.0),
            false,
            true,
        ),
        (
            "terminated",
            Some(with_state(Ec2State::Terminated)),
            Some(-5.0),
            false,
            true,
        ),
        (
            "unlisted, made long before the listing",
            None,
            Some(grace),
            false,
            true,
        ),
        (
            "unlisted, made just before the listing",
            None,
            Some(grace - 1.0),
            false,
            false,
        ),
        (
            "unlisted, made after the listing",
            None,
            Some(-3.0),
            false,
            false,
        ),
        ("unlisted, unknown when made", None, None, false, false),
        // Claims of instances gone are ended as claims, not here.
        (
            "claim, terminated",
            Some(with_state(Ec2State::Terminated)),
            Some(999.0),
            true,
            false,
        ),
        ("claim, unlisted", None, Some(999.0), true, false),
    ];
    for (what, instance, made, claim, want) in cases {
        for row in [idle_row(1, "i-x", 1.0), busy_row(1, "i-x")] {
            // An unlisted instance may still run: its busy row stays.
            let want = want && !(instance.is_none() && row.run.is_some());
            let row = PoolRow { claim, ..row };
            let mut sn = snap(instance.clone().into_iter().collect(), vec![row]);
            sn.made_before_listing.extend(made.map(|secs| (1, secs)));
            let p = run(&spec(0, 5, 10), &sn);
            assert_eq!(p.gone, if want { vec![1] } else { vec![] }, "{what}");
            if want {
                assert!(p.retirements.is_empty(), "{what}: {:?}", p.retirements);
            }
            let mut paused = spec(0, 5, 10);
            paused.paused = true;
            assert!(run(&paused, &sn).gone.is_empty(), "{what}: paused");
        }
    }
}

#[test]
fn what_this_loop_launched_and_the_listing_lacks_yet_is_booting_and_takes_room() {
    let mut s = spec(2, 2, 3);
    let mut sn = snap(vec![inst("i-1", 100)], vec![idle_row(1, "i-1", 5.0)]);
    sn.ours = HashSet::from(["i-2".to_string()]);
    let p = run(&s, &sn);
    assert_eq!((p.launch_count(), p.counts.launching), (0, 1));
    // Two of ours unlisted and one listed fill maxInstances.
    sn.ours.insert("i-3".into());
    s.idle.min = 4;
    s.idle.max = 4;
    let p = run(&s, &sn);
    assert_eq!((p.launch_count(), p.room, p.short), (0, 0, 1));
    // Once listed, an instance of ours is counted once.
    sn.instances.push(inst("i-2", 1));
    let p = run(&s, &sn);
    assert_eq!((p.counts.launching, p.room), (2, 0));
    // One the listing lacks that was handed a run is busy, not booting.
    sn.rows.push(busy_row(3, "i-3"));
    let p = run(&s, &sn);
    assert_eq!((p.counts.launching, p.counts.busy, p.room), (1, 1, 0));
    // Its run over, its row ended (the agent powered it off): neither
    // booting nor retired until a listing shows it.
    sn.rows.pop();
    sn.known.insert("i-3".into());
    let p = run(&s, &sn);
    assert_eq!((p.counts.launching, p.counts.busy, p.room), (1, 0, 1));
    assert!(p.retirements.is_empty(), "{p:?}");
}
