//! A pool moved to another region, then removed from the directory, in the
//! local mode: its instances where it ran are terminated, never left
//! running. Once, the local mode stopped the old loop and started a new
//! one in the new region, and the old instances ran on, counted by no one;
//! a removed pool's instances the same. A pool put back where it still
//! drains waits until that is done, and so does one given its own moto's
//! endpoint by name (the same EC2).

use orca_operator::fence::Fence;
use orca_operator::warmpool::{Ec2, Ec2Config};

use super::*;

fn pool(region: &str) -> String {
    format!(
        "apiVersion: orca.dev/v1alpha1
kind: WarmPool
metadata:
  name: runners
spec:
  scheduler: orca
  region: {region}
  idle: {{min: 2, max: 2}}
  maxInstances: 4
  launch:
    imageId: ami-12c6146b
    instanceTypes: [t3.micro]
    subnetIds: [subnet-1]
    runCommand: 'sleep 20'
"
    )
}

/// The instances moto runs in `region` that are not terminated (or
/// shutting down).
async fn alive(endpoint: &str, region: &str) -> Vec<String> {
    by_end(endpoint, region, false).await
}

/// The instances moto has ended (or is ending) in `region`.
async fn ended(endpoint: &str, region: &str) -> Vec<String> {
    by_end(endpoint, region, true).await
}

/// The instances moto lists in `region` that are ended (or ending), or
/// that are not.
async fn by_end(endpoint: &str, region: &str, ended: bool) -> Vec<String> {
    let ec2 = Ec2::new(&Ec2Config::new(region, Some(endpoint)), Fence::always()).await;
    let out = ec2
        .client()
        .describe_instances()
        .send()
        .await
        .unwrap_or_else(|e| panic!("moto's DescribeInstances in {region} failed: {e}"));
    out.reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter(|i| {
            let state = i.state().and_then(|s| s.name()).map(|n| n.as_str());
            matches!(state, Some("terminated" | "shutting-down")) == ended
        })
        .filter_map(|i| i.instance_id().map(String::from))
        .collect()
}

/// Where the local mode's own moto listens, as it says.
fn moto_of(local: &LocalMode) -> String {
    local
        .output()
        .iter()
        .find_map(|l| {
            let (_, rest) = l.split_once("on moto at ")?;
            rest.split(": image").next().map(String::from)
        })
        .expect("the local mode says where its moto is")
}

