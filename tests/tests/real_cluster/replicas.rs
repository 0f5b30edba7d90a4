//! Two operator replicas on one Lease, on the real cluster: the leader is
//! frozen (SIGSTOP) past its Lease, or stopped by SIGTERM; the standby takes
//! over and converges, and the old leader makes no Kubernetes write, no EC2
//! call and no database statement from then on — counted in the
//! apiserver's audit log, at the EC2 proxy and in PostgreSQL's log, by the
//! credentials or the `application_name` each replica alone has.

use std::time::{Duration, Instant};

use orca_tests::{eventually::eventually, on_cluster::OnCluster, pg, release::writes_by};

use super::{
    handed_over_to, scheduler,
    warm_pool::{v1_and_one_idle, Ec2Stage},
};

/// Two replicas, v1 Ready and one idle instance, every statement on the
/// stage's database logged with its connection's application_name
/// (`orca-operator…/<replica>`); which replica leads (its index), and the
/// database's name.
async fn two_replicas(prefix: &str) -> (OnCluster, Ec2Stage, usize, String) {
    let stage = OnCluster::new(prefix).await.with_replica("b").await;
    let db = pg::connect(stage.url()).await;
    let name: String = db
        .query_one("select current_database()", &[])
        .await
        .unwrap()
        .get(0);
    db.batch(&format!(
        "alter database \"{name}\" set log_statement = 'all'"
    ))
    .await
    .unwrap();
    let ec2 = v1_and_one_idle(&stage).await;
    let first = eventually(
        "a replica holds the Lease",
        Duration::from_secs(30),
        || async {
            stage
                .lease_holder()
                .await
                .ok_or_else(|| "no holder".to_string())
        },
    )
    .await;
    let leader = match first.as_str() {
        "a" => 0,
        "b" => 1,
        other => panic!("the Lease is held by {other:?}, not a replica of this test"),
    };
    (stage, ec2, leader, name)
}

/// The end of PostgreSQL's log now: what is logged from here on is read
/// by [`statements_since`].
fn log_mark() -> u64 {
    std::fs::metadata(pg::Cluster::shared().log_path())
        .map(|m| m.len())
        .unwrap_or(0)
}

