//! One EC2 listing for the pools of one region and endpoint: they share
//! their `DescribeInstances`, never take each other's instances, and a pool
//! that acted lists anew.

use orca_operator::fence::Fence;
use orca_operator::warmpool::{Listings, Tuning};

use super::*;

/// Pools `ns/a` and `ns/b` of one place, sharing `listings`.
async fn two_pools(
    url: &str,
    endpoint: &str,
    subnets: &[String],
    tuning: &Tuning,
    listings: &Listings,
) -> (PoolLoop, PoolLoop) {
    let mut loops = Vec::new();
    for name in ["a", "b"] {
        let spec = warm::spec(endpoint, &["t3.micro"], &subnets[..1], 1, 1, 3);
        let lp = PoolLoop::new("shared", name, spec, url, tuning.clone(), Fence::always())
            .await
            .unwrap()
            .with_listings(listings);
        loops.push(lp);
    }
    let b = loops.pop().unwrap();
    (loops.pop().unwrap(), b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_of_one_place_share_their_listings_and_never_take_each_others_instances() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let faults = Ec2Faults::start(&moto.endpoint());
    warm::aws_env();
    // A leak grace of a second: a pool that took the other's instance for
    // its own would terminate it as a leak at its next pass.
    // A listing reused for 3 s: long enough for the second pool's pass to
    // find the first one's listing on two busy cores (a pass that launches
    // took over a second there), short enough to outwait below; and rows
    // that stay fresh while it does.
    let tuning = warm::tuning(Duration::from_secs(1))
        .with_listing_reuse(Duration::from_secs(3))
        .with_stale(Duration::from_secs(60));
    let listings = Listings::default();
    let (mut a, mut b) = two_pools(&url, &faults.endpoint(), &subnets, &tuning, &listings).await;
    let db = pg::connect(&url).await;
    let lists = || faults.calls_of("DescribeInstances").len();

    let first_a = a.pass(Utc::now()).await.unwrap();
    let first_b = b.pass(Utc::now()).await.unwrap();
    assert_eq!(
        (first_a.launched().len(), first_b.launched().len()),
        (1, 1),
        "{first_a:?} {first_b:?}"
    );
    assert_eq!(lists(), 1, "the second pool took the first one's listing");
    let (ia, ib) = (first_a.launched()[0].clone(), first_b.launched()[0].clone());
    report_idle(&db, "shared/a", &ia).await;
    report_idle(&db, "shared/b", &ib).await;

    // Past the leak grace and the listing's reuse: listings that show both
    // instances, each pool's by its own tags.
    let mut calls = lists();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(3200)).await;
        for lp in [&mut a, &mut b] {
            let r = lp.pass(Utc::now()).await.unwrap();
            assert!(r.terminated().is_empty(), "{}: {r:?}", lp.pool());
            assert!(r.launched().is_empty(), "{}: {r:?}", lp.pool());
            let s = r.status();
            assert_eq!(
                (s.idle, s.busy, s.launching, s.terminating),
                (1, 0, 0, 0),
                "{}: {s:?}",
                lp.pool()
            );
        }
        assert_eq!(lists(), calls + 1, "one listing for both pools");
        calls = lists();
    }
    for (pool, id) in [("shared/a", &ia), ("shared/b", &ib)] {
        let left: Vec<String> = present(&ec2, pool)
            .await
            .into_iter()
            .map(|i| i.id().to_string())
            .collect();
        assert_eq!(left, vec![id.to_string()], "{pool}");
    }

    // Pool b terminates its instance (a new spec, idle 0): its next pass
    // lists anew, and pool a takes that listing.
    let mut spec = b.spec().clone();
    spec.idle = orca_operator::crd::IdleRange { min: 0, max: 0 };
    b.set_spec(spec).await;
    let trim = b.pass(Utc::now()).await.unwrap();
    assert_eq!(trim.terminated(), vec![ib.clone()], "{trim:?}");
    let before = lists();
    b.pass(Utc::now()).await.unwrap();
    assert_eq!(
        lists(),
        before + 1,
        "the pass after a termination lists anew"
    );
    let quiet = a.pass(Utc::now()).await.unwrap();
    assert_eq!(lists(), before + 1, "the other pool takes that listing");
    assert!(quiet.terminated().is_empty(), "{quiet:?}");
    assert_eq!(
        state_of(&ec2, "shared/a", &ia).await,
        Some(Ec2State::Running)
    );
}
