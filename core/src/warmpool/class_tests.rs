//! A pool on its class as tables: what the class gives, what it refuses
//! and names, the profile of each namespace, the admission rules.

use crate::crd::{CapacityType, OnDelete, PoolLimits, WarmPoolClassSpec, WarmPoolSpec};
use crate::crd::{IdleRange, Launch};
use crate::warmpool::class::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::BTreeMap;

fn class() -> WarmPoolClassSpec {
    serde_yaml::from_str(
        "region: eu-west-1\n\
         endpoint: http://ec2.internal\n\
         launch: {imageId: ami-1, subnetIds: [subnet-1], securityGroupIds: [sg-1], \
                  iamInstanceProfile: orca-pool-runners, runCommand: run}\n\
         instanceTypes: [t3.micro, t3.small]\n\
         capacityTypes: [onDemand, spot]\n\
         namespaces: {matchLabels: {team: a}}\n",
    )
    .expect("the class parses")
}

fn pool() -> WarmPoolSpec {
    serde_yaml::from_str(
        "scheduler: orca\nclassRef: {name: shared}\nidle: {min: 1, max: 2}\nmaxInstances: 5\n",
    )
    .expect("the pool parses")
}

fn team(t: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("team".to_string(), t.to_string())])
}

/// `class` for `p` in namespace `ns` labelled `team=<t>`.
fn resolve_in(
    class: &WarmPoolClassSpec,
    ns: &str,
    t: &str,
    p: &WarmPoolSpec,
) -> Result<WarmPoolSpec, Refusal> {
    let labels = team(t);
    let tenant = Tenant::new(ns, &labels);
    resolve("shared", class, &tenant, p)
}

/// `p` in team a's namespace is denied by the class, the message
/// beginning with `fields` (the fields it may not set).
#[track_caller]
fn denied(p: &WarmPoolSpec, fields: &str) {
    let e = resolve_in(&class(), "team-a", "a", p).unwrap_err();
    assert_eq!(e.reason, "ClassDenied");
    assert!(e.message.starts_with(fields), "{e:?}");
}

#[test]
fn a_pool_runs_on_the_class_launch_with_its_own_idle_range() {
    let spec = resolve_in(&class(), "team-a", "a", &pool()).expect("admitted");
    assert_eq!(spec.region, "eu-west-1");
    assert_eq!(spec.endpoint.as_deref(), Some("http://ec2.internal"));
    assert_eq!(spec.launch.image_id.as_deref(), Some("ami-1"));
    assert_eq!(spec.launch.instance_types, ["t3.micro", "t3.small"]);
    assert_eq!(spec.launch.capacity_type, CapacityType::OnDemand);
    assert_eq!(spec.idle, IdleRange { min: 1, max: 2 });
}

#[test]
fn a_pool_narrows_the_types_and_picks_an_allowed_capacity_type() {
    let mut p = pool();
    p.launch.instance_types = vec!["t3.small".into()];
    p.launch.capacity_type = CapacityType::Spot;
    let spec = resolve_in(&class(), "team-a", "a", &p).expect("admitted");
    assert_eq!(spec.launch.instance_types, ["t3.small"]);
    assert_eq!(spec.launch.capacity_type, CapacityType::Spot);
}

/// A type listed a hundred thousand times (a 1.4 MB spec) is one type:
/// every pass asked the class's book, shared by every pool, once per
/// entry.
#[test]
fn a_type_listed_again_is_listed_once() {
    let mut p = pool();
    p.launch.instance_types = ["t3.small", "t3.micro"]
        .iter()
        .cycle()
        .take(100_000)
        .map(|t| t.to_string())
        .collect();
    let spec = resolve_in(&class(), "team-a", "a", &p).expect("admitted");
    assert_eq!(spec.launch.instance_types, ["t3.small", "t3.micro"]);
}

#[test]
fn a_type_or_capacity_type_beyond_the_class_is_denied_naming_the_field() {
    let mut p = pool();
    p.launch.instance_types = vec!["p5.48xlarge".into()];
    denied(&p, "spec.launch.instanceTypes: p5.48xlarge");
    let mut p = pool();
    p.launch.capacity_type = CapacityType::SpotThenOnDemand;
    denied(&p, "spec.launch.capacityType");
}

#[test]
fn every_field_the_class_owns_is_denied_by_name() {
    let mut p = pool();
    p.region = "us-east-1".into();
    p.launch = Launch {
        iam_instance_profile: Some("orca-pool-team-b".into()),
        ..Launch::default()
    };
    denied(&p, "spec.region, spec.launch.iamInstanceProfile");
}

#[test]
fn a_namespace_the_class_does_not_select_is_not_allowed() {
    let e = resolve_in(&class(), "team-b", "b", &pool()).unwrap_err();
    assert_eq!(e.reason, "NamespaceNotAllowed");
    let mut open = class();
    open.namespaces = None;
    assert!(resolve_in(&open, "team-b", "b", &pool()).is_ok());
}

