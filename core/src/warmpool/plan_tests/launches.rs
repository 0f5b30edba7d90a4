//! Launches: the offerings in order, how many for idle.min and demand, in
//! batches, counting what boots and what the listing lacks yet.

use super::*;

// Not a row: the order of offerings, a pure helper, no plan.
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

// Not a row: the order of offerings, a pure helper, no plan.
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
    assert!(offerings(&launch).iter().all(|o| o.spot()));
}

/// A pool of `idle` idle and `busy` busy instances, `booting` more this loop
/// launched (listed, no row yet), and `demand` runs waiting.
fn pool(idle: usize, busy: usize, booting: usize, demand: i64) -> Snapshot {
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
    Snapshot::default()
        .with_instances(instances)
        .with_rows(rows)
        .with_ours(ours)
        .with_demand(demand)
}

/// What a row launches: (launches, short, counts.launching).
type Launched = (u32, u32, u32);

fn cases() -> Vec<Case<Launched>> {
    let none_available = offerings(&spec(2, 2, 10).launch).into_iter().fold(
        case(
            "no offering available: nothing launched, all short",
            spec(2, 2, 10),
            Snapshot::default(),
            (0, 2, 0),
        ),
        |c, o| c.held(o, 100),
    );

    // What this loop launched that the listing lacks yet: booting, taking
    // room, until a listing shows it or its row ends.
    let listed = idle_pool(&[("i-1", 5.0)]);
    let one_unlisted = listed.clone().with_ours(HashSet::from(["i-2".to_string()]));
    let two_unlisted = listed.with_ours(HashSet::from(["i-2".to_string(), "i-3".to_string()]));
    let one_listed_since = two_unlisted
        .clone()
        .with_instances(vec![inst("i-1", 100), inst("i-2", 1)]);
    let handed_a_run = one_listed_since
        .clone()
        .with_rows(vec![idle_row(1, "i-1", 5.0), busy_row(3, "i-3")]);
    let its_row_ended = one_listed_since
        .clone()
        .with_known(HashSet::from(["i-3".to_string()]));

    // A spot notice: the interrupted busy instance's replacement is
    // launched at once; an idle one whose agent is leaving goes by itself.
    let interrupted = busy_row(1, "i-busy")
        .with_interrupted(true)
        .with_noticed(true);
    let recommended = interrupted.clone().with_interrupted(false);
    let leaving = idle_row(2, "i-idle", 5.0).with_noticed(true);
    let noticed = |rows| snap(vec![inst("i-busy", 100), inst("i-idle", 100)], rows);

    // The same pass, listed or not: three of ours fill maxInstances 3.
    let fill_max = [
        (
            "two of ours unlisted and one listed fill maxInstances",
            two_unlisted,
        ),
        (
            "once listed, one of ours is counted once",
            one_listed_since.clone(),
        ),
    ]
    .map(|(what, sn)| case(what, spec(4, 4, 3), sn, (0, 1, 2)).also([Room(0)]));

    let rows = vec![
        case(
            "idle.min 0, nothing waits: nothing launched",
            spec(0, 0, 10),
            pool(0, 0, 0, 0),
            (0, 0, 0),
        ),
        case(
            "an empty pool launches idle.min",
            spec(2, 4, 10),
            pool(0, 0, 0, 0),
            (2, 0, 0),
        ),
        case(
            "one idle of idle.min 2: one launched",
            spec(2, 4, 10),
            pool(1, 0, 0, 0),
            (1, 0, 0),
        ),
        case(
            "idle.min idle: nothing launched",
            spec(2, 4, 10),
            pool(2, 0, 0, 0),
            (0, 0, 0),
        ),
        case(
            "booting counts toward idle.min",
            spec(2, 4, 10),
            pool(1, 0, 1, 0),
            (0, 0, 1),
        ),
        case(
            "idle.min booting: nothing launched",
            spec(2, 4, 10),
            pool(0, 0, 2, 0),
            (0, 0, 2),
        ),
        case(
            "demand beyond idle.min is launched for",
            spec(2, 4, 10),
            pool(2, 3, 0, 3),
            (3, 0, 0),
        ),
        case(
            "maxInstances reached: the demand is short",
            spec(2, 4, 5),
            pool(2, 3, 0, 3),
            (0, 3, 0),
        ),
        case(
            "capped by maxInstances: the rest is short",
            spec(2, 4, 6),
            pool(0, 3, 0, 5),
            (3, 4, 0),
        ),
        case(
            "demand alone: one launched per run waiting",
            spec(0, 0, 50),
            pool(0, 0, 0, 50),
            (50, 0, 0),
        ),
        case(
            "demand with some booting, capped by maxInstances",
            spec(0, 0, 20),
            pool(0, 0, 5, 50),
            (15, 30, 5),
        ),
        case(
            "a busy instance fills the pool",
            spec(1, 1, 1),
            pool(0, 1, 0, 0),
            (0, 1, 0),
        ),
        case(
            "idle beyond idle.max: nothing launched",
            spec(3, 3, 10),
            pool(4, 0, 0, 0),
            (0, 0, 0),
        ),
        none_available,
        case(
            "launches go to the first available offering, in batches",
            spec(250, 250, 1000),
            Snapshot::default(),
            (250, 0, 0),
        )
        .held(off("t3.small", "subnet-a"), 60)
        .held(off("t3.medium", "subnet-a"), -1)
        .limits(Limits::default().with_max_batch(100))
        .also([
            Batches(vec![
                (off("t3.small", "subnet-b"), 100),
                (off("t3.small", "subnet-b"), 100),
                (off("t3.small", "subnet-b"), 50),
            ]),
            Fallback(vec![
                off("t3.medium", "subnet-a"),
                off("t3.medium", "subnet-b"),
            ]),
        ]),
        case(
            "one of ours the listing lacks is booting and counts toward idle.min",
            spec(2, 2, 3),
            one_unlisted,
            (0, 0, 1),
        ),
        case(
            "one of ours unlisted that was handed a run is busy, not booting",
            spec(4, 4, 3),
            handed_a_run,
            (0, 2, 1),
        )
        .also([Busy(1), Room(0)]),
        case(
            "one of ours unlisted whose row ended: neither booting nor retired until listed",
            spec(4, 4, 3),
            its_row_ended,
            (1, 1, 1),
        )
        .also([Busy(0), Room(1), Retired(vec![])]),
        case(
            "a spot notice launches the replacement at once; a leaving instance is not idle",
            spec(1, 1, 10),
            noticed(vec![interrupted, leaving.clone()]),
            (2, 0, 0),
        )
        .also([Busy(1), Idle(0), Retired(vec![])]),
        case(
            "a rebalance recommendation on a busy instance launches nothing for it",
            spec(1, 1, 10),
            noticed(vec![recommended, leaving]),
            (1, 0, 0),
        ),
    ];
    rows.into_iter().chain(fill_max).collect()
}

#[test]
fn launches_table() {
    for c in cases() {
        let (p, what) = (c.plan(), &c.name);
        assert_eq!(
            (p.launch_count(), p.short, p.counts.launching),
            c.want,
            "{what}: (launches, short, launching)"
        );
        assert_eq!(p.launches.is_empty(), p.launch_count() == 0, "{what}");
        let (listed, cap) = (c.snap.instances.len() as u32, c.spec.max_instances);
        assert!(
            listed + p.launch_count() - p.retirements.len() as u32 <= cap.max(listed as i32) as u32,
            "{what}: never past maxInstances"
        );
    }
}
