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
        .map(|i| i.id)
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
        .filter(|i| i.state.is_present())
        .map(|i| i.id)
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

/// Launches one instance of pool `default/runners` as an operator that
/// tagged no cluster did. Its id.
async fn launch_untagged(ec2: &Ec2, subnet: &str) -> String {
    let mut tags = TagSpecification::builder().resource_type(ResourceType::Instance);
    let operator = Tuning::default().operator().clone();
    for (k, v) in [
        (TAG_POOL, "default/runners"),
        (TAG_SCHEDULER, "default/sched"),
        (TAG_OPERATOR, operator.as_str()),
    ] {
        tags = tags.tags(Tag::builder().key(k).value(v).build());
    }
    let out = ec2
        .client()
        .run_instances()
        .image_id("ami-12c6146b")
        .instance_type(aws_sdk_ec2::types::InstanceType::T3Micro)
        .subnet_id(subnet)
        .min_count(1)
        .max_count(1)
        .tag_specifications(tags.build())
        .send()
        .await
        .unwrap_or_else(|e| panic!("moto's RunInstances failed: {e}"));
    out.instances()[0].instance_id().unwrap().to_string()
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
        .map(|i| i.id)
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