async fn until(local: &LocalMode, what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while !done().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within 90 s; the operator said:\n{}",
            local.output().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_or_removed_pool_terminates_its_instances_where_it_ran() {
    orca_tests::warm::aws_env();
    let mut local = LocalMode::own_database(&scheduler("v1", "", ""));
    local.write("warmpool.yaml", &pool("us-east-1"));
    local.start();
    until(&local, "two idle in us-east-1", async || {
        local.pool_status("runners").idle == 2
    })
    .await;
    let endpoint = moto_of(&local);
    assert_eq!(alive(&endpoint, "us-east-1").await.len(), 2);

    // Moved: the old region's instances are terminated, the new region's
    // warm.
    local.write("warmpool.yaml", &pool("us-west-2"));
    until(&local, "us-east-1 emptied, us-west-2 warm", async || {
        alive(&endpoint, "us-east-1").await.is_empty()
            && alive(&endpoint, "us-west-2").await.len() == 2
            && local.pool_status("runners").idle == 2
    })
    .await;
    until(&local, "the old place's loop ends", async || {
        local
            .output()
            .iter()
            .any(|l| l.contains("nothing left where it ran"))
    })
    .await;
    let said = local.output().join("\n");
    assert!(
        said.contains("warmpool default/runners: moved; terminating its instances"),
        "{said}"
    );
    assert!(
        said.contains("(where it ran: orca in us-east-1 on http://"),
        "the old place's lines say where: {said}"
    );

    // Removed while a run goes on, and put back before it ends: the pool
    // put back waits until its instances there are gone, as a deleted
    // WarmPool must be gone before one of its name is made again. Two
    // loops there would fight: the old one terminating what the new one
    // launches, and the new one launching again, for ever.
    local.hand_out("default/runners").await;
    std::fs::remove_file(local.dir().join("warmpool.yaml")).unwrap();
    until(&local, "the removal is seen", async || {
        local
            .output()
            .iter()
            .any(|l| l.contains("removed; terminating"))
    })
    .await;
    // A removed pool has no status: its last one ("two idle") does not
    // stand for it while it is gone.
    let status = local.dir().join(".status/warmpool-default-runners.yaml");
    until(&local, "the removed pool's status gone", async || {
        !status.exists()
    })
    .await;
    let put_back = local.output().len();
    local.write("warmpool.yaml", &pool("us-west-2"));
    until(
        &local,
        "the old place emptied, then the pool warm again",
        async || {
            let emptied = local
                .output()
                .iter()
                .filter(|l| l.contains("nothing left where it ran"))
                .count();
            emptied == 2
                && local.pool_status("runners").idle == 2
                && alive(&endpoint, "us-west-2").await.len() == 2
        },
    )
    .await;
    let said = local.output()[put_back..].join("\n");
    let launches = said.matches("Normal Launched").count();
    assert_eq!(
        launches, 1,
        "one launch once the old place is empty, no launch-and-terminate fight: {said}"
    );
    assert!(
        said.contains("NotStarted: still terminating its instances where it ran"),
        "the pool put back says why it waits: {said}"
    );
    let terminations = |local: &LocalMode| {
        local
            .output()
            .iter()
            .filter(|l| l.contains("Terminated"))
            .count()
    };
    let before = terminations(&local);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        terminations(&local),
        before,
        "nothing terminated once the pool is back; the operator said:\n{}",
        local.output().join("\n")
    );
    assert_eq!(
        alive(&endpoint, "us-west-2").await.len(),
        2,
        "two idle; the operator said:\n{}",
        local.output().join("\n")
    );

    // Removed: its instances go too.
    std::fs::remove_file(local.dir().join("warmpool.yaml")).unwrap();
    until(&local, "us-west-2 emptied", async || {
        alive(&endpoint, "us-west-2").await.is_empty()
    })
    .await;
}

/// A pool given its own moto's endpoint by name (the same EC2 it ran on
/// without one) terminates nothing it launches there: the loop left where
/// it ran drains its own instances first, and the pool starts again once
/// they are gone. Once, both loops ran at once on the same listing, and
/// the old place's terminated what the new one launched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_given_its_endpoint_by_name_terminates_nothing_it_launches_after() {
    orca_tests::warm::aws_env();
    let mut local = LocalMode::own_database(&scheduler("v1", "", ""));
    local.write("warmpool.yaml", &pool("us-east-1"));
    local.start();
    until(&local, "two idle", async || {
        local.pool_status("runners").idle == 2
    })
    .await;
    let endpoint = moto_of(&local);
    let before = alive(&endpoint, "us-east-1").await;
    assert_eq!(before.len(), 2);

    // Named, the endpoint is the pool's own: so are the subnet and the
    // SSM endpoint, moto's.
    let subnet = local
        .output()
        .iter()
        .find_map(|l| {
            let (_, rest) = l.split_once("moto's subnets [\"")?;
            rest.split('"').next().map(String::from)
        })
        .expect("the local mode says moto's subnets");
    let named = pool("us-east-1")
        .replace(
            "  region: us-east-1\n",
            &format!("  region: us-east-1\n  endpoint: {endpoint}\n  ssmEndpoint: {endpoint}\n"),
        )
        .replace("subnet-1", &subnet);
    local.write("warmpool.yaml", &named);
    until(
        &local,
        "two new idle, the old place's loop ended",
        async || {
            let wrong: Vec<String> = ended(&endpoint, "us-east-1")
                .await
                .into_iter()
                .filter(|id| !before.contains(id))
                .collect();
            assert!(
                wrong.is_empty(),
                "{wrong:?}, launched after the move, were terminated; the operator said:\n{}",
                local.output().join("\n")
            );
            let now = alive(&endpoint, "us-east-1").await;
            now.len() == 2
                && now.iter().all(|id| !before.contains(id))
                && local
                    .output()
                    .iter()
                    .any(|l| l.contains("nothing left where it ran"))
        },
    )
    .await;
}
