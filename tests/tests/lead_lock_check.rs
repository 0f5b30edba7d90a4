//! The lead-lock check itself (`orca_tests::sim::lead_check`): it passes a
//! handover that falls inside one sampling gap, and it fails — naming the
//! instance — a scheduler that acts as leader without the lock, both on
//! made-up samples and against a real `orca-sim --unsafe-skip-lead-lock`.
//! The handover tests (`handover`, `local_mode`) run it on correct
//! schedulers.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use orca_tests::{
    pg,
    sim::{
        lead_check::{judge, Decision, Holder, LockSampler, Sample, Session},
        probe::{queue, runs},
        process::{Sim, SimOptions},
    },
};

const TICK_MS: u64 = 200;
const STALE_S: f64 = 2.0;

/// `ms` milliseconds into a made-up test.
fn at(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(1_700_000_000_000 + ms).unwrap()
}

fn session(pid: i32) -> Session {
    Session::new(pid, Some(at(-(pid as i64) * 1000)))
}

/// A sample read between `ms` and `ms + 1`, with these holders.
fn sample(ms: i64, holders: &[(i32, i64)]) -> Sample {
    Sample::new(
        at(ms),
        at(ms + 1),
        holders
            .iter()
            .map(|&(pid, instance)| Holder::new(session(pid), Some(instance)))
            .collect(),
    )
}

/// Instance `instance` on backend `pid` decides `what` at `ms`, its own
/// statement seeing `holders`.
fn decision(instance: i64, pid: i32, ms: i64, what: &str, holders: &[i32]) -> Decision {
    Decision::new(
        instance,
        at(ms),
        what.into(),
        session(pid),
        holders.to_vec(),
    )
}

#[test]
fn a_handover_inside_one_sampling_gap_passes() {
    // Instance 1 (backend 11) decides, unlocks; 2 (backend 22) locks and
    // decides: all between the samples at 0 and 50 ms. Then 3 (backend 33)
    // leads so briefly that no sample sees it.
    let samples = [
        sample(-50, &[(11, 1)]),
        sample(0, &[(11, 1)]),
        sample(50, &[(22, 2)]),
        sample(100, &[]),
        sample(150, &[]),
    ];
    let decisions = [
        decision(1, 11, 10, "start run=1 start=1", &[11]),
        decision(2, 22, 30, "lead", &[22]),
        decision(2, 22, 40, "start run=2 start=1", &[22]),
        decision(3, 33, 110, "lead", &[33]),
        decision(3, 33, 120, "start run=3 start=1", &[33]),
        // After the last sample: only its own view and the periods judge it.
        decision(3, 33, 200, "start run=4 start=1", &[33]),
    ];
    let checked = judge(&samples, &decisions).unwrap();
    assert_eq!((checked.decisions(), checked.bracketed()), (6, 5));
}

#[test]
fn a_decision_while_another_session_held_the_lock_across_it_fails() {
    let samples = [sample(0, &[(11, 1)]), sample(50, &[(11, 1)])];
    // Its own statement is made to say it held the lock: only the samples
    // can tell.
    let decisions = [decision(2, 22, 25, "start run=7 start=1", &[22])];
    let err = judge(&samples, &decisions).unwrap_err();
    assert!(
        err.contains("instance 2 decided \"start run=7 start=1\"")
            && err.contains("while backend 11 (instance 1) held the lead lock"),
        "{err}"
    );
    // The same pid, but a later backend: a reused pid is another session.
    let mut reused = decisions[0].clone();
    let session = reused.session().with_pid(11);
    reused = reused.with_session(session);
    reused = reused.with_holders(vec![11]);
    let err = judge(&samples, &[reused]).unwrap_err();
    assert!(err.contains("held the lead lock"), "{err}");
}

#[test]
fn a_decision_its_own_statement_saw_unheld_fails() {
    let samples = [sample(0, &[]), sample(50, &[])];
    let decisions = [decision(3, 33, 25, "lead", &[])];
    let err = judge(&samples, &decisions).unwrap_err();
    assert!(
        err.contains("instance 3 decided \"lead\"")
            && err.contains("showed the lead lock held by nobody"),
        "{err}"
    );
}

