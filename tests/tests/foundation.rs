//! The foundation on a real PostgreSQL: the migrator, the schema's
//! guarantees and notifications, and the connection layer's limits.

use std::{process::Command, time::Duration};

use orca_db::{connect, ConnectOptions, DatabaseUrl, Reconnect};
use orca_tests::{bins, moto::Moto, pg};

fn migrate_cmd(url: &str) -> Command {
    let mut cmd = Command::new(bins::path("orca-operator"));
    cmd.arg("migrate").env("ORCA_DATABASE_URL", url);
    cmd
}

async fn tables(url: &str) -> Vec<String> {
    let db = pg::connect(url).await;
    db.query(
        "select table_name::text from information_schema.tables where table_schema = 'orca' order by 1",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

#[tokio::test]
async fn migrate_creates_every_table_then_changes_nothing() {
    let url = pg::Cluster::shared().fresh_db().await;
    let first = migrate_cmd(&url).output().unwrap();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert_eq!(
        tables(&url).await,
        [
            "instances",
            "migrations",
            "pool_demand",
            "runs",
            "schedulers"
        ]
    );
    let again = migrate_cmd(&url).output().unwrap();
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stdout).contains("up to date"));
    let db = pg::connect(&url).await;
    let n: i64 = db
        .query_one("select count(*) from orca.migrations", &[])
        .await
        .unwrap()
        .get(0);
    let known = Command::new(bins::path("orca-operator"))
        .arg("migrations")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&known.stdout).trim(), n.to_string());
}

#[tokio::test]
async fn four_migrators_at_once_apply_each_migration_once() {
    let url = pg::Cluster::shared().fresh_db().await;
    let children: Vec<_> = (0..4).map(|_| migrate_cmd(&url).spawn().unwrap()).collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
    }
    let db = pg::connect(&url).await;
    let rows = db
        .query(
            "select n, count(*) from orca.migrations group by n order by n",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len() as i32, orca_db::migrate::known());
    for row in rows {
        assert_eq!(
            row.get::<_, i64>(1),
            1,
            "migration {} applied more than once",
            row.get::<_, i32>(0)
        );
    }
}

#[tokio::test]
async fn an_edited_applied_migration_is_an_error_naming_the_file() {
    let url = pg::Cluster::shared().fresh_db().await;
    let dir = std::env::temp_dir().join(format!("orca-migrations-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
    for entry in std::fs::read_dir(&src).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    let run = || {
        migrate_cmd(&url)
            .arg("--migrations-dir")
            .arg(&dir)
            .output()
            .unwrap()
    };
    assert!(run().status.success());
    let edited = dir.join("0001_schedulers_and_runs.sql");
    let sql = std::fs::read_to_string(&edited).unwrap();
    std::fs::write(&edited, format!("{sql}\n-- an afterthought\n")).unwrap();
    let out = run();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("0001_schedulers_and_runs.sql"), "{err}");
    assert!(err.contains("changed"), "{err}");
}

#[tokio::test]
async fn the_database_refuses_a_second_live_row_for_one_instance() {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    let insert =
        "insert into orca.instances (instance, pool, role) values ('i-1', 'default/p', 'warm')";
    db.execute(insert, &[]).await.unwrap();
    let second = db.execute(insert, &[]).await.unwrap_err();
    assert_eq!(second.code(), Some("23505"), "{second}");
    // The server's words, not tokio-postgres's bare "db error"; its DETAIL
    // (which quotes the row) left out.
    let said = second.to_string();
    assert!(
        said.ends_with("duplicate key value violates unique constraint \"instances_one_live\" (SQLSTATE 23505)"),
        "{said}"
    );
    // Once the first has ended, a new live row is fine.
    db.execute(
        "update orca.instances set ended = now(), ended_by = 'agent' where instance = 'i-1'",
        &[],
    )
    .await
    .unwrap();
    db.execute(insert, &[]).await.unwrap();
}

#[tokio::test]
async fn known_instances_are_those_whose_every_row_ended() {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    for (instance, ended) in [
        ("i-ended", true),
        ("i-back", true),
        ("i-back", false),
        ("i-live", false),
    ] {
        db.execute(
            "insert into orca.instances (instance, pool, role, ended, ended_by)
             values ($1, 'default/p', 'warm',
                     case when $2 then now() end, case when $2 then 'agent' end)",
            &[&instance, &ended],
        )
        .await
        .unwrap();
    }
    let ids: Vec<String> = ["i-ended", "i-back", "i-live", "i-never"]
        .map(String::from)
        .to_vec();
    // An instance whose agent reported again after its row ended (after
    // the pool's rows were read, say) is not one without a row.
    let known = orca_db::pool::known(&db, &ids).await.unwrap();
    assert_eq!(known, ["i-ended".to_string()].into());
}

async fn next_notification(db: &mut orca_db::Db) -> tokio_postgres::Notification {
    tokio::time::timeout(Duration::from_secs(5), db.notification())
        .await
        .expect("no notification within 5 s")
        .expect("the listening connection ended")
}

#[tokio::test]
async fn instance_and_run_changes_are_notified() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut listener = pg::connect(&url).await;
    listener.listen("orca_i_i-0abc").await.unwrap();
    let db = pg::connect(&url).await;
    let id: i64 = db
        .query_one(
            "insert into orca.instances (instance, pool, role) values ('i-0abc', 'default/p', 'warm') returning id",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let n = next_notification(&mut listener).await;
    assert_eq!(
        (n.channel(), n.payload()),
        ("orca_i_i-0abc", id.to_string().as_str())
    );
    db.execute(
        "update orca.instances set ended = now(), ended_by = 'scheduler' where id = $1",
        &[&id],
    )
    .await
    .unwrap();
    let n = next_notification(&mut listener).await;
    assert_eq!(n.channel(), "orca_i_i-0abc");

    let run: i64 = db
        .query_one(
            "insert into orca.runs (pipeline) values ('p') returning id",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let channel = format!("orca_run_{run}");
    listener.listen(&channel).await.unwrap();
    db.execute(
        "update orca.runs set status = 'running', start = 1 where id = $1",
        &[&run],
    )
    .await
    .unwrap();
    let n = next_notification(&mut listener).await;
    assert_eq!((n.channel(), n.payload()), (channel.as_str(), "running 1"));
    // A heartbeat alone is not a change of status or start.
    db.execute(
        "update orca.runs set heartbeat = now() where id = $1",
        &[&run],
    )
    .await
    .unwrap();
    db.execute(
        "update orca.runs set status = 'succeeded' where id = $1",
        &[&run],
    )
    .await
    .unwrap();
    let n = next_notification(&mut listener).await;
    assert_eq!(n.payload(), "succeeded 1");
}

#[tokio::test]
async fn connecting_where_nothing_listens_fails_in_time_naming_host_and_port_only() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = DatabaseUrl::parse(&format!(
        "postgres://orca:hunter2secret@127.0.0.1:{port}/orca"
    ))
    .unwrap();
    let opts = ConnectOptions::default().with_connect_timeout(Duration::from_secs(2));
    let started = std::time::Instant::now();
    let err = connect(&url, &opts)
        .await
        .err()
        .expect("nothing listens there");
    assert!(started.elapsed() < Duration::from_secs(3));
    let msg = err.to_string();
    assert!(msg.contains(&format!("127.0.0.1:{port}")), "{msg}");
    assert!(
        !msg.contains("hunter2secret") && !format!("{err:?}").contains("hunter2secret"),
        "{msg}"
    );
    assert!(!msg.contains('\n'));
    assert!(err.is_connection());
}

#[tokio::test]
async fn a_host_that_does_not_answer_is_cut_by_the_connect_timeout() {
    // A listener that never accepts the start-up: the TCP connect succeeds,
    // the server never speaks.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let url = DatabaseUrl::parse(&format!(
        "postgres://orca:pw-not-shown@127.0.0.1:{port}/orca?sslmode=disable"
    ))
    .unwrap();
    let opts = ConnectOptions::default().with_connect_timeout(Duration::from_millis(700));
    let err = connect(&url, &opts)
        .await
        .err()
        .expect("the server never answers");
    let msg = err.to_string();
    assert!(msg.contains("no answer within"), "{msg}");
    assert!(!msg.contains("pw-not-shown"));
    drop(listener);
}

