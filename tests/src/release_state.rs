//! What a release leaves behind, kept as fixtures
//! (`tests/fixtures/releases/<commit>/state/`): its Scheduler and WarmPool
//! with the status its operator wrote, the Scheduler's pods and Jobs, the
//! rows of its database and its EC2 instances with their tags. The binary
//! `capture-release` (run by `scripts/capture-release`) writes them from a
//! real run of that release; the upgrade tests load them onto a control
//! plane, a database and a moto of their own and upgrade from there.
//!
//! What differs from one run to the next is kept as a placeholder: moto's
//! instance and subnet ids (`${instance-0}`, `${subnet-0}`) and its
//! endpoint (`${ec2-endpoint}`). The namespace is the same in both
//! ([`NAMESPACE`]), since host names and EC2 tags carry it.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use kube::{
    api::{ApiResource, DynamicObject, GroupVersionKind, PostParams},
    Api, Client,
};
use orca_operator::warmpool::{Ec2, Ownership};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{moto::Moto, pg, warm};

/// The namespace of the captured release, its objects and its operator.
pub const NAMESPACE: &str = "orca-release";
/// The Helm release of the captured operator.
pub const RELEASE: &str = "orca-operator";
/// The captured Scheduler.
pub const SCHEDULER: &str = "orca";
/// The captured WarmPool.
pub const POOL: &str = "runners";

/// The Schedulers and WarmPools, each with its status.
pub const OBJECTS: &str = "objects.yaml";
/// The Schedulers' pods (without their status).
pub const PODS: &str = "pods.yaml";
/// The Schedulers' Jobs, each with its status.
pub const JOBS: &str = "jobs.yaml";
/// The `orca` schema with its rows (`pg_dump`).
pub const ROWS: &str = "orca.sql";
/// The EC2 instances.
pub const INSTANCES: &str = "instances.yaml";
/// The user-data the release's launches booted with (its URL, endpoints
/// and instance ids as placeholders).
pub const USER_DATA: &str = "user-data.sh";

/// One EC2 instance as captured.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Instance {
    id: String,
    instance_type: String,
    image: String,
    subnet: String,
    tags: BTreeMap<String, String>,
}

impl Instance {
    /// Instance `id` of `instance_type` from `image` in `subnet`, with `tags`.
    pub fn new(
        id: String,
        instance_type: String,
        image: String,
        subnet: String,
        tags: BTreeMap<String, String>,
    ) -> Self {
        Instance {
            id,
            instance_type,
            image,
            subnet,
            tags,
        }
    }
}

/// Placeholders and the values they stand for in one run.
#[derive(Debug, Default)]
pub struct Names(Vec<(String, String)>);

impl Names {
    /// moto's endpoint and its default subnets (`subnets`, sorted), which
    /// change with each moto.
    pub fn of_moto(endpoint: &str, subnets: &[String]) -> Names {
        let mut names = Names::default();
        names.add("${ec2-endpoint}".into(), endpoint.into());
        for (i, subnet) in subnets.iter().enumerate() {
            names.add(format!("${{subnet-{i}}}"), subnet.clone());
        }
        names
    }

    pub fn add(&mut self, placeholder: String, value: String) {
        self.0.push((placeholder, value));
    }

    /// `text` with each value written as its placeholder.
    pub fn hide(&self, text: &str) -> String {
        let mut by_length: Vec<&(String, String)> = self.0.iter().collect();
        by_length.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
        by_length
            .iter()
            .fold(text.to_string(), |t, (p, v)| t.replace(v.as_str(), p))
    }

    /// `text` with each placeholder written as its value.
    pub fn show(&self, text: &str) -> String {
        self.0
            .iter()
            .fold(text.to_string(), |t, (p, v)| t.replace(p.as_str(), v))
    }
}

/// The API resource of `object` (its `apiVersion` and `kind`).
fn resource_of(object: &Value) -> ApiResource {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = object["kind"].as_str().unwrap_or_default();
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

fn api_of(client: &Client, object: &Value) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), NAMESPACE, &resource_of(object))
}

