//! A WarmPool on the real cluster: moto behind the logging proxy for EC2,
//! local hosts playing its instances with the real agent; the pool reaches
//! `idle.min` and says so in its status, follows its Scheduler's Secret to
//! another database, and keeps a capacity hold across an operator restart.

use std::time::Duration;

use orca_db::pool::{ask_for_instance, Request};
use orca_operator::{
    crd::WarmPool,
    warmpool::{Ec2, Ownership},
};
use orca_tests::{
    ec2_faults::{Ec2Faults, Fault},
    eventually::eventually,
    on_cluster::OnCluster,
    pg,
    release::Replica,
    warm,
};
use tokio::sync::oneshot;

use super::scheduler;

/// What a WarmPool test stands on besides the cluster: moto, the proxy in
/// front of it, the test's own EC2 client (straight to moto), and the local
/// hosts of pool `name` (its ownership tags `owner`), running until
/// dropped.
pub struct Ec2Stage {
    _moto: orca_tests::moto::Moto,
    pub proxy: Ec2Faults,
    pub ec2: Ec2,
    pub owner: Ownership,
    pub subnets: Vec<String>,
    _hosts: oneshot::Sender<()>,
}

impl Ec2Stage {
    pub async fn new(stage: &OnCluster, pool: &str) -> Ec2Stage {
        Ec2Stage::running(stage, pool, "true").await
    }

    /// As [`Ec2Stage::new`], each run handed to an instance running
    /// `run_command` (`sh -c`), its end the run's end.
    pub async fn running(stage: &OnCluster, pool: &str, run_command: &str) -> Ec2Stage {
        let moto = orca_tests::moto::Moto::start();
        let proxy = Ec2Faults::start(&moto.endpoint());
        // The operator's EC2 endpoint, reachable from the test node's image
        // pods too (the in-cluster operator's).
        stage
            .cp()
            .expose(orca_tests::cluster::port_of(&proxy.endpoint()));
        let ec2 = warm::ec2(&moto.endpoint()).await;
        let subnets = warm::subnets(&ec2).await;
        let owner = Ownership::new(
            stage.ns(),
            pool,
            "orca",
            "orca-operator",
            orca_tests::release::TEST_CLUSTER,
        );
        let hosts =
            warm::hosts_for(&moto.endpoint(), stage.url(), owner.clone(), run_command).await;
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(hosts.run(async move {
            let _ = stopped.await;
        }));
        Ec2Stage {
            _moto: moto,
            proxy,
            ec2,
            owner,
            subnets,
            _hosts: stop,
        }
    }

    /// How many instances the `RunInstances` calls that got through asked
    /// for, all together.
    pub fn launched(&self) -> u32 {
        self.proxy
            .calls_of("RunInstances")
            .iter()
            .filter(|c| c.fault().is_none())
            .map(|c| {
                c.param("MinCount")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0)
            })
            .sum()
    }

    /// A WarmPool `name` of Scheduler `orca` on this EC2.
    pub fn pool(&self, name: &str, min: i32, max: i32, max_instances: i32) -> WarmPool {
        let mut spec = warm::spec(
            &self.proxy.endpoint(),
            &["t3.micro"],
            &self.subnets,
            min,
            max,
            max_instances,
        );
        spec.scheduler = "orca".into();
        WarmPool::new(name, spec)
    }
}

/// Scheduler `orca` at `v1` Ready, then WarmPool `runners` (idle 1 to 3,
/// 5 instances at most) on an [`Ec2Stage`] of its own, once it has its
/// one idle instance.
pub async fn v1_and_one_idle(stage: &OnCluster) -> Ec2Stage {
    super::v1_ready(stage).await;
    let ec2 = Ec2Stage::new(stage, "runners").await;
    stage.create_pool(&ec2.pool("runners", 1, 3, 5)).await;
    stage
        .wait_pool(
            "runners",
            "one idle instance",
            Duration::from_secs(90),
            |s| s.idle == 1,
        )
        .await;
    ec2
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_pool_on_moto_reaches_idle_min() {
    let stage = OnCluster::new("pool").await;
    stage
        .apply_scheduler(&scheduler("orca", "v1", &[], ""))
        .await;
    let ec2 = Ec2Stage::new(&stage, "runners").await;
    stage.create_pool(&ec2.pool("runners", 2, 3, 5)).await;
    let status = stage
        .wait_pool(
            "runners",
            "two idle instances",
            Duration::from_secs(90),
            |s| s.idle == 2,
        )
        .await;
    assert_eq!(status.busy, 0, "{status:?}");
    let launched = ec2.launched();
    assert_eq!(
        launched,
        2,
        "launched {launched} for idle.min 2: {:?}",
        ec2.proxy.calls_of("RunInstances")
    );
    stage
        .wait_event("runners", "Launched", Duration::from_secs(10))
        .await;
}

/// The Scheduler's Secret is changed to another database: the pool runs on
/// that one within seconds — well inside the 20 s resync — and launches for
/// the run waiting there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_database_secret_reaches_the_pool_within_seconds() {
    let stage = OnCluster::new("pool-url").await;
    stage
        .apply_scheduler(&scheduler("orca", "v1", &[], ""))
        .await;
    let ec2 = Ec2Stage::new(&stage, "runners").await;
    stage.create_pool(&ec2.pool("runners", 0, 0, 5)).await;
    stage
        .wait_pool("runners", "a first pass", Duration::from_secs(60), |s| {
            s.conditions.iter().any(|c| c.type_ == "Available")
        })
        .await;
    assert_eq!(ec2.launched(), 0);

    let other = pg::Cluster::shared().migrated_db().await;
    stage.secret("orca-db", "url", &other).await;
    let db = pg::connect(&other).await;
    db.execute(
        "insert into orca.runs (id, pipeline, status, start) values (1, 'p', 'running', 1)",
        &[],
    )
    .await
    .unwrap();
    let pool = format!("{}/runners", stage.ns());
    let request = Request::new(&pool, 1, 1, "head", "", true);
    ask_for_instance(&db, &request).await.unwrap();
    eventually(
        "a launch for the run waiting in the Secret's new database",
        Duration::from_secs(10),
        || async {
            match ec2.launched() {
                0 => Err(format!(
                    "nothing launched; events {:?}",
                    stage.events("runners").await
                )),
                n => Ok(n),
            }
        },
    )
    .await;
}