#[test]
fn a_lifetime_beyond_the_class_bound_is_denied_naming_field_and_limit() {
    let mut bounded = class();
    bounded.pool_limits = Some(PoolLimits {
        max_idle_seconds: Some(3600),
        max_boot_timeout_seconds: Some(600),
        max_drain_timeout_seconds: Some(3600),
        orphan: false,
    });
    let within = resolve_in(&bounded, "team-a", "a", &pool());
    assert!(within.is_ok(), "the defaults are within: {within:?}");
    type Case = (fn(&mut WarmPoolSpec), &'static str);
    let cases: [Case; 4] = [
        (
            |p| p.idle_seconds = 31_536_000,
            "spec.idleSeconds: 31536000 is over WarmPoolClass shared's poolLimits.maxIdleSeconds (3600)",
        ),
        (
            |p| p.boot_timeout_seconds = 601,
            "spec.bootTimeoutSeconds: 601 is over WarmPoolClass shared's poolLimits.maxBootTimeoutSeconds (600)",
        ),
        (
            |p| p.drain_timeout_seconds = 7200,
            "spec.drainTimeoutSeconds: 7200 is over WarmPoolClass shared's poolLimits.maxDrainTimeoutSeconds (3600)",
        ),
        (
            |p| p.on_delete = OnDelete::Orphan,
            "spec.onDelete: Orphan is not allowed by WarmPoolClass shared",
        ),
    ];
    for (change, said) in cases {
        let mut p = pool();
        change(&mut p);
        let e = resolve_in(&bounded, "team-a", "a", &p).unwrap_err();
        assert_eq!(e.reason, "ClassDenied");
        assert!(e.message.starts_with(said), "{e:?}");
        // A class without the bound admits it.
        assert!(resolve_in(&class(), "team-a", "a", &p).is_ok(), "{said}");
    }
    assert!(!may_orphan(&bounded));
    assert!(may_orphan(&class()));
}

/// A pool deleted after its class lowered `maxDrainTimeoutSeconds` under
/// the pool's own drain time-out (refused since, it ran no loop) lets its
/// busy instances run only as long as the class allows now.
#[test]
fn a_deleted_pools_drain_is_the_class_bound_as_it_is_now() {
    let long = WarmPoolSpec {
        drain_timeout_seconds: 86_400,
        ..pool()
    };
    let short = WarmPoolSpec {
        drain_timeout_seconds: 60,
        ..pool()
    };
    let mut bounded = class();
    bounded.pool_limits = Some(PoolLimits {
        max_drain_timeout_seconds: Some(0),
        ..PoolLimits::default()
    });
    assert_eq!(drain_within(&bounded, &long), 0);
    assert_eq!(drain_within(&class(), &long), 86_400, "no bound");
    bounded.pool_limits = Some(PoolLimits {
        max_drain_timeout_seconds: Some(3600),
        ..PoolLimits::default()
    });
    assert_eq!(drain_within(&bounded, &short), 60, "within the bound");
}

#[test]
fn each_namespace_launches_with_its_own_profile() {
    let mut per_team = class();
    per_team.launch.iam_instance_profile = Some("orca-pool-{namespace}".into());
    let a = resolve_in(&per_team, "team-a", "a", &pool()).unwrap();
    assert_eq!(
        a.launch.iam_instance_profile.as_deref(),
        Some("orca-pool-team-a")
    );
    let mut open = per_team.clone();
    open.namespaces = None;
    let b = resolve_in(&open, "team-b", "b", &pool()).unwrap();
    assert_eq!(
        b.launch.iam_instance_profile.as_deref(),
        Some("orca-pool-team-b")
    );
    // One profile for all, as written.
    let shared = resolve_in(&class(), "team-a", "a", &pool()).unwrap();
    assert_eq!(
        shared.launch.iam_instance_profile.as_deref(),
        Some("orca-pool-runners")
    );
}

#[test]
fn the_admission_rules_refuse_each_owned_field_and_lifetime_by_name() {
    let rules: serde_json::Value =
        serde_yaml::from_str(&crate::warmpool::admission::admission_rules())
            .expect("the rules are YAML");
    let owned = rules["classOwned"].as_array().expect("classOwned");
    // Each field twice: not set beside a class, not changed without one.
    assert_eq!(owned.len(), 2 * CLASS_OWNED.len());
    let (set, changed) = owned.split_at(CLASS_OWNED.len());
    for ((set, changed), f) in set.iter().zip(changed).zip(CLASS_OWNED) {
        assert_eq!(
            set["message"].as_str(),
            Some(format!("{} may not be set: the WarmPoolClass holds it", f.path).as_str())
        );
        let changed = changed["message"].as_str().expect("a message");
        assert!(
            changed.starts_with(&format!(
                "{} may not change on a WarmPool without a class",
                f.path
            )),
            "{changed}"
        );
    }
    let limits = rules["poolLimits"].as_array().expect("poolLimits");
    assert_eq!(limits.len(), LIFETIMES.len() + 1);
    for l in LIFETIMES {
        assert!(
            limits
                .iter()
                .any(|r| r["expression"].as_str().is_some_and(|e| e
                    .contains(&format!("object.spec.{}", l.field))
                    && e.contains(l.limit))),
            "{}",
            l.field
        );
    }
    assert_eq!(rules["deletion"].as_array().map(Vec::len), Some(4));
}

#[test]
fn selectors_follow_the_api_servers_operators() {
    let sel: LabelSelector = serde_yaml::from_str(
        "matchExpressions: [{key: team, operator: In, values: [a, b]}, \
         {key: frozen, operator: DoesNotExist}]",
    )
    .unwrap();
    assert!(selects(&sel, &team("b")));
    assert!(!selects(&sel, &team("c")));
    let mut frozen = team("a");
    frozen.insert("frozen".into(), "yes".into());
    assert!(!selects(&sel, &frozen));
    assert!(selects(&LabelSelector::default(), &BTreeMap::new()));
}
