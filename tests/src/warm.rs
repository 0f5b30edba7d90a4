//! Scaffolding for the warm pool's tests and bench: moto's EC2 server with
//! dummy credentials, a WarmPool spec on moto's default subnets, short
//! test intervals, local hosts running the real `orca-pool-agent`, and the
//! scheduler's half of the hand-out (the `orca_db::pool` functions
//! `orca-sim` uses).

use orca_operator::fence::Fence;
use std::{sync::Once, time::Duration};

use orca_operator::{
    crd::{IdleRange, Launch, WarmPoolSpec},
    local::host::{HostConfig, Hosts},
    warmpool::{Ec2, Ec2Config, Ownership, PoolLoop, Tuning},
};

use crate::{bins, moto::Moto, pg};

pub const REGION: &str = "us-east-1";
/// An image id moto accepts (any is: its AMI validation is off, and the
/// tests' moto holds no AMIs, see `orca_operator::local::moto`).
pub const IMAGE: &str = "ami-12c6146b";
/// Another: the image a pool's spec is changed to, to make its instances
/// drift.
pub const ANOTHER_IMAGE: &str = "ami-0c9a5b2e7d1f3a864";

/// Dummy AWS credentials for moto (the SDK's default chain reads them), and
/// no IMDS probing.
pub fn aws_env() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for (k, v) in [
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", "testing"),
            ("AWS_SESSION_TOKEN", "testing"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ] {
            std::env::set_var(k, v);
        }
    });
}

/// What the warm-pool tests stand on: a moto of their own, a migrated
/// database on the shared throwaway cluster, an EC2 client for moto, and
/// moto's default subnets.
pub struct Stage {
    moto: Moto,
    url: String,
    ec2: Ec2,
    subnets: Vec<String>,
}

impl Stage {
    /// The stage's moto.
    pub fn moto(&self) -> &Moto {
        &self.moto
    }

    /// The stage's migrated database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A client of the stage's moto.
    pub fn ec2(&self) -> &Ec2 {
        &self.ec2
    }

    /// The subnets moto made for it.
    pub fn subnets(&self) -> &Vec<String> {
        &self.subnets
    }
}

impl Stage {
    pub async fn new() -> Stage {
        let moto = Moto::start();
        let url = pg::Cluster::shared().migrated_db().await;
        let ec2 = ec2(&moto.endpoint()).await;
        let subnets = subnets(&ec2).await;
        Stage {
            moto,
            url,
            ec2,
            subnets,
        }
    }

    /// Each of its parts as a variable of its own: `(moto, url, ec2, subnets)`.
    pub fn parts(self) -> (Moto, String, Ec2, Vec<String>) {
        (self.moto, self.url, self.ec2, self.subnets)
    }
}

/// An EC2 client of the tests' own for `endpoint`.
pub async fn ec2(endpoint: &str) -> Ec2 {
    aws_env();
    Ec2::new(&Ec2Config::new(REGION, Some(endpoint)), Fence::always()).await
}

/// An EC2 client for `endpoint` signing as IAM user `key` (see
/// [`crate::iam`]).
pub async fn ec2_as(endpoint: &str, key: &crate::iam::AccessKey) -> Ec2 {
    aws_env();
    Ec2::with_credentials(
        &Ec2Config::new(REGION, Some(endpoint)),
        key.id(),
        key.secret(),
        Fence::always(),
    )
    .await
}

/// moto's default subnets, sorted.
pub async fn subnets(ec2: &Ec2) -> Vec<String> {
    let out = ec2
        .client()
        .describe_subnets()
        .send()
        .await
        .unwrap_or_else(|e| panic!("moto's DescribeSubnets failed: {e}"));
    let mut ids: Vec<String> = out
        .subnets()
        .iter()
        .filter_map(|s| s.subnet_id().map(String::from))
        .collect();
    ids.sort();
    assert!(
        ids.len() >= 2,
        "moto has fewer than two default subnets: {ids:?}"
    );
    ids
}

/// A pool on `endpoint` with an image, `types` and `subnets`.
pub fn spec(
    endpoint: &str,
    types: &[&str],
    subnets: &[String],
    min: i32,
    max: i32,
    max_instances: i32,
) -> WarmPoolSpec {
    WarmPoolSpec {
        class_ref: None,
        scheduler: "sched".into(),
        region: REGION.into(),
        endpoint: Some(endpoint.into()),
        // moto serves SSM too.
        ssm_endpoint: Some(endpoint.into()),
        idle: IdleRange { min, max },
        schedules: vec![],
        forecast: None,
        objective: None,
        stopped: None,
        max_instances,
        idle_seconds: 600,
        max_uses: 0,
        boot_timeout_seconds: 60,
        launch: Launch {
            launch_template: None,
            image_id: Some(IMAGE.into()),
            instance_types: types.iter().map(|t| t.to_string()).collect(),
            subnet_ids: subnets.to_vec(),
            security_group_ids: vec![],
            iam_instance_profile: None,
            tags: Default::default(),
            agent_path: "/usr/local/bin/orca-pool-agent".into(),
            run_command: "true".into(),
            database_url_file: None,
            database_url_in: Default::default(),
            capacity_type: Default::default(),
        },
        paused: false,
        on_delete: Default::default(),
        drain_timeout_seconds: 3600,
        disruption: Default::default(),
        maintenance_windows: vec![],
    }
}

