//! The stopped reserve: refilled from spare idle instances or by launching,
//! started before anything is launched, trimmed to `stopped.max`, and never
//! counted idle.

use super::*;
use crate::crd::StoppedRange;

/// What a case starts from.
#[derive(Clone, Copy, Default)]
struct Pool {
    idle_min: i32,
    idle_max: i32,
    reserve: Option<(i32, Option<i32>)>,
    max_instances: i32,
    idle: usize,
    booting: usize,
    /// Stopped, with a reserved row.
    stopped: usize,
    /// Still running, with a reserved row (an earlier stop did not take).
    stopping: usize,
    demand: i64,
}

/// What the plan does: (starts, stops, restops, launches, retired beyond
/// stopped.max, short, counts.idle, counts.stopped).
type Did = (usize, usize, usize, u32, usize, u32, u32, u32);

/// The spec and snapshot a [`Pool`] describes.
fn given(p: Pool) -> (WarmPoolSpec, Snapshot) {
    let s = WarmPoolSpec {
        stopped: p.reserve.map(|(min, max)| StoppedRange { min, max }),
        ..spec(p.idle_min, p.idle_max, p.max_instances)
    };
    let mut instances = Vec::new();
    let mut rows = Vec::new();
    let mut ours = HashSet::new();
    for k in 0..p.idle {
        let id = format!("i-idle{k}");
        instances.push(inst(&id, 100));
        rows.push(idle_row(k as i64, &id, 10.0 + k as f64));
    }
    for k in 0..p.booting {
        let id = format!("i-boot{k}");
        instances.push(inst(&id, 5));
        ours.insert(id);
    }
    for k in 0..p.stopped {
        let id = format!("i-stop{k}");
        instances.push(stopped(&id));
        rows.push(reserved_row(100 + k as i64, &id));
    }
    for k in 0..p.stopping {
        let id = format!("i-going{k}");
        instances.push(inst(&id, 100));
        rows.push(reserved_row(200 + k as i64, &id));
    }
    let snap = Snapshot {
        ours,
        demand: p.demand,
        ..snap(instances, rows)
    };
    (s, snap)
}

/// What a plan did, as [`Did`] says.
fn did(plan: &PoolPlan) -> Did {
    let beyond = plan
        .retirements
        .iter()
        .filter(|r| r.reason == Reason::ReserveBeyondMax)
        .count();
    (
        plan.starts.len(),
        plan.stops.len(),
        plan.restops.len(),
        plan.launch_count(),
        beyond,
        plan.short,
        plan.counts.idle,
        plan.counts.stopped,
    )
}

/// The rows a [`Pool`] describes, then those of snapshots made by hand.
fn cases() -> Vec<Case<Did>> {
    let base = Pool {
        idle_max: 5,
        reserve: Some((2, None)),
        max_instances: 10,
        ..Pool::default()
    };
    let pools: &[(&str, Pool, Did)] = &[
        (
            "an empty pool launches for the reserve",
            base,
            (0, 0, 0, 2, 0, 0, 0, 0),
        ),
        (
            "booting beyond what runs need will go to the reserve",
            Pool { booting: 2, ..base },
            (0, 0, 0, 0, 0, 0, 0, 0),
        ),
        (
            "spare idle instances are stopped into it, not counted idle",
            Pool { idle: 2, ..base },
            (0, 2, 0, 0, 0, 0, 0, 2),
        ),
        (
            "a full reserve: nothing to do",
            Pool { stopped: 2, ..base },
            (0, 0, 0, 0, 0, 0, 0, 2),
        ),
        (
            "demand starts the reserve first, then launches",
            Pool {
                stopped: 2,
                demand: 3,
                ..base
            },
            (2, 0, 0, 1, 0, 0, 0, 0),
        ),
        (
            "while runs wait, launches are for them, not the reserve",
            Pool { demand: 2, ..base },
            (0, 0, 0, 2, 0, 0, 0, 0),
        ),
        (
            "once none waits, the reserve is refilled",
            Pool { idle: 1, ..base },
            (0, 1, 0, 1, 0, 0, 0, 1),
        ),
        (
            "below idle.min starts the reserve before launching",
            Pool {
                idle_min: 1,
                stopped: 2,
                ..base
            },
            (1, 0, 0, 1, 0, 0, 0, 1),
        ),
        (
            "idle up to idle.min stays running; only the spare goes",
            Pool {
                idle_min: 2,
                idle: 3,
                ..base
            },
            (0, 1, 0, 1, 0, 0, 2, 1),
        ),
        (
            "beyond stopped.max the stopped ones go",
            Pool {
                reserve: Some((1, Some(1))),
                stopped: 3,
                ..base
            },
            (0, 0, 0, 0, 2, 0, 0, 1),
        ),
        (
            "spare idle is stopped up to stopped.max rather than retired",
            Pool {
                idle_max: 0,
                reserve: Some((1, Some(3))),
                stopped: 1,
                idle: 2,
                ..base
            },
            (0, 2, 0, 0, 0, 0, 0, 3),
        ),
        (
            "stopped.max above min keeps what is there",
            Pool {
                reserve: Some((1, Some(3))),
                stopped: 3,
                ..base
            },
            (0, 0, 0, 0, 0, 0, 0, 3),
        ),
        (
            "reserved but still running: stopped again, counted in the reserve",
            Pool {
                stopping: 2,
                ..base
            },
            (0, 0, 2, 0, 0, 0, 0, 2),
        ),
        (
            "no reserve in the spec: spare idle is left to idle.max",
            Pool {
                reserve: None,
                idle: 3,
                ..base
            },
            (0, 0, 0, 0, 0, 0, 3, 0),
        ),
        (
            "no reserve in the spec: one left from before goes",
            Pool {
                reserve: None,
                stopped: 1,
                ..base
            },
            (0, 0, 0, 0, 1, 0, 0, 0),
        ),
        (
            "the reserve counts against maxInstances",
            Pool {
                max_instances: 2,
                stopped: 2,
                demand: 3,
                ..base
            },
            (2, 0, 0, 0, 0, 1, 0, 0),
        ),
        (
            "spare idle beyond what the reserve takes is trimmed to idle.max",
            Pool {
                idle_max: 1,
                idle: 5,
                ..base
            },
            (0, 2, 0, 0, 0, 0, 1, 2),
        ),
    ];
    let pooled = pools.iter().map(|&(what, pool, want)| {
        let (s, snap) = given(pool);
        case(what, s, snap, want)
    });
    pooled.chain(by_hand()).collect()
}

