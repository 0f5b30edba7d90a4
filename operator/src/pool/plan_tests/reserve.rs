//! The stopped reserve: refilled from spare idle instances or by launching,
//! started before anything is launched, trimmed to `stopped.max`, and never
//! counted idle.

use super::*;
use crate::crd::StoppedRange;

fn stopped(id: &str) -> Ec2Instance {
    Ec2Instance {
        state: Ec2State::Stopped,
        ..inst(id, 1000)
    }
}

fn reserved_row(id: i64, instance: &str) -> PoolRow {
    PoolRow {
        idle_secs: None,
        reserved: true,
        ..idle_row(id, instance, 0.0)
    }
}

fn woken_row(id: i64, instance: &str, secs: f64) -> PoolRow {
    PoolRow {
        idle_secs: None,
        woken_secs: Some(secs),
        ..idle_row(id, instance, 0.0)
    }
}

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

fn decide(p: Pool) -> (PoolPlan, Did) {
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
    let plan = run(&s, &snap);
    let beyond = plan
        .retirements
        .iter()
        .filter(|r| r.reason == Reason::ReserveBeyondMax)
        .count();
    let did = (
        plan.starts.len(),
        plan.stops.len(),
        plan.restops.len(),
        plan.launch_count(),
        beyond,
        plan.short,
        plan.counts.idle,
        plan.counts.stopped,
    );
    (plan, did)
}

#[test]
fn reserve_table() {
    let base = Pool {
        idle_max: 5,
        reserve: Some((2, None)),
        max_instances: 10,
        ..Pool::default()
    };
    let cases: &[(&str, Pool, Did)] = &[
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
    for (what, pool, want) in cases {
        let (_, did) = decide(*pool);
        assert_eq!(did, *want, "{what}");
    }
}

#[test]
fn a_paused_pool_neither_starts_nor_stops() {
    let snap = snap(
        vec![inst("i-1", 100), stopped("i-2"), inst("i-3", 100)],
        vec![
            idle_row(1, "i-1", 1.0),
            reserved_row(2, "i-2"),
            reserved_row(3, "i-3"),
        ],
    );
    let demand = Snapshot {
        demand: 4,
        ..snap.clone()
    };
    let mut s = WarmPoolSpec {
        stopped: Some(StoppedRange { min: 3, max: None }),
        ..spec(0, 5, 10)
    };
    // Unpaused, it would stop the spare idle one, start the stopped one for
    // the demand, and stop the running reserved one again.
    let (idle, busy) = (run(&s, &snap), run(&s, &demand));
    assert_eq!(
        (idle.stops.len(), busy.starts.len(), idle.restops.len()),
        (1, 1, 1)
    );
    s.paused = true;
    for p in [run(&s, &snap), run(&s, &demand)] {
        assert!(p.starts.is_empty() && p.stops.is_empty() && p.restops.is_empty());
        assert_eq!((p.counts.idle, p.counts.stopped), (1, 2));
    }
}

#[test]
fn a_started_instance_boots_like_a_launch_and_times_out_like_one() {
    let s = WarmPoolSpec {
        stopped: Some(StoppedRange { min: 0, max: None }),
        ..spec(1, 1, 10)
    };
    let p = run(
        &s,
        &snap(vec![inst("i-1", 1000)], vec![woken_row(1, "i-1", 20.0)]),
    );
    assert_eq!(p.counts.launching, 1);
    assert_eq!(p.launch_count(), 0, "it counts toward idle.min");
    assert!(p.retirements.is_empty());
    let p = run(
        &s,
        &snap(vec![inst("i-1", 1000)], vec![woken_row(1, "i-1", 300.0)]),
    );
    assert_eq!(
        p.retirements,
        [Retirement {
            instance: "i-1".into(),
            reason: Reason::BootTimeout,
            end: End::Reserved(1),
        }]
    );
    assert_eq!(p.launch_count(), 1);
}

#[test]
fn a_reserve_whose_offering_has_no_capacity_is_not_started_and_launches_instead() {
    let s = WarmPoolSpec {
        stopped: Some(StoppedRange { min: 1, max: None }),
        ..spec(1, 1, 10)
    };
    let snap = snap(vec![stopped("i-1")], vec![reserved_row(1, "i-1")]);
    let held = BTreeMap::from([(off("t3.small", "subnet-a"), now() + Duration::minutes(3))]);
    let p = plan(&s, &snap, &held, &Limits::default(), now());
    assert!(p.starts.is_empty());
    assert_eq!(p.launches[0].offering, off("t3.small", "subnet-b"));
    assert_eq!(p.launch_count(), 1, "for idle.min; the reserve is full");
    let p = plan(
        &s,
        &snap,
        &held,
        &Limits::default(),
        now() + Duration::minutes(4),
    );
    assert_eq!(p.starts.len(), 1, "the hold is over");
}

#[test]
fn a_stopped_instance_with_an_idle_row_is_never_counted_idle() {
    // Stopped by hand, or its stop raced a hand-out's row: no agent answers.
    let s = WarmPoolSpec {
        stopped: Some(StoppedRange { min: 2, max: None }),
        ..spec(1, 1, 10)
    };
    let p = run(
        &s,
        &snap(vec![stopped("i-1")], vec![idle_row(1, "i-1", 1.0)]),
    );
    assert_eq!(p.gone, [1]);
    assert_eq!((p.counts.idle, p.counts.stopped), (0, 0));
    assert!(p.starts.is_empty());
}

#[test]
fn a_deleted_pool_terminates_its_reserve_by_claiming_the_rows() {
    let s = WarmPoolSpec {
        stopped: Some(StoppedRange { min: 2, max: None }),
        ..spec(0, 0, 10)
    };
    let snap = Snapshot {
        deleting: Some(now()),
        ..snap(
            vec![stopped("i-1"), inst("i-2", 100)],
            vec![reserved_row(1, "i-1"), woken_row(2, "i-2", 3.0)],
        )
    };
    let p = run(&s, &snap);
    let ends: Vec<End> = p.retirements.iter().map(|r| r.end).collect();
    assert_eq!(ends, [End::Reserved(1), End::Reserved(2)]);
    assert!(p.starts.is_empty() && p.launches.is_empty());
}
