//! `capture-release <dir>`: runs an earlier release on a control plane, a
//! database and a moto of its own, and writes what it leaves behind to
//! `<dir>/state/` (see `orca_tests::release_state`). `scripts/capture-release`
//! builds that release and runs this with its binaries:
//! `ORCA_OPERATOR_UNDER_TEST` and `ORCA_AGENT_UNDER_TEST`; its chart is
//! `<dir>/chart`.
//!
//! The release runs a Scheduler on the reference scheduler and a WarmPool
//! of two idle instances, as its users would. Once the Scheduler is Ready
//! and both instances idle, its operator is stopped, as the upgrade stops
//! it, and the state is written.

use std::{path::PathBuf, time::Duration};

use k8s_openapi::api::{batch::v1::Job, core::v1::Pod};
use kube::{api::ListParams, Api};
use orca_operator::crd::{Scheduler, WarmPool};
use orca_tests::{
    cluster::ControlPlane,
    eventually::eventually,
    on_cluster::kubectl,
    pg,
    release::{helm, run_as_admin, Release, Replica},
    release_state::{
        self, kept, postgres_tool, write_yaml, Instance, Names, INSTANCES, JOBS, NAMESPACE,
        OBJECTS, PODS, POOL, RELEASE, ROWS, SCHEDULER, USER_DATA,
    },
    warm,
};
use serde_json::Value;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .expect("usage: capture-release <tests/fixtures/releases/COMMIT>"),
    );
    for var in ["ORCA_OPERATOR_UNDER_TEST", "ORCA_AGENT_UNDER_TEST"] {
        assert!(
            std::env::var_os(var).is_some(),
            "{var} is not set: the release's binaries (scripts/capture-release sets it)"
        );
    }
    let cp = ControlPlane::shared();
    let client = cp.client().await;
    cp.namespace_named(&client, NAMESPACE).await;
    let chart = dir.join("chart");
    let mut install = vec![
        "install".to_string(),
        RELEASE.into(),
        chart.to_str().expect("a UTF-8 path").into(),
        "--namespace".into(),
        NAMESPACE.into(),
        "--set".into(),
        "replicaCount=0".into(),
        "--wait".into(),
    ];
    // A release that knows clusterName requires it.
    let values = std::fs::read_to_string(chart.join("values.yaml")).unwrap_or_default();
    if values.lines().any(|l| l.starts_with("clusterName:")) {
        install.push("--set".into());
        install.push(format!("clusterName={}", orca_tests::release::TEST_CLUSTER));
    }
    let install: Vec<&str> = install.iter().map(String::as_str).collect();
    run_as_admin(cp, &helm(), &install, None);
    let url = pg::Cluster::shared().migrated_db().await;
    let moto = orca_tests::moto::Moto::start();
    let ec2 = warm::ec2(&moto.endpoint()).await;
    let subnets = warm::subnets(&ec2).await;
    let (stop_hosts, stopped) = tokio::sync::oneshot::channel::<()>();
    let hosts = release_state::hosts(&moto.endpoint(), &url, async move {
        let _ = stopped.await;
    })
    .await;
    release_state::db_secret(&client, &url).await;
    let objects = objects(&moto.endpoint(), &subnets);
    run_as_admin(
        cp,
        &kubectl(),
        &["apply", "-n", NAMESPACE, "-f", "-"],
        Some(&objects),
    );
    let release = Release::new(RELEASE.into(), NAMESPACE.into(), vec![NAMESPACE.into()]);
    let mut replica = Replica::start(cp, &client, &release, "a").await;
    let schedulers: Api<Scheduler> = Api::namespaced(client.clone(), NAMESPACE);
    let db = pg::connect(&url).await;
    eventually(
        "the Scheduler Ready and two idle instances",
        Duration::from_secs(180),
        || async {
            let s = schedulers.get(SCHEDULER).await.map_err(|e| e.to_string())?;
            let status = serde_json::to_value(&s.status).unwrap_or_default();
            if status["phase"] != "Ready" {
                return Err(format!("Scheduler: {status}"));
            }
            let idle: i64 = db
                .query_one(
                    "select count(*) from orca.instances where ended is null and idle is not null",
                    &[],
                )
                .await
                .map_err(|e| e.to_string())?
                .get(0);
            if idle < 2 {
                return Err(format!("{idle} idle instances"));
            }
            Ok(())
        },
    )
    .await;
    // A few resyncs more, so that the status is the steady state's.
    tokio::time::sleep(Duration::from_secs(10)).await;
    replica.stop();
    if !replica.log().contains("INFO") {
        panic!("the release's operator logged nothing:\n{}", replica.log());
    }

    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap_or_else(|e| panic!("{}: {e}", state.display()));
    let mut names = Names::of_moto(&moto.endpoint(), &subnets);
    names.add("${database-url}".into(), url.clone());
    let instances = instances(&ec2, &mut names).await;
    // What its launches booted with: the version skew tests run this
    // release's agent on it.
    let first = names.show("${instance-0}");
    let user_data = ec2
        .user_data(&first)
        .await
        .unwrap_or_else(|e| panic!("{first}'s user-data: {e}"))
        .unwrap_or_else(|| panic!("{first} has no user-data"));
    std::fs::write(state.join(USER_DATA), names.hide(&user_data))
        .unwrap_or_else(|e| panic!("writing {USER_DATA}: {e}"));
    std::fs::write(
        state.join(INSTANCES),
        serde_yaml::to_string(&instances).expect("invariant: instances serialise"),
    )
    .unwrap_or_else(|e| panic!("writing {INSTANCES}: {e}"));
    let hidden = |values: Vec<Value>| -> Vec<Value> {
        values
            .into_iter()
            .map(|v| serde_json::from_str(&names.hide(&v.to_string())).expect("still JSON"))
            .collect()
    };
    let mut kept_objects = list::<Scheduler>(&client, "", true).await;
    kept_objects.extend(list::<WarmPool>(&client, "", true).await);
    write_yaml(&state.join(OBJECTS), &hidden(kept_objects));
    let pods: Vec<Value> = list::<Pod>(&client, "orca.dev/scheduler", false)
        .await
        .into_iter()
        .filter(|p| {
            !p["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|o| o["kind"] == "Job")
        })
        .collect();
    write_yaml(&state.join(PODS), &hidden(pods));
    write_yaml(
        &state.join(JOBS),
        &hidden(list::<Job>(&client, "", true).await),
    );
    let dump = postgres_tool(
        "pg_dump",
        &[
            "--schema=orca",
            "--no-owner",
            "--no-privileges",
            "--dbname",
            &url,
        ],
    );
    std::fs::write(state.join(ROWS), names.hide(&dump))
        .unwrap_or_else(|e| panic!("writing {ROWS}: {e}"));
    for file in [INSTANCES, OBJECTS, PODS, JOBS, ROWS, USER_DATA] {
        let text = std::fs::read_to_string(state.join(file)).unwrap_or_default();
        assert!(
            !text.contains(&url) && !text.contains("127.0.0.1"),
            "{file} holds an address of this run"
        );
    }
    let _ = stop_hosts.send(());
    let _ = hosts.await;
    println!("wrote {}", state.display());
}

