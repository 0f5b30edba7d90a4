//! Spot notices (docs/protocol.md#spot-notices), from a stand-in metadata
//! service: an idle agent leaves the pool, a busy instance's watcher
//! records the notice, and a notice racing a hand-out never loses the run.

use std::sync::atomic::{AtomicUsize, Ordering};

use orca_tests::imds::FakeImds;

use super::*;

/// The environment that points an agent at `imds`.
fn at(imds: &FakeImds) -> [(&'static str, String); 2] {
    [
        ("AWS_EC2_METADATA_DISABLED", "false".into()),
        ("ORCA_POOL_AGENT_IMDS", imds.url()),
    ]
}

fn spawn(url: &str, args: &[&str], env: &[(&str, String)]) -> Agent {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Agent::spawn(url, args, &env)
}

/// Waits until the agent has read `spot/instance-action` `n` times.
async fn polled(imds: &FakeImds, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while imds.polls() < n {
        assert!(
            Instant::now() < deadline,
            "the agent read the metadata service {} times, not {n}",
            imds.polls()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// (ended_by, notice, whether noticed is set, whether idle is set)
async fn row_state(db: &orca_db::Db, row: i64) -> (Option<String>, Option<String>, bool, bool) {
    let r = db
        .query_one(
            "select ended_by, notice, noticed is not null, idle is not null
             from orca.instances where id = $1",
            &[&row],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2), r.get(3))
}

#[tokio::test]
async fn an_idle_agent_given_a_notice_ends_its_row_and_exits_1() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut db = pg::connect(&url).await;
    for (i, notice) in ["interruption", "rebalance"].into_iter().enumerate() {
        let imds = FakeImds::start().await;
        let (instance, pool_name) = (format!("i-0idle{i}"), format!("ns/spot{i}"));
        let mut env = at(&imds).to_vec();
        env.push(("ORCA_POOL", pool_name.clone()));
        let mut agent = spawn(&url, &["pool-next", &instance, "0", "0", "600"], &env);
        let row = idle_row(&db, &instance).await;
        // It reads the service while it waits, and a service with no notice
        // changes nothing.
        polled(&imds, 2).await;
        assert!(agent.is_running(), "{}", agent.stderr());
        assert_eq!(row_state(&db, row).await, (None, None, false, true));
        let raised = Instant::now();
        match notice {
            "interruption" => imds.interrupt("terminate"),
            _ => imds.rebalance(),
        }
        let (code, out, err) = agent.exit_within(Duration::from_secs(5)).await;
        assert_eq!((code, out.as_str()), (1, ""), "{err}");
        assert!(
            raised.elapsed() < Duration::from_secs(4),
            "left {:?} after the notice",
            raised.elapsed()
        );
        assert!(err.contains("spot notice; idle row ended"), "{err}");
        assert_eq!(
            row_state(&db, row).await,
            (Some("agent".into()), Some(notice.into()), true, true)
        );
        // The instance is out of the pool: no hand-out takes it.
        let req = request(&pool_name, 7, 0, "worker", "h:1", false);
        assert_eq!(pool::hand_out(&mut db, &req, FRESH).await.unwrap(), None);
    }

    // An instance noticed during its run: pool-next after the run marks the
    // run's row idle (the run is over, as its scheduler must learn), then
    // leaves at once.
    let imds = FakeImds::start().await;
    imds.interrupt("stop");
    let served: i64 = db
        .query_one(
            "insert into orca.instances (instance, pool, run, start, role, pooled, joined)
             values ('i-0after', 'ns/spot', 5, 1, 'head', true, now()) returning id",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let agent = spawn(
        &url,
        &["pool-next", "i-0after", "5", "1", "600"],
        &at(&imds),
    );
    let (code, out, err) = agent.exit_within(Duration::from_secs(5)).await;
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(
        row_state(&db, served).await,
        (
            Some("agent".into()),
            Some("interruption".into()),
            true,
            true
        )
    );
}

#[tokio::test]
async fn a_busy_instances_watcher_records_the_notice_on_its_row() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut db = pg::connect(&url).await;
    // A busy instance: handed a run, as a scheduler does it.
    let fresh = Agent::fresh(&url, "i-0busy", "ns/busy", "600", "");
    idle_row(&db, "i-0busy").await;
    let req = request("ns/busy", 12, 1, "head", "", true);
    let handed = pool::hand_out(&mut db, &req, FRESH)
        .await
        .unwrap()
        .expect("an idle instance");
    let (code, out, _) = fresh.exit_within(Duration::from_secs(5)).await;
    assert_eq!((code, out.as_str()), (0, "next 12 1  1\n"));

    let imds = FakeImds::start().await;
    let mut watcher = spawn(&url, &["pool-watch", "i-0busy"], &at(&imds));
    polled(&imds, 2).await;
    assert!(watcher.is_running(), "{}", watcher.stderr());
    assert_eq!(
        row_state(&db, handed.row()).await,
        (None, None, false, false)
    );
    // The operator's pool loops hear of a notice.
    db.listen("orca_pool").await.unwrap();
    db.drain_notifications();
    // A token that has expired is asked for again.
    let tokens = imds.tokens_issued();
    imds.expire_tokens();
    imds.rebalance();
    let deadline = Instant::now() + Duration::from_secs(5);
    while row_state(&db, handed.row()).await.1.is_none() {
        assert!(
            Instant::now() < deadline,
            "no notice recorded; stderr:\n{}",
            watcher.stderr()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        row_state(&db, handed.row()).await,
        (None, Some("rebalance".into()), true, false),
        "recorded on the busy row, which stays live and busy"
    );
    assert!(imds.refused() >= 1 && imds.tokens_issued() > tokens);
    let woken = tokio::time::timeout(Duration::from_secs(5), db.notification())
        .await
        .expect("no notification on orca_pool")
        .expect("the test's connection closed");
    assert_eq!(woken.payload(), "ns/busy");
    // A rebalance may be followed by an interruption: it watches on, then
    // records the interruption over it and is done.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(watcher.is_running(), "{}", watcher.stderr());
    imds.interrupt("terminate");
    let (code, out, err) = watcher.exit_within(Duration::from_secs(5)).await;
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    assert_eq!(
        row_state(&db, handed.row()).await,
        (None, Some("interruption".into()), true, false)
    );
    // An interruption is never replaced by a rebalance.
    assert_eq!(
        pool::record_notice(&db, "i-0busy", pool::Notice::Rebalance)
            .await
            .unwrap(),
        Some(handed.row())
    );
    assert_eq!(
        row_state(&db, handed.row()).await.1.as_deref(),
        Some("interruption")
    );
}

#[tokio::test]
async fn a_metadata_service_out_of_reach_is_said_once_and_is_not_fatal() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut db = pg::connect(&url).await;
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gone = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let env = [
        ("ORCA_POOL", "ns/noimds".to_string()),
        ("AWS_EC2_METADATA_DISABLED", "false".into()),
        ("ORCA_POOL_AGENT_IMDS", gone.clone()),
    ];
    let mut agent = spawn(&url, &["pool-next", "i-0noimds", "0", "0", "600"], &env);
    idle_row(&db, "i-0noimds").await;
    tokio::time::sleep(Duration::from_millis(3200)).await;
    assert!(agent.is_running(), "{}", agent.stderr());
    let req = request("ns/noimds", 3, 0, "worker", "h:1", false);
    pool::hand_out(&mut db, &req, FRESH)
        .await
        .unwrap()
        .expect("still idle");
    let (code, out, err) = agent.exit_within(Duration::from_secs(5)).await;
    assert_eq!((code, out.as_str()), (0, "next 3 0 h:1 0\n"), "{err}");
    assert_eq!(
        err.matches("cannot read the instance metadata service")
            .count(),
        1,
        "{err}"
    );

    // pool-watch rides it out too; with the service disabled it has nothing
    // to watch and is done at once.
    let mut watcher = spawn(&url, &["pool-watch", "i-0noimds"], &env[1..]);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(watcher.is_running(), "{}", watcher.stderr());
    drop(watcher);
    let disabled = spawn(
        &url,
        &["pool-watch", "i-0noimds"],
        &[("AWS_EC2_METADATA_DISABLED", "true".into())],
    );
    let (code, _, _) = disabled.exit_within(Duration::from_secs(5)).await;
    assert_eq!(code, 0);
    // The stand-in is a test's setting alone, and says so.
    let help = std::process::Command::new(bins::path("orca-pool-agent"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.lines()
            .any(|l| l.contains("ORCA_POOL_AGENT_IMDS") && l.contains("TEST ONLY")),
        "{help}"
    );
    // A stand-in that is not a URL is a usage error, like any other.
    let bad = spawn(
        &url,
        &["pool-watch", "i-0noimds"],
        &[
            ("AWS_EC2_METADATA_DISABLED", "false".into()),
            ("ORCA_POOL_AGENT_IMDS", "169.254.169.254".into()),
        ],
    );
    let (code, out, err) = bad.exit_within(Duration::from_secs(5)).await;
    assert_eq!(
        (code, out.as_str(), err.lines().count()),
        (2, "", 1),
        "{err}"
    );
}

/// Hand-outs that won after the agent had read its notice and tried to
/// leave.
static CLOSE_CALLS: AtomicUsize = AtomicUsize::new(0);

/// How one race ended, as a user sees it.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// The hand-out won: the agent printed the run's `next` line, so the
    /// user-data runs it.
    Taken,
    /// The notice won: no hand-out, the agent left (exit 1, the instance
    /// powers off) and the run asks for another instance.
    Left,
}

/// One race of a notice against a hand-out on instance `i`.
async fn race(url: &str, db: &mut orca_db::Db, i: i64) -> Result<Seen, String> {
    let imds = FakeImds::start().await;
    let instance = format!("i-spot{i}");
    let pool_name = format!("spot/{i}");
    let run = 30_000 + i;
    let mut env = at(&imds).to_vec();
    env.push(("ORCA_POOL", pool_name.clone()));
    let agent = spawn(url, &["pool-next", &instance, "0", "0", "600"], &env);
    agent.logged(" idle", Duration::from_secs(20)).await;
    imds.hold_notices();
    if i % 2 == 0 {
        imds.interrupt("terminate");
    } else {
        imds.rebalance();
    }
    // The agent has asked and the notice is held back: it gets it (then
    // records it and ends its row, two statements) and the hand-out starts
    // within a few milliseconds of each other, either first.
    imds.notice_asked(Duration::from_secs(20)).await;
    let offset = (i * 7919) % 8000 - 4000;
    let req = request(&pool_name, run, 0, "worker", "10.2.2.2:1", false);
    let hand_out = async {
        tokio::time::sleep(Duration::from_micros(offset.max(0) as u64)).await;
        pool::hand_out(db, &req, FRESH).await
    };
    let notice = async {
        tokio::time::sleep(Duration::from_micros((-offset).max(0) as u64)).await;
        imds.release();
    };
    let (handed, ()) = tokio::join!(hand_out, notice);
    let handed = handed.map_err(|e| e.to_string())?;
    if handed.is_none() {
        // What the scheduler does without an idle instance.
        pool::ask_for_instance(db, &req)
            .await
            .map_err(|e| e.to_string())?;
    }
    let (code, out, err) = agent.exit_within(Duration::from_secs(20)).await;
    match (handed, code) {
        (Some(h), 0)
            if h.instance() == instance && out == format!("next {run} 0 10.2.2.2:1 0\n") =>
        {
            if err.contains("handed out or ended first") {
                CLOSE_CALLS.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Seen::Taken)
        }
        (None, 1) if out.is_empty() && err.contains("spot notice; idle row ended") => {
            Ok(Seen::Left)
        }
        (handed, code) => Err(format!(
            "race {i}: hand-out {handed:?}, agent exited {code} printing {out:?}; stderr:\n{err}"
        )),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_notices_racing_hand_outs_lose_no_run() {
    let url = pg::Cluster::shared().migrated_db().await;
    const RACES: i64 = 1000;
    const AT_ONCE: i64 = 100;
    let started = Instant::now();
    let mut lanes = Vec::new();
    for lane in 0..AT_ONCE {
        let url = url.clone();
        lanes.push(tokio::spawn(async move {
            let mut db = pg::connect(&url).await;
            let mut taken = 0;
            let mut i = lane;
            while i < RACES {
                if race(&url, &mut db, i).await? == Seen::Taken {
                    taken += 1;
                }
                i += AT_ONCE;
            }
            Ok::<i64, String>(taken)
        }));
    }
    let mut taken = 0;
    for lane in lanes {
        taken += lane.await.unwrap().unwrap_or_else(|e| panic!("{e}"));
    }
    eprintln!(
        "{taken} of {RACES} hand-outs won against the notice, {} of them after the agent had tried to leave; {:?}",
        CLOSE_CALLS.load(Ordering::Relaxed),
        started.elapsed()
    );
    // Both outcomes happened, so the races were real.
    assert!(
        taken > 0 && taken < RACES,
        "{taken} of {RACES} hand-outs won"
    );
    // The database agrees: every hand-out joined by its instance; every
    // other race an idle row its agent ended with the notice on it, and the
    // run's demand still open for the operator to launch another instance.
    let db = pg::connect(&url).await;
    let row = db
        .query_one(
            "select (select count(*) from orca.instances where pooled and joined is not null),
                    (select count(*) from orca.instances where pooled and joined is null),
                    (select count(*) from orca.instances
                     where role = 'warm' and ended_by = 'agent' and notice is not null),
                    (select count(*) from orca.pool_demand where served is null)",
            &[],
        )
        .await
        .unwrap();
    let counts: (i64, i64, i64, i64) = (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(counts, (taken, 0, RACES - taken, RACES - taken));
}