/// The statements logged since `mark` on database `db` that replica
/// `name`'s connections sent: a simple query (`statement:`) or an extended
/// one (`execute …:`). Each line starts with its time (`%m`, in UTC), then
/// `[pid] database application_name`. (Other tests' replicas have the same
/// names, on databases of their own.)
fn statements_since(mark: u64, db: &str, name: &str) -> Vec<String> {
    let logged = std::fs::read(pg::Cluster::shared().log_path()).expect("PostgreSQL's log");
    let since = String::from_utf8_lossy(&logged[mark as usize..]).to_string();
    let on = format!("] {db} orca-operator");
    let by = format!("/{name} LOG:  ");
    since
        .lines()
        .filter(|l| {
            l.contains(&on)
                && (l.contains(&format!("{by}statement: ")) || l.contains(&format!("{by}execute ")))
        })
        .map(String::from)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_that_lost_its_lease_never_acts_again() {
    let (stage, ec2, leader, db) = two_replicas("replicas").await;
    let (old, new) = (&stage.replicas()[leader], &stage.replicas()[1 - leader]);
    old.freeze();
    eventually(
        "the standby takes the Lease",
        Duration::from_secs(60),
        || async {
            match stage.lease_holder().await {
                Some(h) if h == new.name() => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;

    // Work for whoever leads now: a second idle instance and a new image.
    stage.set_idle_min("runners", 2).await;
    stage
        .apply_scheduler(&scheduler("orca", "v2", &[], ""))
        .await;

    let writes_before = writes_by(stage.cp(), old.credential_id());
    let log_before = log_mark();
    let thawed = Instant::now();
    old.thaw();

    stage
        .wait_scheduler(
            "orca",
            "v2 Ready under the new leader",
            Duration::from_secs(90),
            handed_over_to("v2"),
        )
        .await;
    stage
        .wait_pool(
            "runners",
            "two idle instances",
            Duration::from_secs(90),
            |s| s.idle == 2,
        )
        .await;
    // Give a rogue replica every chance to act: several of its resyncs.
    tokio::time::sleep(Duration::from_secs(25)).await;

    let writes_after = writes_by(stage.cp(), old.credential_id());
    assert_eq!(
        writes_after[writes_before.len().min(writes_after.len())..],
        [] as [String; 0],
        "the old leader wrote to the API after it lost the Lease:\n{}",
        stage.logs()
    );
    let rogue: Vec<_> = ec2
        .proxy
        .calls()
        .into_iter()
        .filter(|c| c.at() >= thawed && c.key_id() == Some(old.aws_key_id()))
        .map(|c| c.action().to_string())
        .collect();
    assert!(
        rogue.is_empty(),
        "the old leader called EC2 after it lost the Lease: {rogue:?}\n{}",
        stage.logs()
    );
    let statements = statements_since(log_before, &db, old.name());
    assert!(
        statements.is_empty(),
        "the old leader sent statements after it lost the Lease:\n{}",
        statements.join("\n")
    );
    assert!(
        !statements_since(log_before, &db, new.name()).is_empty(),
        "the log shows the new leader's statements (else it shows nothing)"
    );
    let launched = ec2.launched();
    assert_eq!(launched, 2, "two instances are right for idle.min 2");
}

/// SIGTERM to the leader (a rolling update, a drained node): it closes its
/// fence, stops its controllers and releases the Lease, so the standby
/// leads within a few seconds rather than a lease duration; from the signal
/// on the old leader writes nothing but that release, and calls neither EC2
/// nor the database — a call already under way when the signal came may
/// land within 100 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stopped_by_sigterm_hands_over_at_once_and_acts_no_more() {
    let (mut stage, ec2, leader, db) = two_replicas("sigterm").await;
    let new_name = stage.replicas()[1 - leader].name().to_string();
    let (old_name, old_key, old_credential) = {
        let old = &stage.replicas()[leader];
        (
            old.name().to_string(),
            old.aws_key_id().to_string(),
            old.credential_id().to_string(),
        )
    };
    let writes_before = writes_by(stage.cp(), &old_credential);
    let log_before = log_mark();
    let (signalled, signalled_at) = (Instant::now(), chrono::Utc::now());
    stage.stop_replica(leader);
    assert!(!stage.replica_running(leader), "the old leader exited");
    eventually(
        "the standby leads, well within the 15 s lease duration",
        Duration::from_secs(8),
        || async {
            match stage.lease_holder().await {
                Some(h) if h == new_name => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(signalled.elapsed() < Duration::from_secs(10));
    // What the alerts read: the new leader exports the Scheduler's phase,
    // though it found the status as the old one left it. (Once, only a
    // changed status was exported, and an alert on a Degraded Scheduler
    // went quiet after a failover.)
    let series = format!(
        r#"orca_scheduler_phase{{namespace="{}",scheduler="orca","#,
        stage.ns()
    );
    eventually(
        "the new leader exports the Scheduler's phase",
        Duration::from_secs(30),
        || async {
            let metrics = stage.replicas()[1 - leader].scrape();
            let phases: Vec<&str> = metrics.lines().filter(|l| l.starts_with(&series)).collect();
            if phases.iter().filter(|l| l.ends_with(" 1")).count() == 1 {
                Ok(())
            } else {
                Err(format!("{phases:?}"))
            }
        },
    )
    .await;

    // Work for the new leader: a second idle instance.
    stage.scale_idle("runners", 2).await;

    let writes_after = writes_by(stage.cp(), &old_credential);
    let writes: Vec<&String> = writes_after[writes_before.len().min(writes_after.len())..]
        .iter()
        // The Lease's release is the one write expected.
        .filter(|w| w.split(' ').nth(1) != Some("leases"))
        .collect();
    assert!(
        writes.is_empty(),
        "the old leader wrote after SIGTERM: {writes:?}\n{}",
        stage.logs()
    );
    let grace = signalled + Duration::from_millis(100);
    let calls: Vec<String> = ec2
        .proxy
        .calls()
        .into_iter()
        .filter(|c| c.at() >= grace && c.key_id() == Some(old_key.as_str()))
        .map(|c| c.action().to_string())
        .collect();
    assert!(
        calls.is_empty(),
        "the old leader called EC2 after SIGTERM: {calls:?}"
    );
    let grace = signalled_at + chrono::Duration::milliseconds(100);
    let statements: Vec<String> = statements_since(log_before, &db, &old_name)
        .into_iter()
        .filter(|l| {
            let at = chrono::NaiveDateTime::parse_from_str(&l[..23], "%Y-%m-%d %H:%M:%S%.3f")
                .unwrap_or_else(|e| panic!("a log line without its time ({e}): {l}"));
            at.and_utc() >= grace
        })
        .collect();
    assert!(
        statements.is_empty(),
        "the old leader sent statements after SIGTERM:\n{}",
        statements.join("\n")
    );
    assert!(
        !statements_since(log_before, &db, &new_name).is_empty(),
        "the log shows the new leader's statements (else it shows nothing)"
    );
    assert_eq!(ec2.launched(), 2, "two instances are right for idle.min 2");
}
