//! The database URL kept in SSM Parameter Store (moto's), not in the
//! user-data: what a launch writes, what the instances boot with, and the
//! real agent reading it with the instance role's credentials from a
//! metadata stand-in; a rotated URL reaches the next agent; no log line,
//! at trace, holds the password or the user-data.

use orca_operator::fence::Fence;
use std::{
    io::Write,
    sync::{Arc, Mutex},
};

use orca_tests::{bins, imds::FakeImds};

use super::*;

/// Every line logged, at trace, while it is the thread's subscriber.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The value of `NAME='…'` in the script, unquoted.
fn assigned(script: &str, name: &str) -> Option<String> {
    let prefix = format!("{name}=");
    script.lines().find_map(|l| {
        let v = l.strip_prefix(&prefix)?;
        Some(v.trim_matches('\'').to_string())
    })
}

/// `orca-pool-agent database-url`, in the environment the user-data
/// gives it, on an instance whose role the metadata stand-in serves (no
/// keys of its own): what it prints, or its stderr.
async fn read_as_instance(script: &str, imds: &FakeImds) -> Result<String, String> {
    // Not blocking: the metadata stand-in answers on this test's thread.
    let mut cmd = tokio::process::Command::new(bins::path("orca-pool-agent"));
    cmd.arg("database-url")
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_EC2_METADATA_DISABLED")
        .env_remove("ORCA_DATABASE_URL")
        .env("ORCA_POOL_AGENT_IMDS", imds.url());
    for name in [
        "ORCA_DATABASE_URL_PARAMETER",
        "ORCA_DATABASE_URL_REGION",
        "ORCA_DATABASE_URL_ENDPOINT",
    ] {
        if let Some(v) = assigned(script, name) {
            cmd.env(name, v);
        }
    }
    let out = cmd.output().await.expect("orca-pool-agent runs");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[tokio::test]
async fn the_user_data_names_a_parameter_the_agent_reads_and_a_rotation_reaches_it() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let _logs = tracing::subscriber::set_default(subscriber);
    let imds = FakeImds::start().await;
    let pool = "vault/pool";
    // The URL as the Secret holds it, password and all (the test cluster
    // trusts local connections, so any password connects).
    let with_password = |pw: &str| url.replacen("postgres@", &format!("postgres:{pw}@"), 1);
    let first = with_password("first-s3cret");
    let spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets, 2, 4, 4);
    let mut lp = warm::pool_loop(pool, spec.clone(), &first).await;
    lp.pass(Utc::now()).await.unwrap();
    let launched = present(&ec2, pool).await;
    assert_eq!(launched.len(), 2, "minIdle 2 launches two");
    let parameter = format!(
        "/orca/{}/vault/sched/database-url",
        warm::tuning(Duration::from_secs(60)).cluster()
    );
    let mut script = String::new();
    for i in &launched {
        script = ec2
            .user_data(i.id())
            .await
            .unwrap()
            .expect("a launch has user-data");
        assert!(
            !script.contains("first-s3cret"),
            "the password is in {}'s user-data:\n{script}",
            i.id()
        );
        assert!(
            !script.contains("postgres://"),
            "a URL is in {}'s user-data",
            i.id()
        );
        assert_eq!(
            assigned(&script, "ORCA_DATABASE_URL_PARAMETER"),
            Some(parameter.clone())
        );
    }
    assert_eq!(read_as_instance(&script, &imds).await, Ok(first.clone()));
    assert!(
        imds.credential_reads() >= 1,
        "the agent did not use the instance role's credentials"
    );

    // The Secret changes: the pool's next loop writes the new URL, and an
    // agent reads the new one.
    let second = with_password("second-s3cret");
    drop(lp);
    let mut lp = warm::pool_loop(pool, spec.clone(), &second).await;
    lp.pass(Utc::now()).await.unwrap();
    assert_eq!(read_as_instance(&script, &imds).await, Ok(second.clone()));

    // Asked for, the URL is in the user-data, with a Warning Event.
    let mut asked = spec.clone();
    asked.launch.database_url_in = orca_operator::crd::DatabaseUrlIn::UserData;
    asked.idle.min = 3;
    lp.set_spec(asked).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    assert!(
        report
            .events()
            .iter()
            .any(|e| e.reason() == "DatabaseUrlInUserData" && e.is_warning()),
        "{:?}",
        report.events()
    );
    let newest: Vec<String> = present(&ec2, pool)
        .await
        .into_iter()
        .map(|i| i.id().to_string())
        .filter(|id| !launched.iter().any(|l| l.id() == id))
        .collect();
    assert_eq!(newest.len(), 1);
    let script_with_url = ec2.user_data(&newest[0]).await.unwrap().unwrap();
    assert!(script_with_url.contains("second-s3cret"));

    // At trace, nothing logged the passwords or a script.
    drop(_logs);
    let logged = String::from_utf8_lossy(&lines.0.lock().unwrap()).into_owned();
    assert!(
        logged.lines().count() > 50,
        "too little was logged to prove anything"
    );
    for secret in [
        "first-s3cret",
        "second-s3cret",
        "#!/bin/sh",
        "ORCA_DATABASE_URL_PARAMETER",
    ] {
        let hit = logged.lines().find(|l| l.contains(secret));
        assert!(
            hit.is_none(),
            "`{secret}` was logged: {}",
            hit.unwrap_or_default()
        );
    }
}