/// The operator restarted while an instance type is held for want of
/// capacity: the new replica reads the hold and the conditions' transition
/// times back from the status — it writes no new times, and tries the held
/// type no more until the hold is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_operator_keeps_the_capacity_hold_and_transition_times() {
    let mut stage = OnCluster::new("pool-hold").await;
    stage
        .apply_scheduler(&scheduler("orca", "v1", &[], ""))
        .await;
    let ec2 = Ec2Stage::new(&stage, "runners").await;
    ec2.proxy.fail(
        "RunInstances",
        &["InstanceType=t3.small"],
        Fault::error("InsufficientInstanceCapacity"),
        usize::MAX,
    );
    let mut pool = ec2.pool("runners", 1, 3, 5);
    pool.spec.launch.instance_types = vec!["t3.small".into(), "t3.medium".into()];
    stage.create_pool(&pool).await;
    let before = stage
        .wait_pool(
            "runners",
            "one idle instance, t3.small held",
            Duration::from_secs(90),
            |s| s.idle == 1 && !s.capacity_errors.is_empty(),
        )
        .await;
    let held = before.capacity_errors.clone();
    assert_eq!(held[0].instance_type, "t3.small", "{before:?}");

    // Restarted: replica a stops (SIGTERM), replica c starts.
    stage.stop_replica(0);
    let c = Replica::start(stage.cp(), stage.client(), stage.release(), "c").await;
    let c_key = c.aws_key_id().to_string();
    stage.add_replica(c);
    eventually(
        "the new replica's first passes",
        Duration::from_secs(60),
        || async {
            let n = ec2
                .proxy
                .calls_of("DescribeInstances")
                .iter()
                .filter(|call| call.key_id() == Some(c_key.as_str()))
                .count();
            if n >= 2 {
                Ok(())
            } else {
                Err(format!("{n} DescribeInstances by replica c"))
            }
        },
    )
    .await;
    let after = stage
        .wait_pool("runners", "the status", Duration::from_secs(5), |_| true)
        .await;
    assert_eq!(after.capacity_errors, held, "the hold is kept as it was");
    assert_eq!(
        after.conditions, before.conditions,
        "the same conditions, transition times and all"
    );

    // More wanted: launched on t3.medium, t3.small not tried while held.
    stage.scale_idle("runners", 2).await;
    let tried: Vec<_> = ec2
        .proxy
        .calls_of("RunInstances")
        .into_iter()
        .filter(|call| call.key_id() == Some(c_key.as_str()))
        .map(|call| call.param("InstanceType").map(String::from))
        .collect();
    assert_eq!(
        tried,
        [Some("t3.medium".to_string())],
        "replica c's launches"
    );
}

/// A stopped reserve on the cluster, under the chart's RBAC: launched,
/// booted by the real agents, stopped; `kubectl get wpool` shows it in its
/// Stopped column, and the status counts the seconds it cost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_reserve_shows_in_kubectl_get_wpool() {
    let stage = OnCluster::new("pool-reserve").await;
    stage
        .apply_scheduler(&scheduler("orca", "v1", &[], ""))
        .await;
    let ec2 = Ec2Stage::new(&stage, "runners").await;
    let mut pool = ec2.pool("runners", 0, 0, 5);
    pool.spec.stopped = Some(orca_operator::crd::StoppedRange { min: 2, max: None });
    stage.create_pool(&pool).await;
    let status = stage
        .wait_pool(
            "runners",
            "two instances stopped in the reserve",
            Duration::from_secs(90),
            |s| s.stopped == 2,
        )
        .await;
    assert_eq!((status.idle, status.launching), (0, 0), "{status:?}");
    assert!(!ec2.proxy.calls_of("StopInstances").is_empty());
    let (stopped, text) = stage.column("wpool", "runners", "STOPPED");
    assert_eq!(stopped.as_deref(), Some("2"), "the STOPPED column: {text}");
    let (degraded, text) = stage.column("wpool", "runners", "DEGRADED");
    assert_eq!(
        degraded.as_deref(),
        Some("AsExpected"),
        "kubectl get shows why a pool is (not) degraded: {text}"
    );
    // What the reserve costs, as Prometheus scrapes it: seconds stopped
    // (the status shows them with its next change, or ten minutes on).
    eventually(
        "stopped instance-seconds in /metrics",
        Duration::from_secs(60),
        || async {
            let metrics = stage.replicas()[0].scrape();
            let stopped: f64 = metrics
                .lines()
                .filter(|l| {
                    l.starts_with("orca_pool_instance_seconds_total{")
                        && l.contains("use=\"stopped\"")
                        && l.contains("capacity_type=\"onDemand\"")
                        && l.contains("instance_type=\"t3.micro\"")
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum();
            if stopped > 0.0 {
                Ok(stopped)
            } else {
                Err(format!("none yet in:\n{metrics}"))
            }
        },
    )
    .await;
}
