//! Two operator replicas on one Lease, on the real cluster: the leader is
//! frozen (SIGSTOP) past its Lease, the standby takes over and converges,
//! and the old leader, thawed, makes no Kubernetes write, no EC2 call and
//! no database statement from then on — counted in the apiserver's audit
//! log, at the EC2 proxy and in PostgreSQL's log, by the credentials or the
//! `application_name` each replica alone has.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{
    api::{Patch, PatchParams},
    Api,
};
use orca_tests::{eventually::eventually, on_cluster::OnCluster, pg, release::writes_by};

use super::{ready_with, scheduler, warm_pool::Ec2Stage};

async fn holder(stage: &OnCluster) -> Option<String> {
    Api::<Lease>::namespaced(stage.client.clone(), &stage.ns)
        .get_opt(&stage.release.fullname())
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_that_lost_its_lease_never_acts_again() {
    let stage = OnCluster::new("replicas").await.with_replica("b").await;
    // Every statement on the stage's database is logged, with the
    // connection's application_name (`orca-operator…/<replica>`).
    let db = pg::connect(&stage.url).await;
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
    let log = pg::Cluster::shared().log_path();
    stage
        .apply_scheduler(&scheduler("orca", "v1", &[], ""))
        .await;
    let ec2 = Ec2Stage::new(&stage, "runners").await;
    stage.create_pool(&ec2.pool("runners", 1, 3, 5)).await;
    stage
        .wait_scheduler(
            "orca",
            "v1 Ready",
            Duration::from_secs(60),
            ready_with("v1"),
        )
        .await;
    stage
        .wait_pool(
            "runners",
            "one idle instance",
            Duration::from_secs(90),
            |s| s.idle == 1,
        )
        .await;

    let first = eventually(
        "a replica holds the Lease",
        Duration::from_secs(30),
        || async { holder(&stage).await.ok_or_else(|| "no holder".to_string()) },
    )
    .await;
    let (old, new) = match first.as_str() {
        "a" => (&stage.replicas[0], &stage.replicas[1]),
        "b" => (&stage.replicas[1], &stage.replicas[0]),
        other => panic!("the Lease is held by {other:?}, not a replica of this test"),
    };
    old.freeze();
    eventually(
        "the standby takes the Lease",
        Duration::from_secs(60),
        || async {
            match holder(&stage).await {
                Some(h) if h == new.name => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;

    // Work for whoever leads now: a second idle instance and a new image.
    let pools = stage.pools();
    pools
        .patch(
            "runners",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"idle": {"min": 2}}})),
        )
        .await
        .expect("raising idle.min");
    stage
        .apply_scheduler(&scheduler("orca", "v2", &[], ""))
        .await;

    let writes_before = writes_by(stage.cp, &old.credential_id);
    let log_before = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    let thawed = Instant::now();
    old.thaw();

    stage
        .wait_scheduler(
            "orca",
            "v2 Ready under the new leader",
            Duration::from_secs(90),
            |s| {
                ready_with("v2")(s)
                    && s.last_handover
                        .as_ref()
                        .is_some_and(|h| h.drained.is_some())
            },
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

    let writes_after = writes_by(stage.cp, &old.credential_id);
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
        .filter(|c| c.at >= thawed && c.key_id.as_deref() == Some(old.aws_key_id.as_str()))
        .map(|c| c.action)
        .collect();
    assert!(
        rogue.is_empty(),
        "the old leader called EC2 after it lost the Lease: {rogue:?}\n{}",
        stage.logs()
    );
    let logged = std::fs::read(&log).expect("PostgreSQL's log");
    let since = String::from_utf8_lossy(&logged[log_before as usize..]);
    // A statement of replica `name`'s connections: a simple query
    // (`statement:`) or an extended one (`execute …:`).
    let sent_by = |l: &str, name: &str| {
        let by = format!("/{name} LOG:  ");
        l.contains("] orca-operator")
            && (l.contains(&format!("{by}statement: ")) || l.contains(&format!("{by}execute ")))
    };
    let statements: Vec<&str> = since.lines().filter(|l| sent_by(l, &old.name)).collect();
    assert!(
        statements.is_empty(),
        "the old leader sent statements after it lost the Lease:\n{}",
        statements.join("\n")
    );
    assert!(
        since.lines().any(|l| sent_by(l, &new.name)),
        "the log shows the new leader's statements (else it shows nothing)"
    );
    let launched = ec2.launched();
    assert_eq!(launched, 2, "two instances are right for idle.min 2");
}