/// An agent whose URL's password was rotated away is refused by the
/// database: it reads the parameter again, connects with the URL it holds
/// now and makes its warm row.
#[tokio::test]
async fn an_agent_refused_by_the_database_reads_the_parameter_again() {
    use orca_operator::local::postgres::PASSWORD_ROLE;
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let imds = FakeImds::start().await;
    let admin = pg::connect(&url).await;
    // A login of its own, with a password (members of PASSWORD_ROLE are
    // not trusted by the test cluster).
    let user = format!("rotated_{}", std::process::id());
    admin
        .batch(&format!(
            "do $$ begin create role {PASSWORD_ROLE} nologin; \
             exception when duplicate_object then null; end $$; \
             create role {user} login superuser password 'old-pw' in role {PASSWORD_ROLE};"
        ))
        .await
        .unwrap();
    let as_user = |pw: &str| url.replacen("postgres@", &format!("{user}:{pw}@"), 1);
    let (old, new) = (as_user("old-pw"), as_user("new-pw"));
    let pool = "rotate/pool";
    let spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets, 1, 1, 1);
    // The password is rotated: the Secret (the pool's URL) says the new one.
    admin
        .batch(&format!("alter role {user} password 'new-pw'"))
        .await
        .unwrap();
    let mut lp = warm::pool_loop(pool, spec, &new).await;
    lp.pass(Utc::now()).await.unwrap();
    let launched = present(&ec2, pool).await;
    let script = ec2.user_data(launched[0].id()).await.unwrap().unwrap();
    let refused = orca_db::connect(
        &orca_db::DatabaseUrl::parse(&old).unwrap(),
        &orca_db::ConnectOptions::named("orca-tests"),
    )
    .await;
    assert!(
        matches!(&refused, Err(e) if e.is_refused()),
        "the old password still connects: {:?}",
        refused.err()
    );

    let mut agent = tokio::process::Command::new(bins::path("orca-pool-agent"));
    agent
        .args(["pool-next", "i-rotated", "0", "0", "600"])
        .env("ORCA_DATABASE_URL", &old)
        .env("ORCA_POOL", pool)
        .env("ORCA_POOL_AGENT_IMDS", imds.url())
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_EC2_METADATA_DISABLED")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    for name in [
        "ORCA_DATABASE_URL_PARAMETER",
        "ORCA_DATABASE_URL_REGION",
        "ORCA_DATABASE_URL_ENDPOINT",
    ] {
        if let Some(v) = assigned(&script, name) {
            agent.env(name, v);
        }
    }
    let mut agent = agent.spawn().expect("orca-pool-agent starts");
    let rows = eventually_true(
        "the refused agent's warm row, made with the parameter's URL",
        Duration::from_secs(20),
        || async {
            admin
                .query(
                    "select 1 from orca.instances where instance = 'i-rotated' and ended is null",
                    &[],
                )
                .await
                .map(|r| !r.is_empty())
                .unwrap_or(false)
        },
    );
    rows.await;
    let _ = agent.start_kill();
    let out = agent.wait_with_output().await.unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !said.contains("old-pw") && !said.contains("new-pw"),
        "a password in the agent's log:\n{said}"
    );
}