/// The Scheduler and the WarmPool the release runs: the reference
/// scheduler, found on the test node's `PATH` as a real image would have
/// its program; two idle instances on moto.
fn objects(endpoint: &str, subnets: &[String]) -> String {
    format!(
        r#"apiVersion: orca.dev/v1alpha1
kind: Scheduler
metadata:
  name: {SCHEDULER}
spec:
  image: v1
  command: ["orca-sim"]
  args: ["scheduler", "--tick-ms", "200", "--stale-seconds", "3"]
  database:
    urlSecretRef: {{name: orca-db, key: url}}
  register:
    command: ["sh", "-c", "echo registered $ORCA_IMAGE"]
    timeoutSeconds: 60
  handover:
    staleSeconds: 3
    joinTimeoutSeconds: 30
---
apiVersion: orca.dev/v1alpha1
kind: WarmPool
metadata:
  name: {POOL}
spec:
  scheduler: {SCHEDULER}
  region: {region}
  endpoint: {endpoint}
  idle: {{min: 2, max: 4}}
  maxInstances: 5
  idleSeconds: 600
  bootTimeoutSeconds: 60
  launch:
    imageId: {image}
    instanceTypes: ["t3.micro"]
    subnetIds: {subnets:?}
    agentPath: /usr/local/bin/orca-pool-agent
    runCommand: "true"
"#,
        region = warm::REGION,
        image = warm::IMAGE,
    )
}

/// The pool's running instances, each id written as `${instance-N}`.
async fn instances(ec2: &orca_operator::warmpool::Ec2, names: &mut Names) -> Vec<Instance> {
    use aws_sdk_ec2::types::Filter;
    let out = ec2
        .client()
        .describe_instances()
        .filters(
            Filter::builder()
                .name("tag:orca.dev/pool")
                .values(format!("{NAMESPACE}/{POOL}"))
                .build(),
        )
        .filters(
            Filter::builder()
                .name("instance-state-name")
                .values("running")
                .build(),
        )
        .send()
        .await
        .unwrap_or_else(|e| panic!("moto's DescribeInstances failed: {e}"));
    let mut found = Vec::new();
    for (i, instance) in out
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .enumerate()
    {
        let placeholder = format!("${{instance-{i}}}");
        names.add(
            placeholder.clone(),
            instance.instance_id().unwrap_or_default().to_string(),
        );
        found.push(Instance::new(
            placeholder,
            instance
                .instance_type()
                .map(|t| t.as_str().to_string())
                .unwrap_or_default(),
            instance.image_id().unwrap_or_default().to_string(),
            names.hide(instance.subnet_id().unwrap_or_default()),
            instance
                .tags()
                .iter()
                .map(|t| {
                    (
                        t.key().unwrap_or_default().to_string(),
                        t.value().unwrap_or_default().to_string(),
                    )
                })
                .collect(),
        ));
    }
    found
}

/// Every `K` of the namespace (with label `label`, if given), as kept.
async fn list<K>(client: &kube::Client, label: &str, status: bool) -> Vec<Value>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), NAMESPACE);
    let params = if label.is_empty() {
        ListParams::default()
    } else {
        ListParams::default().labels(label)
    };
    let dt = K::DynamicType::default();
    api.list(&params)
        .await
        .unwrap_or_else(|e| panic!("listing {}: {e}", K::kind(&dt)))
        .items
        .iter()
        .map(|o| {
            let mut v = serde_json::to_value(o).expect("invariant: objects serialise");
            v["apiVersion"] = K::api_version(&dt).into();
            v["kind"] = K::kind(&dt).into();
            kept(&v, status)
        })
        .collect()
}
