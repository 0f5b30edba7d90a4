//! Two clusters in one AWS account, and the instances of an operator that
//! did not tag its cluster yet.

use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
use orca_operator::fence::Fence;
use orca_operator::warmpool::{
    ec2::{TAG_CLUSTER, TAG_OPERATOR, TAG_POOL, TAG_SCHEDULER},
    Ownership, Tuning,
};

use super::*;

/// A loop of pool `default/runners` for `cluster` on database `url`.
async fn loop_of(
    cluster: &str,
    endpoint: &str,
    url: &str,
    subnets: &[String],
    min: i32,
) -> PoolLoop {
    let spec = warm::spec(endpoint, &["t3.micro"], subnets, min, min, 5);
    let tuning = warm::tuning(Duration::from_secs(1))
        .with_cluster(cluster.into())
        // Anything without a row is leaked after a second: the second
        // cluster would reap the first's instances at once, if it saw them.
        .with_leak_grace(Some(Duration::from_secs(1)))
        // The rows these tests write are never polled again: a loaded
        // machine must not make them stale (and retire the adopted
        // instance) between two passes.
        .with_stale(Duration::from_secs(120));
    PoolLoop::new("default", "runners", spec, url, tuning, Fence::always())
        .await
        .unwrap()
}

fn owner_of(cluster: &str) -> Ownership {
    Ownership::new(
        "default",
        "runners",
        "sched",
        Tuning::default().operator(),
        cluster,
    )
}

/// Two clusters, each with its operator and database and a WarmPool
/// `default/runners`, on one EC2 endpoint: neither lists, counts or
/// terminates the other's instances. Once, the second terminated the
/// first's as `Leaked` within a minute.
#[tokio::test]
async fn two_clusters_with_one_pool_name_never_touch_each_others_instances() {
    let (moto, east_url, ec2, subnets) = warm::Stage::new().await.parts();
    let west_url = pg::Cluster::shared().migrated_db().await;
    let mut east = loop_of("east", &moto.endpoint(), &east_url, &subnets, 2).await;
    east.pass(Utc::now()).await.unwrap();
    let mut launched: Vec<String> = ec2
        .describe(&owner_of("east"))
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id().to_string())
        .collect();
    launched.sort();
    assert_eq!(launched.len(), 2, "east launches its idle.min");

    let mut west = loop_of("west", &moto.endpoint(), &west_url, &subnets, 0).await;
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let report = west.pass(Utc::now()).await.unwrap();
        assert!(
            report.terminated().is_empty(),
            "west terminated {:?}: east's",
            report.terminated()
        );
        assert_eq!(
            report.status().launching + report.status().idle,
            0,
            "{:?}",
            report.status()
        );
    }
    let mut left: Vec<String> = ec2
        .describe(&owner_of("east"))
        .await
        .unwrap()
        .into_iter()
        .filter(|i| i.state().is_present())
        .map(|i| i.id().to_string())
        .collect();
    left.sort();
    assert_eq!(left, launched, "east's instances run on");
    let report = east.pass(Utc::now()).await.unwrap();
    assert_eq!(
        report.status().launching,
        2,
        "east still counts its own: {:?}",
        report.status()
    );
}

/// Launches one instance with the tags `tags` straight through EC2. Its id.
async fn launch_tagged(ec2: &Ec2, subnet: &str, tags: &[(&str, &str)]) -> String {
    let mut spec = TagSpecification::builder().resource_type(ResourceType::Instance);
    for (k, v) in tags {
        spec = spec.tags(Tag::builder().key(*k).value(*v).build());
    }
    let out = ec2
        .client()
        .run_instances()
        .image_id("ami-12c6146b")
        .instance_type(aws_sdk_ec2::types::InstanceType::T3Micro)
        .subnet_id(subnet)
        .min_count(1)
        .max_count(1)
        .tag_specifications(spec.build())
        .send()
        .await
        .unwrap_or_else(|e| panic!("moto's RunInstances failed: {e}"));
    out.instances()[0].instance_id().unwrap().to_string()
}

/// Launches one instance of pool `default/runners` as an operator that
/// tagged no cluster did. Its id.
async fn launch_untagged(ec2: &Ec2, subnet: &str) -> String {
    let operator = Tuning::default().operator().clone();
    let tags = [
        (TAG_POOL, "default/runners"),
        (TAG_SCHEDULER, "default/sched"),
        (TAG_OPERATOR, operator.as_str()),
    ];
    launch_tagged(ec2, subnet, &tags).await
}

