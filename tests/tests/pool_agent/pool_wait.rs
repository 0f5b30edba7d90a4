//! `pool-wait`: it ends when the run is over for its worker, and not before.

use super::*;

#[tokio::test]
async fn pool_wait_ends_when_the_run_is_over_for_its_worker_and_not_before() {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    let mut agents = Vec::new();
    let mut runs = Vec::new();
    for i in 0..3 {
        let run: i64 = db
            .query_one("insert into orca.runs (pipeline, status, start) values ('p', 'running', 1) returning id", &[])
            .await
            .unwrap()
            .get(0);
        let instance = format!("i-0w{i}");
        db.execute(
            "insert into orca.instances (instance, pool, run, start, role, pooled, joined) values ($1, 'ns/w', $2, 1, 'worker', true, now())",
            &[&instance, &run],
        )
        .await
        .unwrap();
        agents.push(Agent::spawn(
            &url,
            &["pool-wait", &instance, &run.to_string(), "1"],
            &[],
        ));
        runs.push(run);
    }
    agents_connected(&db, 3).await;
    // What is not the end of the run for these workers.
    let other: i64 = db
        .query_one(
            "insert into orca.runs (pipeline, status) values ('p', 'running') returning id",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    for statement in [
        "update orca.runs set heartbeat = now(), owner = 'x' where id = any($1)",
        "update orca.runs set status = 'failed' where id = $2",
        "insert into orca.instances (instance, pool, run, start, role) values ('i-0other', 'ns/w', $2, 0, 'worker')",
        "update orca.instances set ended = now(), ended_by = 'scheduler' where instance = 'i-0other'",
        "update orca.instances set polled = now() where run = any($1)",
    ] {
        let sql = statement.replace("$2", &other.to_string());
        if sql.contains("$1") {
            db.execute(&sql, &[&runs]).await.unwrap();
        } else {
            db.execute(&sql, &[]).await.unwrap();
        }
    }
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for agent in &mut agents {
        assert!(
            agent.is_running(),
            "pool-wait ended early: {}",
            agent.stderr()
        );
    }
    db.execute(
        "update orca.runs set status = 'succeeded' where id = $1",
        &[&runs[0]],
    )
    .await
    .unwrap();
    db.execute("update orca.runs set start = 2 where id = $1", &[&runs[1]])
        .await
        .unwrap();
    db.execute(
        "update orca.instances set ended = now(), ended_by = 'scheduler' where run = $1",
        &[&runs[2]],
    )
    .await
    .unwrap();
    for (agent, why) in
        agents
            .into_iter()
            .zip(["a status change", "a start change", "its row ending"])
    {
        let (code, out, err) = agent.exit_within(Duration::from_secs(3)).await;
        assert_eq!((code, out.as_str()), (0, ""), "after {why}: {err}");
    }
}
