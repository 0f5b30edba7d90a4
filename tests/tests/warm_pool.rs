//! The WarmPool controller (docs/architecture.md#the-warmpool-controller)
//! against moto's EC2 server, a real PostgreSQL and real `orca-pool-agent`
//! processes on local hosts: the scheduler's side is `orca_db::pool`
//! (`hand_out`, `ask_for_instance`), as `orca-sim` uses it.
//!
//! Intervals are shortened through `warm::tuning` (resync 1 s, stale 5 s,
//! leak grace per test); the production defaults are in `pool::Tuning`.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use chrono::Utc;
use orca_db::pool::{ask_for_instance, hand_out, Request};
use orca_operator::pool::{
    ec2::client_token,
    userdata::{self, DatabaseSource},
    Ec2, Ec2State, Offering, PoolEvent, PoolLoop,
};
use orca_tests::{
    ec2_faults::{Ec2Faults, Fault},
    pg, warm,
};
use tokio::sync::oneshot;

/// Polls `check` every 100 ms until it is true; fails saying `what` after
/// `within`.
async fn wait_for<F, Fut>(what: &str, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn present(ec2: &Ec2, pool: &str) -> Vec<orca_operator::pool::Ec2Instance> {
    ec2.describe(&warm::owner(pool))
        .await
        .unwrap()
        .into_iter()
        .filter(|i| i.state.is_present())
        .collect()
}

async fn state_of(ec2: &Ec2, pool: &str, id: &str) -> Option<Ec2State> {
    ec2.describe(&warm::owner(pool))
        .await
        .unwrap()
        .into_iter()
        .find(|i| i.id == id)
        .map(|i| i.state)
}

/// Idle rows of `pool` whose agent polled within 3 s.
async fn idle_fresh(db: &orca_db::Db, pool: &str) -> Vec<String> {
    db.query(
        "select instance from orca.instances
         where pool = $1 and ended is null and idle is not null
           and polled > now() - interval '3 seconds'
         order by idle, id",
        &[&pool],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

fn request(pool: &str, run: i64, head: &str) -> Request<'static> {
    Request {
        pool: Box::leak(pool.to_string().into_boxed_str()),
        run,
        start: 1,
        role: "head",
        head_address: Box::leak(head.to_string().into_boxed_str()),
        new_code: true,
    }
}

/// Asks for an instance for `req`'s run, the run first made `running` at
/// that start in `orca.runs` as a scheduler's run is: demand of a run that
/// does not wait at its start counts for nothing (docs/protocol.md#demand).
async fn ask(db: &orca_db::Db, req: &Request<'_>) {
    db.execute(
        "insert into orca.runs (id, pipeline, status, start) values ($1, 'p', 'running', $2)
         on conflict (id) do nothing",
        &[&req.run, &req.start],
    )
    .await
    .unwrap();
    ask_for_instance(db, req).await.unwrap();
}

/// A pool loop running in the background; its events are collected.
struct Running {
    stop: Vec<oneshot::Sender<()>>,
    events: Arc<Mutex<Vec<PoolEvent>>>,
}

impl Running {
    fn events(&self) -> Vec<PoolEvent> {
        self.events.lock().unwrap().clone()
    }

    /// The events so far, once one that is `what` is among them, or after
    /// 10 s without: a pass reports its events when it ends, after its EC2
    /// calls, so EC2 may show a termination a moment before its event.
    async fn events_once(&self, what: impl Fn(&PoolEvent) -> bool) -> Vec<PoolEvent> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let events = self.events();
            if events.iter().any(&what) || Instant::now() > deadline {
                return events;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn start(
    pool: &str,
    spec: orca_operator::crd::WarmPoolSpec,
    url: &str,
    endpoint: &str,
    run_command: &str,
) -> Running {
    let (ns, name) = pool.split_once('/').unwrap();
    warm::aws_env();
    let lp = PoolLoop::new(ns, name, spec, url, warm::tuning(Duration::from_secs(60)))
        .await
        .unwrap();
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let (stop_loop, stopped_loop) = oneshot::channel::<()>();
    tokio::spawn(lp.run(
        move |r| {
            if let Ok(r) = r {
                sink.lock().unwrap().extend(r.events.iter().cloned());
            }
        },
        async move {
            let _ = stopped_loop.await;
        },
    ));
    let hosts = warm::hosts(endpoint, url, pool, run_command).await;
    let (stop_hosts, stopped_hosts) = oneshot::channel::<()>();
    tokio::spawn(hosts.run(async move {
        let _ = stopped_hosts.await;
    }));
    Running {
        stop: vec![stop_loop, stop_hosts],
        events,
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        for s in self.stop.drain(..) {
            let _ = s.send(());
        }
    }
}

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

    wait_for(
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
    wait_for(
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
    wait_for(
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
    wait_for(
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
    wait_for("two instances trimmed", Duration::from_secs(20), || async {
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

/// The pids of the local agents serving `instance` (started by this test).
fn agent_pids(instance: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if args.len() > 2 && args[1] == b"pool-next" && args[2] == instance.as_bytes() {
            pids.push(pid);
        }
    }
    pids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_max_uses_and_scheduler_ended_instances_are_terminated() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let pool = "retire/pool";
    let mut spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 3, 3, 6);
    spec.max_uses = 1;
    // ORCA_HEAD carries how long the run lasts.
    let running = start(pool, spec, &url, &moto.endpoint(), "sleep \"$ORCA_HEAD\"").await;
    let mut db = pg::connect(&url).await;
    wait_for("3 idle instances", Duration::from_secs(30), || async {
        idle_fresh(&db, pool).await.len() == 3
    })
    .await;

    // maxUses = 1: terminated after its one run.
    let used = hand_out(&mut db, &request(pool, 1, "0.2"), Duration::from_secs(3))
        .await
        .unwrap()
        .expect("an idle instance for run 1");
    wait_for(
        "the used instance terminated",
        Duration::from_secs(20),
        || async { state_of(&ec2, pool, &used.instance).await != Some(Ec2State::Running) },
    )
    .await;
    let idle: Option<bool> = db
        .query_one(
            "select idle is not null from orca.instances where id = $1",
            &[&used.row],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(idle, Some(true), "retired before its run was over");

    // A row the scheduler ends (say the run was cancelled) while the
    // instance works: terminated.
    wait_for(
        "3 idle instances again",
        Duration::from_secs(30),
        || async { idle_fresh(&db, pool).await.len() == 3 },
    )
    .await;
    let busy = hand_out(&mut db, &request(pool, 2, "60"), Duration::from_secs(3))
        .await
        .unwrap()
        .expect("an idle instance for run 2");
    wait_for("run 2 joined", Duration::from_secs(20), || async {
        db.query_one(
            "select joined is not null from orca.instances where id = $1",
            &[&busy.row],
        )
        .await
        .unwrap()
        .get::<_, bool>(0)
    })
    .await;
    db.execute(
        "update orca.instances set ended = now(), ended_by = 'scheduler' where id = $1",
        &[&busy.row],
    )
    .await
    .unwrap();
    wait_for(
        "the instance whose row the scheduler ended terminated",
        Duration::from_secs(20),
        || async { state_of(&ec2, pool, &busy.instance).await != Some(Ec2State::Running) },
    )
    .await;

    // An agent that stops polling (hung): stale, terminated.
    wait_for(
        "3 idle instances once more",
        Duration::from_secs(30),
        || async { idle_fresh(&db, pool).await.len() == 3 },
    )
    .await;
    let hung = idle_fresh(&db, pool).await[0].clone();
    let pids = agent_pids(&hung);
    assert!(!pids.is_empty(), "no agent process found for {hung}");
    for pid in &pids {
        // SAFETY: a plain signal to a child process this test started.
        unsafe { libc::kill(*pid, libc::SIGSTOP) };
    }
    wait_for(
        "the hung instance terminated",
        Duration::from_secs(20),
        || async { state_of(&ec2, pool, &hung).await != Some(Ec2State::Running) },
    )
    .await;
    // The host killed the stopped agent's process group with the instance.
    for (instance, reason) in [
        (&used.instance, "MaxUses"),
        (&busy.instance, "NoLiveRow"),
        (&hung, "Stale"),
    ] {
        let terminated = |e: &PoolEvent| {
            e.reason == "Terminated"
                && e.message.contains(instance.as_str())
                && e.message.contains(reason)
        };
        let events = running.events_once(terminated).await;
        assert!(
            events.iter().any(terminated),
            "no Terminated event for {instance} ({reason}): {events:#?}"
        );
    }
    wait_for("idle.min kept", Duration::from_secs(30), || async {
        idle_fresh(&db, pool).await.len() == 3
    })
    .await;
}

/// Launches `count` instances with `pool`'s ownership tags by hand.
#[tokio::test]
async fn leaked_instances_older_than_the_grace_are_terminated_younger_ones_left() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let pool = "leak/pool";
    let old = warm::launch_by_hand(&ec2, pool, &subnets[0], 1, "leak-old").await;
    let other = warm::launch_by_hand(&ec2, "leak/other", &subnets[0], 1, "leak-other").await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let young = warm::launch_by_hand(&ec2, pool, &subnets[0], 1, "leak-young").await;
    let spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 0, 0, 5);
    let mut lp = PoolLoop::new(
        "leak",
        "pool",
        spec,
        &url,
        warm::tuning(Duration::from_secs(3)),
    )
    .await
    .unwrap();
    let report = lp.pass(Utc::now()).await.unwrap();
    assert_eq!(report.terminated, old);
    assert!(report
        .events
        .iter()
        .any(|e| e.reason == "Terminated" && e.message.contains("Leaked")));
    assert_eq!(
        state_of(&ec2, pool, &young[0]).await,
        Some(Ec2State::Running)
    );
    assert_eq!(
        state_of(&ec2, "leak/other", &other[0]).await,
        Some(Ec2State::Running)
    );
    assert_eq!(
        report.status.launching, 1,
        "the young one counts as booting"
    );
    // Its claim was ended once it was terminated.
    let db = pg::connect(&url).await;
    let live: i64 = db
        .query_one(
            "select count(*) from orca.instances where instance = $1 and ended is null",
            &[&old[0]],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(live, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_hand_outs_racing_retirements_never_terminate_a_handed_out_instance() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let faults = Arc::new(Ec2Faults::start(&moto.endpoint()));
    let db = pg::connect(&url).await;
    let mut scheds = Vec::new();
    for _ in 0..5 {
        scheds.push(pg::connect(&url).await);
    }
    const ROUNDS: usize = 10;
    const PER_ROUND: usize = 100;
    let (mut handed_total, mut terminated_total, mut lost_total) = (0, 0, 0);
    // The hand-outs start `delay` after EC2 answered the pass's listing and
    // spread over
    // `WINDOW`; `delay` is steered so that the pass ends the idle rows in
    // the middle of the hand-outs: some come before it reads the rows,
    // some between its read and its end (the tight race), some after.
    const WINDOW: Duration = Duration::from_millis(30);
    let mut delay = Duration::from_millis(2);
    let mut run = 0i64;
    for round in 0..ROUNDS {
        // A pool per round, so EC2 lists only this round's instances.
        let name = format!("pool{round}");
        let pool = format!("race/{name}");
        let ids = warm::launch_by_hand(
            &ec2,
            &pool,
            &subnets[0],
            PER_ROUND as u32,
            &format!("race-{round}"),
        )
        .await;
        db.execute(
            "insert into orca.instances (instance, pool, role, idle, polled)
             select unnest($1::text[]), $2, 'warm', now(), now()",
            &[&ids, &pool],
        )
        .await
        .unwrap();
        // idle.max 0: every idle instance is to be retired, racing a hand-out.
        let spec = warm::spec(
            &faults.endpoint(),
            &["t3.micro"],
            &subnets[..1],
            0,
            0,
            100_000,
        );
        let mut lp = PoolLoop::new(
            "race",
            &name,
            spec,
            &url,
            warm::tuning(Duration::from_secs(600)),
        )
        .await
        .unwrap();
        let listed = faults.calls_of("DescribeInstances").len();
        // Five schedulers hand out runs, spread over the pass's act step.
        let per = PER_ROUND / 5;
        let mut tasks = Vec::new();
        for (k, mut sched) in scheds.drain(..).enumerate() {
            let runs: Vec<i64> = (0..per).map(|j| run + (k * per + j) as i64 + 1).collect();
            let (faults, pool) = (faults.clone(), pool.clone());
            tasks.push(tokio::spawn(async move {
                while faults
                    .calls_of("DescribeInstances")
                    .get(listed)
                    .is_none_or(|c| c.answered.is_none())
                {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let t0 = tokio::time::Instant::now();
                let mut got = Vec::new();
                for (j, r) in runs.into_iter().enumerate() {
                    let at = delay + WINDOW.mul_f64((j * 5 + k) as f64 / PER_ROUND as f64);
                    tokio::time::sleep_until(t0 + at).await;
                    if let Some(h) =
                        hand_out(&mut sched, &request(&pool, r, ""), Duration::from_secs(60))
                            .await
                            .unwrap()
                    {
                        got.push(h.instance);
                    }
                }
                (sched, got)
            }));
        }
        run += PER_ROUND as i64;
        let report = lp.pass(Utc::now()).await.unwrap();

        let mut handed = HashSet::new();
        for t in tasks {
            let (sched, got) = t.await.unwrap();
            scheds.push(sched);
            handed.extend(got);
        }
        let terminated: HashSet<String> = report.terminated.iter().cloned().collect();
        assert!(
            handed.is_disjoint(&terminated),
            "round {round}: terminated while handed out: {:?}",
            handed.intersection(&terminated).collect::<Vec<_>>()
        );
        assert_eq!(
            handed.len() + terminated.len(),
            PER_ROUND,
            "round {round}: every instance is handed out or retired"
        );
        let busy_terminated: i64 = db
            .query_one(
                "select count(*) from orca.instances
                 where instance = any($1) and ended is null and idle is null",
                &[&report.terminated],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            busy_terminated, 0,
            "round {round}: a terminated instance holds a live run"
        );
        // Every run handed out is served: its instance runs, its row is live.
        let listed = ec2.describe(&warm::owner(&pool)).await.unwrap();
        for id in &handed {
            let state = listed.iter().find(|i| &i.id == id).map(|i| i.state);
            assert_eq!(
                state,
                Some(Ec2State::Running),
                "round {round}: {id} handed out"
            );
        }
        let handed: Vec<String> = handed.into_iter().collect();
        let live: i64 = db
            .query_one(
                "select count(*) from orca.instances
                 where instance = any($1) and ended is null and pooled and run is not null",
                &[&handed],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            live as usize,
            handed.len(),
            "round {round}: a handed-out run lost its row"
        );
        lost_total += report
            .events
            .iter()
            .filter(|e| e.reason == "RetirementLost")
            .count();
        delay = if handed.len() > PER_ROUND / 2 {
            delay.mul_f64(1.5)
        } else {
            delay.div_f64(1.5)
        };
        handed_total += handed.len();
        terminated_total += terminated.len();
    }
    eprintln!(
        "{} races: {handed_total} handed out, {terminated_total} retired, \
         {lost_total} retirements lost to a hand-out holding the row",
        ROUNDS * PER_ROUND
    );
    assert!(
        handed_total > 0 && terminated_total > 0,
        "the two sides never raced"
    );
}

#[tokio::test]
async fn capacity_errors_move_launches_to_the_next_type_or_subnet() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let faults = Ec2Faults::start(&moto.endpoint());
    let (s1, s2) = (&subnets[0], &subnets[1]);
    let pool = "ice/pool";
    let db = pg::connect(&url).await;
    for run in 1..=3 {
        ask(&db, &request(pool, run, "")).await;
    }
    faults.fail(
        "RunInstances",
        &["InstanceType=t3.small"],
        Fault::error("InsufficientInstanceCapacity"),
        usize::MAX,
    );
    faults.fail(
        "RunInstances",
        &["InstanceType=t3.medium", &format!("SubnetId={s1}")],
        Fault::error("InsufficientFreeAddressesInSubnet"),
        usize::MAX,
    );
    let spec = warm::spec(
        &faults.endpoint(),
        &["t3.small", "t3.medium"],
        &[s1.clone(), s2.clone()],
        0,
        0,
        10,
    );
    let mut lp = PoolLoop::new(
        "ice",
        "pool",
        spec,
        &url,
        warm::tuning(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    let report = lp.pass(Utc::now()).await.unwrap();
    let launched = present(&ec2, pool).await;
    assert_eq!(launched.len(), 3, "one instance per unserved demand");
    for i in &launched {
        assert_eq!(
            (
                i.offering.instance_type.as_str(),
                i.offering.subnet.as_str()
            ),
            ("t3.medium", s2.as_str())
        );
    }
    let errors: Vec<(String, String, String)> = report
        .status
        .capacity_errors
        .iter()
        .map(|c| (c.instance_type.clone(), c.subnet.clone(), c.code.clone()))
        .collect();
    let ice = "InsufficientInstanceCapacity".to_string();
    assert_eq!(
        errors,
        [
            (
                "t3.medium".to_string(),
                s1.clone(),
                "InsufficientFreeAddressesInSubnet".to_string()
            ),
            ("t3.small".to_string(), s1.clone(), ice.clone()),
            ("t3.small".to_string(), s2.clone(), ice),
        ]
    );
    assert_eq!(
        report
            .events
            .iter()
            .filter(|e| e.reason == "CapacityUnavailable" && e.warning)
            .count(),
        3
    );
    let degraded = report
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .unwrap();
    assert_eq!(degraded.status, "True");
    // Nothing is launched again for the same demand, and the offerings
    // without capacity are not tried while they are held.
    let calls = faults.calls_of("RunInstances").len();
    lp.pass(Utc::now()).await.unwrap();
    assert_eq!(faults.calls_of("RunInstances").len(), calls);
    assert_eq!(present(&ec2, pool).await.len(), 3);
}

#[tokio::test]
async fn request_limit_exceeded_backs_off_then_succeeds_with_the_same_token() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let faults = Ec2Faults::start(&moto.endpoint());
    let pool = "throttle/pool";
    let db = pg::connect(&url).await;
    for run in 1..=2 {
        ask(&db, &request(pool, run, "")).await;
    }
    // Seven throttled answers: more than one pass retries (5 calls).
    faults.fail("RunInstances", &[], Fault::error("RequestLimitExceeded"), 7);
    let spec = warm::spec(&faults.endpoint(), &["t3.micro"], &subnets[..1], 0, 0, 10);
    let mut lp = PoolLoop::new(
        "throttle",
        "pool",
        spec,
        &url,
        warm::tuning(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    let first = lp.pass(Utc::now()).await.unwrap();
    assert!(first.throttled && first.launched.is_empty());
    assert!(first
        .events
        .iter()
        .any(|e| e.reason == "Throttled" && e.warning));
    let second = lp.pass(Utc::now()).await.unwrap();
    assert!(!second.throttled);
    assert_eq!(second.launched.len(), 2);
    assert_eq!(
        present(&ec2, pool).await.len(),
        2,
        "no demand lost, none doubled"
    );
    let calls = faults.calls_of("RunInstances");
    assert_eq!(calls.len(), 8);
    assert!(calls[..7].iter().all(|c| c.fault.is_some()) && calls[7].fault.is_none());
    let token = calls[0].param("ClientToken").unwrap();
    assert!(calls.iter().all(|c| c.param("ClientToken") == Some(token)));
    // Within a pass the waits grow: each at least the one before.
    let gaps: Vec<Duration> = calls[..5].windows(2).map(|w| w[1].at - w[0].at).collect();
    for w in gaps.windows(2) {
        assert!(
            w[1] + Duration::from_millis(5) >= w[0],
            "back-off shrank: {gaps:?}"
        );
    }
}

#[tokio::test]
async fn an_operator_restarted_in_the_middle_of_a_launch_launches_no_duplicates() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let faults = Ec2Faults::start(&moto.endpoint());
    let db = pg::connect(&url).await;

    // EC2 launched, the operator never heard: the next one sees them.
    let pool = "restart/a";
    for run in 1..=2 {
        ask(&db, &request(pool, run, "")).await;
    }
    faults.fail("RunInstances", &[], Fault::DropResponse, 1);
    let spec = warm::spec(&faults.endpoint(), &["t3.micro"], &subnets[..1], 0, 0, 10);
    let mut first = PoolLoop::new(
        "restart",
        "a",
        spec.clone(),
        &url,
        warm::tuning(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    let report = first.pass(Utc::now()).await.unwrap();
    assert!(report.launched.is_empty());
    assert!(report.events.iter().any(|e| e.reason == "LaunchFailed"));
    drop(first);
    assert_eq!(
        present(&ec2, pool).await.len(),
        2,
        "moto launched the lost call"
    );
    let mut second = PoolLoop::new(
        "restart",
        "a",
        spec,
        &url,
        warm::tuning(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    let report = second.pass(Utc::now()).await.unwrap();
    assert!(report.launched.is_empty());
    assert_eq!(report.status.launching, 2);
    assert_eq!(present(&ec2, pool).await.len(), 2, "no duplicate instances");
    assert_eq!(faults.calls_of("RunInstances").len(), 1);

    // The call never reached EC2: the restarted operator retries it with
    // the same ClientToken (EC2 would answer a repeat with the first
    // call's instances).
    let pool = "restart/b";
    for run in 1..=2 {
        ask(&db, &request(pool, run, "")).await;
    }
    faults.forget_calls();
    faults.fail("RunInstances", &[], Fault::DropRequest, 1);
    let spec = warm::spec(&faults.endpoint(), &["t3.micro"], &subnets[..1], 0, 0, 10);
    let mut third = PoolLoop::new(
        "restart",
        "b",
        spec.clone(),
        &url,
        warm::tuning(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    assert!(third.pass(Utc::now()).await.unwrap().launched.is_empty());
    drop(third);
    let mut fourth = PoolLoop::new(
        "restart",
        "b",
        spec,
        &url,
        warm::tuning(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    assert_eq!(fourth.pass(Utc::now()).await.unwrap().launched.len(), 2);
    assert_eq!(present(&ec2, pool).await.len(), 2);
    let calls = faults.calls_of("RunInstances");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].param("ClientToken"), calls[1].param("ClientToken"));
    // The token is the one derived from what the pool looked like.
    let offering = Offering {
        instance_type: "t3.micro".into(),
        subnet: subnets[0].clone(),
    };
    let mark: i64 = db
        .query_one(
            "select max(id) from orca.pool_demand where pool = $1",
            &[&pool],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        calls[0].param("ClientToken"),
        Some(client_token(pool, &offering, 2, 0, &[], mark).as_str())
    );
}

#[test]
fn user_data_passes_sh_n_and_holds_no_password_with_a_url_file() {
    let secret = "postgres://orca:s3cr3t-pw@db.internal:5432/orca";
    let mut spec = warm::spec(
        "http://unused",
        &["t3.micro"],
        &["subnet-1".into()],
        0,
        0,
        1,
    );
    let with_url = userdata::render(&spec, "ns/pool", DatabaseSource::for_spec(&spec, secret));
    assert!(
        with_url.contains(secret),
        "the default puts the URL in user-data"
    );
    spec.launch.database_url_file = Some("/etc/orca/database-url".into());
    let with_file = userdata::render(&spec, "ns/pool", DatabaseSource::for_spec(&spec, secret));
    assert!(!with_file.contains("s3cr3t-pw"), "{with_file}");
    assert!(with_file.contains("/etc/orca/database-url"));
    for script in [&with_url, &with_file] {
        let out = std::process::Command::new("sh")
            .args(["-n", "-c", script])
            .output()
            .expect("sh is needed to check the user-data");
        assert!(
            out.status.success(),
            "sh -n: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The script itself, run with stand-ins for IMDS (curl), the agent and
/// the power-off: it serves one run with the seed's environment, calls
/// `pool-next` for that run, and powers off when it exits 1.
#[test]
fn user_data_serves_a_run_then_powers_off() {
    let dir = std::env::temp_dir().join(format!("orca-userdata-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display();
    let stub = |name: &str, body: &str| {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::process::Command::new("chmod")
            .arg("+x")
            .arg(&p)
            .status()
            .unwrap();
    };
    stub(
        "curl",
        r#"case "$*" in *api/token*) echo tok ;; *) echo i-0stub ;; esac"#,
    );
    stub(
        "agent",
        &format!(
            r#"echo "$*" >> {d}/agent.calls
if [ ! -e {d}/served ]; then touch {d}/served; echo "next 42 1 10.0.0.1:7077 1"; exit 0; fi
exit 1"#
        ),
    );
    stub("shutdown", &format!("touch {d}/halted"));
    std::fs::write(dir.join("url"), "postgres://u:p@h/db\n").unwrap();
    let mut spec = warm::spec(
        "http://unused",
        &["t3.micro"],
        &["subnet-1".into()],
        0,
        0,
        1,
    );
    spec.launch.agent_path = dir.join("agent").display().to_string();
    spec.launch.database_url_file = Some(dir.join("url").display().to_string());
    spec.launch.run_command = format!("env | grep ^ORCA_ | sort > {d}/env");
    let script = userdata::render(&spec, "ns/pool", DatabaseSource::for_spec(&spec, "unused"));
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(&script)
        .env(
            "PATH",
            format!("{d}:{}", std::env::var("PATH").unwrap_or_default()),
        )
        .output()
        .unwrap();
    assert!(
        out.status.code() == Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let env = std::fs::read_to_string(dir.join("env")).unwrap();
    for want in [
        "ORCA_RUN=42",
        "ORCA_START=1",
        "ORCA_HEAD=10.0.0.1:7077",
        "ORCA_NEW_CODE=1",
        "ORCA_INSTANCE=i-0stub",
        "ORCA_POOL=ns/pool",
        "ORCA_DATABASE_URL=postgres://u:p@h/db",
    ] {
        assert!(env.lines().any(|l| l == want), "{want} not in\n{env}");
    }
    let calls = std::fs::read_to_string(dir.join("agent.calls")).unwrap();
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        ["pool-next i-0stub 0 0 600", "pool-next i-0stub 42 1 600"]
    );
    assert!(dir.join("halted").exists(), "no power-off");
    let _ = std::fs::remove_dir_all(&dir);
}
