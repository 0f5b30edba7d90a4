//! Spot capacity: launched as spot; a spot capacity error moves the launch
//! to on-demand under spotThenOnDemand, and is a refusal under spot.

use orca_operator::crd::CapacityType;
use orca_operator::fence::Fence;

use super::*;

/// A pool of `capacity` asked for two instances, with every spot
/// `RunInstances` refused for capacity: its first pass, and the instances
/// EC2 then lists with whether each is spot.
async fn without_spot(
    capacity: CapacityType,
    pool: &str,
) -> (
    orca_operator::warmpool::PassReport,
    Vec<bool>,
    Vec<Vec<String>>,
) {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let faults = Ec2Faults::start(&moto.endpoint());
    faults.fail(
        "RunInstances",
        &["InstanceMarketOptions.MarketType=spot"],
        Fault::error("InsufficientInstanceCapacity"),
        usize::MAX,
    );
    let mut spec = warm::spec(&faults.endpoint(), &["t3.micro"], &subnets[..1], 2, 2, 10);
    spec.launch.capacity_type = capacity;
    let (ns, name) = pool.split_once('/').unwrap();
    let mut lp = PoolLoop::new(
        ns,
        name,
        spec,
        &url,
        warm::tuning(Duration::from_secs(60)),
        Fence::always(),
    )
    .await
    .unwrap();
    let report = lp.pass(Utc::now()).await.unwrap();
    let spot: Vec<bool> = present(&ec2, pool)
        .await
        .iter()
        .map(|i| i.offering().spot())
        .collect();
    let calls = faults
        .calls_of("RunInstances")
        .iter()
        .map(|c| {
            let mut p: Vec<String> = c
                .body()
                .split('&')
                .filter(|kv| kv.starts_with("InstanceMarketOptions.MarketType"))
                .map(String::from)
                .collect();
            p.sort();
            p
        })
        .collect();
    (report, spot, calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spot_then_on_demand_launches_on_demand_once_spot_has_no_capacity_and_holds_spot() {
    let (report, spot, calls) = without_spot(CapacityType::SpotThenOnDemand, "spot1/pool").await;
    assert_eq!(
        calls,
        [
            vec!["InstanceMarketOptions.MarketType=spot".to_string()],
            vec![]
        ],
        "spot first, then on-demand"
    );
    assert_eq!(spot, [false, false], "two on-demand instances");
    let held: Vec<(bool, &str)> = report
        .status()
        .capacity_errors
        .iter()
        .map(|e| (e.spot, e.code.as_str()))
        .collect();
    assert_eq!(held, [(true, "InsufficientInstanceCapacity")]);
    let reasons: Vec<&str> = report.events().iter().map(|e| e.reason()).collect();
    assert_eq!(reasons, ["CapacityUnavailable", "Launched"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spot_only_never_falls_back_to_on_demand() {
    let (report, spot, calls) = without_spot(CapacityType::Spot, "spot2/pool").await;
    assert_eq!(
        calls,
        [vec!["InstanceMarketOptions.MarketType=spot".to_string()]]
    );
    assert!(spot.is_empty(), "nothing launched: {spot:?}");
    let reasons: Vec<&str> = report.events().iter().map(|e| e.reason()).collect();
    assert_eq!(reasons, ["CapacityUnavailable", "NoCapacity"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_pool_launches_spot_instances() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let mut spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 1, 1, 10);
    spec.launch.capacity_type = CapacityType::Spot;
    let mut lp = warm::pool_loop("spot3/pool", spec, &url).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    assert_eq!(report.launched().len(), 1, "{report:?}");
    let spot: Vec<bool> = present(&ec2, "spot3/pool")
        .await
        .iter()
        .map(|i| i.offering().spot())
        .collect();
    assert_eq!(spot, [true], "EC2 lists it as a spot instance");
}

/// The two-minute notice on an idle spot instance, end to end: its agent
/// (the real one, reading a stand-in metadata service) ends its idle row and
/// powers the instance off, and the operator launches its replacement.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_interruption_notice_takes_an_idle_instance_out_and_it_is_replaced() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let imds = orca_tests::imds::FakeImds::start().await;
    let pool = "spot4/pool";
    let mut spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 1, 1, 3);
    spec.launch.capacity_type = CapacityType::Spot;
    let env = vec![
        ("ORCA_POOL_AGENT_IMDS".to_string(), imds.url()),
        ("AWS_EC2_METADATA_DISABLED".to_string(), "false".to_string()),
    ];
    let _running = start_with(pool, spec, &url, &moto.endpoint(), "true", env).await;
    let db = pg::connect(&url).await;
    eventually_true("an idle instance", Duration::from_secs(30), || async {
        idle_fresh(&db, pool).await.len() == 1
    })
    .await;
    let first = idle_fresh(&db, pool).await.remove(0);

    imds.interrupt("terminate");
    eventually_true(
        "its idle row ended by its agent",
        Duration::from_secs(20),
        || async {
            db.query_one(
                "select count(*) from orca.instances
             where instance = $1 and ended_by = 'agent' and notice = 'interruption'",
                &[&first],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
                == 1
        },
    )
    .await;
    // The replacement is no spot instance of this notice.
    imds.calm();
    eventually_true(
        "the instance powered off",
        Duration::from_secs(20),
        || async { !present(&ec2, pool).await.iter().any(|i| i.id() == first) },
    )
    .await;
    eventually_true("a replacement idle", Duration::from_secs(30), || async {
        idle_fresh(&db, pool).await.iter().any(|i| *i != first)
    })
    .await;
}

/// The two-minute notice on a busy spot instance: `pool-watch` records it
/// on the run's row, and the operator launches the replacement at once,
/// while the run still goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_interruption_notice_on_a_busy_instance_launches_its_replacement_at_once() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let imds = orca_tests::imds::FakeImds::start().await;
    let pool = "spot5/pool";
    let mut spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 0, 0, 3);
    spec.launch.capacity_type = CapacityType::Spot;
    let env = vec![
        ("ORCA_POOL_AGENT_IMDS".to_string(), imds.url()),
        ("AWS_EC2_METADATA_DISABLED".to_string(), "false".to_string()),
    ];
    let _running = start_with(pool, spec, &url, &moto.endpoint(), "sleep 60", env).await;
    let (db, mut sched) = (pg::connect(&url).await, pg::connect(&url).await);
    let req = request(pool, 1, "");
    ask(&db, &req).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let busy = loop {
        if let Some(h) = hand_out(&mut sched, &req, Duration::from_secs(3))
            .await
            .unwrap()
        {
            break h.instance().to_string();
        }
        assert!(Instant::now() < deadline, "run 1 never handed out");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eventually_true("run 1 joined", Duration::from_secs(20), || async {
        db.query_one(
            "select count(*) from orca.instances where instance = $1 and run = 1 and joined is not null",
            &[&busy],
        )
        .await
        .unwrap()
        .get::<_, i64>(0)
            == 1
    })
    .await;
    assert_eq!(present(&ec2, pool).await.len(), 1);

    imds.interrupt("terminate");
    eventually_true(
        "a replacement launched",
        Duration::from_secs(20),
        || async { present(&ec2, pool).await.len() == 2 },
    )
    .await;
    let row = db
        .query_one(
            "select notice, ended is null, idle is null from orca.instances
             where instance = $1 and run = 1",
            &[&busy],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            row.get::<_, Option<String>>(0),
            row.get::<_, bool>(1),
            row.get::<_, bool>(2)
        ),
        (Some("interruption".into()), true, true),
        "the run goes on, its row noticed"
    );
}

/// The account's spot quota used up (`MaxSpotInstanceCountExceeded`) holds
/// every spot offering at once: under spotThenOnDemand the next call is
/// on-demand. Once, each spot type was asked in turn first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spot_quota_holds_every_spot_offering() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let faults = Ec2Faults::start(&moto.endpoint());
    faults.fail(
        "RunInstances",
        &["InstanceMarketOptions.MarketType=spot"],
        Fault::error("MaxSpotInstanceCountExceeded"),
        usize::MAX,
    );
    let mut spec = warm::spec(
        &faults.endpoint(),
        &["t3.micro", "t3.small"],
        &subnets[..2],
        1,
        1,
        10,
    );
    spec.launch.capacity_type = CapacityType::SpotThenOnDemand;
    let mut lp = warm::pool_loop("spot4/pool", spec, &url).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    let calls = faults.calls_of("RunInstances");
    let spot: Vec<bool> = calls
        .iter()
        .map(|c| c.param("InstanceMarketOptions.MarketType") == Some("spot"))
        .collect();
    assert_eq!(spot, [true, false], "one spot refusal, then on-demand");
    let launched = present(&ec2, "spot4/pool").await;
    assert_eq!(launched.len(), 1);
    assert!(!launched[0].offering().spot());
    assert_eq!(
        report.status().capacity_errors.len(),
        4,
        "{:?}",
        report.status().capacity_errors
    );
    assert!(report.status().capacity_errors.iter().all(|c| c.spot));
}