/// `orca-pool-agent database-url` as an instance whose role is a moto IAM
/// user with `policy` (moto enforcing IAM), the parameter `name` at moto:
/// what it prints, or its stderr.
async fn read_as(
    moto: &orca_tests::moto::Moto,
    key: &orca_tests::iam::AccessKey,
    name: &str,
) -> Result<String, String> {
    let out = tokio::process::Command::new(bins::path("orca-pool-agent"))
        .arg("database-url")
        .env("AWS_ACCESS_KEY_ID", key.id())
        .env("AWS_SECRET_ACCESS_KEY", key.secret())
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("ORCA_DATABASE_URL")
        .env("ORCA_DATABASE_URL_PARAMETER", name)
        .env("ORCA_DATABASE_URL_REGION", warm::REGION)
        .env("ORCA_DATABASE_URL_ENDPOINT", moto.endpoint())
        // One try: a refusal is the answer wanted.
        .env("ORCA_POOL_AGENT_READ_SECONDS", "0")
        .output()
        .await
        .expect("orca-pool-agent runs");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// A team's instance role, as `orca-operator iam-policy --instance-role
/// --namespace` prints it, has every action its agent needs to read its
/// team's database URL (moto enforcing IAM checks actions; which
/// parameters it may read is held by the policy's unit evaluator, which
/// refuses another team's), and a role without `ssm:GetParameter` reads
/// nothing.
#[tokio::test]
async fn a_team_role_as_printed_lets_its_agent_read_its_url() {
    use orca_operator::iam_policy::{instance_policy, Reads};
    let (moto, url, _ec2, _subnets) = warm::Stage::new().await.parts();
    let cluster = warm::tuning(Duration::from_secs(60)).cluster().clone();
    let name = orca_operator::warmpool::ssm::parameter_name(&cluster, "team-a", "orca");
    orca_operator::warmpool::ssm::Ssm::new(
        &orca_operator::warmpool::Ec2Config::new(warm::REGION, Some(&moto.endpoint())),
        Fence::always(),
    )
    .await
    .publish(&name, &url, &[])
    .await
    .unwrap_or_else(|e| panic!("publishing {name}: {e}"));
    let printed: serde_json::Value = serde_json::from_str(&orca_operator::iam_policy::render(
        &instance_policy(&cluster, Reads::Namespace("team-a")),
    ))
    .unwrap();
    // As moto checks a policy: its actions, on any resource.
    let checked = |without| orca_tests::iam::as_moto_checks(&printed, without);
    let team_a = orca_tests::iam::user(&moto, "team-a-instances", &checked(None));
    let without = checked(Some("ssm:GetParameter"));
    assert!(
        orca_tests::iam::statements(&without).is_empty(),
        "{without}"
    );
    let elsewhere = serde_json::json!({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["ec2:DescribeInstances"], "Resource": "*"}]});
    let none = orca_tests::iam::user(&moto, "no-read", &elsewhere);
    orca_tests::iam::enforce(&moto);
    assert_eq!(read_as(&moto, &team_a, &name).await, Ok(url.clone()));
    let refused = read_as(&moto, &none, &name).await.expect_err("refused");
    assert!(refused.contains("GetParameter"), "{refused}");
    assert!(!refused.contains(&url), "{refused}");
}
