//! Drift: instances of an out-of-date launch spec are replaced, at most
//! `disruption.maxDrifted` at a time, never dropping the pool below
//! `idle.min` for it; as a table of (what, spec, snapshot) → (retired,
//! launched, counts).

use super::*;
use crate::crd::{Disruption, StoppedRange};

/// An instance `age` seconds old of another launch spec.
fn old(id: &str, age: i64) -> Ec2Instance {
    inst(id, age)
        .with_launch(Some("0ld0ld0ld0ld".into()))
        .with_image(Some("ami-0".into()))
}

/// An instance of the spec's launch spec.
fn new(id: &str, age: i64) -> Ec2Instance {
    inst(id, age)
        .with_launch(Some(crate::warmpool::drift::launch_hash(
            &spec(0, 0, 1).launch,
        )))
        .with_image(Some("ami-1".into()))
}

/// `s` with one maintenance window, 3 h from each start `cron` names (UTC).
fn windowed(mut s: WarmPoolSpec, cron: &str) -> WarmPoolSpec {
    s.maintenance_windows = vec![crate::crd::Period {
        cron: cron.into(),
        timezone: "UTC".into(),
        duration: "3h".into(),
    }];
    s
}

fn with_max(mut s: WarmPoolSpec, max_drifted: i32) -> WarmPoolSpec {
    s.disruption = Disruption { max_drifted };
    s
}

