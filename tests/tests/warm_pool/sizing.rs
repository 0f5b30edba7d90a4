//! Sizing: idle.min kept, bursts bounded by maxInstances, idle.max trimmed.

use super::*;

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

    let mut sched = pg::connect(&url).await;
    let mut waiting: Vec<i64> = (1..=50).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !waiting.is_empty() {
        assert!(
            Instant::now() < deadline,
            "runs never handed out: {waiting:?}"
        );
        let mut still = Vec::new();
        for run in waiting {
            let req = request(pool, run, "");
            match hand_out(&mut sched, &req, Duration::from_secs(3))
                .await
                .unwrap()
            {
                Some(_) => {}
                None => {
                    ask(&sched, &req).await;
                    still.push(run);
                }
            }
        }
        waiting = still;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
        .map(|i| i.id)
        .collect();
    assert_eq!(left, by_idle[2..].iter().cloned().collect::<HashSet<_>>());
    let trimmed = |e: &PoolEvent| e.reason == "Terminated" && e.message.contains("IdleBeyondMax");
    assert!(running.events_once(trimmed).await.iter().any(trimmed));
}
