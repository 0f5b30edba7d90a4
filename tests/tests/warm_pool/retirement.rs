//! Retirement: stale, used-up, scheduler-ended and leaked instances terminated,
//! and never one that was just handed a run.

use super::*;
use orca_operator::fence::Fence;

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
    eventually_true("3 idle instances", Duration::from_secs(30), || async {
        idle_fresh(&db, pool).await.len() == 3
    })
    .await;

    // maxUses = 1: terminated after its one run.
    let used = hand_out(&mut db, &request(pool, 1, "0.2"), Duration::from_secs(3))
        .await
        .unwrap()
        .expect("an idle instance for run 1");
    eventually_true(
        "the used instance terminated",
        Duration::from_secs(20),
        || async { state_of(&ec2, pool, used.instance()).await != Some(Ec2State::Running) },
    )
    .await;
    let idle: Option<bool> = db
        .query_one(
            "select idle is not null from orca.instances where id = $1",
            &[&used.row()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(idle, Some(true), "retired before its run was over");

    // A row the scheduler ends (say the run was cancelled) while the
    // instance works: terminated.
    eventually_true(
        "3 idle instances again",
        Duration::from_secs(30),
        || async { idle_fresh(&db, pool).await.len() == 3 },
    )
    .await;
    let busy = hand_out(&mut db, &request(pool, 2, "60"), Duration::from_secs(3))
        .await
        .unwrap()
        .expect("an idle instance for run 2");
    eventually_true("run 2 joined", Duration::from_secs(20), || async {
        db.query_one(
            "select joined is not null from orca.instances where id = $1",
            &[&busy.row()],
        )
        .await
        .unwrap()
        .get::<_, bool>(0)
    })
    .await;
    db.execute(
        "update orca.instances set ended = now(), ended_by = 'scheduler' where id = $1",
        &[&busy.row()],
    )
    .await
    .unwrap();
    eventually_true(
        "the instance whose row the scheduler ended terminated",
        Duration::from_secs(20),
        || async { state_of(&ec2, pool, busy.instance()).await != Some(Ec2State::Running) },
    )
    .await;

    // An agent that stops polling (hung): stale, terminated.
    eventually_true(
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
    eventually_true(
        "the hung instance terminated",
        Duration::from_secs(20),
        || async { state_of(&ec2, pool, &hung).await != Some(Ec2State::Running) },
    )
    .await;
    // The host killed the stopped agent's process group with the instance.
    for (instance, reason) in [
        (used.instance(), "MaxUses"),
        (busy.instance(), "NoLiveRow"),
        (hung.as_str(), "Stale"),
    ] {
        // Or named by a `TerminateFailed`, gone all the same: moto answers
        // a TerminateInstances the SDK retried (a slow call, under load)
        // with `InvalidAttachment.NotFound` once the first attempt began
        // terminating it, where EC2 would answer it again.
        let terminated = |e: &PoolEvent| {
            (e.reason() == "Terminated"
                && e.message().contains(instance)
                && e.message().contains(reason))
                || (e.reason() == "TerminateFailed"
                    && e.message().contains(instance)
                    && e.message().contains("InvalidAttachment.NotFound"))
        };
        let events = running.events_once(terminated).await;
        assert!(
            events.iter().any(terminated),
            "no Terminated event for {instance} ({reason}): {events:#?}"
        );
    }
    eventually_true("idle.min kept", Duration::from_secs(30), || async {
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
        Fence::always(),
    )
    .await
    .unwrap();
    let report = lp.pass(Utc::now()).await.unwrap();
    assert_eq!(report.terminated(), old);
    assert!(report
        .events()
        .iter()
        .any(|e| e.reason() == "Terminated" && e.message().contains("Leaked")));
    assert_eq!(
        state_of(&ec2, pool, &young[0]).await,
        Some(Ec2State::Running)
    );
    assert_eq!(
        state_of(&ec2, "leak/other", &other[0]).await,
        Some(Ec2State::Running)
    );
    assert_eq!(
        report.status().launching,
        1,
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
    let (moto, url, ec2, mut subnets) = warm::Stage::new().await.parts();
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
        // A pool per round, on an EC2 holding only this round's instances:
        // moto's listing of ten rounds' thousand took seconds of its CPU.
        if round > 0 {
            moto.reset();
            subnets = warm::subnets(&ec2).await;
        }
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
            Fence::always(),
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
                    .is_none_or(|c| c.answered().is_none())
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
                        got.push(h.instance().to_string());
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
        let terminated: HashSet<String> = report.terminated().iter().cloned().collect();
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
                &[&report.terminated()],
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
            let state = listed.iter().find(|i| i.id() == id).map(|i| i.state());
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
            .events()
            .iter()
            .filter(|e| e.reason() == "RetirementLost")
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
