//! Sizing: idle.min kept, bursts bounded by maxInstances, idle.max trimmed.

use super::*;
use orca_operator::fence::Fence;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_min_is_kept_and_a_burst_of_50_runs_never_passes_max_instances() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let pool = "burst/pool";
    let dir = std::env::temp_dir().join(format!("orca-warm-burst-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run_command = format!("sleep 0.2; touch {}/$ORCA_RUN", dir.display());
    let spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 2, 3, 6);
    let _running = start(pool, spec, &url, &moto.endpoint(), &run_command).await;
    let db = pg::connect(&url).await;

    eventually_true(
        "idle.min (2) idle instances",
        Duration::from_secs(30),
        || async { idle_fresh(&db, pool).await.len() >= 2 },
    )
    .await;

    // Watch the number of instances while the burst runs.
    let most = Arc::new(Mutex::new(0usize));
    let (watch_ec2, watch_most) = (warm::ec2(&moto.endpoint()).await, most.clone());
    let watcher = tokio::spawn(async move {
        loop {
            let n = present(&watch_ec2, pool).await.len();
            {
                let mut m = watch_most.lock().unwrap();
                *m = (*m).max(n);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });

    hand_out_all(&url, pool, 1..=50).await;
    eventually_true(
        "every run of the burst served",
        Duration::from_secs(30),
        || async { (1..=50).all(|r| dir.join(r.to_string()).exists()) },
    )
    .await;
    let peak = *most.lock().unwrap();
    assert!(peak <= 6, "{peak} instances at once, maxInstances is 6");
    assert!(
        peak > 3,
        "demand launched nothing beyond idle.max: at most {peak} instances"
    );

    // Demand served: back to between idle.min and idle.max.
    eventually_true(
        "the pool back within idle.max",
        Duration::from_secs(30),
        || async {
            let n = present(&ec2, pool).await.len();
            (2..=3).contains(&n) && idle_fresh(&db, pool).await.len() >= 2
        },
    )
    .await;
    watcher.abort();
    let peak = *most.lock().unwrap();
    assert!(peak <= 6, "{peak} instances at once, maxInstances is 6");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_max_trims_the_longest_idle_first() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let pool = "trim/pool";
    let db = pg::connect(&url).await;
    for run in 1..=4 {
        ask(&db, &request(pool, run, "")).await;
    }
    let spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 0, 2, 8);
    let running = start(pool, spec, &url, &moto.endpoint(), "true").await;
    eventually_true(
        "4 idle instances for 4 runs' demand",
        Duration::from_secs(30),
        || async { idle_fresh(&db, pool).await.len() == 4 },
    )
    .await;
    let by_idle = idle_fresh(&db, pool).await;
    db.execute(
        "update orca.pool_demand set served = now() where pool = $1",
        &[&pool],
    )
    .await
    .unwrap();
    eventually_true("two instances trimmed", Duration::from_secs(20), || async {
        present(&ec2, pool).await.len() == 2
    })
    .await;
    let ended: HashSet<String> = db
        .query(
            "select instance from orca.instances where pool = $1 and ended_by = 'operator'",
            &[&pool],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ended, by_idle[..2].iter().cloned().collect::<HashSet<_>>());
    let left: HashSet<String> = present(&ec2, pool)
        .await
        .into_iter()
        .map(|i| i.id().to_string())
        .collect();
    assert_eq!(left, by_idle[2..].iter().cloned().collect::<HashSet<_>>());
    let trimmed =
        |e: &PoolEvent| e.reason() == "Terminated" && e.message().contains("IdleBeyondMax");
    assert!(running.events_once(trimmed).await.iter().any(trimmed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_out_launches_without_a_new_listing_and_nothing_is_launched_twice() {
    let (moto, url, _ec2, subnets) = warm::Stage::new().await.parts();
    let faults = Ec2Faults::start(&moto.endpoint());
    let pool = "relist/pool";
    let spec = warm::spec(&faults.endpoint(), &["t3.micro"], &subnets[..1], 1, 1, 3);
    let tuning = warm::tuning(Duration::from_secs(60)).with_listing_reuse(Duration::from_secs(3));
    warm::aws_env();
    let mut lp = PoolLoop::new(
        "relist",
        "pool",
        spec.clone(),
        &url,
        tuning,
        Fence::always(),
    )
    .await
    .unwrap();
    let db = pg::connect(&url).await;
    let lists = || faults.calls_of("DescribeInstances").len();

    let first = lp.pass(Utc::now()).await.unwrap();
    assert_eq!((lists(), first.launched().len()), (1, 1), "{first:?}");
    // The agent reports idle; the listing (older than the launch) lacks
    // the instance, the loop knows it launched it: nothing more launched.
    report_idle(&db, pool, &first.launched()[0]).await;
    let quiet = lp.pass(Utc::now()).await.unwrap();
    assert_eq!((lists(), quiet.launched().len()), (1, 0), "{quiet:?}");
    // A hand-out takes it: its replacement without waiting for a listing.
    let mut sched = pg::connect(&url).await;
    hand_out(&mut sched, &request(pool, 1, ""), Duration::from_secs(3))
        .await
        .unwrap()
        .expect("the idle instance handed out");
    let refill = lp.pass(Utc::now()).await.unwrap();
    assert_eq!((lists(), refill.launched().len()), (1, 1), "{refill:?}");
    assert_eq!(refill.status().busy, 1, "{:?}", refill.status());

    // A new spec lists afresh; so does the pass after a termination.
    report_idle(&db, pool, &refill.launched()[0]).await;
    lp.set_spec(warm::spec(
        &faults.endpoint(),
        &["t3.micro"],
        &subnets[..1],
        0,
        0,
        3,
    ))
    .await;
    let trim = lp.pass(Utc::now()).await.unwrap();
    assert_eq!(trim.terminated(), refill.launched(), "{trim:?}");
    assert_eq!(lists(), 2, "a pass on a new spec lists EC2");
    lp.pass(Utc::now()).await.unwrap();
    assert_eq!(lists(), 3, "a pass after a termination lists EC2");
    lp.pass(Utc::now()).await.unwrap();
    assert_eq!(lists(), 3, "a quiet pass reuses the listing");
    // And a listing older than `listing_reuse` is not reused.
    tokio::time::sleep(Duration::from_secs(3)).await;
    lp.pass(Utc::now()).await.unwrap();
    assert_eq!(lists(), 4, "a listing past listing_reuse is taken afresh");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_powered_off_since_the_listing_is_looked_at_again_not_terminated_twice() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let faults = Ec2Faults::start(&moto.endpoint());
    let pool = "poweroff/pool";
    let spec = warm::spec(&faults.endpoint(), &["t3.micro"], &subnets[..1], 1, 1, 3);
    let tuning = warm::tuning(Duration::from_secs(60)).with_listing_reuse(Duration::from_secs(3));
    warm::aws_env();
    let mut lp = PoolLoop::new("poweroff", "pool", spec, &url, tuning, Fence::always())
        .await
        .unwrap();
    let db = pg::connect(&url).await;
    let lists = || faults.calls_of("DescribeInstances").len();

    let first = lp.pass(Utc::now()).await.unwrap();
    let x = first.launched()[0].clone();
    report_idle(&db, pool, &x).await;
    // A listing that shows it, idle.
    tokio::time::sleep(Duration::from_secs(3)).await;
    lp.pass(Utc::now()).await.unwrap();
    assert_eq!(lists(), 2);
    // Its agent ends its row and powers it off (idle too long, say).
    db.execute(
        "update orca.instances set ended = now(), ended_by = 'agent' where instance = $1",
        &[&x],
    )
    .await
    .unwrap();
    ec2.terminate(std::slice::from_ref(&x)).await.unwrap();
    let next = lp.pass(Utc::now()).await.unwrap();
    assert_eq!(
        lists(),
        3,
        "the reused listing shows it alive: looked again"
    );
    assert!(next.terminated().is_empty(), "terminated again: {next:?}");
    assert_eq!(next.launched().len(), 1, "its replacement: {next:?}");
}
