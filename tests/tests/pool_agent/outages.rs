//! The database going away: an outage both commands ride out, a killed
//! listener, and a database that never answers.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_commands_ride_out_a_database_outage() {
    let cluster = Arc::new(pg::Cluster::private());
    let url = cluster.migrated_db().await;
    let db = pg::connect(&url).await;
    let run: i64 = db
        .query_one("insert into orca.runs (pipeline, status, start) values ('p', 'running', 1) returning id", &[])
        .await
        .unwrap()
        .get(0);
    db.execute(
        "insert into orca.instances (instance, pool, run, start, role, pooled, joined) values ('i-0work', 'ns/o', $1, 1, 'worker', true, now())",
        &[&run],
    )
    .await
    .unwrap();
    let mut next = Agent::fresh(&url, "i-0out", "ns/o", "600", "");
    let mut wait = Agent::spawn(&url, &["pool-wait", "i-0work", &run.to_string(), "1"], &[]);
    idle_row(&db, "i-0out").await;
    agents_connected(&db, 2).await;
    // The fixture's server commits asynchronously; its immediate stop would
    // lose the last commits (the schema itself) but for this.
    db.batch("checkpoint").await.unwrap();
    drop(db);

    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.stop()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        next.is_running(),
        "pool-next exited during the outage: {}",
        next.stderr()
    );
    assert!(
        wait.is_running(),
        "pool-wait exited during the outage: {}",
        wait.stderr()
    );
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.start())
        .await
        .unwrap();

    let mut db = pg::connect(&url).await;
    let req = request("ns/o", 77, 3, "head", "10.2.2.2:1", true);
    let handed = pool::hand_out(&mut db, &req, Duration::from_secs(120))
        .await
        .unwrap();
    assert_eq!(
        handed.map(|h| h.instance().to_string()).as_deref(),
        Some("i-0out")
    );
    let (code, out, next_err) = next.exit_within(Duration::from_secs(10)).await;
    assert_eq!(
        (code, out.as_str()),
        (0, "next 77 3 10.2.2.2:1 1\n"),
        "{next_err}"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        wait.is_running(),
        "pool-wait exited though its run goes on: {}",
        wait.stderr()
    );
    db.execute(
        "update orca.runs set status = 'succeeded' where id = $1",
        &[&run],
    )
    .await
    .unwrap();
    let (code, out, wait_err) = wait.exit_within(Duration::from_secs(10)).await;
    assert_eq!((code, out.as_str()), (0, ""));
    for (name, err) in [("pool-next", next_err), ("pool-wait", wait_err)] {
        let count = |word: &str| err.lines().filter(|l| l.contains(word)).count();
        assert_eq!(
            (count("unreachable"), count("reconnected")),
            (1, 1),
            "{name} should say once that the database is lost and once that it is back:\n{err}"
        );
    }
}

#[tokio::test]
async fn a_killed_listener_still_sees_the_next_hand_out_within_a_second() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut db = pg::connect(&url).await;
    let agent = Agent::fresh(&url, "i-0kill", "ns/k", "600", "");
    idle_row(&db, "i-0kill").await;
    agents_connected(&db, 1).await;
    let killed: i64 = db
        .query_one(
            "select count(pg_terminate_backend(pid)) from pg_stat_activity
             where datname = current_database() and application_name = 'orca-pool-agent'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(killed, 1);
    let req = request("ns/k", 5, 1, "worker", "10.3.3.3:1", false);
    pool::hand_out(&mut db, &req, FRESH)
        .await
        .unwrap()
        .expect("the idle instance");
    let started = Instant::now();
    let (code, out, _) = agent.exit_within(Duration::from_secs(5)).await;
    assert_eq!((code, out.as_str()), (0, "next 5 1 10.3.3.3:1 0\n"));
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn an_unreachable_database_is_said_once_without_the_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/orca?sslmode=disable");
    let mut agent = Agent::spawn(&url, &["pool-wait", "i-1", "2", "3"], &[]);
    agent.logged("unreachable", Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(agent.is_running());
    let err = agent.stderr();
    assert_eq!(err.matches("unreachable").count(), 1, "{err}");
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(!err.contains(SECRET), "{err}");
}

/// The message an idle agent leaves when its deadline passed with no
/// database to end its row on.
const POWERING_OFF: &str = "the database could not be reached by the deadline";

#[tokio::test]
async fn an_idle_agent_whose_database_never_answers_powers_off_at_its_deadline() {
    // Nothing listens there: the agent never marks a row idle.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/orca?sslmode=disable");
    let started = Instant::now();
    // 2 s, and no minute after (the test-only grace): its deadline is 2 s
    // on its own clock, as the database's clock is out of reach.
    let agent = Agent::fresh(&url, "i-0nodb", "ns/nodb", "2", "0");
    // Before the fix it retried for ever: on EC2 an instance billed for
    // ever, since the operator needs that same database to terminate it.
    let (code, out, err) = agent.exit_within(Duration::from_secs(30)).await;
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "gave up after {:?}, before its deadline:\n{err}",
        started.elapsed()
    );
    assert_eq!(err.matches(POWERING_OFF).count(), 1, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_agent_powers_off_at_its_deadline_though_its_database_went_away() {
    let cluster = Arc::new(pg::Cluster::private());
    let url = cluster.migrated_db().await;
    let db = pg::connect(&url).await;
    // 6 s and no minute after: its row is idle long before that, and the
    // database is gone before the row's time-out on the database's clock.
    let agent = Agent::fresh(&url, "i-0lost", "ns/lost", "6", "0");
    let row = idle_row(&db, "i-0lost").await;
    // The fixture's server commits asynchronously; its immediate stop would
    // lose the last commits (the agent's row) but for this.
    db.batch("checkpoint").await.unwrap();
    drop(db);
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.stop()).await.unwrap();

    let (code, out, err) = agent.exit_within(Duration::from_secs(30)).await;
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(err.matches(POWERING_OFF).count(), 1, "{err}");

    // The database back: the row was left as it was, idle and live, but
    // its `polled` is older than a scheduler's freshness limit (the demo's
    // scheduler: 5 s), so no hand-out gives the powered-off instance a run.
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.start())
        .await
        .unwrap();
    let mut db = pg::connect(&url).await;
    let left: (bool, bool) = db
        .query_one(
            "select ended is null, idle is not null from orca.instances where id = $1",
            &[&row],
        )
        .await
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(left, (true, true), "the row was not left idle and live");
    let req = request("ns/lost", 8, 1, "worker", "h:1", false);
    assert_eq!(
        pool::hand_out(&mut db, &req, Duration::from_secs(5))
            .await
            .unwrap(),
        None
    );
}
