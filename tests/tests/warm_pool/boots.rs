//! Boots that fail however they fail, and the agent and the user-data of
//! two releases side by side (docs/operations.md#version-skew). Here the
//! instances run their own user-data (`orca_tests::booting`), with this
//! release's agent or the previous release's in their "image"
//! (`launch.agentPath`): an instance that powers itself off before its
//! agent reported counts as a failed boot, a few in a row make the pool
//! `BootFailing` with the cause its script printed on the console, and its
//! launches back off. (Before, such an instance was never counted, and a
//! launch followed every pass.)

use orca_operator::crd::WarmPoolSpec;
use orca_tests::{bins, booting::Booting, iam, release_state};
use serde_json::json;

use super::*;

/// What the instances' scripts get besides their user-data: keys for SSM
/// (moto takes any), and a short first read of the parameter.
fn instance_env() -> Vec<(String, String)> {
    [
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("ORCA_POOL_AGENT_READ_SECONDS", "2"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .to_vec()
}

/// How many instances the `RunInstances` calls through `proxy` asked for.
fn launched(proxy: &Ec2Faults) -> u32 {
    proxy
        .calls_of("RunInstances")
        .iter()
        .map(|c| {
            c.param("MinCount")
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// Passes of `pool`'s loop on `spec` every second for `seconds`, its
/// instances booting their own user-data: the `BootFailing` message, if
/// the pool said it, and how many instances were launched. With
/// `principals`, on moto enforcing IAM: the operator (and the hosts' EC2
/// calls) signing as the first, the instances' SSM reads as the second,
/// their role.
async fn boot_as(
    pool: &str,
    spec: WarmPoolSpec,
    url: &str,
    moto: &orca_tests::moto::Moto,
    proxy: &Ec2Faults,
    seconds: u64,
    principals: Option<(&iam::AccessKey, &iam::AccessKey)>,
) -> (Option<String>, u32) {
    let mut env = instance_env();
    let (ec2, operator) = match principals {
        Some((operator, role)) => {
            env.retain(|(k, _)| !k.starts_with("AWS_"));
            env.push(("AWS_ACCESS_KEY_ID".into(), role.id().to_string()));
            env.push(("AWS_SECRET_ACCESS_KEY".into(), role.secret().to_string()));
            // The test process's dummy session token is no part of it.
            env.push(("AWS_SESSION_TOKEN".into(), String::new()));
            (
                warm::ec2_as(&moto.endpoint(), operator).await,
                Some(warm::ec2_as(&proxy.endpoint(), operator).await),
            )
        }
        None => (warm::ec2(&moto.endpoint()).await, None),
    };
    let _booting = Booting::start(ec2, proxy, warm::owner(pool), env);
    let mut lp = warm::pool_loop(pool, spec, url).await;
    if let Some(operator) = operator {
        lp = lp.with_ec2(operator);
    }
    let mut said = None;
    for _ in 0..seconds {
        let report = lp.pass(Utc::now()).await.unwrap();
        if let Some(("BootFailing", message)) = report.degraded().map(|(r, m)| (*r, m)) {
            said = Some(message.clone());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    (said, launched(proxy))
}

/// A spec of two idle instances whose agents read the database URL from
/// its parameter at `ssm` (moto, or somewhere unreachable), the image's
/// agent at `agent`.
fn spec_with(
    proxy: &Ec2Faults,
    subnets: &[String],
    ssm: &str,
    agent: &std::path::Path,
) -> WarmPoolSpec {
    let mut spec = warm::spec(&proxy.endpoint(), &["t3.micro"], &subnets[..1], 2, 2, 4);
    spec.ssm_endpoint = Some(ssm.into());
    spec.launch.agent_path = agent.display().to_string();
    spec.boot_timeout_seconds = 600;
    spec
}

/// The previous release's agent, which has no `database-url`, on this
/// release's user-data: each instance powers itself off at once saying
/// so; after three the pool is `BootFailing` with those words, and its
/// launches wait (four launched in 30 s, where one followed every pass).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_previous_agent_on_this_releases_user_data_fails_at_once_naming_it_and_backs_off() {
    warm::aws_env();
    let (moto, url, _ec2, subnets) = warm::Stage::new().await.parts();
    let proxy = Ec2Faults::start(&moto.endpoint());
    let spec = spec_with(
        &proxy,
        &subnets,
        &moto.endpoint(),
        &release_state::previous_binary("orca-pool-agent"),
    );
    let (said, launched) = boot_as("skew/old-agent", spec, &url, &moto, &proxy, 30, None).await;
    let said = said.expect("the pool says its boots fail");
    assert!(
        said.contains("The last one said: the image's orca-pool-agent has no database-url command"),
        "{said}"
    );
    assert!(said.contains("launches wait"), "{said}");
    assert!(launched <= 4, "{launched} launched in 30 s");
}

/// An instance role that may not read the database URL's parameter (moto
/// enforcing IAM; the role has no `ssm:GetParameter`): each instance says
/// so on its console and powers off; after three the pool is
/// `BootFailing` naming the role's missing action, and its launches wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_role_that_may_not_read_the_parameter_is_named_within_a_few_launches() {
    warm::aws_env();
    let (moto, url, _ec2, subnets) = warm::Stage::new().await.parts();
    let proxy = Ec2Faults::start(&moto.endpoint());
    let everything = iam::everything();
    let operator = iam::user(&moto, "operator", &everything);
    let no_read = json!({"Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": ["ec2:DescribeInstances"], "Resource": "*"}]});
    let role = iam::user(&moto, "instances", &no_read);
    iam::enforce(&moto);
    let spec = spec_with(
        &proxy,
        &subnets,
        &moto.endpoint(),
        &bins::path("orca-pool-agent"),
    );
    let pool = "skew/no-read";
    let principals = Some((&operator, &role));
    let (said, launched) = boot_as(pool, spec, &url, &moto, &proxy, 30, principals).await;
    let said = said.expect("the pool says its boots fail");
    assert!(
        said.contains("The last one said: cannot read the database URL parameter")
            && said.contains("ssm:GetParameter"),
        "{said}"
    );
    assert!(!said.contains(&url), "{said}");
    assert!(launched <= 4, "{launched} launched in 30 s");
}

/// This release's agent on the previous release's user-data (captured from
/// its launches, its database URL in the script): it reports, is handed a
/// run, runs it, and reports idle again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn this_releases_agent_serves_runs_on_the_previous_releases_user_data() {
    warm::aws_env();
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let proxy = Ec2Faults::start(&moto.endpoint());
    let previous = std::fs::read_to_string(release_state::previous_release(&format!(
        "state/{}",
        release_state::USER_DATA
    )))
    .expect("the previous release's captured user-data");
    let agent = bins::agent();
    let script = previous.replace("${database-url}", &url).replace(
        "/usr/local/bin/orca-pool-agent",
        &agent.display().to_string(),
    );
    let pool = format!("{}/{}", release_state::NAMESPACE, release_state::POOL);
    let owner = warm::owner(&pool);
    let spec = warm::spec(&proxy.endpoint(), &["t3.micro"], &subnets[..1], 0, 0, 1);
    let offering =
        orca_operator::warmpool::Offering::new("t3.micro".into(), subnets[0].clone(), false);
    let user_data: userdata::UserData = script.as_str().into();
    let ids = ec2
        .run(&orca_operator::warmpool::ec2::RunRequest::new(
            &spec.launch,
            &offering,
            1,
            "skew-previous-user-data",
            &user_data,
            &owner,
        ))
        .await
        .expect("a launch with the previous release's user-data");
    let _booting = Booting::start(ec2.clone(), &proxy, owner, instance_env());
    let mut db = pg::connect(&url).await;
    serves_a_run(
        &mut db,
        &pool,
        &ids[0],
        "this release's agent on the previous release's user-data",
    )
    .await;
}

/// The previous release's agent on this release's user-data with the
/// database URL in it (`launch.databaseUrlIn: userData`), the way to keep
/// the images as they are through the upgrade: the pool's instances
/// report, and one is handed a run and takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_previous_agent_serves_runs_on_this_releases_user_data_with_the_url_in_it() {
    warm::aws_env();
    let (moto, url, _ec2, subnets) = warm::Stage::new().await.parts();
    let proxy = Ec2Faults::start(&moto.endpoint());
    let pool = "skew/url-in-user-data";
    let mut spec = spec_with(
        &proxy,
        &subnets,
        &moto.endpoint(),
        &release_state::previous_binary("orca-pool-agent"),
    );
    spec.launch.database_url_in = orca_operator::crd::DatabaseUrlIn::UserData;
    let ec2 = warm::ec2(&moto.endpoint()).await;
    let _booting = Booting::start(ec2, &proxy, warm::owner(pool), instance_env());
    let mut lp = warm::pool_loop(pool, spec, &url).await;
    let mut db = pg::connect(&url).await;
    let mut idle = Vec::new();
    for _ in 0..30 {
        let report = lp.pass(Utc::now()).await.unwrap();
        assert!(report.degraded().is_none(), "{:?}", report.degraded());
        idle = idle_fresh(&db, pool).await;
        if idle.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(
        idle.len(),
        2,
        "the previous agent's instances idle: {idle:?}"
    );
    assert_eq!(launched(&proxy), 2);
    let id = idle[0].clone();
    serves_a_run(
        &mut db,
        pool,
        &id,
        "the previous agent on this release's user-data",
    )
    .await;
}

/// A run is handed to `id`, idle in `pool`, and its agent takes it.
async fn serves_a_run(db: &mut orca_db::Db, pool: &str, id: &str, what: &str) {
    eventually_true(
        &format!("{what}: idle"),
        Duration::from_secs(30),
        || async { idle_fresh(db, pool).await.iter().any(|i| i == id) },
    )
    .await;
    let run: i64 = db
        .query_one(
            "insert into orca.runs (pipeline, status, start) values ('skew', 'running', 1) returning id",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let handed = hand_out(
        db,
        &Request::new(pool, run, 1, "head", "", false),
        Duration::from_secs(5),
    )
    .await
    .expect("the hand-out")
    .expect("an idle instance to hand out");
    assert_eq!(handed.instance(), id);
    eventually_true(&format!("{what}: the run taken"), Duration::from_secs(30), || async {
        db.query_one(
            "select count(*) from orca.instances where instance = $1 and run = $2 and joined is not null",
            &[&id, &run],
        )
        .await
        .map(|r| r.get::<_, i64>(0) == 1)
        .unwrap_or(false)
    })
    .await;
}
