//! Many objects on one database and one region: the operator's connections
//! to the database and its EC2 listings do not grow with them.

use std::time::Duration;

use orca_operator::crd::WarmPool;
use orca_tests::{ec2_faults::Ec2Faults, eventually::eventually, on_cluster::OnCluster, pg, warm};

use super::scheduler;

const SCHEDULERS: usize = 6;
const POOLS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedulers_and_pools_on_one_database_share_its_connections_and_their_listings() {
    let stage = OnCluster::new("scale").await;
    let moto = orca_tests::moto::Moto::start();
    let proxy = Ec2Faults::start(&moto.endpoint());
    let subnets = warm::subnets(&warm::ec2(&moto.endpoint()).await).await;
    for i in 0..SCHEDULERS {
        let s = scheduler(&format!("s-{i}"), "v1", &[], "  paused: true\n");
        stage.apply_scheduler(&s).await;
    }
    for i in 0..POOLS {
        let mut spec = warm::spec(&proxy.endpoint(), &["t3.micro"], &subnets[..1], 0, 0, 2);
        spec.scheduler = format!("s-{i}");
        stage
            .create_pool(&WarmPool::new(&format!("p-{i}"), spec))
            .await;
    }
    eventually(
        "every Scheduler and WarmPool with its first status",
        Duration::from_secs(60),
        || async {
            let (s, p) = stage.with_first_status().await;
            if s == SCHEDULERS && p == POOLS {
                Ok(())
            } else {
                Err(format!("{s} Schedulers and {p} WarmPools"))
            }
        },
    )
    .await;

    // One connection for the Schedulers, one for the pools, one listening.
    let db = pg::connect(stage.url()).await;
    let sessions: Vec<(String, i64)> = db
        .query(
            "select application_name, count(*) from pg_stat_activity
             where datname = current_database() and application_name like 'orca-operator%'
             group by 1 order by 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let replica = &stage.replicas()[0].name();
    assert_eq!(
        sessions,
        [
            (format!("orca-operator-listen/{replica}"), 1),
            (format!("orca-operator-pool/{replica}"), 1),
            (format!("orca-operator/{replica}"), 1),
        ],
        "the operator's sessions on the database, by application_name"
    );

    // The pools list EC2: once one has, a resync of every pool (20 s)
    // fits in the next 21 s, and they list together, not one listing
    // each. (Counted from a listing, not from any moment: on a busy
    // machine a resync came later than 21 s after one.)
    proxy.forget_calls();
    eventually("a listing", Duration::from_secs(60), || async {
        match proxy.calls_of("DescribeInstances").len() {
            0 => Err("none yet".to_string()),
            _ => Ok(()),
        }
    })
    .await;
    proxy.forget_calls();
    tokio::time::sleep(Duration::from_secs(21)).await;
    let lists = proxy.calls_of("DescribeInstances").len();
    assert!(
        lists <= 2,
        "{lists} DescribeInstances in 21 s for {POOLS} pools"
    );
}
