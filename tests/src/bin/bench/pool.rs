//! `bench pool`: the WarmPool controller's figures
//! (docs/architecture.md#benchmarks), printed as
//! `| figure | value | target |` lines:
//! - `plan` time for 10 000 instances, and finding the schedule under way;
//! - a pool dropping below target (a hand-out takes its idle instance) →
//!   its `RunInstances` call, p50/p99 (moto's server behind a counting
//!   proxy, a real PostgreSQL, the loop woken by LISTEN);
//! - EC2 calls in a steady-state minute of an idle pool of 100, and of 200
//!   idle pools of one region sharing their listings; a hand-out's launch
//!   beside those 200;
//! - demand → hand-out from the stopped reserve (real agents on local
//!   hosts, moto behind the counting proxy), and the EC2 calls it took;
//! - `plan` for 10 000 instances with a stopped reserve and a schedule;
//! - a pool's pass, 200 pools over 5 WarmPoolClasses at their limits,
//!   beside the same 200 pools without a class.

use orca_operator::fence::Fence;
use std::{
    collections::BTreeMap,
    sync::mpsc,
    time::{Duration, Instant},
};

use crate::figures::{self, ms, percentile, row};
use chrono::Utc;
use orca_operator::crd::{
    IdleRange, IdleSchedule, Period, StoppedRange, WarmPoolClassSpec, WarmPoolSpec,
};
use orca_operator::warmpool::{
    budget::{Budgets, Census, Counted},
    plan::{plan, Ec2Instance, Ec2State, Limits, Offering, PoolRow, Snapshot},
    schedule, Listings, PoolLoop, Tuning,
};
use orca_tests::{ec2_faults::Ec2Faults, moto::Moto, pg, warm};

fn bench_plan() {
    let spec = warm::spec(
        "http://unused",
        &["t3.micro", "t3.small"],
        &["subnet-a".into()],
        100,
        200,
        20_000,
    );
    let now = Utc::now();
    let (mut instances, mut rows) = (Vec::new(), Vec::new());
    for k in 0..10_000i64 {
        let id = format!("i-{k:017x}");
        instances.push(
            Ec2Instance::bare(&id, Ec2State::Running, now - chrono::Duration::seconds(600))
                .with_offering(Offering::new("t3.micro".into(), "subnet-a".into(), false)),
        );
        // A busy pool: 300 idle (100 beyond idle.max), the rest busy.
        let idle = k % 33 == 0 && k < 9_900;
        rows.push(
            PoolRow::new(k, id)
                .with_run((!idle).then_some(k))
                .with_idle_secs(idle.then_some(k as f64))
                .with_polled_secs(Some(0.5))
                .with_uses(1),
        );
    }
    let snap = Snapshot::default()
        .with_instances(instances)
        .with_rows(rows)
        .with_demand(30);
    let limits = Limits::default();
    let mut times: Vec<Duration> = (0..50)
        .map(|_| {
            let t = Instant::now();
            let p = plan(&spec, &snap, &BTreeMap::new(), &limits, now);
            std::hint::black_box(p);
            t.elapsed()
        })
        .collect();
    times.sort();
    row(
        "plan time, 10 000 instances: 300 idle, 9 700 busy, 30 demand (median / max of 50)",
        format!(
            "{} / {}",
            ms(percentile(&times, 0.5)),
            ms(times[times.len() - 1])
        ),
        "≤ 10 ms",
    );
    // What a pass adds before the plan with schedules: which one is under
    // way, each read from its text (five, none active but the last).
    let schedules: Vec<IdleSchedule> = ["0 8 * * 1-5", "0 22 * * *", "30 6 * * sat", "0 12 1 * *"]
        .iter()
        .map(|cron| (*cron, "Europe/Berlin", "1h"))
        .chain([("* * * * *", "UTC", "10m")])
        .map(|(cron, tz, duration)| IdleSchedule {
            period: Period {
                cron: cron.into(),
                timezone: tz.into(),
                duration: duration.into(),
            },
            idle: IdleRange { min: 1, max: 2 },
        })
        .collect();
    let mut times: Vec<Duration> = (0..50)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(schedule::active(&schedules, now).ok());
            t.elapsed()
        })
        .collect();
    bench_plan_with_reserve(&spec, &snap, &schedules, now);
    times.sort();
    row(
        "which of 5 schedules is under way, per pass (median / max of 50)",
        format!(
            "{} / {}",
            ms(percentile(&times, 0.5)),
            ms(times[times.len() - 1])
        ),
        "plan + this ≤ 10 ms",
    );
}