#[test]
fn two_instances_deciding_in_overlapping_periods_fail() {
    let decisions = [
        decision(1, 11, 10, "start run=1 start=1", &[11]),
        decision(2, 22, 20, "start run=2 start=1", &[22]),
        decision(1, 11, 30, "start run=3 start=1", &[11]),
    ];
    let err = judge(&[sample(0, &[])], &decisions).unwrap_err();
    assert!(
        err.contains("instances 1 and 2 decided in overlapping lead periods"),
        "{err}"
    );
}

fn sim(url: &str, image: &str, broken: bool) -> Sim {
    let mut opts = SimOptions::new(image, TICK_MS, STALE_S);
    if broken {
        opts = opts.with_args(vec!["--unsafe-skip-lead-lock".into()]);
    }
    Sim::start(url, &opts)
}

const BROKEN_LEADS: &str = "leading without the lock (--unsafe-skip-lead-lock)";

/// Waits until every run of `ids` was started by `instance`.
async fn started_by(db: &orca_db::Db, ids: &[i64], instance: i64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !runs(db, ids)
        .await
        .values()
        .all(|r| r.instance() == Some(instance))
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "instance {instance} did not start {ids:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The leader is frozen (SIGSTOP) with its session, and the lock, alive;
/// a newer instance that skips the lock starts runs beside it. The samples
/// show the old leader's backend on both sides of each of its decisions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sim_deciding_beside_a_frozen_leader_fails_the_check() {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    let mut a = sim(&url, "v1", false);
    let a_id = a.id().await;
    a.wait_for(&format!("leading id={a_id}"), Duration::from_secs(5))
        .await;
    let sampler = LockSampler::start(&url).await;
    a.signal(libc::SIGSTOP);
    tokio::time::sleep(Duration::from_millis(150)).await;

    let mut b = sim(&url, "v2", true);
    let b_id = b.id().await;
    b.wait_for(&format!("{BROKEN_LEADS} id={b_id}"), Duration::from_secs(5))
        .await;
    let ids = queue(&db, "sleep:0.1", 2).await;
    started_by(&db, &ids, b_id).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let err = sampler.check().await.unwrap_err();
    for run in &ids {
        assert!(
            err.contains(&format!(
                "instance {b_id} decided \"start run={run} start=1\""
            )),
            "{err}"
        );
    }
    // The outside view: the frozen leader's backend, seen across them.
    assert!(
        err.contains(&format!(
            "(instance {a_id}) held the lead lock: the pg_locks samples"
        )),
        "{err}"
    );
    // The act's own view, too.
    assert!(
        err.contains(&format!("instance {b_id} decided \"lead\""))
            && err.contains("but pg_locks in that statement showed the lead lock held by backend"),
        "{err}"
    );
    a.signal(libc::SIGKILL);
}

/// Alone, an instance that skips the lock leads with nobody holding it:
/// the samples cannot tell that from a lead between two samples, but the
/// deciding statements' own view of `pg_locks` can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_sim_leading_without_the_lock_fails_the_check() {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    let sampler = LockSampler::start(&url).await;
    let mut b = sim(&url, "v1", true);
    let b_id = b.id().await;
    b.wait_for(&format!("{BROKEN_LEADS} id={b_id}"), Duration::from_secs(5))
        .await;
    let ids = queue(&db, "sleep:0", 1).await;
    started_by(&db, &ids, b_id).await;
    let err = sampler.check().await.unwrap_err();
    assert!(
        err.contains(&format!(
            "instance {b_id} decided \"start run={} start=1\"",
            ids[0]
        )) && err.contains("showed the lead lock held by nobody"),
        "{err}"
    );
    b.signal(libc::SIGTERM);
    assert!(b.wait_exit(Duration::from_secs(5)).await.success());
}
