//! End to end: `orca-operator local` rolling `orca-sim` schedulers on a
//! real PostgreSQL — the handover in order, the aborts, stop-the-world,
//! recreate, restarts of the pod and of the operator itself.

use std::time::Duration;

use orca_operator::crd::Phase;
use orca_tests::{
    local::LocalMode,
    pg,
    sim::probe::{self, LockSampler},
};

const TICK_MS: u64 = 200;

/// A Scheduler running `orca-sim` with image `image` and `extra` args.
fn scheduler(image: &str, extra: &str, more_spec: &str) -> String {
    format!(
        r#"apiVersion: orca.dev/v1alpha1
kind: Scheduler
metadata:
  name: orca
spec:
  image: {image}
  command: ["orca-sim", "scheduler"]
  args: ["--tick-ms", "{TICK_MS}", "--stale-seconds", "2"{extra}]
  database:
    urlSecretRef: {{name: orca-db, key: url}}
  register:
    command: ["sh", "-c", "echo registered $ORCA_IMAGE"]
  handover:
    staleSeconds: 2
    joinTimeoutSeconds: 20
{more_spec}"#
    )
}

async fn instance_of_image(url: &str, image: &str) -> i64 {
    let db = pg::connect(url).await;
    db.query_one(
        "select max(id) from orca.schedulers where image = $1",
        &[&image],
    )
    .await
    .unwrap()
    .get::<_, Option<i64>>(0)
    .unwrap_or_else(|| panic!("no instance of {image}"))
}

fn ready_with(image: &'static str) -> impl Fn(&orca_operator::crd::SchedulerStatus) -> bool {
    move |s| s.phase == Phase::Ready && s.leader.as_ref().is_some_and(|l| l.image == image)
}