/// Rows of snapshots made by hand: paused, started, held, stopped by hand.
fn by_hand() -> Vec<Case<Did>> {
    // A spare idle one, a stopped one, and one reserved still running.
    let three = snap(
        vec![inst("i-1", 100), stopped("i-2"), inst("i-3", 100)],
        vec![
            idle_row(1, "i-1", 1.0),
            reserved_row(2, "i-2"),
            reserved_row(3, "i-3"),
        ],
    );
    let three_demand = Snapshot {
        demand: 4,
        ..three.clone()
    };
    let reserve_3 = WarmPoolSpec {
        stopped: Some(StoppedRange { min: 3, max: None }),
        ..spec(0, 5, 10)
    };
    let paused = WarmPoolSpec {
        paused: true,
        ..reserve_3.clone()
    };

    let reserve_0 = WarmPoolSpec {
        stopped: Some(StoppedRange { min: 0, max: None }),
        ..spec(1, 1, 10)
    };
    let woken = |secs| snap(vec![inst("i-1", 1000)], vec![woken_row(1, "i-1", secs)]);

    let reserve_1 = WarmPoolSpec {
        stopped: Some(StoppedRange { min: 1, max: None }),
        ..spec(1, 1, 10)
    };
    let one_stopped = snap(vec![stopped("i-1")], vec![reserved_row(1, "i-1")]);
    let held = off("t3.small", "subnet-a");

    let reserve_2 = WarmPoolSpec {
        stopped: Some(StoppedRange { min: 2, max: None }),
        ..spec(1, 1, 10)
    };

    vec![
        case(
            "unpaused: the spare idle one is stopped, the running reserved one stopped again",
            reserve_3.clone(),
            three.clone(),
            (0, 1, 1, 0, 0, 0, 0, 3),
        ),
        case(
            "unpaused, runs waiting: the stopped one is started",
            reserve_3,
            three_demand.clone(),
            (1, 0, 1, 2, 0, 0, 1, 1),
        ),
        case(
            "paused: nothing started or stopped, still counted",
            paused.clone(),
            three,
            (0, 0, 0, 0, 0, 0, 1, 2),
        ),
        case(
            "paused, runs waiting: nothing started or stopped, still counted",
            paused,
            three_demand,
            (0, 0, 0, 0, 0, 0, 1, 2),
        ),
        case(
            "a started instance boots like a launch: it counts toward idle.min",
            reserve_0.clone(),
            woken(20.0),
            (0, 0, 0, 0, 0, 0, 0, 0),
        )
        .also(Also {
            launching: Some(1),
            retired: Some(vec![]),
            ..Also::default()
        }),
        case(
            "a started instance times out like a launch, and is replaced",
            reserve_0,
            woken(300.0),
            (0, 0, 0, 1, 0, 0, 0, 0),
        )
        .also(Also {
            retired: Some(vec![("i-1", Reason::BootTimeout, End::Reserved(1))]),
            ..Also::default()
        }),
        case(
            "a reserve whose offering has no capacity is not started; idle.min launches elsewhere",
            reserve_1.clone(),
            one_stopped.clone(),
            (0, 0, 0, 1, 0, 0, 0, 1),
        )
        .held(held.clone(), 180)
        .also(Also {
            batches: Some(vec![(off("t3.small", "subnet-b"), 1)]),
            ..Also::default()
        }),
        case(
            "the hold over, the reserve is started",
            reserve_1,
            one_stopped,
            (1, 0, 0, 1, 0, 0, 0, 0),
        )
        .held(held, 180)
        .at(240),
        // Stopped by hand, or its stop raced a hand-out's row: no agent answers.
        case(
            "a stopped instance with an idle row is never counted idle",
            reserve_2,
            snap(vec![stopped("i-1")], vec![idle_row(1, "i-1", 1.0)]),
            (0, 0, 0, 3, 0, 0, 0, 0),
        )
        .also(Also {
            gone: Some(vec![1]),
            ..Also::default()
        }),
    ]
}

#[test]
fn reserve_table() {
    for c in cases() {
        let p = c.plan();
        assert_eq!(did(&p), c.want, "{}", c.name);
    }
}
