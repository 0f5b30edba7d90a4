//! The scheduler-instance protocol (docs/protocol.md#scheduler-instances)
//! with real `orca-sim` processes on a real PostgreSQL: lead, handover, 50
//! handovers, a killed leader, a killed lock session, a server outage, an
//! ended row, overlap_refusal and the operator's instances / drain /
//! wait-for-lead.
//!
//! A short tick and stale limit keep it quick; the only timed assertions are
//! the bounds, measured with the database's clock where it can.

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use orca_db::{
    schedulers::{self, Joining, Role, SchedulerRow},
    Db,
};
use orca_tests::{
    bins, pg,
    sim::{
        probe::{all_ended, db_now, finishes, holders, queue, runs, LockSampler},
        process::{Sim, SimOptions},
    },
};

const TICK_MS: u64 = 200;
const STALE_S: f64 = 2.0;

fn tick() -> Duration {
    Duration::from_millis(TICK_MS)
}

fn stale() -> Duration {
    Duration::from_secs_f64(STALE_S)
}

fn sim(url: &str, image: &str) -> Sim {
    Sim::start(url, &SimOptions::new(image, TICK_MS, STALE_S))
}

async fn row(db: &Db, id: i64) -> SchedulerRow {
    schedulers::observe(db, stale())
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.id == id)
        .unwrap_or_else(|| panic!("no orca.schedulers row {id}"))
}

/// Seconds from `a` to `b`.
fn secs(a: DateTime<Utc>, b: DateTime<Utc>) -> f64 {
    (b - a).num_microseconds().unwrap() as f64 / 1e6
}

