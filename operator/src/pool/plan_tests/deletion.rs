//! A deleted pool: everything retired, nothing launched, what is left counted.

use super::*;

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
            ..Counts::default()
        }
    );
    // Nothing left: an empty plan.
    let p = run(&s, &deleted(vec![], vec![], 10));
    assert_eq!(p, PoolPlan::default());
}