/// `object` as it is kept: its kind, name, labels, annotations
/// (kubectl's last-applied one left out), finalizers, owners (by kind and
/// name: the uids are the cluster's), spec and, with `status`, its status.
/// For a pod, the ServiceAccount token volume the API server adds is left
/// out, since it adds it again.
pub fn kept(object: &Value, status: bool) -> Value {
    let meta = &object["metadata"];
    let mut out = serde_json::json!({
        "apiVersion": object["apiVersion"],
        "kind": object["kind"],
        "metadata": {"name": meta["name"]},
        "spec": object["spec"],
    });
    for key in ["labels", "finalizers"] {
        if !meta[key].is_null() {
            out["metadata"][key] = meta[key].clone();
        }
    }
    if let Some(annotations) = meta["annotations"].as_object() {
        let mut annotations = annotations.clone();
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
        if !annotations.is_empty() {
            out["metadata"]["annotations"] = annotations.into();
        }
    }
    if let Some(owners) = meta["ownerReferences"].as_array() {
        let owners: Vec<Value> = owners
            .iter()
            .map(|o| {
                let mut o = o.clone();
                o.as_object_mut().map(|o| o.remove("uid"));
                o
            })
            .collect();
        out["metadata"]["ownerReferences"] = owners.into();
    }
    if status && !object["status"].is_null() {
        out["status"] = object["status"].clone();
    }
    if object["kind"] == "Pod" {
        strip_token_volume(&mut out["spec"]);
    }
    if object["kind"] == "Job" {
        // The API server makes the selector and its labels for each Job.
        let spec = &mut out["spec"];
        spec.as_object_mut().map(|s| s.remove("selector"));
        if let Some(labels) = spec["template"]["metadata"]["labels"].as_object_mut() {
            labels.retain(|k, _| {
                !k.contains("controller-uid")
                    && k != "job-name"
                    && k != "batch.kubernetes.io/job-name"
            });
        }
    }
    out
}

fn strip_token_volume(spec: &mut Value) {
    let token = |v: &Value| {
        v["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("kube-api-access-"))
    };
    if let Some(volumes) = spec["volumes"].as_array_mut() {
        volumes.retain(|v| !token(v));
    }
    for list in ["containers", "initContainers"] {
        for c in spec[list].as_array_mut().into_iter().flatten() {
            if let Some(mounts) = c["volumeMounts"].as_array_mut() {
                mounts.retain(|m| !token(m));
            }
        }
    }
}

fn yaml_docs(text: &str, path: &Path) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .filter(|v| !v.is_null())
        .collect()
}