/// Polls `check` every 50 ms until it is true; fails the test after `within`.
async fn until<F, Fut>(what: &str, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The leader's row led within `ticks` ticks of `since` (database clock).
fn led_within(r: &SchedulerRow, since: DateTime<Utc>, ticks: f64, what: &str) {
    let led = r
        .led
        .unwrap_or_else(|| panic!("{what}: instance {} never led", r.id));
    let took = secs(since, led);
    assert!(
        took <= ticks * TICK_MS as f64 / 1000.0,
        "{what}: instance {} led {took:.3}s after, more than {ticks} ticks of {TICK_MS} ms",
        r.id
    );
}

/// Every run succeeded at `start` under `instance`.
async fn assert_ran(db: &Db, ids: &[i64], start: i32, instance: i64) {
    for (run, r) in runs(db, ids).await {
        assert_eq!(
            (r.status.as_str(), r.start, r.instance),
            ("succeeded", start, Some(instance)),
            "run {run}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_migrates_a_fresh_database_and_leads_within_two_ticks() {
    let url = pg::Cluster::shared().fresh_db().await;
    let mut a = sim(&url, "v1");
    let id = a.id().await;
    a.wait_for(&format!("leading id={id}"), Duration::from_secs(5))
        .await;
    let db = pg::connect(&url).await;
    let r = row(&db, id).await;
    led_within(&r, r.joined, 2.0, "a lone instance");
    assert!(r.leads(), "{r:?}");
    assert_eq!(holders(&db).await, vec![r.backend_pid.unwrap()]);
    assert_eq!((r.host.as_str(), r.pid), ("sim-v1", a.pid()));

    let ids = queue(&db, "sleep:0.2", 3).await;
    until("runs finish", Duration::from_secs(10), || {
        all_ended(&db, &ids)
    })
    .await;
    for (run, r) in runs(&db, &ids).await {
        assert_eq!(
            (r.status.as_str(), r.start, r.instance),
            ("succeeded", 1, Some(id)),
            "run {run}"
        );
    }
    a.signal(libc::SIGTERM);
    assert!(a.wait_exit(Duration::from_secs(5)).await.success());
    let r = row(&db, id).await;
    assert!(r.ended.is_some() && !r.holds_lock, "{r:?}");
    a.wait_for(&format!("ended id={id}"), Duration::from_secs(1))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_instance_takes_over_and_the_older_drains_its_runs() {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    let mut a = sim(&url, "v1");
    let a_id = a.id().await;
    a.wait_for("leading id=", Duration::from_secs(5)).await;
    let old_runs = queue(&db, "sleep:2", 4).await;
    until("A starts its runs", Duration::from_secs(5), || async {
        runs(&db, &old_runs)
            .await
            .values()
            .all(|r| r.status == "running" && r.instance == Some(a_id))
    })
    .await;

    let sampler = LockSampler::start(&url).await;
    let mut b = sim(&url, "v2");
    let b_id = b.id().await;
    let new_runs = queue(&db, "sleep:0.2", 3).await;
    b.wait_for(&format!("leading id={b_id}"), Duration::from_secs(5))
        .await;
    let rb = row(&db, b_id).await;
    led_within(&rb, rb.joined, 2.0, "the newer instance");
    a.wait_for(&format!("draining id={a_id}"), Duration::from_secs(1))
        .await;

    let wait = std::process::Command::new(bins::path("orca-operator"))
        .args(["wait-for-lead", "--timeout", "5", "--stale-seconds", "2"])
        .env("ORCA_DATABASE_URL", &url)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&wait.stdout);
    assert!(
        wait.status.success(),
        "{said} {}",
        String::from_utf8_lossy(&wait.stderr)
    );
    assert!(said.contains(&format!("instance {b_id} ")), "{said}");

    assert!(a.wait_exit(Duration::from_secs(10)).await.success());
    until("B's runs finish", Duration::from_secs(10), || {
        all_ended(&db, &new_runs)
    })
    .await;
    sampler.assert_leaders_held_the_lock().await;

    let ra = row(&db, a_id).await;
    assert!(ra.ended.is_some() && ra.role == Role::Draining, "{ra:?}");
    assert_ran(&db, &old_runs, 1, a_id).await;
    assert_ran(&db, &new_runs, 1, b_id).await;
    let done = finishes(&[&a, &b]);
    for run in old_runs.iter().chain(&new_runs) {
        assert_eq!(done[run].len(), 1, "run {run} finished {:?}", done[run]);
    }
    b.signal(libc::SIGTERM);
    assert!(b.wait_exit(Duration::from_secs(5)).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_handovers_in_a_row_with_runs_flowing() {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    let sampler = LockSampler::start(&url).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = {
        let (db, stop) = (pg::connect(&url).await, stop.clone());
        tokio::spawn(async move {
            let mut ids = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                ids.extend(queue(&db, "sleep:0.3", 1).await);
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            ids
        })
    };
    let mut current = sim(&url, "v1");
    let id = current.id().await;
    current
        .wait_for(&format!("leading id={id}"), Duration::from_secs(5))
        .await;
    let mut old = Vec::new();
    for n in 2..=51 {
        let mut next = sim(&url, &format!("v{n}"));
        let id = next.id().await;
        next.wait_for(&format!("leading id={id}"), Duration::from_secs(5))
            .await;
        old.push(std::mem::replace(&mut current, next));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let ids = producer.await.unwrap();
    until("every run ends", Duration::from_secs(20), || {
        all_ended(&db, &ids)
    })
    .await;
    for s in &mut old {
        assert!(s.wait_exit(Duration::from_secs(10)).await.success());
    }
    current.signal(libc::SIGTERM);
    assert!(current.wait_exit(Duration::from_secs(5)).await.success());
    sampler.assert_leaders_held_the_lock().await;

    let mut all: Vec<&Sim> = old.iter().collect();
    all.push(&current);
    let done = finishes(&all);
    assert!(ids.len() > 50, "only {} runs flowed", ids.len());
    for (run, r) in runs(&db, &ids).await {
        assert_eq!((r.status.as_str(), r.start), ("succeeded", 1), "run {run}");
        let f = &done[&run];
        assert_eq!(f.len(), 1, "run {run} finished {f:?}");
        assert_eq!(Some(f[0].instance), r.instance, "run {run}");
    }
    let leaders: i64 = db
        .query_one(
            "select count(*) from orca.schedulers where led is not null and ended is not null",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(leaders, 51, "every instance led once and ended");
}

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
            .all(|r| r.instance == Some(a_id))
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
        vec![row(&db, a_id).await.backend_pid.unwrap()]
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
                    .heartbeat
                    .filter(|_| rows[run].instance == Some(a_id))
            })
            .max()
            .unwrap_or_else(|| panic!("run {run}: never seen beating under A"));
        for (at, rows) in &samples {
            if secs(last_beat, *at) < STALE_S {
                let r = &rows[run];
                assert_eq!(
                    (r.start, r.instance),
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
    let before = row(&db, id).await.backend_pid.unwrap();
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
        r.leads() && r.backend_pid != Some(before)
    })
    .await;
    let r = row(&db, id).await;
    led_within(&r, killed, 2.0, "after pg_terminate_backend");
    assert_eq!(holders(&db).await, vec![r.backend_pid.unwrap()]);
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
            .all(|r| r.instance == Some(a_id))
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
            .all(|r| r.status == "running")
    })
    .await;
    until(
        "each instance lists its runs",
        Duration::from_secs(5),
        || async {
            row(&db, a_id).await.running.len() == 2 && row(&db, b_id).await.running.len() == 2
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
        r.leads() && r.led.is_some_and(|led| secs(back, led) > -1.0)
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
    assert!(row(&db, a_id).await.ended.is_some());
    assert!(row(&db, b_id).await.ended.is_none());
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

/// A live instance held by the test itself: joined (and leading if asked)
/// on a connection of its own, as an older binary would be.
async fn fake_instance(url: &str, host: &str, migrations: i32, lead: bool) -> (Db, i64) {
    let db = pg::connect(url).await;
    let me = Joining {
        host,
        pid: 1,
        image: "old",
        migrations,
    };
    let id = schedulers::join(&db, &me).await.unwrap();
    if lead {
        assert!(schedulers::try_lead(&db, id).await.unwrap());
    }
    (db, id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floor_above_a_live_instance_refuses_with_75_and_migrates_nothing() {
    let url = pg::Cluster::shared().fresh_db().await;
    // The database as a binary knowing only the first migration left it.
    let dir = std::env::temp_dir().join(format!("orca-first-migration-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let first = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../migrations/0001_schedulers_and_runs.sql");
    std::fs::copy(&first, dir.join("0001_schedulers_and_runs.sql")).unwrap();
    let mut db = pg::connect(&url).await;
    orca_db::migrate::migrate(
        &mut db,
        &orca_db::migrate::Migrations::from_dir(&dir).unwrap(),
    )
    .await
    .unwrap();
    let (_old, old_id) = fake_instance(&url, "old-pod", 1, true).await;

    let log = dir.join("termination-log");
    let mut opts = SimOptions::new("v2", TICK_MS, STALE_S);
    opts.termination_log = Some(log.clone());
    let mut b = Sim::start(&url, &opts);
    let status = b.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(75), "{:?}", b.lines());
    let reason = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        reason.contains(&format!("instance {old_id} on old-pod knows 1"))
            && reason.contains("floor"),
        "{reason}"
    );
    let count = |sql: &'static str| {
        let db = &db;
        async move { db.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    assert_eq!(
        count("select count(*) from orca.migrations").await,
        1,
        "nothing migrated"
    );
    assert_eq!(
        count("select count(*) from orca.schedulers").await,
        1,
        "no row joined"
    );

    // A floor the old instance meets: it starts beside it, and migrates.
    let mut opts = SimOptions::new("v2", TICK_MS, STALE_S);
    opts.args = vec!["--floor".into(), "1".into()];
    let mut c = Sim::start(&url, &opts);
    c.id().await;
    assert_eq!(
        count("select count(*) from orca.migrations").await,
        i64::from(orca_db::migrate::known())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_refusal_is_empty_where_it_must_be() {
    let url = pg::Cluster::shared().fresh_db().await;
    let db = pg::connect(&url).await;
    let refusal = |floor| schedulers::overlap_refusal(&db, floor, stale());
    // No orca.schedulers yet.
    assert_eq!(refusal(99).await.unwrap(), "");
    assert!(schedulers::live_older(&db, 99, stale())
        .await
        .unwrap()
        .is_empty());
    drop(db);
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    let refusal = |floor| schedulers::overlap_refusal(&db, floor, stale());
    // No instance at all.
    assert_eq!(refusal(99).await.unwrap(), "");
    // Instances below the floor that have ended, or are gone (unseen).
    let (_e, ended) = fake_instance(&url, "ended-pod", 1, false).await;
    schedulers::end(&db, ended).await.unwrap();
    let (_g, gone) = fake_instance(&url, "gone-pod", 1, false).await;
    db.execute(
        "update orca.schedulers set seen = now() - interval '1 hour' where id = $1",
        &[&gone],
    )
    .await
    .unwrap();
    assert_eq!(refusal(2).await.unwrap(), "");
    // A live leader that knows the floor.
    let (leader_db, leader) = fake_instance(&url, "leader-pod", 2, true).await;
    assert_eq!(refusal(2).await.unwrap(), "");
    // ... but not a higher one.
    assert_eq!(
        schedulers::live_older(&db, 3, stale()).await.unwrap(),
        vec![schedulers::Older {
            id: leader,
            host: "leader-pod".into(),
            migrations: 2
        }]
    );
    assert!(refusal(3)
        .await
        .unwrap()
        .contains(&format!("instance {leader} on leader-pod knows 2")));
    // Live instances, none of which leads.
    schedulers::step_down(&leader_db, leader, true)
        .await
        .unwrap();
    let reason = refusal(2).await.unwrap();
    assert!(reason.contains("none of them leads"), "{reason}");
}

fn operator(url: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(bins::path("orca-operator"))
        .args(args)
        .env("ORCA_DATABASE_URL", url)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_lead_is_true_at_once_with_no_live_instance_and_false_on_timeout() {
    let url = pg::Cluster::shared().migrated_db().await;
    let started = std::time::Instant::now();
    let out = operator(
        &url,
        &["wait-for-lead", "--timeout", "30", "--stale-seconds", "2"],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "not at once: {:?}",
        started.elapsed()
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("no instance is live"));

    let mut a = sim(&url, "v1");
    let a_id = a.id().await;
    a.wait_for(&format!("leading id={a_id}"), Duration::from_secs(5))
        .await;
    // The newest instance never tries to lead.
    let (_stuck, stuck) = fake_instance(&url, "stuck-pod", 2, false).await;
    let out = operator(
        &url,
        &["wait-for-lead", "--timeout", "1", "--stale-seconds", "2"],
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "instance {stuck} (stuck-pod pid 1, image old) should"
        )),
        "{said}"
    );
    // A saw a newer live instance: it drained and ended.
    assert!(a.wait_exit(Duration::from_secs(5)).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_lists_instances_and_asks_one_to_drain() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut a = sim(&url, "v1");
    let id = a.id().await;
    a.wait_for(&format!("leading id={id}"), Duration::from_secs(5))
        .await;
    let out = operator(&url, &["instances", "--stale-seconds", "2"]);
    let listed = String::from_utf8_lossy(&out.stdout);
    let expected = format!(
        "{id} sim-v1 pid {} leading image v1 migrations {} runs - seen",
        a.pid(),
        orca_db::migrate::known()
    );
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(&expected) && l.ends_with("(live, holds the lead)")),
        "{listed}"
    );

    let out = operator(&url, &["drain", "987654"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no live scheduler instance 987654"));

    let out = operator(&url, &["drain", &id.to_string()]);
    assert!(out.status.success(), "{out:?}");
    a.wait_for(
        &format!("draining id={id} reason=asked to drain"),
        Duration::from_secs(2),
    )
    .await;
    assert!(a.wait_exit(Duration::from_secs(5)).await.success());
    let out = operator(&url, &["instances"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("(ended)"),
        "{out:?}"
    );
    let out = operator(&url, &["drain", &id.to_string()]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "an ended instance can't be asked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_overlap_off_it_runs_alone_without_a_row_or_the_lock() {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    let mut opts = SimOptions::new("v1", TICK_MS, STALE_S);
    opts.overlap = false;
    let mut a = Sim::start(&url, &opts);
    a.wait_for("running alone", Duration::from_secs(5)).await;
    let ids = queue(&db, "fail:0.1", 2).await;
    until("runs end", Duration::from_secs(5), || all_ended(&db, &ids)).await;
    for (run, r) in runs(&db, &ids).await {
        assert_eq!(
            (r.status.as_str(), r.start, r.instance),
            ("failed", 1, None),
            "run {run}"
        );
    }
    let rows: i64 = db
        .query_one("select count(*) from orca.schedulers", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0);
    assert!(holders(&db).await.is_empty());
    a.signal(libc::SIGTERM);
    assert!(a.wait_exit(Duration::from_secs(5)).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_pool_a_run_asks_for_an_instance_and_ends_when_it_is_idle_again() {
    use orca_db::pool;
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    let mut opts = SimOptions::new("v1", TICK_MS, STALE_S);
    opts.args = vec!["--pool".into(), "default/p".into()];
    let mut a = Sim::start(&url, &opts);
    let id = a.id().await;
    a.wait_for(&format!("leading id={id}"), Duration::from_secs(5))
        .await;
    let ids = queue(&db, "sleep:0", 1).await;
    let run = ids[0];
    a.wait_for(
        &format!("asked for an instance run={run}"),
        Duration::from_secs(5),
    )
    .await;
    // An instance comes up idle, as its agent's first pool-next makes it.
    pool::mark_idle(&db, "i-1", 0, 0, Some("default/p"))
        .await
        .unwrap()
        .unwrap();
    a.wait_for(
        &format!("handed out run={run} start=1 instance=i-1"),
        Duration::from_secs(5),
    )
    .await;
    assert!(
        !all_ended(&db, &[run]).await,
        "the run waits for its instance"
    );
    // The agent ran the run's command; its row goes idle again.
    pool::mark_idle(&db, "i-1", run, 1, None)
        .await
        .unwrap()
        .unwrap();
    until("the run ends", Duration::from_secs(5), || {
        all_ended(&db, &ids)
    })
    .await;
    assert_eq!(runs(&db, &ids).await[&run].status, "succeeded");
    let unserved: i64 = db
        .query_one(
            "select count(*) from orca.pool_demand where served is null",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(unserved, 0, "the hand-out served the demand");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_notifications_polling_alone_hands_over_within_two_ticks() {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    let polling = |image: &str| {
        let mut opts = SimOptions::new(image, TICK_MS, STALE_S);
        opts.listen = false;
        Sim::start(&url, &opts)
    };
    let mut a = polling("v1");
    let a_id = a.id().await;
    a.wait_for(&format!("leading id={a_id}"), Duration::from_secs(5))
        .await;
    for image in ["v2", "v3", "v4"] {
        let mut b = polling(image);
        let b_id = b.id().await;
        b.wait_for(&format!("leading id={b_id}"), Duration::from_secs(5))
            .await;
        let rb = row(&db, b_id).await;
        led_within(&rb, rb.joined, 2.0, "polling only");
        assert!(a.wait_exit(Duration::from_secs(5)).await.success());
        a = b;
    }
    a.signal(libc::SIGTERM);
    assert!(a.wait_exit(Duration::from_secs(5)).await.success());
}