/// Short intervals for tests: a resync every second, stale after 5 s, a
/// leak grace of `leak_grace`, quick back-off.
pub fn tuning(leak_grace: Duration) -> Tuning {
    Tuning::default()
        .with_resync(Duration::from_secs(1))
        .with_min_gap(Duration::from_millis(50))
        .with_stale(Duration::from_secs(5))
        .with_leak_grace(Some(leak_grace))
        .with_backoff_base(Duration::from_millis(50))
        .with_backoff_cap(Duration::from_secs(1))
        // Below the resync, as in production: a resync lists afresh.
        .with_listing_reuse(Duration::from_millis(500))
        .with_template_every(Duration::from_secs(1))
}

/// The loop of pool `pool` (`namespace/name`) on database `url`, with
/// [`tuning`] and a leak grace of a minute.
pub async fn pool_loop(pool: &str, spec: WarmPoolSpec, url: &str) -> PoolLoop {
    let (ns, name) = pool.split_once('/').expect("namespace/name");
    PoolLoop::new(
        ns,
        name,
        spec,
        url,
        tuning(Duration::from_secs(60)),
        Fence::always(),
    )
    .await
    .expect("the pool's loop starts")
}

/// The ownership tags of pool `pool` of these tests.
pub fn owner(pool: &str) -> Ownership {
    let (ns, name) = pool.split_once('/').unwrap_or(("default", pool));
    let tuning = Tuning::default();
    Ownership::new(ns, name, "sched", tuning.operator(), tuning.cluster())
}

/// Local hosts for `pool`: the real agent, `run_command` per run, agents
/// that give up 1 s after `idle_seconds`.
pub async fn hosts(endpoint: &str, url: &str, pool: &str, run_command: &str) -> Hosts {
    hosts_for(endpoint, url, owner(pool), run_command).await
}

/// Local hosts for the instances `owner` tags (a pool of another
/// Scheduler than these tests' `sched`).
pub async fn hosts_for(endpoint: &str, url: &str, owner: Ownership, run_command: &str) -> Hosts {
    hosts_with(endpoint, url, owner, run_command, vec![]).await
}

/// Local hosts as [`hosts_for`], their agents given `env` too.
pub async fn hosts_with(
    endpoint: &str,
    url: &str,
    owner: Ownership,
    run_command: &str,
    env: Vec<(String, String)>,
) -> Hosts {
    hosts_on(ec2(endpoint).await, url, owner, run_command, env)
}

/// Local hosts as [`hosts_with`], listing the instances through `ec2`.
pub fn hosts_on(
    ec2: Ec2,
    url: &str,
    owner: Ownership,
    run_command: &str,
    env: Vec<(String, String)>,
) -> Hosts {
    let cfg = HostConfig::new(bins::agent(), url, owner.pool(), 600, run_command)
        .with_env(
            [("ORCA_POOL_AGENT_GRACE_MS".to_string(), "1000".to_string())]
                .into_iter()
                .chain(env)
                .collect(),
        )
        .with_poll(Duration::from_millis(200))
        .with_agent_stderr(std::env::var_os("ORCA_TEST_AGENT_STDERR").is_some());
    Hosts::new(ec2, owner, cfg)
}

/// Launches `count` instances tagged as pool `pool`'s straight through
/// EC2, as if by another operator or by hand: the leaks and the load the
/// pool loop meets. Their ids.
pub async fn launch_by_hand(
    ec2: &Ec2,
    pool: &str,
    subnet: &str,
    count: u32,
    token: &str,
) -> Vec<String> {
    let spec = spec(
        "http://unused",
        &["t3.micro"],
        &[subnet.to_string()],
        0,
        0,
        1,
    );
    let owner = owner(pool);
    let offering = orca_operator::warmpool::Offering::new("t3.micro".into(), subnet.into(), false);
    ec2.run(&orca_operator::warmpool::ec2::RunRequest::new(
        &spec.launch,
        &offering,
        count,
        token,
        &"#!/bin/sh\n".into(),
        &owner,
    ))
    .await
    .unwrap_or_else(|e| panic!("moto's RunInstances failed: {e}"))
}

/// Hands run `run` of `pool` an idle instance (as a scheduler would,
/// through `sched`), then waits for the pool's next `RunInstances` at
/// `faults` (calls forgotten before): when the hand-out began, and when that
/// call came. The benchmarks' "pool below target → RunInstances".
pub async fn hand_out_until_launch(
    sched: &mut orca_db::Db,
    faults: &crate::ec2_faults::Ec2Faults,
    pool: &str,
    run: i64,
) -> (std::time::Instant, std::time::Instant) {
    use std::time::Instant;
    faults.forget_calls();
    let req = orca_db::pool::Request::new(pool, run, 1, "head", "", true);
    let handed = Instant::now();
    orca_db::pool::hand_out(sched, &req, Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("hand-out: {e}"))
        .unwrap_or_else(|| panic!("no idle instance to hand out for run {run}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(c) = faults.calls_of("RunInstances").first() {
            return (handed, c.at());
        }
        assert!(
            Instant::now() < deadline,
            "no RunInstances within 30 s of a hand-out"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The value of SSM parameter `name` at `endpoint` (moto's, or a proxy in
/// front of it), as the real agent's `database-url` reads it with the
/// tests' keys; `None` if SSM has no such parameter.
pub async fn parameter(endpoint: &str, name: &str) -> Option<String> {
    let out = tokio::process::Command::new(bins::path("orca-pool-agent"))
        .arg("database-url")
        .env("ORCA_DATABASE_URL_PARAMETER", name)
        .env("ORCA_DATABASE_URL_REGION", REGION)
        .env("ORCA_DATABASE_URL_ENDPOINT", endpoint)
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .await
        .expect("orca-pool-agent runs");
    let said = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => Some(String::from_utf8_lossy(&out.stdout).trim().to_string()),
        Some(1) if said.contains("ParameterNotFound") => None,
        _ => panic!("reading parameter {name}: {said}"),
    }
}