/// The pass's decide step as a pool with a stopped reserve and schedules
/// runs it: the schedule under way, then the plan, over 10 000 instances of
/// which 500 are stopped in the reserve and 300 idle, with demand that
/// starts part of the reserve.
fn bench_plan_with_reserve(
    spec: &WarmPoolSpec,
    busy: &Snapshot,
    schedules: &[IdleSchedule],
    now: chrono::DateTime<Utc>,
) {
    let spec = WarmPoolSpec {
        stopped: Some(StoppedRange {
            min: 400,
            max: Some(600),
        }),
        schedules: schedules.to_vec(),
        ..spec.clone()
    };
    let (mut instances, mut rows) = (busy.instances().to_vec(), busy.rows().to_vec());
    for (i, r) in instances.iter_mut().zip(rows.iter_mut()).take(500) {
        if r.idle_secs().is_none() {
            *i = i.clone().with_state(Ec2State::Stopped);
            *r = r.clone().with_run(None).with_reserved(true);
        }
    }
    let snap = busy
        .clone()
        .with_instances(instances)
        .with_rows(rows)
        .with_demand(400);
    let limits = Limits::default();
    let mut starts = 0;
    let mut times: Vec<Duration> = (0..50)
        .map(|_| {
            let t = Instant::now();
            let active = schedule::active(&spec.schedules, now).ok().flatten();
            let scheduled = WarmPoolSpec {
                idle: active.map_or(spec.idle.clone(), |a| a.idle().clone()),
                ..spec.clone()
            };
            let p = plan(&scheduled, &snap, &BTreeMap::new(), &limits, now);
            starts = p.starts().len();
            std::hint::black_box(p);
            t.elapsed()
        })
        .collect();
    times.sort();
    row(
        &format!(
            "schedule + plan, 10 000 instances: 500 stopped in the reserve ({starts} started), 5 schedules (median / max of 50)"
        ),
        format!(
            "{} / {}",
            ms(percentile(&times, 0.5)),
            ms(times[times.len() - 1])
        ),
        "≤ 10 ms",
    );
}

