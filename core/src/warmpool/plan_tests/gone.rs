//! Instances EC2 no longer runs: not counted, and their claims and rows ended.

use super::*;

/// What is ended: (rows ended as gone, claims ended).
type Ended = (Vec<i64>, Vec<i64>);

/// The rows of one instance `i-x` as EC2 shows it (`None`: not listed), its
/// row made `made` seconds before the listing (`None`: no entry), a claim
/// or not, ended as gone or not: one row with an idle row, one with a busy
/// one. An unlisted instance may still run: its busy row stays. A claim's
/// instance here is always gone: the claim is ended as a claim, not as gone.
fn rows_of(
    what: &str,
    instance: Option<Ec2Instance>,
    made: Option<f64>,
    claim: bool,
    gone: bool,
) -> [Case<Ended>; 2] {
    [
        ("idle row", idle_row(1, "i-x", 1.0)),
        ("busy row", busy_row(1, "i-x")),
    ]
    .map(|(kind, row)| {
        let gone = gone && !(instance.is_none() && row.run().is_some());
        let row = row.with_claim(claim);
        let mut sn = snap(instance.clone().into_iter().collect(), vec![row]);
        sn.made_before_listing.extend(made.map(|secs| (1, secs)));
        let want = (
            if gone { vec![1] } else { vec![] },
            if claim { vec![1] } else { vec![] },
        );
        case(format!("{what}, {kind}"), spec(0, 5, 10), sn, want)
    })
}

fn cases() -> Vec<Case<Ended>> {
    let grace = Limits::default().unlisted_grace_secs;
    let with_state = |state| in_state("i-x", state);
    let terminated = in_state("i-a", Ec2State::Terminated);
    let shutting_down = in_state("i-b", Ec2State::ShuttingDown);
    let claim = claim_row(8, "i-gone");
    let gone = in_state("i-gone", Ec2State::Terminated);

    let mut cases = vec![
        case(
            "terminated and shutting down instances are not counted",
            spec(2, 2, 2),
            snap(vec![terminated, shutting_down], vec![]),
            (vec![], vec![]),
        )
        .also([Launches(2), Terminating(1)]),
        case(
            "the claim row of a terminated instance is ended",
            spec(0, 0, 2),
            snap(vec![gone], vec![claim]),
            (vec![], vec![8]),
        ),
    ];
    let rows = [
        rows_of(
            "running",
            Some(with_state(Ec2State::Running)),
            Some(999.0),
            false,
            false,
        ),
        rows_of(
            "pending",
            Some(with_state(Ec2State::Pending)),
            Some(999.0),
            false,
            false,
        ),
        rows_of(
            "stopping",
            Some(with_state(Ec2State::Stopping)),
            Some(999.0),
            false,
            false,
        ),
        rows_of(
            "stopped",
            Some(with_state(Ec2State::Stopped)),
            Some(1.0),
            false,
            true,
        ),
        rows_of(
            "shutting down",
            Some(with_state(Ec2State::ShuttingDown)),
            Some(1.0),
            false,
            true,
        ),
        rows_of(
            "terminated",
            Some(with_state(Ec2State::Terminated)),
            Some(-5.0),
            false,
            true,
        ),
        rows_of(
            "unlisted, made long before the listing",
            None,
            Some(grace),
            false,
            true,
        ),
        rows_of(
            "unlisted, made just before the listing",
            None,
            Some(grace - 1.0),
            false,
            false,
        ),
        rows_of(
            "unlisted, made after the listing",
            None,
            Some(-3.0),
            false,
            false,
        ),
        rows_of("unlisted, unknown when made", None, None, false, false),
        rows_of(
            "claim, terminated",
            Some(with_state(Ec2State::Terminated)),
            Some(999.0),
            true,
            false,
        ),
        rows_of("claim, unlisted", None, Some(999.0), true, false),
    ];
    cases.extend(rows.into_iter().flatten());
    cases
}

#[test]
fn gone_table() {
    for c in cases() {
        let (p, what) = (c.plan(), &c.name);
        assert_eq!(
            (p.gone.clone(), p.ends.clone()),
            c.want,
            "{what}: (gone, ends)"
        );
        assert!(p.retirements.is_empty(), "{what}: {:?}", p.retirements);
        // A paused pool ends nothing.
        let paused = WarmPoolSpec {
            paused: true,
            ..c.spec.clone()
        };
        let p = plan(&paused, &c.snap, &c.held, &c.limits, c.at);
        assert!(
            p.gone.is_empty() && p.ends.is_empty() && p.retirements.is_empty(),
            "{what}: paused: {p:?}"
        );
    }
}