/// After an upgrade, instances launched before instances carried the
/// cluster's tag are adopted — tagged, then counted — if their agents
/// reported to the pool's database; one that did not may be another
/// cluster's and is left alone, neither tagged nor terminated.
#[tokio::test]
async fn untagged_instances_with_rows_here_are_adopted_and_the_rest_left_alone() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let ours = launch_untagged(&ec2, &subnets[0]).await;
    let theirs = launch_untagged(&ec2, &subnets[0]).await;
    let db = pg::connect(&url).await;
    report_idle(&db, "default/runners", &ours).await;

    let mut lp = loop_of("east", &moto.endpoint(), &url, &subnets, 1).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    let adopted: Vec<&PoolEvent> = report
        .events()
        .iter()
        .filter(|e| e.reason() == "Adopted")
        .collect();
    assert_eq!(adopted.len(), 1, "{:?}", report.events());
    assert!(adopted[0].message().contains(&ours) && !adopted[0].message().contains(&theirs));
    assert_eq!(
        report.status().idle,
        1,
        "the adopted one is counted: {:?}",
        report.status()
    );
    assert!(
        report.plan().launch_count() == 0,
        "nothing launched: idle.min is met"
    );
    // The next pass at once: the listing asked for before the tags (which
    // shows the adopted one as no cluster's) must not be taken again, or
    // the pool launches as many again.
    let report = lp.pass(Utc::now()).await.unwrap();
    assert_eq!(
        (report.plan().launch_count(), report.status().idle),
        (0, 1),
        "the pass right after the adoption: {:?}",
        report.status()
    );
    let tagged: Vec<String> = ec2
        .describe(&owner_of("east"))
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id().to_string())
        .collect();
    assert_eq!(tagged.len(), 1, "{tagged:?}");
    assert_eq!(tagged[0], ours);

    // Later passes never touch the other one.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let report = lp.pass(Utc::now()).await.unwrap();
        assert!(
            !report.terminated().contains(&theirs),
            "{:?}",
            report.terminated()
        );
    }
    let out = ec2
        .client()
        .describe_instances()
        .instance_ids(&theirs)
        .send()
        .await
        .unwrap();
    let theirs_now = &out.reservations()[0].instances()[0];
    assert_eq!(
        theirs_now
            .state()
            .and_then(|s| s.name())
            .map(|n| n.as_str()),
        Some("running")
    );
    assert!(
        !theirs_now
            .tags()
            .iter()
            .any(|t| t.key() == Some(TAG_CLUSTER)),
        "the other was tagged"
    );
}

/// Launches one instance of `owner`'s pool as the release before tenancy
/// tags did: its ownership tags, and neither a namespace's nor a class's.
async fn launch_before_tenancy(ec2: &Ec2, subnet: &str, owner: &Ownership) -> String {
    let tags = [
        (TAG_POOL, owner.pool().as_str()),
        (TAG_SCHEDULER, owner.scheduler().as_str()),
        (TAG_OPERATOR, owner.operator().as_str()),
        (TAG_CLUSTER, owner.cluster().as_str()),
    ];
    launch_tagged(ec2, subnet, &tags).await
}

/// The value of the tag `key` on instance `id`, as EC2 describes it.
async fn tag_on(ec2: &Ec2, id: &str, key: &str) -> Option<String> {
    let out = ec2
        .client()
        .describe_instances()
        .instance_ids(id)
        .send()
        .await
        .unwrap_or_else(|e| panic!("moto's DescribeInstances failed: {e}"));
    let instance = &out.reservations()[0].instances()[0];
    instance
        .tags()
        .iter()
        .find(|t| t.key() == Some(key))
        .and_then(|t| t.value().map(String::from))
}

/// An upgraded pool's instance, given its namespace's tag while the pool
/// had no class, gets its class's tag once the pool is put on a class
/// (`kubectl orca class from-pool`): the class's census counts it, and its
/// limits hold. Once, an instance tagged once was never looked at again,
/// and the class granted launches beyond its limits for as long as it ran.
#[tokio::test]
async fn an_instance_tagged_before_its_pool_had_a_class_counts_in_the_class() {
    use orca_operator::warmpool::budget::Budgets;
    use orca_operator::warmpool::ec2::{TAG_CLASS, TAG_NAMESPACE};
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let pool = "default/runners";
    let spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 1, 1, 4);
    let mut lp = warm::pool_loop(pool, spec, &url).await;
    let old = launch_before_tenancy(&ec2, &subnets[0], lp.ownership()).await;

    lp.pass(Utc::now()).await.unwrap();
    assert_eq!(
        tag_on(&ec2, &old, TAG_NAMESPACE).await.as_deref(),
        Some("default")
    );
    assert_eq!(tag_on(&ec2, &old, TAG_CLASS).await, None, "no class yet");

    let budgets = Arc::new(Budgets::default());
    lp.set_budget(Some(budgets.budget("shared", pool, "default")));
    lp.pass(Utc::now()).await.unwrap();
    assert_eq!(
        tag_on(&ec2, &old, TAG_CLASS).await.as_deref(),
        Some("shared"),
        "the class's tag, for its census"
    );
}
