//! The status's list of instances (`status.instances`): each one EC2
//! listed, with what its row says it does, its age, uses and whether its
//! launch spec is out of date. Pure: from the snapshot and the plan of one
//! pass.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};

use super::{
    drift,
    plan::{Ec2State, Offering, PoolPlan, Snapshot},
};
use crate::crd::{PoolInstance, WarmPoolSpec};

/// At most this many instances are listed (the counts beside them count
/// all): a status stays a small object whatever the pool's size.
pub const LISTED: usize = 100;

/// The instances of `snap` as `plan` leaves them, and those this loop
/// launched that EC2 does not list yet (booting, as the plan counts them):
/// those in a run first, then idle, booting, stopped and retiring, the
/// oldest first in each. An instance in `launch_times` (launched by this
/// loop) is listed with that time and offering, known before EC2 lists it,
/// so that its first listing changes nothing.
pub fn roster(
    spec: &WarmPoolSpec,
    snap: &Snapshot,
    plan: &PoolPlan,
    launch_times: &HashMap<String, (DateTime<Utc>, Offering)>,
) -> Vec<PoolInstance> {
    let hash = drift::launch_hash(&spec.launch);
    let rows: HashMap<&str, _> = snap.rows().iter().map(|r| (r.instance(), r)).collect();
    let retiring: HashSet<&str> = plan.retirements().iter().map(|r| r.instance()).collect();
    let mut listed: Vec<(u8, PoolInstance)> = snap
        .instances()
        .iter()
        .filter(|i| i.state().is_present() || i.state() == Ec2State::ShuttingDown)
        .map(|i| {
            let row = rows.get(i.id()).filter(|r| !r.claim());
            let (rank, state) = match (i.state(), row) {
                _ if retiring.contains(i.id()) => (4, "retiring"),
                (Ec2State::ShuttingDown, _) => (4, "retiring"),
                (Ec2State::Stopped | Ec2State::Stopping, _) => (3, "stopped"),
                (_, Some(r)) if r.reserved() => (3, "stopped"),
                (_, Some(r)) if r.run().is_some() && r.idle_secs().is_none() => {
                    if snap.drain().contains(i.id()) {
                        (0, "draining")
                    } else {
                        (0, "busy")
                    }
                }
                (_, Some(r)) if r.idle_secs().is_some() => (1, "idle"),
                _ => (2, "booting"),
            };
            (
                rank,
                PoolInstance {
                    id: i.id().to_string(),
                    state: state.into(),
                    launched: launch_times
                        .get(i.id())
                        .map_or(&i.launched(), |(at, _)| at)
                        .to_rfc3339(),
                    instance_type: i.offering().instance_type().to_string(),
                    spot: i.offering().spot(),
                    uses: (spec.max_uses > 0).then(|| row.map_or(0, |r| r.uses())),
                    drifted: drift::drifted(spec, &hash, snap.template_version(), i),
                },
            )
        })
        .collect();
    for (id, (at, offering)) in launch_times {
        if snap.known().contains(id) || snap.instances().iter().any(|i| i.id() == id) {
            continue;
        }
        listed.push((
            2,
            PoolInstance {
                id: id.clone(),
                state: "booting".into(),
                launched: at.to_rfc3339(),
                instance_type: offering.instance_type().to_string(),
                spot: offering.spot(),
                uses: (spec.max_uses > 0).then_some(0),
                drifted: false,
            },
        ));
    }
    listed.sort_by(|(a, x), (b, y)| {
        a.cmp(b)
            .then(x.launched.cmp(&y.launched))
            .then(x.id.cmp(&y.id))
    });
    listed.truncate(LISTED);
    listed.into_iter().map(|(_, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Duration, Utc};

    use super::*;
    use crate::test_support::pool_spec as spec;
    use crate::warmpool::plan::{Ec2Instance, Offering, PoolRow};

    fn inst(id: &str, state: Ec2State, age_min: i64, launch: &str) -> Ec2Instance {
        let now: DateTime<Utc> = "2026-12-02T12:00:00Z".parse().unwrap();
        Ec2Instance::bare(id, state, now - Duration::minutes(age_min))
            .with_offering(Offering::new("t3.small".into(), String::new(), false))
            .with_launch(Some(launch.into()))
    }

    fn row(id: i64, instance: &str, run: Option<i64>, idle: bool, uses: i64) -> PoolRow {
        PoolRow::new(id, instance.into())
            .with_run(run)
            .with_idle_secs(idle.then_some(5.0))
            .with_polled_secs(Some(1.0))
            .with_uses(uses)
    }

    #[test]
    fn each_instance_is_listed_by_what_it_does_busy_first_then_oldest() {
        let mut s = spec(1, 2, 10);
        s.max_uses = 5;
        let ours = drift::launch_hash(&s.launch);
        let snap = Snapshot::default()
            .with_instances(vec![
                inst("i-idle", Ec2State::Running, 30, &ours),
                inst("i-old", Ec2State::Running, 90, "elsewhere"),
                inst("i-busy", Ec2State::Running, 10, &ours),
                inst("i-boot", Ec2State::Pending, 1, &ours),
                inst("i-stop", Ec2State::Stopped, 300, &ours),
                inst("i-going", Ec2State::ShuttingDown, 60, &ours),
                inst("i-gone", Ec2State::Terminated, 60, &ours),
            ])
            .with_rows(vec![
                row(1, "i-idle", None, true, 2),
                row(2, "i-old", None, true, 4),
                row(3, "i-busy", Some(7), false, 1),
            ]);
        let listed = roster(&s, &snap, &PoolPlan::default(), &HashMap::new());
        let shown: Vec<(&str, &str, Option<i64>, bool)> = listed
            .iter()
            .map(|i| (i.id.as_str(), i.state.as_str(), i.uses, i.drifted))
            .collect();
        assert_eq!(
            shown,
            [
                ("i-busy", "busy", Some(1), false),
                ("i-old", "idle", Some(4), true),
                ("i-idle", "idle", Some(2), false),
                ("i-boot", "booting", Some(0), false),
                ("i-stop", "stopped", Some(0), false),
                ("i-going", "retiring", Some(0), false),
            ]
        );
        assert_eq!(listed[0].launched, "2026-12-02T11:50:00+00:00");
        // Uses are counted only with maxUses.
        s.max_uses = 0;
        assert!(roster(&s, &snap, &PoolPlan::default(), &HashMap::new())
            .iter()
            .all(|i| i.uses.is_none()));
    }

    #[test]
    fn an_instance_launched_by_the_loop_is_listed_as_it_launched_it_listed_or_not() {
        let s = spec(1, 2, 10);
        let at: DateTime<Utc> = "2026-12-02T11:59:30Z".parse().unwrap();
        let spot = Offering::new(
            s.launch.instance_types[0].clone(),
            s.launch.subnet_ids[0].clone(),
            true,
        );
        let times = HashMap::from([("i-new".to_string(), (at, spot))]);
        // The pass that launched it: EC2 did not list it yet.
        let before = roster(&s, &Snapshot::default(), &PoolPlan::default(), &times);
        // The next: EC2 lists it, with a launch time of its own.
        let hash = drift::launch_hash(&s.launch);
        let listed = inst("i-new", Ec2State::Pending, 0, &hash);
        let listed = listed.with_offering(times["i-new"].1.clone());
        let snap = Snapshot::default().with_instances(vec![listed]);
        let after = roster(&s, &snap, &PoolPlan::default(), &times);
        assert_eq!(
            before, after,
            "the status would be written again for nothing"
        );
        assert_eq!(
            (
                before[0].state.as_str(),
                before[0].launched.as_str(),
                before[0].spot
            ),
            ("booting", "2026-12-02T11:59:30+00:00", true)
        );
    }

    #[test]
    fn a_big_pool_lists_a_bounded_number() {
        let s = spec(0, 0, 10_000);
        let snap = Snapshot::default().with_instances(
            (0..LISTED + 50)
                .map(|n| inst(&format!("i-{n}"), Ec2State::Pending, 1, "x"))
                .collect(),
        );
        assert_eq!(
            roster(&s, &snap, &PoolPlan::default(), &HashMap::new()).len(),
            LISTED
        );
    }
}
