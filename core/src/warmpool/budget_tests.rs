//! The class's book as tables: what a census counts, what a launch adds
//! until a census shows it, and two pools racing for the last places.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use crate::crd::{ClassLimits, WarmPoolClassSpec};
use crate::warmpool::budget::{Budget, Budgets, Census, Counted, Grant, LISTING_LAG};

fn limits(instances: Option<i64>, vcpus: Option<i64>) -> ClassLimits {
    ClassLimits { instances, vcpus }
}

fn spec(total: ClassLimits, per_ns: ClassLimits) -> WarmPoolClassSpec {
    let mut spec: WarmPoolClassSpec =
        serde_yaml::from_str("region: r\nlaunch: {runCommand: run}\n").unwrap();
    spec.instance_types = vec!["t3.micro".into(), "t3.xlarge".into()];
    spec.limits = Some(total);
    spec.namespace_limits = Some(per_ns);
    spec
}

/// `(id, namespace, type)` as EC2 lists them under the class's tag.
fn census(at: Instant, listed: &[(&str, &str, &str)]) -> Census {
    Census::new(
        at,
        listed
            .iter()
            .map(|(id, ns, t)| Counted::new(id.to_string(), ns.to_string(), t.to_string()))
            .collect(),
    )
}

/// A class `shared` with these limits, counted once with `listed`.
fn book(total: ClassLimits, per_ns: ClassLimits, listed: &[(&str, &str, &str)]) -> Arc<Budgets> {
    let b = Arc::new(Budgets::default());
    b.learn_vcpus([("t3.micro".to_string(), 2), ("t3.xlarge".to_string(), 4)]);
    b.set_limits("shared", &spec(total, per_ns));
    b.census("shared", census(Instant::now(), listed));
    b
}

#[test]
fn a_namespace_gets_no_more_than_its_limit_and_says_which() {
    let b = book(limits(None, None), limits(Some(3), None), &[]);
    let p = b.budget("shared", "a/p", "a");
    let g = p.grant("t3.micro", 5);
    assert_eq!(g.count, 3);
    assert_eq!(
        g.held_back.as_deref(),
        Some(
            "WarmPoolClass shared: the pools of namespace a hold 3 of their 3 instances \
             (namespaceLimits.instances): 5 more wanted, 3 launched"
        )
    );
    assert_eq!(p.grant("t3.micro", 1).count, 0);
}

#[test]
fn the_room_a_plan_is_bounded_by_is_the_tightest_limit_and_grants_nothing() {
    let listed = [("i-1", "a", "t3.micro"), ("i-2", "b", "t3.xlarge")];
    // 12 vCPUs in all (6 taken): one more xlarge, three more micro; a's
    // own limit of 2 instances leaves one.
    let b = book(limits(None, Some(12)), limits(Some(2), None), &listed);
    let p = b.budget("shared", "a/p", "a");
    assert_eq!(p.room("t3.xlarge"), Some((1, "limits.vcpus")));
    assert_eq!(p.room("t3.micro"), Some((1, "namespaceLimits.instances")));
    // Asking twice took nothing.
    assert_eq!(p.grant("t3.micro", 5).count, 1);
    assert_eq!(p.room("t3.micro"), Some((0, "namespaceLimits.instances")));
    // No limits: no room to name.
    let free = book(limits(None, None), limits(None, None), &listed);
    assert_eq!(free.budget("shared", "a/p", "a").room("t3.micro"), None);
    // A class not counted yet: not known, and nothing is granted either.
    let uncounted = Arc::new(Budgets::default());
    uncounted.set_limits("shared", &spec(limits(Some(1), None), limits(None, None)));
    let p = uncounted.budget("shared", "a/p", "a");
    assert_eq!(p.room("t3.micro"), None);
    assert_eq!(p.grant("t3.micro", 1).count, 0);
}

#[test]
fn what_ec2_lists_under_the_class_counts_whatever_its_pool_is_doing() {
    // Three of namespace a's instances run with no pool, no loop, no
    // status (orphaned, their WarmPool deleted): a's limit is taken.
    let listed = [
        ("i-1", "a", "t3.micro"),
        ("i-2", "a", "t3.micro"),
        ("i-3", "a", "t3.micro"),
        ("i-9", "b", "t3.micro"),
    ];
    let b = book(limits(Some(5), None), limits(Some(3), None), &listed);
    let again = b.budget("shared", "a/again", "a");
    let g = again.grant("t3.micro", 3);
    assert_eq!(g.count, 0, "{g:?}");
    assert!(g.held_back.unwrap().contains("hold 3 of their 3 instances"));
    // b's one, a's three: the class's total leaves b one more.
    let q = b.budget("shared", "b/q", "b");
    assert_eq!(q.grant("t3.micro", 5).count, 1);
    let u = b.usage("shared");
    assert_eq!((u.total.instances, u.total.vcpus), (5, 10));
    assert_eq!(u.namespaces["a"].instances, 3);
}