/// What drift did: (retired, launches, counts.drifted).
type Replaced = (Vec<(&'static str, Reason)>, u32, u32);

fn cases() -> Vec<Case<Replaced>> {
    let two = with_max(spec(2, 2, 6), 1);
    let mut reserve = with_max(spec(1, 1, 8), 1);
    reserve.stopped = Some(StoppedRange {
        min: 2,
        max: Some(2),
    });
    let stopped = |i: Ec2Instance| i.with_state(Ec2State::Stopped);
    let reserve_2_drifted = Snapshot::default()
        .with_instances(vec![
            stopped(old("i-a", 100)),
            stopped(old("i-b", 100)),
            stopped(new("i-c", 100)),
        ])
        .with_rows(vec![
            reserved_row(1, "i-a"),
            reserved_row(2, "i-b"),
            reserved_row(3, "i-c"),
        ])
        .with_demand(1);
    // Two idle of an old launch spec; and one old beside two new, all idle.
    let two_old_idle = snap(
        vec![old("i-a", 100), old("i-b", 100)],
        idle_rows(&[("i-a", 30.0), ("i-b", 10.0)]),
    );
    let spare_old = snap(
        vec![new("i-a", 100), new("i-b", 100), old("i-c", 100)],
        idle_rows(&[("i-a", 1.0), ("i-b", 1.0), ("i-c", 1.0)]),
    );
    vec![
        row(
            "both idle drifted: one replacement launched, nothing retired yet",
            two.clone(),
            two_old_idle.clone(),
            vec![],
            1,
            2,
        ),
        row(
            "its replacement boots: nothing more, nothing retired",
            two.clone(),
            snap(
                vec![old("i-a", 100), old("i-b", 100), new("i-c", 10)],
                idle_rows(&[("i-a", 30.0), ("i-b", 10.0)]),
            ),
            vec![],
            0,
            2,
        ),
        row(
            "the replacement is idle: the longest idle drifted one goes, the next replacement launches",
            two.clone(),
            snap(
                vec![old("i-a", 100), old("i-b", 100), new("i-c", 10)],
                idle_rows(&[("i-a", 30.0), ("i-b", 10.0), ("i-c", 1.0)]),
            ),
            vec![("i-a", Reason::Drifted)],
            1,
            2,
        ),
        row(
            "two at a time: both replacements launch at once",
            with_max(spec(2, 2, 6), 2),
            two_old_idle.clone(),
            vec![],
            2,
            2,
        ),
        row(
            "enough without it: a spare drifted one goes at once",
            two.clone(),
            spare_old.clone(),
            vec![("i-c", Reason::Drifted)],
            0,
            1,
        ),
        row(
            "busy drifted: left to its run, counted",
            two.clone(),
            snap(
                vec![new("i-a", 100), new("i-b", 100), old("i-c", 100)],
                vec![
                    idle_row(1, "i-a", 1.0),
                    idle_row(2, "i-b", 1.0),
                    busy_row(3, "i-c"),
                ],
            ),
            vec![],
            0,
            1,
        ),
        row(
            "maxDrifted 0: left to idleSeconds and maxUses, counted",
            with_max(spec(2, 2, 6), 0),
            two_old_idle.clone(),
            vec![],
            0,
            2,
        ),
        row(
            "an instance type no longer listed drifts too",
            two.clone(),
            snap(
                vec![
                    new("i-a", 100).with_offering(off("m5.large", "subnet-a")),
                    new("i-b", 100),
                    new("i-c", 100),
                ],
                idle_rows(&[("i-a", 1.0), ("i-b", 1.0), ("i-c", 1.0)]),
            ),
            vec![("i-a", Reason::Drifted)],
            0,
            1,
        ),
        row(
            "launched before instances carried the hash: not known to drift",
            two.clone(),
            idle_pool(&[("i-a", 1.0), ("i-b", 1.0)]),
            vec![],
            0,
            0,
        ),
        // The clock is 12:00 UTC: a window from 02:00 is over, one from
        // 11:00 is under way.
        row(
            "outside its maintenance windows drifted idle ones stay: nothing launched for them",
            windowed(two.clone(), "0 2 * * *"),
            two_old_idle.clone(),
            vec![],
            0,
            2,
        ),
        row(
            "inside a window they are replaced as without windows",
            windowed(two.clone(), "0 11 * * *"),
            two_old_idle.clone(),
            vec![],
            1,
            2,
        ),
        row(
            "outside its windows a spare drifted one is the one retired as idle beyond max",
            windowed(two.clone(), "0 2 * * *"),
            spare_old.clone(),
            vec![("i-c", Reason::IdleBeyondMax)],
            0,
            1,
        ),
        row(
            "outside its windows a dead instance is still replaced: its row is stale",
            windowed(two.clone(), "0 2 * * *"),
            snap(
                vec![old("i-a", 100), new("i-b", 100)],
                vec![
                    polled_ago(600.0, idle_row(1, "i-a", 30.0)),
                    idle_row(2, "i-b", 1.0),
                ],
            ),
            vec![("i-a", Reason::Stale)],
            1,
            1,
        ),
        row(
            "a window that cannot be read holds drift as outside one",
            {
                let mut s = windowed(two.clone(), "0 11 * * *");
                s.maintenance_windows[0].timezone = "Mars/Olympus".into();
                s
            },
            two_old_idle.clone(),
            vec![],
            0,
            2,
        ),
        row(
            "drifted stopped instances are never started, and go at the pace allowed",
            reserve,
            reserve_2_drifted,
            vec![("i-a", Reason::Drifted)],
            1,
            2,
        )
        .also([Starts(vec!["i-c"])]),
    ]
}

/// A row: (what, spec, snapshot) → (retired, launches, counts.drifted).
fn row(
    what: &str,
    s: WarmPoolSpec,
    sn: Snapshot,
    retired: Vec<(&'static str, Reason)>,
    launches: u32,
    drifted: u32,
) -> Case<Replaced> {
    case(what, s, sn, (retired, launches, drifted))
}

#[test]
fn drift_table() {
    for c in cases() {
        let (p, what) = (c.plan(), &c.name);
        let (want, launches, drifted) = &c.want;
        assert_eq!(&retired(&p), want, "{what}");
        assert_eq!(p.launch_count(), *launches, "{what}: launches");
        assert_eq!(p.counts.drifted, *drifted, "{what}: drifted");
    }
}

// Not a row: passes replayed in turn, each fed the last one's plan.
#[test]
fn the_pool_never_drops_below_idle_min_while_replacing() {
    // Replaying passes over a pool of five drifted idle instances, two at
    // a time: each pass's replacements boot and then report idle; the
    // idle count never falls below idle.min, and in the end every
    // instance is of the new spec.
    let s = with_max(spec(5, 5, 20), 2);
    let mut instances: Vec<Ec2Instance> = (0..5).map(|n| old(&format!("i-old-{n}"), 100)).collect();
    let mut rows: Vec<PoolRow> = (0..5)
        .map(|n| idle_row(n, &format!("i-old-{n}"), 10.0 + n as f64))
        .collect();
    let mut booting: Vec<String> = Vec::new();
    let mut next = 100;
    for pass in 0..20 {
        // What booted in the pass before reports idle now.
        for id in booting.drain(..) {
            rows.push(idle_row(next, &id, 0.0));
            next += 1;
        }
        let p = run(&s, &snap(instances.clone(), rows.clone()));
        let gone: Vec<String> = p.retirements.iter().map(|r| r.instance.clone()).collect();
        instances.retain(|i| !gone.iter().any(|g| g == i.id()));
        rows.retain(|r| !gone.iter().any(|g| g == r.instance()));
        let idle_now = rows.iter().filter(|r| r.idle_secs().is_some()).count();
        assert!(idle_now >= 5, "pass {pass}: {idle_now} idle of 5");
        for n in 0..p.launch_count() {
            let id = format!("i-new-{pass}-{n}");
            instances.push(new(&id, 0));
            booting.push(id);
        }
        if instances.iter().all(|i| i.image() == Some("ami-1")) && booting.is_empty() {
            assert_eq!(instances.len(), 5, "pass {pass}: {instances:?}");
            return;
        }
    }
    panic!("still drifted after 20 passes: {instances:?}");
}
