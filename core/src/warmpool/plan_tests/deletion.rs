//! A deleted pool: everything retired, nothing launched, what is left counted.

use super::*;

/// A pool deleted `ago` seconds before `now()` (onDelete Terminate).
fn deleted(instances: Vec<Ec2Instance>, rows: Vec<PoolRow>, ago: i64) -> Snapshot {
    snap(instances, rows).with_deleting(Some(now() - Duration::seconds(ago)))
}

/// The one instance of a row: with a live row, or without one.
enum I {
    Row(PoolRow),
    /// Launched by this loop 5 s ago, its agent not reported yet.
    Ours,
    /// Not launched by this loop, 5 s old: younger than the leak grace.
    Unknown,
    /// No live row, but rows once.
    Known,
}

/// What a deletion does: every retirement (instance, end; the reason
/// always PoolDeleted), and how many are left busy.
type Deleted = (Vec<(&'static str, End)>, u32);

/// A row of a pool of one instance `i-x`, `paused` or not, deleted `ago`
/// seconds before, with runs waiting: retired with `end`, or (None) left
/// busy to its run.
fn lone(what: &str, instance: I, paused: bool, ago: i64, end: Option<End>) -> Case<Deleted> {
    let s = WarmPoolSpec {
        paused,
        ..spec(3, 5, 10)
    };
    let (age, rows, ours, known) = match instance {
        I::Row(row) => (100, vec![row], false, false),
        I::Ours => (5, vec![], true, false),
        I::Unknown => (5, vec![], false, false),
        I::Known => (100, vec![], false, true),
    };
    let sn = deleted(vec![inst("i-x", age)], rows, ago)
        .with_ours(ours.then(|| "i-x".to_string()).into_iter().collect())
        .with_known(known.then(|| "i-x".to_string()).into_iter().collect())
        .with_demand(2);
    let want = match end {
        Some(end) => (vec![("i-x", end)], 0),
        None => (vec![], 1),
    };
    case(what, s, sn, want)
}

fn cases() -> Vec<Case<Deleted>> {
    let idle = idle_row(1, "i-x", 1.0);
    let stale = polled_ago(99.0, idle_row(1, "i-x", 40.0));
    let busy = busy_row(1, "i-x");
    let claim = claim_row(1, "i-x");

    // Idle, busy, booting, shutting down, terminated with its claim left.
    let mixed = deleted(
        vec![
            inst("i-a", 100),
            inst("i-b", 100),
            inst("i-busy", 100),
            inst("i-boot", 5),
            in_state("i-going", Ec2State::ShuttingDown),
            in_state("i-gone", Ec2State::Terminated),
        ],
        vec![
            idle_row(1, "i-a", 1.0),
            idle_row(2, "i-b", 2.0),
            busy_row(3, "i-busy"),
            claim_row(9, "i-gone"),
        ],
        10,
    )
    .with_ours(["i-boot".to_string()].into())
    .with_demand(4);

    let reserve = WarmPoolSpec {
        stopped: Some(crate::crd::StoppedRange { min: 2, max: None }),
        ..spec(0, 0, 10)
    };
    let stopped_and_woken = deleted(
        vec![stopped("i-1"), inst("i-2", 100)],
        vec![reserved_row(1, "i-1"), woken_row(2, "i-2", 3.0)],
        0,
    );

    vec![
        lone("idle", I::Row(idle.clone()), false, 0, Some(End::Idle(1))),
        lone("stale idle", I::Row(stale), false, 0, Some(End::Idle(1))),
        lone("ours booting", I::Ours, false, 0, Some(End::Claim)),
        lone(
            "younger than the leak grace",
            I::Unknown,
            false,
            0,
            Some(End::Claim),
        ),
        lone(
            "row ended by the scheduler",
            I::Known,
            false,
            0,
            Some(End::Claim),
        ),
        lone(
            "claimed earlier",
            I::Row(claim),
            false,
            0,
            Some(End::Claimed(1)),
        ),
        lone(
            "busy, drain time left",
            I::Row(busy.clone()),
            false,
            3599,
            None,
        ),
        lone(
            "busy past the drain time-out",
            I::Row(busy),
            false,
            3600,
            Some(End::Busy(1)),
        ),
        lone("idle, paused", I::Row(idle), true, 0, Some(End::Idle(1))),
        lone("booting, paused", I::Ours, true, 0, Some(End::Claim)),
        case(
            "idle and booting retired, busy left to its run, the claim of one gone ended",
            spec(3, 5, 10),
            mixed,
            (
                vec![
                    ("i-a", End::Idle(1)),
                    ("i-b", End::Idle(2)),
                    ("i-boot", End::Claim),
                ],
                1,
            ),
        )
        .also([
            Ends(vec![9]),
            Check::Counts(Counts {
                launching: 0,
                idle: 0,
                busy: 1,
                terminating: 4,
                ..Counts::default()
            }),
        ]),
        case(
            "nothing left: an empty plan",
            spec(3, 5, 10),
            deleted(vec![], vec![], 10),
            (vec![], 0),
        )
        .also([Check::Plan(Box::default())]),
        case(
            "its reserve, stopped or started, is terminated by claiming the rows",
            reserve,
            stopped_and_woken,
            (
                vec![("i-1", End::Reserved(1)), ("i-2", End::Reserved(2))],
                0,
            ),
        ),
    ]
}

#[test]
fn deletion_table() {
    for c in cases() {
        let (p, what) = (c.plan(), &c.name);
        let got: Vec<(&str, End)> = p
            .retirements
            .iter()
            .map(|r| (r.instance.as_str(), r.end))
            .collect();
        assert_eq!((got, p.counts.busy), c.want, "{what}");
        assert!(
            p.retirements
                .iter()
                .all(|r| r.reason == Reason::PoolDeleted),
            "{what}: {p:?}"
        );
        // Nothing launched, started, or stopped; no row ended as gone.
        assert!(
            p.launches.is_empty() && p.fallback.is_empty() && p.room == 0 && p.short == 0,
            "{what}: {p:?}"
        );
        assert!(
            p.starts.is_empty() && p.stops.is_empty() && p.restops.is_empty() && p.gone.is_empty(),
            "{what}: {p:?}"
        );
    }
}
