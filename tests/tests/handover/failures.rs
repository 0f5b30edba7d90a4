//! Failures: a killed leader, a killed lock session, a server outage, and
//! a row someone else ended.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_and_its_runs_requeued_only_once_stale() {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    let mut a = sim(&url, "v1");
    let a_id = a.id().await;
    a.wait_for(&format!("leading id={a_id}"), Duration::from_secs(5))
        .await;
    let ids = queue(&db, "sleep:2", 3).await;
    until("A starts its runs", Duration::from_secs(5), || async {
        runs(&db, &ids)
            .await
            .values()
            .all(|r| r.instance() == Some(a_id))
    })
    .await;
    let sampler = LockSampler::start(&url).await;
    // Frozen, A holds the lock and beats no more: B joins beside it and
    // cannot lead until A is killed.
    a.signal(libc::SIGSTOP);
    let mut b = sim(&url, "v2");
    let b_id = b.id().await;
    tokio::time::sleep(tick() * 2).await;
    assert_eq!(
        holders(&db).await,
        vec![row(&db, a_id).await.backend_pid().unwrap()]
    );
    a.signal(libc::SIGKILL);
    let killed = db_now(&db).await;

    // Every 50 ms: the runs as the database has them, by its clock.
    let mut samples = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !all_ended(&db, &ids).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the runs did not end"
        );
        samples.push((db_now(&db).await, runs(&db, &ids).await));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rb = row(&db, b_id).await;
    led_within(
        &rb,
        killed,
        STALE_S * 1000.0 / TICK_MS as f64 + 2.0,
        "after the kill",
    );
    for run in &ids {
        let last_beat = samples
            .iter()
            .filter_map(|(_, rows)| {
                rows[run]
                    .heartbeat()
                    .filter(|_| rows[run].instance() == Some(a_id))
            })
            .max()
            .unwrap_or_else(|| panic!("run {run}: never seen beating under A"));
        for (at, rows) in &samples {
            if secs(last_beat, *at) < STALE_S {
                let r = &rows[run];
                assert_eq!(
                    (r.start(), r.instance()),
                    (1, Some(a_id)),
                    "run {run} requeued at {at}, its heartbeat {last_beat} not stale yet"
                );
            }
        }
        assert!(
            b.matching(&format!("requeued run={run} ")).len() == 1,
            "{:?}",
            b.lines()
        );
    }
    assert_ran(&db, &ids, 2, b_id).await;
    let done = finishes(&[&a, &b]);
    for run in &ids {
        assert_eq!(done[run].len(), 1, "run {run}: {:?}", done[run]);
    }
    sampler.assert_leaders_held_the_lock().await;
    b.signal(libc::SIGTERM);
    assert!(b.wait_exit(Duration::from_secs(5)).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lock_session_is_terminated_leads_again_within_two_ticks() {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    let mut a = sim(&url, "v1");
    let id = a.id().await;
    a.wait_for(&format!("leading id={id}"), Duration::from_secs(5))
        .await;
    let before = row(&db, id).await.backend_pid().unwrap();
    let killed: DateTime<Utc> = db
        .query_one(
            "select clock_timestamp() from (select pg_terminate_backend($1)) t",
            &[&before],
        )
        .await
        .unwrap()
        .get(0);
    a.wait_for(&format!("lost the lead id={id}"), tick()).await;
    until("a leader is back", Duration::from_secs(5), || async {
        let r = row(&db, id).await;
        r.leads() && r.backend_pid() != Some(before)
    })
    .await;
    let r = row(&db, id).await;
    led_within(&r, killed, 2.0, "after pg_terminate_backend");
    assert_eq!(holders(&db).await, vec![r.backend_pid().unwrap()]);
    let ids = queue(&db, "sleep:0", 2).await;
    until("it starts runs again", Duration::from_secs(5), || {
        all_ended(&db, &ids)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_second_outage_declares_nobody_gone_and_the_leader_returns() {
    let cluster = Arc::new(pg::Cluster::private());
    let url = cluster.migrated_db().await;
    let db = pg::connect(&url).await;
    let mut a = sim(&url, "v1");
    let a_id = a.id().await;
    a.wait_for(&format!("leading id={a_id}"), Duration::from_secs(5))
        .await;
    let a_runs = queue(&db, "sleep:13", 2).await;
    until("A starts its runs", Duration::from_secs(5), || async {
        runs(&db, &a_runs)
            .await
            .values()
            .all(|r| r.instance() == Some(a_id))
    })
    .await;
    let mut b = sim(&url, "v2");
    let b_id = b.id().await;
    b.wait_for(&format!("leading id={b_id}"), Duration::from_secs(5))
        .await;
    let b_runs = queue(&db, "sleep:13", 2).await;
    until("the runs start", Duration::from_secs(5), || async {
        let all: Vec<i64> = a_runs.iter().chain(&b_runs).copied().collect();
        runs(&db, &all)
            .await
            .values()
            .all(|r| r.status() == "running")
    })
    .await;
    until(
        "each instance lists its runs",
        Duration::from_secs(5),
        || async {
            row(&db, a_id).await.running().len() == 2 && row(&db, b_id).await.running().len() == 2
        },
    )
    .await;
    // The fixture commits asynchronously: give its WAL writer time to write
    // what the instances did, as the crash below must lose nothing.
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(db);
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.stop()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.start())
        .await
        .unwrap();
    let db = pg::connect(&url).await;
    let back = db_now(&db).await;
    until("B leads again", Duration::from_secs(5), || async {
        let r = row(&db, b_id).await;
        r.leads() && r.led().is_some_and(|led| secs(back, led) > -1.0)
    })
    .await;
    led_within(
        &row(&db, b_id).await,
        back,
        2.0,
        "after the server's return",
    );

    let all: Vec<i64> = a_runs.iter().chain(&b_runs).copied().collect();
    until("the runs end", Duration::from_secs(10), || {
        all_ended(&db, &all)
    })
    .await;
    assert_ran(&db, &a_runs, 1, a_id).await;
    assert_ran(&db, &b_runs, 1, b_id).await;
    assert!(b.matching("requeued").is_empty(), "{:?}", b.lines());
    assert!(a.wait_exit(Duration::from_secs(5)).await.success());
    assert!(row(&db, a_id).await.ended().is_some());
    assert!(row(&db, b_id).await.ended().is_none());
    b.signal(libc::SIGTERM);
    assert!(b.wait_exit(Duration::from_secs(5)).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_whose_row_someone_else_ended_stops_at_its_next_beat() {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    let mut a = sim(&url, "v1");
    let id = a.id().await;
    a.wait_for(&format!("leading id={id}"), Duration::from_secs(5))
        .await;
    schedulers::end(&db, id).await.unwrap();
    // The next beat is at most a tick away; the rest is the process exiting.
    let status = a.wait_exit(tick() + Duration::from_millis(300)).await;
    assert_eq!(status.code(), Some(1), "{:?}", a.lines());
    a.wait_for(
        &format!("row ended by someone else; stopping id={id}"),
        tick(),
    )
    .await;
    assert!(holders(&db).await.is_empty());
}

/// An installation's years of schedulers that died without ending their
/// rows (killed past their drain time-out, their nodes gone): what the
/// operator decides on leaves out those not seen for an hour, unless a pod
/// still runs one, so they never fill its read. Once, a thousand and one
/// of them stopped every handover (`DatabaseError`: more than 1000
/// scheduler instances).
#[tokio::test]
async fn rows_of_schedulers_long_dead_never_fill_the_read() {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    db.execute(
        "insert into orca.schedulers (host, pid, migrations, joined, seen)
         select 'gone-' || g, g, 5, now() - interval '30 days', now() - interval '2 days'
         from generate_series(1, 1200) g",
        &[],
    )
    .await
    .unwrap();
    let mut a = sim(&url, "v1");
    let a_id = a.id().await;
    a.wait_for(&format!("leading id={a_id}"), Duration::from_secs(5))
        .await;
    // A pod still there runs one of them: it is read, stale.
    let hosts = ["gone-7".to_string()];
    let read = schedulers::observe(&db, stale(), &hosts)
        .await
        .unwrap_or_else(|e| panic!("the read failed: {e}"));
    let mut got: Vec<(String, bool)> = read
        .iter()
        .map(|r| (r.host().to_string(), r.live()))
        .collect();
    got.sort();
    let sim_host = row(&db, a_id).await.host().to_string();
    let mut want = vec![("gone-7".to_string(), false), (sim_host, true)];
    want.sort();
    assert_eq!(got, want);
}