/// `values` as a multi-document YAML file.
pub fn write_yaml(path: &Path, values: &[Value]) {
    let text: String = values
        .iter()
        .map(|v| {
            format!(
                "---\n{}",
                serde_yaml::to_string(v).expect("invariant: JSON values serialise")
            )
        })
        .collect();
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// Runs PostgreSQL's `program` with `args`; its stdout, or a panic with
/// its stderr.
pub fn postgres_tool(program: &str, args: &[&str]) -> String {
    let path = pg::Cluster::shared().program(program);
    let out = Command::new(&path)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{} could not run: {e}", path.display()));
    assert!(
        out.status.success(),
        "{program} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What [`load`] made: the database, moto with the instances, and the
/// names the placeholders stood for.
pub struct Loaded {
    url: String,
    moto: Moto,
    ec2: Ec2,
    names: Names,
}

impl Loaded {
    /// The database the state was loaded into.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The moto holding its instances.
    pub fn moto(&self) -> &Moto {
        &self.moto
    }

    /// A client of that moto.
    pub fn ec2(&self) -> &Ec2 {
        &self.ec2
    }

    /// What the placeholders stood for.
    pub fn names(&self) -> &Names {
        &self.names
    }
}

/// Loads the state in `dir` into namespace [`NAMESPACE`] (which exists,
/// with the release's CRDs installed): a new database holding its rows
/// (their times moved to now: `AS_IF_JUST_NOW`),
/// a moto holding its instances, the Secret `orca-db`, and its objects
/// with their status, pods and Jobs.
pub async fn load(client: &Client, dir: &Path) -> Loaded {
    let moto = Moto::start();
    let endpoint = moto.endpoint();
    load_into(client, dir, moto, &endpoint).await
}

/// As [`load`], into `moto`, the objects naming `endpoint` as EC2's (a
/// proxy in front of moto, say); each instance launched with the
/// user-data the release booted it with, when the state holds it
/// ([`USER_DATA`]).
pub async fn load_into(client: &Client, dir: &Path, moto: Moto, endpoint: &str) -> Loaded {
    let ec2 = warm::ec2(&moto.endpoint()).await;
    let url = pg::Cluster::shared().fresh_db().await;
    let mut names = Names::of_moto(endpoint, &warm::subnets(&ec2).await);
    names.add("${database-url}".into(), url.clone());
    let user_data = std::fs::read_to_string(dir.join(USER_DATA))
        .ok()
        .map(|script| names.show(&script));
    let instances: Vec<Instance> = serde_yaml::from_str(&read(dir, INSTANCES))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join(INSTANCES).display()));
    for instance in &instances {
        let id = run_instance(&ec2, instance, &names, user_data.as_deref()).await;
        names.add(instance.id.clone(), id);
    }

    let shown = std::env::temp_dir().join(format!(
        "orca-release-rows-{}-{}.sql",
        std::process::id(),
        crate::cluster::random_hex(3)
    ));
    std::fs::write(&shown, names.show(&read(dir, ROWS)))
        .unwrap_or_else(|e| panic!("writing {}: {e}", shown.display()));
    postgres_tool(
        "psql",
        &[
            "--quiet",
            "-v",
            "ON_ERROR_STOP=1",
            "--dbname",
            &url,
            "--file",
            shown.to_str().expect("invariant: temp paths are UTF-8"),
        ],
    );
    let _ = std::fs::remove_file(&shown);
    let db = pg::connect(&url).await;
    db.batch(AS_IF_JUST_NOW)
        .await
        .unwrap_or_else(|e| panic!("moving the captured rows' times: {e}"));

    db_secret(client, &url).await;

    let shown = |file: &str| yaml_docs(&names.show(&read(dir, file)), &dir.join(file));
    for object in shown(OBJECTS) {
        create(client, object, true).await;
    }
    for job in shown(JOBS) {
        create(client, job, true).await;
    }
    for pod in shown(PODS) {
        create(client, pod, false).await;
    }
    Loaded {
        url,
        moto,
        ec2,
        names,
    }
}

/// Moves every time in the `orca` schema forward by as long as the
/// latest of them is ago: the rows as if the release had stopped just now
/// rather than when it was captured (an agent idle since then would power
/// off at once, a scheduler seen then would be long stale).
const AS_IF_JUST_NOW: &str = r#"
do $$
declare
    c record;
    t timestamptz;
    latest timestamptz := '-infinity';
begin
    for c in select table_name, column_name from information_schema.columns
             where table_schema = 'orca' and data_type = 'timestamp with time zone' loop
        execute format('select max(%I) from orca.%I', c.column_name, c.table_name) into t;
        if t > latest then latest := t; end if;
    end loop;
    if latest = '-infinity' then return; end if;
    for c in select table_name, column_name from information_schema.columns
             where table_schema = 'orca' and data_type = 'timestamp with time zone' loop
        execute format('update orca.%I set %I = %I + $1', c.table_name, c.column_name, c.column_name)
            using now() - latest;
    end loop;
end $$;
"#;

/// The Secret `orca-db` in [`NAMESPACE`], its key `url` = `url`.
pub async fn db_secret(client: &Client, url: &str) {
    let secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "orca-db"},
        "stringData": {"url": url},
    }))
    .expect("invariant: a Secret");
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap_or_else(|e| panic!("creating Secret orca-db: {e}"));
}

