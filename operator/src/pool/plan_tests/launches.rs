//! Launches: the offerings in order, how many for idle.min and demand, in batches.

use super::*;

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

#[test]
fn spot_then_on_demand_tries_every_spot_offering_before_any_on_demand_one() {
    let mut launch = spec(0, 0, 1).launch;
    launch.capacity_type = crate::crd::CapacityType::SpotThenOnDemand;
    let order: Vec<String> = offerings(&launch).iter().map(|o| o.to_string()).collect();
    assert_eq!(
        order,
        [
            "t3.small in subnet-a (spot)",
            "t3.small in subnet-b (spot)",
            "t3.medium in subnet-a (spot)",
            "t3.medium in subnet-b (spot)",
            "t3.small in subnet-a",
            "t3.small in subnet-b",
            "t3.medium in subnet-a",
            "t3.medium in subnet-b",
        ]
    );
    launch.capacity_type = crate::crd::CapacityType::Spot;
    assert!(offerings(&launch).iter().all(|o| o.spot));
}

#[test]
fn a_spot_notice_launches_the_replacement_at_once_and_a_leaving_instance_is_not_idle() {
    let s = spec(1, 1, 10);
    let interrupted = PoolRow {
        interrupted: true,
        noticed: true,
        ..busy_row(1, "i-busy")
    };
    let leaving = PoolRow {
        noticed: true,
        ..idle_row(2, "i-idle", 5.0)
    };
    let snap = snap(
        vec![inst("i-busy", 100), inst("i-idle", 100)],
        vec![interrupted.clone(), leaving.clone()],
    );
    let p = run(&s, &snap);
    assert_eq!((p.counts.busy, p.counts.idle), (1, 0));
    assert!(p.retirements.is_empty(), "the leaving one goes by itself");
    assert_eq!(
        p.launch_count(),
        2,
        "idle.min, and the interrupted one's replacement"
    );
    // A rebalance recommendation on a busy instance launches nothing.
    let recommended = PoolRow {
        interrupted: false,
        ..interrupted
    };
    let p = run(&s, &snap_with(&snap, vec![recommended, leaving]));
    assert_eq!(p.launch_count(), 1);
}

fn snap_with(s: &Snapshot, rows: Vec<PoolRow>) -> Snapshot {
    Snapshot { rows, ..s.clone() }
}
