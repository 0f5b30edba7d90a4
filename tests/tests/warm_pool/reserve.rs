//! The stopped reserve: instances launched, booted once and stopped; a
//! burst of runs starts them before anything is launched, their agents come
//! back idle on the rows they had, and no stopped instance is handed a run.

use orca_db::pool::reserve_idle_rows;
use orca_operator::crd::StoppedRange;

use super::*;

/// The pool's instances EC2 lists as stopped whose live row is in the
/// reserve: `(instance, row)`, sorted.
async fn reserve(ec2: &Ec2, db: &orca_db::Db, pool: &str) -> Vec<(String, i64)> {
    let stopped: Vec<String> = ec2
        .describe(&warm::owner(pool))
        .await
        .unwrap()
        .into_iter()
        .filter(|i| i.state() == Ec2State::Stopped)
        .map(|i| i.id().to_string())
        .collect();
    let rows = db
        .query(
            "select instance, id from orca.instances
             where pool = $1 and ended is null and reserved is not null
               and instance = any($2) and polled is not null
             order by instance",
            &[&pool, &stopped],
        )
        .await
        .unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reserve_of_two_is_kept_stopped_and_started_for_a_burst_before_any_launch() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let faults = Ec2Faults::start(&moto.endpoint());
    let pool = "reserve/pool";
    let dir = std::env::temp_dir().join(format!("orca-warm-reserve-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let run_command = format!("echo \"$ORCA_INSTANCE\" > {}/$ORCA_RUN", dir.display());
    let mut spec = warm::spec(&faults.endpoint(), &["t3.micro"], &subnets[..1], 0, 0, 6);
    spec.stopped = Some(StoppedRange { min: 2, max: None });
    let running = start(pool, spec, &url, &faults.endpoint(), &run_command).await;
    let db = pg::connect(&url).await;

    // Launched for the reserve, booted (their agents reported), stopped.
    eventually_true(
        "two stopped reserve instances",
        Duration::from_secs(60),
        || async { reserve(&ec2, &db, pool).await.len() == 2 && running.status().stopped == 2 },
    )
    .await;
    let kept = reserve(&ec2, &db, pool).await;
    let status = running.status();
    assert_eq!((status.idle, status.launching), (0, 0), "{status:?}");
    assert!(
        idle_fresh(&db, pool).await.is_empty(),
        "a stopped instance is never idle"
    );
    assert!(!faults.calls_of("StopInstances").is_empty());

    // The reserve stands stopped a while (whole seconds for the status,
    // which shows them when the burst changes it).
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // A burst of three runs: the reserve is started before anything is
    // launched.
    faults.forget_calls();
    let served_by = hand_out_all(&url, pool, 1..=3).await;
    let calls: Vec<String> = faults
        .calls()
        .into_iter()
        .map(|c| c.action().to_string())
        .collect();
    let last_start = calls.iter().rposition(|a| a == "StartInstances");
    let first_launch = calls.iter().position(|a| a == "RunInstances");
    assert!(
        last_start.is_some() && first_launch.is_none_or(|l| last_start < Some(l)),
        "launched before starting the whole reserve: {calls:?}"
    );
    let starts: Vec<String> = faults
        .calls_of("StartInstances")
        .into_iter()
        .map(|c| c.body().to_string())
        .collect();
    for (id, _) in &kept {
        assert!(
            starts.iter().any(|b| b.contains(id.as_str())),
            "{id} not started: {starts:?}"
        );
    }

    // A restarted instance's agent came back idle on the row it had: the
    // hand-out that gave it a run ended that very row. (The other one may
    // be back in the reserve by now: once no run waits, spare idle goes
    // there.)
    let served: HashSet<&str> = served_by.iter().map(|(_, i)| i.as_str()).collect();
    let restarted_and_served: Vec<i64> = kept
        .iter()
        .filter(|(id, _)| served.contains(id.as_str()))
        .map(|(_, row)| *row)
        .collect();
    assert!(
        !restarted_and_served.is_empty(),
        "no run went to a restarted instance: {served_by:?}"
    );
    let by_hand_out: i64 = db
        .query_one(
            "select count(*) from orca.instances
             where id = any($1) and ended_by = 'handout' and reserved is null",
            &[&restarted_and_served],
        )
        .await
        .unwrap()
        .get(0);
    assert!(by_hand_out >= 1, "the reserve rows were not handed out");

    // Every run handed out was served, on the instance it was handed: none
    // went to an instance that was not running.
    eventually_true("all three runs served", Duration::from_secs(30), || async {
        (1..=3).all(|run| dir.join(run.to_string()).exists())
    })
    .await;
    for (run, instance) in &served_by {
        let ran_on = std::fs::read_to_string(dir.join(run.to_string())).unwrap();
        assert_eq!(ran_on.trim(), instance, "run {run}");
    }
    let unjoined: i64 = db
        .query_one(
            "select count(*) from orca.instances where pool = $1 and pooled and joined is null",
            &[&pool],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(unjoined, 0);

    // And the reserve is refilled.
    eventually_true("the reserve refilled", Duration::from_secs(60), || async {
        reserve(&ec2, &db, pool).await.len() == 2
    })
    .await;

    // What it cost, as the status says: seconds stopped and running, and
    // the three runs, at least one served from the reserve.
    eventually_true(
        "the status counts the three runs",
        Duration::from_secs(10),
        || async {
            running
                .status()
                .runs_served
                .is_some_and(|s| s.idle + s.reserve + s.cold == 3)
        },
    )
    .await;
    let status = running.status();
    let served = status.runs_served.clone().unwrap();
    assert!(served.reserve >= 1, "{served:?}");
    // And how long they waited, by the same sources: a start from the
    // reserve is no instant hand-out.
    let t = status.time_to_start.clone().unwrap();
    let runs = |f: &Option<orca_operator::crd::StartFigures>| f.as_ref().map_or(0, |f| f.runs);
    assert_eq!(
        (runs(&t.idle), runs(&t.reserve), runs(&t.cold)),
        (served.idle, served.reserve, served.cold),
        "{t:?}"
    );
    assert!(t.reserve.as_ref().unwrap().max_millis > 0, "{t:?}");
    let [seconds] = &status.instance_seconds[..] else {
        panic!(
            "one instance type and capacity type: {:?}",
            status.instance_seconds
        );
    };
    assert_eq!(
        (
            seconds.instance_type.as_str(),
            seconds.capacity_type.as_str()
        ),
        ("t3.micro", "onDemand")
    );
    // The reserve stood stopped for a second or more before the burst.
    assert!(seconds.stopped > 0, "{seconds:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Taking idle rows into the reserve races hand-outs: exactly one of the
/// two wins each row, so an instance about to be stopped is never handed a
/// run, and one just handed a run is never stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_hand_outs_racing_the_reserve_never_both_win() {
    let url = pg::Cluster::shared().migrated_db().await;
    const RACES: i64 = 1000;
    const AT_ONCE: i64 = 20;
    let mut lanes = Vec::new();
    for lane in 0..AT_ONCE {
        let url = url.clone();
        lanes.push(tokio::spawn(async move {
            let (mut sched, operator) = (pg::connect(&url).await, pg::connect(&url).await);
            let (mut handed, mut taken) = (0, 0);
            let mut i = lane;
            while i < RACES {
                let pool = format!("reserve-race/{i}");
                let instance = format!("i-rr{i}");
                report_idle(&operator, &pool, &instance).await;
                let row: i64 = operator
                    .query_one(
                        "select id from orca.instances where instance = $1 and ended is null",
                        &[&instance],
                    )
                    .await
                    .unwrap()
                    .get(0);
                let (req, rows) = (request(&pool, 20_000 + i, ""), [row]);
                let (h, t) = tokio::join!(
                    hand_out(&mut sched, &req, Duration::from_secs(30)),
                    reserve_idle_rows(&operator, &rows)
                );
                let (h, t) = (h.unwrap().is_some(), t.unwrap().contains(&row));
                assert!(
                    h != t,
                    "race {i}: handed out {h}, taken into the reserve {t}"
                );
                handed += i64::from(h);
                taken += i64::from(t);
                i += AT_ONCE;
            }
            (handed, taken)
        }));
    }
    let (mut handed, mut taken) = (0, 0);
    for lane in lanes {
        let (h, t) = lane.await.unwrap();
        handed += h;
        taken += t;
    }
    eprintln!("{handed} hand-outs and {taken} reserve takings won of {RACES} races");
    assert_eq!(handed + taken, RACES);
    // The rows agree: each reserved row is live and not idle; each handed
    // out one ended by the hand-out.
    let db = pg::connect(&url).await;
    let row = db
        .query_one(
            "select count(*) filter (where reserved is not null and ended is null and idle is null),
                    count(*) filter (where ended_by = 'handout' and reserved is null)
             from orca.instances where pool like 'reserve-race/%' and role = 'warm'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, i64>(0), row.get::<_, i64>(1)),
        (taken, handed)
    );
}