#[test]
fn a_launch_counts_until_a_census_shows_it_and_then_once() {
    let b = book(limits(Some(2), None), limits(None, None), &[]);
    let p = b.budget("shared", "a/p", "a");
    assert_eq!(p.grant("t3.micro", 2).count, 2);
    p.launched("t3.micro", 2, vec!["i-1".into(), "i-2".into()]);
    assert_eq!(b.usage("shared").total.instances, 2, "not listed yet");
    // A census that shows one of them (EC2's listing lags the other).
    b.census(
        "shared",
        census(Instant::now(), &[("i-1", "a", "t3.micro")]),
    );
    assert_eq!(b.usage("shared").total.instances, 2);
    assert_eq!(p.grant("t3.micro", 1).count, 0);
    // Both shown: two, not four.
    b.census(
        "shared",
        census(
            Instant::now(),
            &[("i-1", "a", "t3.micro"), ("i-2", "a", "t3.micro")],
        ),
    );
    assert_eq!(b.usage("shared").total.instances, 2);
    // One terminated: its place is free.
    b.census(
        "shared",
        census(Instant::now(), &[("i-2", "a", "t3.micro")]),
    );
    assert_eq!(p.grant("t3.micro", 5).count, 1);
}

#[test]
fn a_lost_answer_counts_until_a_census_long_after_it() {
    let b = book(limits(Some(2), None), limits(None, None), &[]);
    let p = b.budget("shared", "a/p", "a");
    assert_eq!(p.grant("t3.micro", 2).count, 2);
    p.lost("t3.micro", 2);
    b.census("shared", census(Instant::now(), &[]));
    assert_eq!(p.grant("t3.micro", 1).count, 0, "they may run");
    let later = Instant::now() + LISTING_LAG + Duration::from_secs(1);
    b.census("shared", census(later, &[]));
    assert_eq!(
        p.grant("t3.micro", 1).count,
        1,
        "a census long after: none ran"
    );
}

#[test]
fn two_pools_racing_never_pass_the_class_limit_together() {
    let b = book(limits(Some(5), None), limits(None, None), &[]);
    let (p, q) = (
        b.budget("shared", "a/p", "a"),
        b.budget("shared", "b/q", "b"),
    );
    let handles: Vec<_> = [p, q]
        .into_iter()
        .map(|budget| {
            std::thread::spawn(move || {
                let got: u32 = (0..10).map(|_| budget.grant("t3.micro", 1).count).sum();
                (got, budget)
            })
        })
        .collect();
    let got: Vec<(u32, Budget)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(got.iter().map(|(n, _)| n).sum::<u32>(), 5);
    assert_eq!(b.usage("shared").total.instances, 5);
}

#[test]
fn vcpus_count_by_type_and_a_lowered_limit_only_stops_launches() {
    let listed = [("i-1", "a", "t3.micro"), ("i-2", "a", "t3.micro")];
    let b = book(limits(None, Some(8)), limits(None, None), &listed);
    let p = b.budget("shared", "a/p", "a");
    let g = p.grant("t3.xlarge", 3);
    assert_eq!(g.count, 1, "4 of 8 vCPUs held, one xlarge fits");
    assert!(g.held_back.unwrap().contains("hold 8 of their 8 vCPUs"));
    b.set_limits("shared", &spec(limits(None, Some(2)), limits(None, None)));
    assert_eq!(b.usage("shared").total.vcpus, 8, "nothing given back");
    assert_eq!(p.grant("t3.micro", 1).count, 0);
}

#[test]
fn an_instance_of_a_type_of_unknown_vcpus_holds_a_vcpu_limit() {
    // Counted at its own type, which nobody has described yet.
    let b = book(
        limits(None, Some(100)),
        limits(None, None),
        &[("i-1", "a", "m7i.large")],
    );
    let p = b.budget("shared", "a/p", "a");
    let g = p.grant("t3.micro", 1);
    assert_eq!(g.count, 0);
    assert!(g.held_back.unwrap().contains("m7i.large are not known yet"));
    assert_eq!(
        b.unknown_vcpus(&["m7i.large".into(), "t3.micro".into()]),
        ["m7i.large"]
    );
    b.learn_vcpus([("m7i.large".to_string(), 2)]);
    assert_eq!(p.grant("t3.micro", 1).count, 1);
}

#[test]
fn nothing_is_granted_before_a_census_and_a_failed_one_is_said() {
    let b = Arc::new(Budgets::default());
    b.set_limits("shared", &spec(limits(Some(4), None), limits(None, None)));
    let p = b.budget("shared", "a/p", "a");
    assert_eq!(
        p.grant("t3.micro", 1),
        Grant {
            count: 0,
            held_back: None
        }
    );
    b.census_failed("shared", "DescribeInstances: throttled".into());
    let g = p.grant("t3.micro", 1);
    assert_eq!(g.count, 0);
    assert!(g
        .held_back
        .unwrap()
        .contains("its instances cannot be listed: DescribeInstances: throttled"),);
    b.census("shared", census(Instant::now(), &[]));
    assert_eq!(p.grant("t3.micro", 1).count, 1);
}

#[test]
fn a_dropped_loops_launch_under_way_still_counts() {
    let b = book(limits(Some(2), None), limits(None, None), &[]);
    let p = b.budget("shared", "a/p", "a");
    assert_eq!(p.grant("t3.micro", 2).count, 2);
    drop(p);
    let q = b.budget("shared", "a/p", "a");
    assert_eq!(q.grant("t3.micro", 1).count, 0);
    assert_eq!(b.usage("shared").total.instances, 2);
}