/// A run's demand met from the stopped reserve: the pool keeps one
/// instance stopped and none idle; a run asks, the operator starts the
/// reserve instance, its real agent boots again on the local host and goes
/// idle, and the run's hand-out succeeds. Timed from the ask to the
/// hand-out, with the EC2 calls made meanwhile.
async fn bench_reserve(moto: &Moto, url: &str, max: Option<i32>) {
    let faults = Ec2Faults::start(&moto.endpoint());
    let ec2 = warm::ec2(&moto.endpoint()).await;
    let subnets = warm::subnets(&ec2).await;
    let name = format!("reserve{}", max.unwrap_or(1));
    let pool = format!("bench/{name}");
    let pool = pool.as_str();
    let mut spec = warm::spec(&faults.endpoint(), &["t3.micro"], &subnets[..1], 0, 0, 10);
    spec.stopped = Some(StoppedRange { min: 1, max });
    let lp = PoolLoop::new(
        "bench",
        &name,
        spec,
        url,
        warm::tuning(Duration::from_secs(600)),
        Fence::always(),
    )
    .await
    .unwrap_or_else(|e| panic!("pool loop: {e}"));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(lp.run(|_| {}, async move {
        let _ = stop_rx.await;
    }));
    let hosts = warm::hosts(&faults.endpoint(), url, pool, "true").await;
    let (hosts_tx, hosts_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(hosts.run(async move {
        let _ = hosts_rx.await;
    }));
    let db = pg::connect(url).await;
    let mut sched = pg::connect(url).await;
    let (mut samples, mut calls) = (Vec::new(), BTreeMap::<String, usize>::new());
    const RUNS: i64 = 10;
    // Run ids of this pool's own.
    let base = 100_000 * i64::from(max.unwrap_or(1));
    for run in 1..=RUNS {
        // The reserve full again: one stopped instance, nothing idle.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let n: i64 = db
                .query_one(
                    "select count(*) from orca.instances
                     where pool = $1 and ended is null and reserved is not null",
                    &[&pool],
                )
                .await
                .unwrap()
                .get(0);
            let stopped = ec2
                .describe(&warm::owner(pool))
                .await
                .unwrap()
                .iter()
                .filter(|i| i.state() == Ec2State::Stopped)
                .count();
            if n == 1 && stopped == 1 {
                break;
            }
            assert!(Instant::now() < deadline, "no stopped reserve within 60 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        faults.forget_calls();
        let asked = Instant::now();
        db.execute(
            "insert into orca.runs (id, pipeline, status, start) values ($1, 'p', 'running', 1)",
            &[&(base + run)],
        )
        .await
        .unwrap();
        let req = orca_db::pool::Request::new(pool, base + run, 1, "head", "", true);
        orca_db::pool::ask_for_instance(&db, &req).await.unwrap();
        loop {
            if orca_db::pool::hand_out(&mut sched, &req, Duration::from_secs(5))
                .await
                .unwrap()
                .is_some()
            {
                break;
            }
            assert!(
                asked.elapsed() < Duration::from_secs(60),
                "no hand-out within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        samples.push(asked.elapsed());
        for c in faults.calls() {
            *calls.entry(c.action().to_string()).or_default() += 1;
        }
    }
    let _ = (stop_tx.send(()), hosts_tx.send(()));
    samples.sort();
    let reserve = format!("stopped {{min: 1, max: {}}}", max.unwrap_or(1));
    row(
        &format!("demand → hand-out from the stopped reserve, {reserve}, idle 0, p50 / max (10 runs; local hosts poll EC2 every 200 ms)"),
        format!(
            "{} / {}",
            ms(percentile(&samples, 0.5)),
            ms(samples[samples.len() - 1])
        ),
        "no launch",
    );
    let per_run = calls
        .iter()
        .map(|(a, n)| format!("{:.1} {a}", *n as f64 / RUNS as f64))
        .collect::<Vec<_>>()
        .join(", ");
    row(
        &format!("EC2 calls by the operator and the local hosts per hand-out from the reserve, {reserve}"),
        per_run,
        "1 StartInstances, 0 RunInstances",
    );
}

async fn add_idle_rows(db: &orca_db::Db, pool: &str, ids: &[String]) {
    db.execute(
        "insert into orca.instances (instance, pool, role, idle, polled)
         select unnest($1::text[]), $2, 'warm', now(), now()",
        &[&ids, &pool],
    )
    .await
    .unwrap_or_else(|e| panic!("inserting idle rows: {e}"));
}

/// A pool whose idle instance a hand-out takes, 40 times: from the
/// hand-out to the pool's `RunInstances`, p50/p99. With `beside`, the pool
/// lists with those pools (`Listings`), and the figure says so.
async fn bench_below_target(moto: &Moto, url: &str, beside: Option<(&Listings, &str)>) {
    let faults = Ec2Faults::start(&moto.endpoint());
    let ec2 = warm::ec2(&moto.endpoint()).await;
    let subnets = warm::subnets(&ec2).await;
    let name = if beside.is_some() {
        "latency-shared"
    } else {
        "latency"
    };
    let pool = &format!("bench/{name}");
    let spec = warm::spec(&faults.endpoint(), &["t3.micro"], &subnets[..1], 1, 1, 1000);
    let tuning = Tuning::default().with_leak_grace(Some(Duration::from_secs(600)));
    let mut lp = PoolLoop::new("bench", name, spec, url, tuning, Fence::always())
        .await
        .unwrap_or_else(|e| panic!("pool loop: {e}"));
    if let Some((listings, _)) = beside {
        lp = lp.with_listings(listings);
    }
    let (launched_tx, launched_rx) = mpsc::channel::<Vec<String>>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(lp.run(
        move |r| {
            if let Ok(r) = r {
                if !r.launched().is_empty() {
                    let _ = launched_tx.send(r.launched().to_vec());
                }
            }
        },
        async move {
            let _ = stop_rx.await;
        },
    ));
    let db = pg::connect(url).await;
    let mut sched = pg::connect(url).await;
    let mut samples = Vec::new();
    for run in 1..=40i64 {
        // Play the agent of what was launched: its warm row, idle.
        let ids = recv(&launched_rx).await;
        add_idle_rows(&db, pool, &ids).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (handed, call) = warm::hand_out_until_launch(&mut sched, &faults, pool, run).await;
        samples.push(call.saturating_duration_since(handed));
    }
    let _ = stop_tx.send(());
    samples.sort();
    let with = beside.map_or(String::new(), |(_, what)| format!(", {what}"));
    row(
        &format!("pool below target → RunInstances, p50 / p99 (40 hand-outs{with})"),
        format!(
            "{} / {}",
            ms(percentile(&samples, 0.5)),
            ms(percentile(&samples, 0.99))
        ),
        "p99 ≤ 250 ms",
    );
}

/// A pool of 20 idle instances whose AMI changes: passes every 100 ms,
/// each instance launched playing its agent at once (an idle row: the
/// boot takes no time here, so what is measured is the loop's own pace),
/// until no instance of the old AMI is left; the time that took and the
/// lowest idle count seen, with `max_drifted` replaced at a time.
async fn bench_drift(moto: &Moto, url: &str, max_drifted: i32) {
    let ec2 = warm::ec2(&moto.endpoint()).await;
    let subnets = warm::subnets(&ec2).await;
    let pool = format!("bench/drift-{max_drifted}");
    let (ns, name) = pool.split_once('/').unwrap_or_default();
    let mut spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 20, 20, 40);
    spec.disruption.max_drifted = max_drifted;
    let tuning = Tuning::default()
        .with_leak_grace(Some(Duration::from_secs(600)))
        .with_listing_reuse(Duration::ZERO);
    let mut lp = PoolLoop::new(ns, name, spec.clone(), url, tuning, Fence::always())
        .await
        .unwrap_or_else(|e| panic!("pool loop: {e}"));
    let db = pg::connect(url).await;
    let idle = || async {
        let n: i64 = db
            .query_one(
                "select count(*) from orca.instances
                 where pool = $1 and ended is null and idle is not null",
                &[&pool],
            )
            .await
            .unwrap()
            .get(0);
        n
    };
    while idle().await < 20 {
        let report = lp
            .pass(Utc::now())
            .await
            .unwrap_or_else(|e| panic!("a pass: {e}"));
        add_idle_rows(&db, &pool, report.launched()).await;
    }
    let new_image = warm::ANOTHER_IMAGE.to_string();
    let mut patched = spec;
    patched.launch.image_id = Some(new_image);
    lp.set_spec(patched).await;
    let started = Instant::now();
    let mut lowest = i64::MAX;
    loop {
        let report = lp
            .pass(Utc::now())
            .await
            .unwrap_or_else(|e| panic!("a pass: {e}"));
        add_idle_rows(&db, &pool, report.launched()).await;
        lowest = lowest.min(idle().await);
        if report.status().drifted == 0 && report.launched().is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "still drifted after 5 minutes: {:?}",
            report.status()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    row(
        &format!(
            "20 idle instances, AMI changed, {max_drifted} at a time (agents played: boots take no time): until no old AMI is left / lowest idle"
        ),
        format!("{} / {lowest} of 20", ms(started.elapsed())),
        "lowest idle ≥ idle.min (20)",
    );
}

/// The agents' beat of the pools `like` names, once a second for all of
/// them, until aborted.
/// `pools` pools `<namespace>/pNNN` of one idle instance each, launched by
/// hand into `subnet` with their idle rows, and their agents beating: the
/// pools' names, and the beat's task.
async fn idle_by_hand(
    ec2: &orca_operator::warmpool::Ec2,
    db: &orca_db::Db,
    url: &str,
    namespace: &str,
    pools: usize,
    subnet: &str,
) -> (Vec<String>, tokio::task::JoinHandle<()>) {
    let names: Vec<String> = (0..pools).map(|i| format!("{namespace}/p{i:03}")).collect();
    for name in &names {
        let ids = warm::launch_by_hand(ec2, name, subnet, 1, &format!("bench-{name}")).await;
        add_idle_rows(db, name, &ids).await;
    }
    (names, agents_beat(url, &format!("{namespace}/%")))
}

fn agents_beat(url: &str, like: &str) -> tokio::task::JoinHandle<()> {
    let (url, like) = (url.to_string(), like.to_string());
    tokio::spawn(async move {
        let db = pg::connect(&url).await;
        loop {
            let _ = db
                .execute(
                    "update orca.instances set polled = now() where pool like $1 and ended is null",
                    &[&like],
                )
                .await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

async fn recv(rx: &mpsc::Receiver<Vec<String>>) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(ids) = rx.try_recv() {
            return ids;
        }
        assert!(
            Instant::now() < deadline,
            "the pool launched nothing within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn bench_steady_state(moto: &Moto, url: &str) {
    let faults = Ec2Faults::start(&moto.endpoint());
    let ec2 = warm::ec2(&moto.endpoint()).await;
    let subnets = warm::subnets(&ec2).await;
    let pool = "bench/steady";
    let ids =
        warm::launch_by_hand(&ec2, pool, &subnets[0], 100, &format!("bench-{pool}-100")).await;
    let db = pg::connect(url).await;
    add_idle_rows(&db, pool, &ids).await;
    let beat = agents_beat(url, "bench/steady");
    let spec = warm::spec(
        &faults.endpoint(),
        &["t3.micro"],
        &subnets[..1],
        100,
        100,
        200,
    );
    let tuning = Tuning::default().with_leak_grace(Some(Duration::from_secs(600)));
    let lp = PoolLoop::new(
        "bench",
        "steady",
        spec,
        url,
        tuning.clone(),
        Fence::always(),
    )
    .await
    .unwrap_or_else(|e| panic!("pool loop: {e}"));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(lp.run(|_| {}, async move {
        let _ = stop_rx.await;
    }));
    // Past the first pass, count a minute.
    tokio::time::sleep(Duration::from_secs(2)).await;
    faults.forget_calls();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let calls = faults.calls();
    let _ = stop_tx.send(());
    beat.abort();
    let text = by_action(&calls);
    row(
        &format!(
            "EC2 calls per steady-state minute, idle pool of 100 (resync {} s)",
            tuning.resync().as_secs()
        ),
        text,
        "a few Describe calls, nothing else",
    );
}

/// `pools` idle pools of one instance each, in one region and endpoint,
/// their loops sharing one `Listings` with the production tuning (resync
/// 20 s): the EC2 calls of a steady minute between all of them; then, with
/// them still running, a hand-out's launch in one more pool of the place.
async fn bench_many_pools(moto: &Moto, url: &str, pools: usize) {
    let faults = Ec2Faults::start(&moto.endpoint());
    let ec2 = warm::ec2(&moto.endpoint()).await;
    let subnets = warm::subnets(&ec2).await;
    let db = pg::connect(url).await;
    let (names, beat) = idle_by_hand(&ec2, &db, url, "many", pools, &subnets[0]).await;
    let tuning = Tuning::default().with_leak_grace(Some(Duration::from_secs(600)));
    let listings = Listings::default();
    let mut stops = Vec::new();
    for name in &names {
        let spec = warm::spec(&faults.endpoint(), &["t3.micro"], &subnets[..1], 1, 1, 3);
        let (_, short) = name.split_once('/').unwrap_or(("many", name));
        let lp = PoolLoop::new("many", short, spec, url, tuning.clone(), Fence::always())
            .await
            .unwrap_or_else(|e| panic!("pool loop: {e}"))
            .with_listings(&listings);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(lp.run(|_| {}, async move {
            let _ = stop_rx.await;
        }));
        stops.push(stop_tx);
    }
    // Past the first passes, count a minute.
    tokio::time::sleep(Duration::from_secs(5)).await;
    faults.forget_calls();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let calls = faults.calls();
    row(
        &format!(
            "EC2 calls per steady-state minute, {pools} idle pools of one region sharing their listings (resync {} s, listings reused {} s)",
            tuning.resync().as_secs(),
            tuning.listing_reuse().as_secs()
        ),
        by_action(&calls),
        "≤ 6",
    );
    bench_below_target(
        moto,
        url,
        Some((
            &listings,
            &format!("{pools} idle pools beside it sharing its listings"),
        )),
    )
    .await;
    for stop in stops {
        let _ = stop.send(());
    }
    beat.abort();
    db.execute("delete from orca.instances where pool like 'many/%'", &[])
        .await
        .unwrap_or_else(|e| panic!("clearing the pools' rows: {e}"));
}

/// The time of one pass of each of 200 pools (one idle instance each,
/// sharing their listings), one pool after another, three rounds: the
/// pools steady without a class (today's), then on 5 classes of 40
/// instances each, every pool wanting one more than its class has room
/// for — each pass counts what it holds and is refused its launch
/// (`LimitReached`). Mean and p99 of a pass, and the ratio.
async fn bench_class_passes(url: &str) {
    const POOLS: usize = 200;
    const CLASSES: usize = 5;
    let moto = Moto::start();
    let ec2 = warm::ec2(&moto.endpoint()).await;
    let subnets = warm::subnets(&ec2).await;
    let db = pg::connect(url).await;
    let (names, beat) = idle_by_hand(&ec2, &db, url, "classed", POOLS, &subnets[0]).await;
    let tuning = Tuning::default().with_leak_grace(Some(Duration::from_secs(600)));
    let budgets = std::sync::Arc::new(Budgets::default());
    let mut class: WarmPoolClassSpec = serde_yaml::from_str(&format!(
        "region: {}\nlaunch: {{imageId: {}, runCommand: 'true'}}\ninstanceTypes: [t3.micro]\n\
         limits: {{instances: {}, vcpus: 100000}}\n",
        warm::REGION,
        warm::IMAGE,
        POOLS / CLASSES
    ))
    .unwrap_or_else(|e| panic!("the bench's class: {e}"));
    class.launch.subnet_ids = subnets[..1].to_vec();
    let class_of = |i: usize| format!("class-{}", i % CLASSES);
    for c in 0..CLASSES {
        budgets.set_limits(&class_of(c), &class);
        // Each pool's one instance, as the class's census lists it.
        let instances = (0..POOLS)
            .filter(|i| i % CLASSES == c)
            .map(|i| Counted::new(format!("i-{i}"), "classed".into(), "t3.micro".into()))
            .collect();
        budgets.census(&class_of(c), Census::new(Instant::now(), instances));
    }
    let listings = Listings::default();
    let mut figures = Vec::new();
    for classed in [false, true] {
        let mut loops = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let (min, max) = if classed { (2, 3) } else { (1, 3) };
            let spec = warm::spec(
                &moto.endpoint(),
                &["t3.micro"],
                &subnets[..1],
                min,
                min,
                max,
            );
            let (_, short) = name.split_once('/').unwrap_or(("classed", name));
            let mut lp =
                PoolLoop::new("classed", short, spec, url, tuning.clone(), Fence::always())
                    .await
                    .unwrap_or_else(|e| panic!("pool loop: {e}"))
                    .with_listings(&listings);
            if classed {
                lp.set_budget(Some(budgets.budget(&class_of(i), name, "classed")));
            }
            loops.push(lp);
        }
        let mut times = Vec::new();
        let mut held_back = 0;
        for round in 0..4 {
            for lp in &mut loops {
                let started = Instant::now();
                let report = lp
                    .pass(Utc::now())
                    .await
                    .unwrap_or_else(|e| panic!("a pass of {}: {e}", lp.pool()));
                // The first round warms the loops up (connections, vCPUs).
                if round > 0 {
                    times.push(started.elapsed());
                    held_back += report
                        .events()
                        .iter()
                        .filter(|e| e.reason() == "LimitReached")
                        .count();
                }
                assert!(report.launched().is_empty(), "{} launched", lp.pool());
            }
        }
        times.sort();
        let mean = times.iter().sum::<Duration>() / times.len() as u32;
        let what = if classed {
            format!("{POOLS} pools over {CLASSES} classes at their limits (every pass held back: {held_back} of {})", times.len())
        } else {
            format!("{POOLS} steady pools without a class (today's)")
        };
        row(
            &format!(
                "a pool's pass, {what}, mean / p99 (3 rounds, one pass at a time, listings shared)"
            ),
            format!("{} / {}", ms(mean), ms(percentile(&times, 0.99))),
            if classed { "≤ 1.5 × today's" } else { "—" },
        );
        figures.push(mean);
    }
    row(
        "a pass on classes at their limits ÷ today's (mean)",
        format!(
            "{:.2} ×",
            figures[1].as_secs_f64() / figures[0].as_secs_f64()
        ),
        "≤ 1.5 ×",
    );
    beat.abort();
    db.execute(
        "delete from orca.instances where pool like 'classed/%'",
        &[],
    )
    .await
    .unwrap_or_else(|e| panic!("clearing the pools' rows: {e}"));
}

/// `calls`, counted by action: "3 DescribeInstances, 1 RunInstances".
fn by_action(calls: &[orca_tests::ec2_faults::Call]) -> String {
    let mut by_action: BTreeMap<String, usize> = BTreeMap::new();
    for c in calls {
        *by_action.entry(c.action().to_string()).or_default() += 1;
    }
    if by_action.is_empty() {
        return "none".to_string();
    }
    by_action
        .iter()
        .map(|(a, n)| format!("{n} {a}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn run(only_classes: bool) {
    warm::aws_env();
    let runtime = figures::runtime();
    // `bench pool classes`: that figure alone.
    if only_classes {
        runtime.block_on(async {
            let url = pg::Cluster::shared().migrated_db().await;
            bench_class_passes(&url).await;
        });
        return;
    }
    bench_plan();
    runtime.block_on(async {
        let moto = Moto::start();
        let url = pg::Cluster::shared().migrated_db().await;
        bench_below_target(&moto, &url, None).await;
        bench_steady_state(&moto, &url).await;
        // A moto of its own: its 200 pools' instances would slow the
        // listings of the figures after it.
        bench_many_pools(&Moto::start(), &url, 200).await;
        bench_class_passes(&url).await;
        // With max = min the instance back from its run finds the reserve
        // refilled by a launch and is retired; with room up to max it is
        // stopped instead.
        bench_reserve(&moto, &url, None).await;
        bench_reserve(&moto, &url, Some(2)).await;
        bench_drift(&moto, &url, 1).await;
        bench_drift(&moto, &url, 5).await;
    });
}