async fn wait_runs_done(url: &str, ids: &[i64], limit: Duration) {
    let db = pg::connect(url).await;
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let left: i64 = db
            .query_one("select count(*) from orca.runs where id = any($1) and status not in ('succeeded', 'failed')", &[&ids])
            .await
            .unwrap()
            .get(0);
        if left == 0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{left} runs still not finished"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_start_then_a_handover_with_runs_going() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut local = LocalMode::new(&url, &scheduler("v1", "", ""));
    local.start();
    let s = local.wait_for(
        "v1 leads and is registered",
        Duration::from_secs(30),
        ready_with("v1"),
    );
    assert_eq!(s.revisions.len(), 1);
    assert!(local.output().iter().any(|l| l.contains("Registering")));

    let watch = LockSampler::start(&url).await;
    let v1 = instance_of_image(&url, "v1").await;
    let before = probe::queue(&pg::connect(&url).await, "sleep:4", 4).await;
    // The runs are started by v1 before v2 exists.
    let db = pg::connect(&url).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let started: i64 = db
            .query_one(
                "select count(*) from orca.runs where id = any($1) and status = 'running'",
                &[&before],
            )
            .await
            .unwrap()
            .get(0);
        if started == before.len() as i64 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "v1 did not start its runs"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    local.apply(&scheduler("v2", "", ""));
    local.wait_for("v2 leads", Duration::from_secs(30), |s| {
        s.leader.as_ref().is_some_and(|l| l.image == "v2")
    });
    let after = probe::queue(&pg::connect(&url).await, "sleep:1", 3).await;
    let s = local.wait_for("the handover completes", Duration::from_secs(60), |s| {
        ready_with("v2")(s)
            && s.last_handover
                .as_ref()
                .is_some_and(|h| h.drained.is_some())
    });
    wait_runs_done(&url, &after, Duration::from_secs(30)).await;
    watch.assert_leaders_held_the_lock().await;

    let h = s.last_handover.expect("the handover is recorded");
    assert_eq!((h.from.as_str(), h.to.as_str()), ("v1", "v2"));
    // Register only after the lead: both are database/exit times in order.
    assert!(h.registered.as_deref() >= h.led.as_deref(), "{h:?}");
    // v1's runs finished under v1, started once; the later ones under v2.
    let v2 = instance_of_image(&url, "v2").await;
    for row in db
        .query(
            "select id, status, start, instance from orca.runs where id = any($1)",
            &[&before],
        )
        .await
        .unwrap()
    {
        assert_eq!(row.get::<_, String>(1), "succeeded");
        assert_eq!(
            row.get::<_, i32>(2),
            1,
            "run {} was started again",
            row.get::<_, i64>(0)
        );
        assert_eq!(row.get::<_, Option<i64>>(3), Some(v1));
    }
    for row in db
        .query(
            "select instance from orca.runs where id = any($1)",
            &[&after],
        )
        .await
        .unwrap()
    {
        assert_eq!(row.get::<_, Option<i64>>(0), Some(v2));
    }
    let ended: Option<chrono::DateTime<chrono::Utc>> = db
        .query_one("select ended from orca.schedulers where id = $1", &[&v1])
        .await
        .unwrap()
        .get(0);
    assert!(ended.is_some(), "v1 ended its row");
    assert_eq!(
        local.pods().len(),
        1,
        "only v2's pod is left: {:?}",
        local.pods()
    );
    let out = local.output().join("\n");
    let order = [
        "HandoverStarted",
        "AskedDrain",
        "Leading",
        "Registering",
        "Removed",
        "HandoverComplete",
    ];
    let mut from = 0;
    for reason in order {
        let at = out[from..]
            .find(reason)
            .unwrap_or_else(|| panic!("no {reason} event after the ones before it:\n{out}"));
        from += at + reason.len();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_that_never_joins_is_aborted_and_the_old_keeps_leading() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut local = LocalMode::new(&url, &scheduler("v1", "", ""));
    local.start();
    local.wait_for("v1 ready", Duration::from_secs(30), ready_with("v1"));
    let v1 = instance_of_image(&url, "v1").await;
    // v2's "scheduler" never joins.
    let never = r#"apiVersion: orca.dev/v1alpha1
kind: Scheduler
metadata:
  name: orca
spec:
  image: v2
  command: ["sleep", "600"]
  database:
    urlSecretRef: {name: orca-db, key: url}
  handover:
    staleSeconds: 2
    joinTimeoutSeconds: 3
"#;
    local.apply(never);
    let s = local.wait_for("the rollout is aborted", Duration::from_secs(20), |s| {
        s.phase == Phase::Degraded
            && s.conditions
                .iter()
                .any(|c| c.type_ == "Degraded" && c.reason == "JoinTimeout")
    });
    assert_eq!(
        s.leader.as_ref().map(|l| l.instance),
        Some(v1),
        "v1 keeps leading"
    );
    let db = pg::connect(&url).await;
    let asked: Option<chrono::DateTime<chrono::Utc>> = db
        .query_one(
            "select drain_asked from orca.schedulers where id = $1",
            &[&v1],
        )
        .await
        .unwrap()
        .get(0);
    assert!(asked.is_none(), "v1 was never asked to drain");
    local.wait_for("v2's pod is gone", Duration::from_secs(10), |s| {
        s.revisions.len() == 1
    });

    // v1 dies too: with nothing older left to lead, v2 is tried again (an
    // old revision is never restarted), rather than no scheduler at all.
    kill_instance(&db, v1).await;
    let s = local.wait_for("v2 is tried again", Duration::from_secs(20), |s| {
        s.revisions.iter().any(|r| r.image == "v2")
    });
    assert!(
        s.revisions.iter().all(|r| r.image == "v2"),
        "v1 is not restarted: {:?}",
        s.revisions
    );
    let out = local.output().join("\n");
    assert!(out.contains("RetryingAborted"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_75_stops_the_world_old_row_ends_before_the_new_starts() {
    let url = pg::Cluster::shared().migrated_db().await;
    // v1 says it knows 1 migration; v2's floor is 2: it must not overlap.
    let mut local = LocalMode::new(&url, &scheduler("v1", r#", "--migrations", "1""#, ""));
    local.start();
    local.wait_for("v1 ready", Duration::from_secs(30), ready_with("v1"));
    let v1 = instance_of_image(&url, "v1").await;
    let runs = probe::queue(&pg::connect(&url).await, "sleep:2", 2).await;
    local.apply(&scheduler("v2", r#", "--floor", "2""#, ""));
    local.wait_for(
        "v2 leads after stop-the-world",
        Duration::from_secs(60),
        ready_with("v2"),
    );
    let out = local.output().join("\n");
    assert!(out.contains("OverlapRefused"), "{out}");
    let db = pg::connect(&url).await;
    let v1_ended: Option<chrono::DateTime<chrono::Utc>> = db
        .query_one("select ended from orca.schedulers where id = $1", &[&v1])
        .await
        .unwrap()
        .get(0);
    let v2_joined: chrono::DateTime<chrono::Utc> = db
        .query_one(
            "select min(joined) from orca.schedulers where image = 'v2'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        v1_ended.expect("v1's row ended") <= v2_joined,
        "v2 joined before v1's row ended"
    );
    wait_runs_done(&url, &runs, Duration::from_secs(20)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_image_while_the_second_hands_over() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut local = LocalMode::new(&url, &scheduler("v1", "", ""));
    local.start();
    local.wait_for("v1 ready", Duration::from_secs(30), ready_with("v1"));
    let watch = LockSampler::start(&url).await;
    local.apply(&scheduler("v2", "", ""));
    local.wait_for("v2's pod exists", Duration::from_secs(10), |s| {
        s.revisions.len() == 2
    });
    local.apply(&scheduler("v3", "", ""));
    local.wait_for("v3 ready, all drained", Duration::from_secs(60), |s| {
        ready_with("v3")(s) && s.revisions.len() == 1
    });
    watch.assert_leaders_held_the_lock().await;
    let db = pg::connect(&url).await;
    let live_old: i64 = db
        .query_one(
            "select count(*) from orca.schedulers where image <> 'v3' and ended is null",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(live_old, 0, "v1 and any v2 have ended their rows");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_current_pod_killed_is_recreated_and_leads_again() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut local = LocalMode::new(&url, &scheduler("v1", "", ""));
    local.start();
    local.wait_for("v1 ready", Duration::from_secs(30), ready_with("v1"));
    let first = instance_of_image(&url, "v1").await;
    let db = pg::connect(&url).await;
    kill_instance(&db, first).await;
    let s = local.wait_for("a new v1 pod leads", Duration::from_secs(40), |s| {
        s.restarts == 1 && s.leader.as_ref().is_some_and(|l| l.instance != first)
    });
    assert_eq!(s.leader.unwrap().image, "v1");
    assert!(local.output().iter().any(|l| l.contains("PodRestarted")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_off_recreates_old_gone_before_new_starts() {
    let url = pg::Cluster::shared().migrated_db().await;
    let off = "  overlap: false\n";
    let mut local = LocalMode::new(&url, &scheduler("v1", "", off));
    local.start();
    local.wait_for("v1 runs", Duration::from_secs(30), |s| {
        s.revisions.len() == 1
    });
    let v1_pod = local.pods();
    local.apply(&scheduler("v2", "", off));
    local.wait_for("v2's pod only", Duration::from_secs(60), |s| {
        s.revisions.len() == 1 && s.revisions[0].image == "v2"
    });
    let out = local.output().join("\n");
    let recreate = out.find("Recreating").expect("a Recreating event");
    let v2_created = out.rfind("Creating: pod").expect("a Creating event for v2");
    assert!(recreate < v2_created, "{out}");
    assert!(!local.pods().iter().any(|p| v1_pod.contains(p)));
    let db = pg::connect(&url).await;
    let rows: i64 = db
        .query_one("select count(*) from orca.schedulers", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "with overlap off a scheduler has no row");
}

/// With overlap off the scheduler writes no row: the rollout does not wait
/// for one (no `JoinTimeout`), the new pod is up once it has run
/// settleSeconds, and the register step runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_off_recreate_settles_ready_and_registers() {
    let url = pg::Cluster::shared().migrated_db().await;
    // Inside `handover:`, then back at the spec's level.
    let off = "    settleSeconds: 2\n  overlap: false\n";
    let settled_with = |image: &'static str| {
        move |s: &orca_operator::crd::SchedulerStatus| {
            s.phase == Phase::Ready
                && s.current_image.as_deref() == Some(image)
                && s.revisions.len() == 1
                && s.leader.as_ref().is_some_and(|l| l.image == image)
                && s.conditions
                    .iter()
                    .any(|c| c.type_ == "Available" && c.status == "True")
        }
    };
    let mut local = LocalMode::new(&url, &scheduler("v1", "", off));
    local.start();
    local.wait_for(
        "v1 up and registered",
        Duration::from_secs(30),
        settled_with("v1"),
    );
    let v1_pods = local.pods();
    local.apply(&scheduler("v2", "", off));
    let s = local.wait_for(
        "v2 up and registered",
        Duration::from_secs(60),
        settled_with("v2"),
    );
    assert!(
        !s.conditions
            .iter()
            .any(|c| c.type_ == "Degraded" && c.status == "True"),
        "{:?}",
        s.conditions
    );
    assert_eq!(s.leader.map(|l| l.pod), Some(s.revisions[0].pod.clone()));
    assert!(!local.pods().iter().any(|p| v1_pods.contains(p)));

    let out = local.output().join("\n");
    // The old pod went before the new one started; the new one was up
    // before it registered.
    let recreate = out.find("Recreating").expect("a Recreating event");
    let created = out.rfind("Creating: pod").expect("a Creating event for v2");
    let up = out.rfind("Running: pod").expect("a Running event for v2");
    let registering = out.rfind("Registering").expect("a Registering event");
    assert!(
        recreate < created && created < up && up < registering,
        "{out}"
    );
    assert!(!out.contains("JoinTimeout"), "{out}");
    // The register Job ran with the new image.
    let registered = std::fs::read_dir(local.dir().join(".status/jobs"))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("log")).ok())
        .any(|log| log.contains("registered v2"));
    assert!(registered, "v2's register job ran:\n{out}");
    let db = pg::connect(&url).await;
    let rows: i64 = db
        .query_one("select count(*) from orca.schedulers", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "with overlap off a scheduler has no row");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_killed_mid_rollout_carries_on_when_restarted() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut local = LocalMode::new(&url, &scheduler("v1", "", ""));
    local.start();
    local.wait_for("v1 ready", Duration::from_secs(30), ready_with("v1"));
    let watch = LockSampler::start(&url).await;
    let mut seed = 0x9e37_79b9_u64;
    let mut random_ms = |max: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % max
    };
    let mut kills = 0;
    for image in ["v2", "v3", "v4", "v5"] {
        local.apply(&scheduler(image, "", ""));
        // Five kills at random moments of each rollout.
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(100 + random_ms(900))).await;
            local.kill();
            kills += 1;
            tokio::time::sleep(Duration::from_millis(random_ms(300))).await;
            local.start();
        }
        local.wait_for(
            &format!("{image} ready after the kills"),
            Duration::from_secs(60),
            |s| {
                s.phase == Phase::Ready
                    && s.leader.as_ref().is_some_and(|l| l.image == image)
                    && s.revisions.len() == 1
            },
        );
    }
    assert_eq!(kills, 20);
    watch.assert_leaders_held_the_lock().await;
    let db = pg::connect(&url).await;
    let live: i64 = db
        .query_one(
            "select count(*) from orca.schedulers where ended is null and image <> 'v5'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(live, 0, "every old instance ended its row");
}

/// SIGKILL to the scheduler process of instance `id`, as its row names it.
async fn kill_instance(db: &orca_db::Db, id: i64) {
    let pid: i32 = db
        .query_one("select pid from orca.schedulers where id = $1", &[&id])
        .await
        .unwrap()
        .get(0);
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// The status the local mode wrote for Scheduler `default/<name>`.
fn status_of(local: &LocalMode, name: &str) -> orca_operator::crd::SchedulerStatus {
    std::fs::read_to_string(
        local
            .dir()
            .join(format!(".status/scheduler-default-{name}.yaml")),
    )
    .ok()
    .and_then(|t| serde_yaml::from_str(&t).ok())
    .unwrap_or_default()
}

/// The register Jobs (local processes) that exist now.
fn register_jobs(local: &LocalMode) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(local.dir().join(".status/jobs"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// A register Job that fails is retried as a new Job after its back-off
/// (10 s), the handover completes only once one succeeded, and a changed
/// register step registers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_register_job_is_retried_as_a_new_job() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut local = LocalMode::new(&url, &scheduler("v1", "", ""));
    local.start();
    local.wait_for("v1 ready", Duration::from_secs(30), ready_with("v1"));

    // v2's register step fails the first time it runs.
    let mark = local.dir().join("registered-once");
    let once = format!(
        r#"command: ["sh", "-c", "if [ -e {m} ]; then echo registered $ORCA_IMAGE; else touch {m}; echo no pipelines yet >&2; exit 3; fi"]"#,
        m = mark.display()
    );
    let with_register = |image: &str, command: &str| {
        scheduler(image, "", "").replace(
            r#"command: ["sh", "-c", "echo registered $ORCA_IMAGE"]"#,
            command,
        )
    };
    local.apply(&with_register("v2", &once));
    local.wait_for("the register job failed", Duration::from_secs(30), |s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Degraded" && c.status == "True" && c.reason == "RegisterFailed")
    });
    let s = local.wait_for(
        "a second register job succeeded and the handover completed",
        Duration::from_secs(60),
        |s| {
            ready_with("v2")(s)
                && s.last_handover
                    .as_ref()
                    .is_some_and(|h| h.drained.is_some())
        },
    );
    let rev2 = s.target_revision.clone().expect("the target revision");
    let register = s.register.clone().expect("the register status");
    assert_eq!(
        (
            register.revision.as_str(),
            register.attempts,
            register.failures
        ),
        (rev2.as_str(), 2, 0),
        "{register:?}"
    );
    let jobs = register_jobs(&local);
    assert!(
        jobs.contains(&orca_operator::rollout::register_job_name("orca", &rev2, 2)),
        "the retry is a new job: {jobs:?}"
    );
    let out = local.output().join("\n");
    let failed = out
        .find("Warning RegisterFailed")
        .expect("a RegisterFailed warning");
    let complete = out
        .find("HandoverComplete")
        .expect("a HandoverComplete event");
    assert!(failed < complete, "{out}");
    assert_eq!(
        out.matches("Warning RegisterFailed").count(),
        1,
        "one failure, said once:\n{out}"
    );

    // A changed register step registers again, as a new Job.
    local.apply(&with_register(
        "v2",
        r#"command: ["sh", "-c", "echo registered again $ORCA_IMAGE"]"#,
    ));
    local.wait_for("registered again", Duration::from_secs(30), |s| {
        s.phase == Phase::Ready && s.register.as_ref().is_some_and(|r| r.attempts == 3)
    });
    let third = orca_operator::rollout::register_job_name("orca", &rev2, 3);
    let log = std::fs::read_to_string(local.dir().join(".status/jobs").join(&third).join("log"))
        .unwrap_or_default();
    assert!(log.contains("registered again v2"), "{third}: {log:?}");
}

/// A second Scheduler on the database of the first touches none of its
/// instances and starts nothing (`DatabaseShared`); once the first is gone,
/// it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_scheduler_on_the_same_database_touches_nothing() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut local = LocalMode::new(&url, &scheduler("v1", "", ""));
    local.start();
    let s = local.wait_for("orca ready", Duration::from_secs(30), ready_with("v1"));
    let orca_pod = s.leader.clone().expect("orca leads").pod;
    let v1 = instance_of_image(&url, "v1").await;

    local.write(
        "other.yaml",
        &scheduler("w1", "", "").replace("metadata:\n  name: orca\n", "metadata:\n  name: other\n"),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let held = loop {
        let s = status_of(&local, "other");
        if s.conditions
            .iter()
            .any(|c| c.type_ == "Degraded" && c.status == "True" && c.reason == "DatabaseShared")
        {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "other is not DatabaseShared: {s:#?}\n{}",
            local.output().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let message = held
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(message.contains(&orca_pod), "names the host: {message}");
    // A few passes more: still nothing started, nothing asked.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !local.pods().iter().any(|p| p.starts_with("other-")),
        "no pod of other: {:?}",
        local.pods()
    );
    let db = pg::connect(&url).await;
    let asked: Option<chrono::DateTime<chrono::Utc>> = db
        .query_one(
            "select drain_asked from orca.schedulers where id = $1",
            &[&v1],
        )
        .await
        .unwrap()
        .get(0);
    assert!(asked.is_none(), "orca's instance was never asked to drain");
    assert!(ready_with("v1")(&local.status()), "orca keeps leading");
    let out = local.output().join("\n");
    assert_eq!(
        out.matches("scheduler default/other: Warning DatabaseShared")
            .count(),
        1,
        "said once:\n{out}"
    );

    // orca goes (its file removed: its pods drain and end their rows);
    // other starts.
    std::fs::remove_file(local.dir().join("scheduler.yaml")).unwrap();
    // The local mode notices a change by the newest modification time of
    // the files, which a removal does not move: write the other again.
    std::thread::sleep(Duration::from_millis(20));
    local.write(
        "other.yaml",
        &scheduler("w1", "", "").replace("metadata:\n  name: orca\n", "metadata:\n  name: other\n"),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let s = status_of(&local, "other");
        if ready_with("w1")(&s) {
            assert!(
                !s.conditions
                    .iter()
                    .any(|c| c.type_ == "Degraded" && c.status == "True"),
                "{s:#?}"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "other did not start once orca was gone: {s:#?}\n{}",
            local.output().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