fn read(dir: &Path, file: &str) -> String {
    let path: PathBuf = dir.join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Creates `object` in [`NAMESPACE`], its owners' uids those of this
/// cluster's objects of their kind and name; then, with `status`, writes
/// its status as captured. A Job is created suspended, so that its
/// controller runs no pod before its finished status is written.
async fn create(client: &Client, mut object: Value, status: bool) {
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let kind = object["kind"].as_str().unwrap_or_default().to_string();
    if let Some(owners) = object["metadata"]["ownerReferences"].as_array_mut() {
        for owner in owners {
            let api = api_of(client, owner);
            let owner_name = owner["name"].as_str().unwrap_or_default().to_string();
            let found = api
                .get(&owner_name)
                .await
                .unwrap_or_else(|e| panic!("{kind} {name}'s owner {owner_name}: {e}"));
            owner["uid"] = found.metadata.uid.unwrap_or_default().into();
        }
    }
    let captured_status = object.as_object_mut().and_then(|o| o.remove("status"));
    if kind == "Job" {
        object["spec"]["suspend"] = true.into();
    }
    let api = api_of(client, &object);
    let dynamic: DynamicObject =
        serde_json::from_value(object).unwrap_or_else(|e| panic!("{kind} {name}: {e}"));
    let made = api
        .create(&PostParams::default(), &dynamic)
        .await
        .unwrap_or_else(|e| panic!("creating {kind} {name}: {e}"));
    if let (true, Some(captured)) = (status, captured_status) {
        write_status(&api, made, captured, &format!("{kind} {name}")).await;
    }
}

/// Writes `captured` as the status of `object`, read again and written
/// again while a controller of the cluster changes it meanwhile (the Job
/// controller answers a new Job within milliseconds: a 409 Conflict).
async fn write_status(
    api: &Api<DynamicObject>,
    mut object: DynamicObject,
    captured: Value,
    what: &str,
) {
    let name = object.metadata.name.clone().unwrap_or_default();
    for _ in 0..10 {
        let mut with_status = serde_json::to_value(&object).expect("invariant: objects serialise");
        with_status["status"] = captured.clone();
        let with_status: DynamicObject =
            serde_json::from_value(with_status).expect("invariant: still the object");
        match api
            .replace_status(&name, &PostParams::default(), &with_status)
            .await
        {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 => {
                object = api
                    .get(&name)
                    .await
                    .unwrap_or_else(|e| panic!("reading {what} again: {e}"));
            }
            Err(e) => panic!("writing {what}'s status: {e}"),
        }
    }
    panic!("writing {what}'s status: still in conflict after 10 tries");
}

/// Launches one instance as `captured` was (its image, type, subnet and
/// tags, and `user_data`) in moto; its id.
async fn run_instance(
    ec2: &Ec2,
    captured: &Instance,
    names: &Names,
    user_data: Option<&str>,
) -> String {
    use aws_sdk_ec2::types::{InstanceType, ResourceType, Tag, TagSpecification};
    let tags = captured
        .tags
        .iter()
        .map(|(k, v)| Tag::builder().key(k).value(names.show(v)).build());
    let out = ec2
        .client()
        .run_instances()
        .image_id(&captured.image)
        .instance_type(InstanceType::from(captured.instance_type.as_str()))
        .subnet_id(names.show(&captured.subnet))
        .min_count(1)
        .max_count(1)
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::Instance)
                .set_tags(Some(tags.collect()))
                .build(),
        )
        .set_user_data(user_data.map(|script| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.encode(script)
        }))
        .send()
        .await
        .unwrap_or_else(|e| panic!("moto's RunInstances failed: {e}"));
    out.instances()
        .first()
        .and_then(|i| i.instance_id())
        .expect("moto answers RunInstances with the instance")
        .to_string()
}

/// The hosts of the pool's instances on moto at `endpoint`, whose agents
/// report to `url`: the release's instances carry no cluster tag until a
/// later release adopts them. Each runs the agent until `stop` resolves
/// (or its sender is dropped, as a test that fails drops it); then every
/// host's processes are killed and the task ends.
pub async fn hosts(
    endpoint: &str,
    url: &str,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let owner = Ownership::new(NAMESPACE, POOL, SCHEDULER, RELEASE, "");
    let hosts = warm::hosts_for(endpoint, url, owner, "true")
        .await
        .of_any_cluster();
    tokio::spawn(hosts.run(stop))
}

/// `tests/fixtures/releases/<commit>/<file>` of the release users upgrade
/// from to this one (`tests/fixtures/releases/PREVIOUS` names it).
pub fn previous_release(file: &str) -> PathBuf {
    let releases = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/releases");
    let commit = std::fs::read_to_string(releases.join("PREVIOUS"))
        .expect("tests/fixtures/releases/PREVIOUS names the previous release");
    releases.join(commit.trim()).join(file)
}

/// The previous release's binary `name` (`orca-operator`,
/// `orca-pool-agent`), which scripts/test builds with
/// scripts/build-release and names in `ORCA_PREVIOUS_RELEASE`.
pub fn previous_binary(name: &str) -> PathBuf {
    let dir = std::env::var_os("ORCA_PREVIOUS_RELEASE").unwrap_or_else(|| {
        panic!(
            "ORCA_PREVIOUS_RELEASE is not set: the previous release's binaries, which \
             `scripts/build-release $(cat tests/fixtures/releases/PREVIOUS)` builds \
             (scripts/test does)"
        )
    });
    PathBuf::from(dir).join(name)
}
