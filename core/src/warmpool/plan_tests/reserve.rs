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

/// What the plan does; a row names only what is not 0.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Did {
    starts: usize,
    stops: usize,
    restops: usize,
    launches: u32,
    /// Retired beyond stopped.max.
    beyond: usize,
    short: u32,
    /// counts.idle
    idle: u32,
    /// counts.stopped
    stopped: u32,
}

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
    let snap = snap(instances, rows).with_ours(ours).with_demand(p.demand);
    (s, snap)
}

/// A plan that does nothing and counts nothing idle or stopped.
const NOTHING: Did = Did {
    starts: 0,
    stops: 0,
    restops: 0,
    launches: 0,
    beyond: 0,
    short: 0,
    idle: 0,
    stopped: 0,
};

/// What a plan did.
fn did(plan: &PoolPlan) -> Did {
    let beyond = plan
        .retirements
        .iter()
        .filter(|r| r.reason == Reason::ReserveBeyondMax)
        .count();
    Did {
        starts: plan.starts.len(),
        stops: plan.stops.len(),
        restops: plan.restops.len(),
        launches: plan.launch_count(),
        beyond,
        short: plan.short,
        idle: plan.counts.idle,
        stopped: plan.counts.stopped,
    }
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
            Did {
                launches: 2,
                ..NOTHING
            },
        ),
        (
            "booting beyond what runs need will go to the reserve",
            Pool { booting: 2, ..base },
            NOTHING,
        ),
        (
            "spare idle instances are stopped into it, not counted idle",
            Pool { idle: 2, ..base },
            Did {
                stops: 2,
                stopped: 2,
                ..NOTHING
            },
        ),
        (
            "a full reserve: nothing to do",
            Pool { stopped: 2, ..base },
            Did {
                stopped: 2,
                ..NOTHING
            },
        ),
        (
            "demand starts the reserve first, then launches",
            Pool {
                stopped: 2,
                demand: 3,
                ..base
            },
            Did {
                starts: 2,
                launches: 1,
                ..NOTHING
            },
        ),
        (
            "while runs wait, launches are for them, not the reserve",
            Pool { demand: 2, ..base },
            Did {
                launches: 2,
                ..NOTHING
            },
        ),
        (
            "once none waits, the reserve is refilled",
            Pool { idle: 1, ..base },
            Did {
                stops: 1,
                launches: 1,
                stopped: 1,
                ..NOTHING
            },
        ),
        (
            "below idle.min starts the reserve before launching",
            Pool {
                idle_min: 1,
                stopped: 2,
                ..base
            },
            Did {
                starts: 1,
                launches: 1,
                stopped: 1,
                ..NOTHING
            },
        ),
        (
            "idle up to idle.min stays running; only the spare goes",
            Pool {
                idle_min: 2,
                idle: 3,
                ..base
            },
            Did {
                stops: 1,
                launches: 1,
                idle: 2,
                stopped: 1,
                ..NOTHING
            },
        ),
        (
            "beyond stopped.max the stopped ones go",
            Pool {
                reserve: Some((1, Some(1))),
                stopped: 3,
                ..base
            },
            Did {
                beyond: 2,
                stopped: 1,
                ..NOTHING
            },
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
            Did {
                stops: 2,
                stopped: 3,
                ..NOTHING
            },
        ),
        (
            "stopped.max above min keeps what is there",
            Pool {
                reserve: Some((1, Some(3))),
                stopped: 3,
                ..base
            },
            Did {
                stopped: 3,
                ..NOTHING
            },
        ),
        (
            "reserved but still running: stopped again, counted in the reserve",
            Pool {
                stopping: 2,
                ..base
            },
            Did {
                restops: 2,
                stopped: 2,
                ..NOTHING
            },
        ),
        (
            "no reserve in the spec: spare idle is left to idle.max",
            Pool {
                reserve: None,
                idle: 3,
                ..base
            },
            Did { idle: 3, ..NOTHING },
        ),
        (
            "no reserve in the spec: one left from before goes",
            Pool {
                reserve: None,
                stopped: 1,
                ..base
            },
            Did {
                beyond: 1,
                ..NOTHING
            },
        ),
        (
            "the reserve counts against maxInstances",
            Pool {
                max_instances: 2,
                stopped: 2,
                demand: 3,
                ..base
            },
            Did {
                starts: 2,
                short: 1,
                ..NOTHING
            },
        ),
        (
            "spare idle beyond what the reserve takes is trimmed to idle.max",
            Pool {
                idle_max: 1,
                idle: 5,
                ..base
            },
            Did {
                stops: 2,
                idle: 1,
                stopped: 2,
                ..NOTHING
            },
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
    let three_demand = three.clone().with_demand(4);
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
            Did {
                stops: 1,
                restops: 1,
                stopped: 3,
                ..NOTHING
            },
        ),
        case(
            "unpaused, runs waiting: the stopped one is started",
            reserve_3,
            three_demand.clone(),
            Did {
                starts: 1,
                restops: 1,
                launches: 2,
                idle: 1,
                stopped: 1,
                ..NOTHING
            },
        ),
        case(
            "paused: nothing started or stopped, still counted",
            paused.clone(),
            three,
            Did {
                idle: 1,
                stopped: 2,
                ..NOTHING
            },
        ),
        case(
            "paused, runs waiting: nothing started or stopped, still counted",
            paused,
            three_demand,
            Did {
                idle: 1,
                stopped: 2,
                ..NOTHING
            },
        ),
        case(
            "a started instance boots like a launch: it counts toward idle.min",
            reserve_0.clone(),
            woken(20.0),
            NOTHING,
        )
        .also([Launching(1), Retired(vec![])]),
        case(
            "a started instance times out like a launch, and is replaced",
            reserve_0,
            woken(300.0),
            Did {
                launches: 1,
                ..NOTHING
            },
        )
        .also([Retired(vec![(
            "i-1",
            Reason::BootTimeout,
            End::Reserved(1),
        )])]),
        case(
            "a reserve whose offering has no capacity is not started; idle.min launches elsewhere",
            reserve_1.clone(),
            one_stopped.clone(),
            Did {
                launches: 1,
                stopped: 1,
                ..NOTHING
            },
        )
        .held(held.clone(), 180)
        .also([Batches(vec![(off("t3.small", "subnet-b"), 1)])]),
        case(
            "the hold over, the reserve is started",
            reserve_1,
            one_stopped,
            Did {
                starts: 1,
                launches: 1,
                ..NOTHING
            },
        )
        .held(held, 180)
        .at(240),
        // Stopped by hand, or its stop raced a hand-out's row: no agent answers.
        case(
            "a stopped instance with an idle row is never counted idle",
            reserve_2,
            snap(vec![stopped("i-1")], vec![idle_row(1, "i-1", 1.0)]),
            Did {
                launches: 3,
                ..NOTHING
            },
        )
        .also([Gone(vec![1])]),
    ]
}

#[test]
fn reserve_table() {
    for c in cases() {
        let p = c.plan();
        assert_eq!(did(&p), c.want, "{}", c.name);
    }
}