#[tokio::test]
async fn a_hanging_statement_is_cut_by_the_statement_timeout() {
    let url = DatabaseUrl::parse(&pg::Cluster::shared().fresh_db().await).unwrap();
    let opts = ConnectOptions::default().with_statement_timeout(Duration::from_millis(500));
    let db = connect(&url, &opts).await.unwrap();
    let started = std::time::Instant::now();
    let err = db.execute("select pg_sleep(60)", &[]).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(err.code(), Some("57014"), "{err}");
    assert!(
        err.to_string()
            .ends_with(": canceling statement due to statement timeout (SQLSTATE 57014)"),
        "{err}"
    );
    // The connection is still good for the next statement.
    db.execute("select 1", &[]).await.unwrap();
}

#[tokio::test]
async fn the_retry_helper_reconnects_once_the_server_is_back() {
    let cluster = pg::Cluster::private();
    let url = DatabaseUrl::parse(&cluster.url("postgres")).unwrap();
    let mut conn = Reconnect::new(url, ConnectOptions::named("orca-tests"));
    conn.db().await.execute("select 1", &[]).await.unwrap();
    cluster.stop();
    let err = conn.db().await.execute("select 1", &[]).await.unwrap_err();
    assert!(
        conn.failed(&err),
        "a stopped server is a lost connection: {err}"
    );
    let waiter = tokio::spawn(async move {
        conn.db()
            .await
            .execute("select 1", &[])
            .await
            .map(|_| conn.is_down())
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !waiter.is_finished(),
        "it cannot connect while the server is down"
    );
    let cluster = std::sync::Arc::new(cluster);
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.start())
        .await
        .unwrap();
    let still_down = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("reconnected within a few seconds of the server's return")
        .unwrap()
        .unwrap();
    assert!(!still_down);
}

#[test]
fn moto_starts_and_answers() {
    let moto = Moto::start();
    assert!(
        moto.get("/moto-api/data.json").is_some(),
        "moto at {} does not answer",
        moto.endpoint()
    );
}

/// With `LOG_SIGNABLE_BODY` set the AWS SDK would log request bodies (the
/// user-data, the database URL parameter's value): the operator does not
/// start, and says why in one line.
#[test]
fn the_operator_refuses_to_start_with_log_signable_body() {
    let out = Command::new(bins::path("orca-operator"))
        .args(["run", "--cluster-name", "c"])
        .env("LOG_SIGNABLE_BODY", "true")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(said.contains("LOG_SIGNABLE_BODY"), "{said}");
}
