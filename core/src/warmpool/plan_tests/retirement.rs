//! Retirement: idle beyond idle.max, stale, used up, leaked, hung,
//! drained, and replaced; a paused pool retires nothing.

use super::*;

/// A pool of one instance `i-x`, `age` seconds old, with `row` or none; one
/// that had rows once (`known`), or one this loop launched (`ours`).
fn lone(age: i64, row: Option<PoolRow>, known: bool, ours: bool) -> Snapshot {
    Snapshot::default()
        .with_instances(vec![inst("i-x", age)])
        .with_rows(row.into_iter().collect())
        .with_known(known.then(|| "i-x".to_string()).into_iter().collect())
        .with_ours(ours.then(|| "i-x".to_string()).into_iter().collect())
        .with_demand(0)
        .with_deleting(None)
}

/// `spec(0, 5, 10)` with `maxUses`.
fn max_uses(n: i32) -> WarmPoolSpec {
    WarmPoolSpec {
        max_uses: n,
        ..spec(0, 5, 10)
    }
}

/// Two busy instances: `i-x` (row 1) seen hung for `secs` (or never), and
/// `i-y`.
fn hung(secs: Option<f64>) -> Snapshot {
    let mut sn = snap(
        vec![inst("i-x", 100), inst("i-y", 100)],
        vec![busy_row(1, "i-x"), busy_row(2, "i-y")],
    );
    sn.hung.extend(secs.map(|secs| (1, secs)));
    sn
}

