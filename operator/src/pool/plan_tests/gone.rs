//! Instances EC2 no longer runs: not counted, and their claims and rows ended.

use super::*;

#[test]
fn terminated_and_shutting_down_instances_are_not_counted() {
    let s = spec(2, 2, 2);
    let mut gone = inst("i-a", 100);
    gone.state = Ec2State::Terminated;
    let mut going = inst("i-b", 100);
    going.state = Ec2State::ShuttingDown;
    let p = run(&s, &snap(vec![gone, going], vec![]));
    assert_eq!(p.launch_count(), 2);
    assert_eq!(p.counts.terminating, 1);
    assert!(p.retirements.is_empty());
}

#[test]
fn claim_rows_of_gone_instances_are_ended() {
    let s = spec(0, 0, 2);
    let claim = PoolRow {
        claim: true,
        idle_secs: None,
        ..idle_row(8, "i-gone", 0.0)
    };
    let mut gone = inst("i-gone", 100);
    gone.state = Ec2State::Terminated;
    let p = run(&s, &snap(vec![gone], vec![claim]));
    assert_eq!(p.ends, [8]);
    assert!(p.retirements.is_empty());
}

#[test]
fn rows_of_instances_ec2_no_longer_runs_are_ended() {
    let grace = Limits::default().unlisted_grace_secs;
    let with_state = |state| Ec2Instance {
        state,
        ..inst("i-x", 100)
    };
    // (EC2's view of the row's instance, the row made how long before the
    // listing (None: no entry), claim) → ended as gone
    type Case = (&'static str, Option<Ec2Instance>, Option<f64>, bool, bool);
    let cases: Vec<Case> = vec![
        (
            "running",
            Some(with_state(Ec2State::Running)),
            Some(999.0),
            false,
            false,
        ),
        (
            "pending",
            Some(with_state(Ec2State::Pending)),
            Some(999.0),
            false,
            false,
        ),
        (
            "stopping",
            Some(with_state(Ec2State::Stopping)),
            Some(999.0),
            false,
            false,
        ),
        (
            "stopped",
            Some(with_state(Ec2State::Stopped)),
            Some(1.0),
            false,
            true,
        ),
        (
            "shutting down",
            Some(with_state(Ec2State::ShuttingDown)),
            Some(1.0),
            false,
            true,
        ),
        (
            "terminated",
            Some(with_state(Ec2State::Terminated)),
            Some(-5.0),
            false,
            true,
        ),
        (
            "unlisted, made long before the listing",
            None,
            Some(grace),
            false,
            true,
        ),
        (
            "unlisted, made just before the listing",
            None,
            Some(grace - 1.0),
            false,
            false,
        ),
        (
            "unlisted, made after the listing",
            None,
            Some(-3.0),
            false,
            false,
        ),
        ("unlisted, unknown when made", None, None, false, false),
        // Claims of instances gone are ended as claims, not here.
        (
            "claim, terminated",
            Some(with_state(Ec2State::Terminated)),
            Some(999.0),
            true,
            false,
        ),
        ("claim, unlisted", None, Some(999.0), true, false),
    ];
    for (what, instance, made, claim, want) in cases {
        for row in [idle_row(1, "i-x", 1.0), busy_row(1, "i-x")] {
            // An unlisted instance may still run: its busy row stays.
            let want = want && !(instance.is_none() && row.run.is_some());
            let row = PoolRow { claim, ..row };
            let mut sn = snap(instance.clone().into_iter().collect(), vec![row]);
            sn.made_before_listing.extend(made.map(|secs| (1, secs)));
            let p = run(&spec(0, 5, 10), &sn);
            assert_eq!(p.gone, if want { vec![1] } else { vec![] }, "{what}");
            if want {
                assert!(p.retirements.is_empty(), "{what}: {:?}", p.retirements);
            }
            let mut paused = spec(0, 5, 10);
            paused.paused = true;
            assert!(run(&paused, &sn).gone.is_empty(), "{what}: paused");
        }
    }
}
