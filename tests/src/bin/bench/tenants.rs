//! `bench tenants`: how long another namespace's scale-up takes while one
//! namespace turns hostile (docs/operations.md#security-notes), on the test
//! control plane with the chart's RBAC, the operator a process of its own
//! held to the chart's memory limit (256 MiB of data) and a stuck limit of
//! 20 s. A victim's pool is raised by one instance, and the time from the
//! spec's change to EC2 listing the new instance is taken: first with all
//! quiet, then after each attack is added to the ones before — a CA path
//! of `/dev/zero`, a FIFO in the chart's CA directory, a database of huge
//! rows, one of slow rows, and a flood of NOTIFYs naming the victim's pool
//! — each figure beside the quiet one. Printed as `| figure | value |
//! target |` lines; never a pass/fail test.

use std::time::{Duration, Instant};

use kube::{
    api::{Patch, PatchParams, PostParams},
    Api,
};
use orca_operator::{
    crd::{Scheduler, WarmPool},
    warmpool::Ownership,
};
use orca_tests::{
    cluster::ControlPlane,
    hostile::{
        fifo, huge_database, notify_flood, paused, secret, sleeper, slow_database, with_ca,
        CHART_MEMORY_LIMIT,
    },
    moto::Moto,
    on_cluster::OnCluster,
    pg, warm,
};

/// The victim's scale-ups measured per step; the median is printed.
const ROUNDS: usize = 3;

struct Victim<'a> {
    pools: Api<WarmPool>,
    owner: Ownership,
    ec2: &'a orca_operator::warmpool::Ec2,
    size: i32,
}

impl Victim<'_> {
    async fn present(&self) -> usize {
        self.ec2
            .describe(&self.owner)
            .await
            .map(|l| l.iter().filter(|i| i.state().is_present()).count())
            .unwrap_or(0)
    }

    /// Raises the pool by one instance: how long until EC2 lists it.
    async fn scale_up(&mut self) -> Duration {
        let before = self.present().await;
        self.size += 1;
        let started = Instant::now();
        let patch = serde_json::json!({"spec": {"idle": {"min": self.size, "max": self.size},
            "maxInstances": self.size}});
        self.pools
            .patch("runners", &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap_or_else(|e| panic!("scaling the victim's pool: {e}"));
        while self.present().await <= before {
            if started.elapsed() > Duration::from_secs(120) {
                return started.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        started.elapsed()
    }

    async fn median(&mut self) -> Duration {
        let mut times = Vec::new();
        for _ in 0..ROUNDS {
            times.push(self.scale_up().await);
        }
        times.sort();
        times[ROUNDS / 2]
    }
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
pub async fn run() {
    warm::aws_env();
    let client = ControlPlane::shared().client().await;
    let victim_ns = ControlPlane::shared()
        .namespace(&client, "bench-victim")
        .await;
    let ca_dir = std::env::temp_dir().join(format!("orca-bench-ca-{}", std::process::id()));
    let fifo = fifo(&ca_dir, "fifo.pem");
    let dirs = format!("databaseCaDirectories={{{}}}", ca_dir.display());
    let stage = OnCluster::watching(
        "bench-tenants",
        std::slice::from_ref(&victim_ns),
        &["tenancy.requireClass=false", &dirs],
    )
    .await
    .with_held_replica("a", &["--stuck-after-seconds=20"], CHART_MEMORY_LIMIT)
    .await;
    let moto = Moto::start();
    let ec2 = warm::ec2(&moto.endpoint()).await;
    let subnets = warm::subnets(&ec2).await;

    secret(stage.client(), &victim_ns, "orca-db", stage.url()).await;
    Api::<Scheduler>::namespaced(stage.client().clone(), &victim_ns)
        .create(&PostParams::default(), &paused("orca", "orca-db"))
        .await
        .unwrap_or_else(|e| panic!("the victim's Scheduler: {e}"));
    let mut spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 0, 0, 1);
    spec.scheduler = "orca".into();
    spec.boot_timeout_seconds = 600;
    let pools = Api::<WarmPool>::namespaced(stage.client().clone(), &victim_ns);
    pools
        .create(&PostParams::default(), &WarmPool::new("runners", spec))
        .await
        .unwrap_or_else(|e| panic!("the victim's pool: {e}"));
    let mut victim = Victim {
        pools,
        owner: Ownership::new(
            &victim_ns,
            "runners",
            "orca",
            "orca-operator",
            orca_tests::release::TEST_CLUSTER,
        ),
        ec2: &ec2,
        size: 0,
    };
    // The pool's loop made and its first pass over, before anything is
    // timed.
    victim.scale_up().await;
    let quiet = victim.median().await;
    println!(
        "| another namespace's pool +1 → EC2 lists it, all quiet (median of {ROUNDS}) | {} | — |",
        secs(quiet)
    );

    // The attacker's own database, whose NOTIFYs will name the victim's
    // pool.
    let flood_url = pg::Cluster::shared().migrated_db().await;
    secret(stage.client(), stage.ns(), "flood", &flood_url).await;
    let attacks: [(&str, &str, String); 4] = [
        (
            "a CA path of /dev/zero",
            "zero",
            with_ca(stage.url(), "/dev/zero"),
        ),
        (
            "a FIFO in the CA directory",
            "fifo",
            with_ca(stage.url(), fifo.to_str().expect("a UTF-8 path")),
        ),
        ("1500 rows, three of 100 MB", "huge", huge_database().await),
        ("rows 3 s each to read", "slow", slow_database().await),
    ];
    let mut during = Vec::new();
    for (what, name, url) in attacks {
        secret(stage.client(), stage.ns(), name, &url).await;
        stage.apply_scheduler(&sleeper(name, name)).await;
        // Its reconciles under way.
        tokio::time::sleep(Duration::from_secs(5)).await;
        during.push(what);
        let took = victim.median().await;
        let alive = matches!(stage.replicas()[0].health(), Ok((200, _)));
        println!(
            "| the same, with {} in another namespace{} | {} (quiet {}) | about the quiet figure |",
            during.join(", "),
            if alive { "" } else { " (the operator is down)" },
            secs(took),
            secs(quiet)
        );
    }
    // Its pool on that database: the database's listener is the one that
    // would wake the victim's pool.
    stage.apply_scheduler(&paused("flood", "flood")).await;
    let mut theirs = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 0, 0, 1);
    theirs.scheduler = "flood".into();
    stage.create_pool(&WarmPool::new("flooding", theirs)).await;
    let flood = notify_flood(&flood_url, &format!("{victim_ns}/runners"), 2000).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let took = victim.median().await;
    flood.abort();
    println!(
        "| the same, all of those and 2000 NOTIFYs a second naming its pool | {} (quiet {}) | about the quiet figure |",
        secs(took),
        secs(quiet)
    );
}