/// Every retirement: (instance, reason, end), in order.
type Retired = Vec<(&'static str, Reason, End)>;

fn cases() -> Vec<Case<Retired>> {
    let stale = polled_ago(31.0, idle_row(1, "i-x", 40.0));
    let never_polled = idle_row(1, "i-x", 40.0).with_polled_secs(None);
    let used = idle_row(1, "i-x", 1.0).with_uses(3).with_run(Some(9));
    let busy_used = busy_row(1, "i-x").with_uses(3);
    let claim = claim_row(1, "i-x");
    let idle_4 = idle_pool(&[("i-a", 5.0), ("i-b", 50.0), ("i-c", 20.0), ("i-d", 1.0)]);
    let idle_3_demand_1 = idle_pool(&[("i-a", 5.0), ("i-b", 6.0), ("i-c", 7.0)]).with_demand(1);
    let stale_and_idle = snap(
        vec![inst("i-a", 100), inst("i-b", 100)],
        vec![
            polled_ago(99.0, idle_row(1, "i-a", 40.0)),
            idle_row(2, "i-b", 3.0),
        ],
    );
    let idle_seen_hung = idle_pool(&[("i-x", 1.0)]).with_hung([(1, 1e6)].into());
    // Stale, busy, and leaked: what a paused pool leaves be.
    let stale_busy_leaked = snap(
        vec![inst("i-a", 100), inst("i-b", 100), inst("i-c", 1000)],
        vec![
            polled_ago(99.0, idle_row(1, "i-a", 40.0)),
            busy_row(2, "i-b"),
        ],
    );
    let drained = |mut sn: Snapshot| {
        sn.drain.insert("i-x".to_string());
        sn
    };
    let two_idle_drain_x = drained(idle_pool(&[("i-x", 1.0), ("i-y", 1.0)]));
    let grace = Limits::default().hung_grace_secs;
    let hung_x = || vec![("i-x", Reason::Hung, End::Busy(1))];

    vec![
        case(
            "fresh idle",
            max_uses(0),
            lone(100, Some(idle_row(1, "i-x", 1.0)), false, false),
            vec![],
        ),
        case(
            "stale polled",
            max_uses(0),
            lone(100, Some(stale), false, false),
            vec![("i-x", Reason::Stale, End::Idle(1))],
        ),
        case(
            "never polled",
            max_uses(0),
            lone(100, Some(never_polled), false, false),
            vec![("i-x", Reason::Stale, End::Idle(1))],
        ),
        case(
            "max uses idle",
            max_uses(3),
            lone(100, Some(used.clone()), false, false),
            vec![("i-x", Reason::MaxUses, End::Idle(1))],
        ),
        case(
            "under max uses",
            max_uses(4),
            lone(100, Some(used), false, false),
            vec![],
        ),
        case(
            "max uses but busy",
            max_uses(3),
            lone(100, Some(busy_used), false, false),
            vec![],
        ),
        case(
            "busy",
            max_uses(0),
            lone(100, Some(busy_row(1, "i-x")), false, false),
            vec![],
        ),
        case(
            "row ended by scheduler",
            max_uses(0),
            lone(100, None, true, false),
            vec![("i-x", Reason::NoLiveRow, End::Claim)],
        ),
        case(
            "ours booting",
            max_uses(0),
            lone(299, None, false, true),
            vec![],
        ),
        case(
            "ours past boot timeout",
            max_uses(0),
            lone(300, None, false, true),
            vec![("i-x", Reason::BootTimeout, End::Claim)],
        ),
        case(
            "unknown younger than grace",
            max_uses(0),
            lone(299, None, false, false),
            vec![],
        ),
        case(
            "leaked",
            max_uses(0),
            lone(301, None, false, false),
            vec![("i-x", Reason::Leaked, End::Claim)],
        ),
        case(
            "claimed earlier",
            max_uses(0),
            lone(100, Some(claim), false, false),
            vec![("i-x", Reason::NoLiveRow, End::Claimed(1))],
        ),
        case(
            "idle beyond idle.max: the longest idle go first",
            spec(1, 2, 10),
            idle_4,
            vec![
                ("i-b", Reason::IdleBeyondMax, End::Idle(2)),
                ("i-c", Reason::IdleBeyondMax, End::Idle(3)),
            ],
        )
        .also([Idle(2), Launches(0)]),
        case(
            "unserved demand keeps idle instances beyond idle.max",
            spec(0, 1, 10),
            idle_3_demand_1,
            vec![("i-c", Reason::IdleBeyondMax, End::Idle(3))],
        )
        .also([Launches(0)]),
        case(
            "a retired instance is replaced up to idle.min",
            spec(2, 2, 2),
            stale_and_idle,
            vec![("i-a", Reason::Stale, End::Idle(1))],
        )
        .also([Room(1), Launches(1)]),
        case("busy, never seen hung", max_uses(0), hung(None), vec![]).also([Busy(2)]),
        case("busy, just seen hung", max_uses(0), hung(Some(0.0)), vec![]).also([Busy(2)]),
        case(
            "busy, hung just short of the grace",
            max_uses(0),
            hung(Some(grace - 0.5)),
            vec![],
        )
        .also([Busy(2)]),
        case(
            "busy, hung the grace: retired",
            max_uses(0),
            hung(Some(grace)),
            hung_x(),
        )
        .also([Busy(1)]),
        case(
            "busy, hung ten times the grace: retired",
            max_uses(0),
            hung(Some(grace * 10.0)),
            hung_x(),
        )
        .also([Busy(1)]),
        case(
            "an idle row is never hung, whatever the snapshot says of it",
            max_uses(0),
            idle_seen_hung,
            vec![],
        ),
        case(
            "unpaused: the stale and the leaked are retired, idle.min launched",
            spec(3, 3, 10),
            stale_busy_leaked.clone(),
            vec![
                ("i-a", Reason::Stale, End::Idle(1)),
                ("i-c", Reason::Leaked, End::Claim),
            ],
        )
        .also([Launches(3), Busy(1)]),
        case(
            "drained idle: retired, and replaced up to idle.min",
            spec(2, 2, 10),
            two_idle_drain_x,
            vec![("i-x", Reason::Drained, End::Idle(1))],
        )
        .also([Idle(1), Launches(1)]),
        case(
            "drained busy: it finishes its run first",
            max_uses(0),
            drained(lone(100, Some(busy_row(1, "i-x")), false, false)),
            vec![],
        )
        .also([Busy(1)]),
        case(
            "drained booting: it goes before it is handed a run",
            max_uses(0),
            drained(lone(10, None, false, true)),
            vec![("i-x", Reason::Drained, End::Claim)],
        ),
        case(
            "paused: nothing retired or launched, still counted",
            WarmPoolSpec {
                paused: true,
                ..spec(3, 3, 10)
            },
            stale_busy_leaked,
            vec![],
        )
        .also([Launches(0), Busy(1)]),
    ]
}

#[test]
fn retirement_table() {
    for c in cases() {
        assert_eq!(retirements(&c.plan()), c.want, "{}", c.name);
    }
}
