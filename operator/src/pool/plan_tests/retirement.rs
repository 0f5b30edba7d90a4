//! Retirement: idle beyond idle.max, stale, used up, leaked, hung, and replaced.

use super::*;

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
