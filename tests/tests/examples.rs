//! The files of `examples/`, which the README shows and the local mode runs:
//! each parses as the type its `kind` names, they name each other, and the
//! CRDs carry the rules that relate their fields. That the API server
//! admits each example, and refuses bad specs naming the field, is tested
//! where a user meets it: on the real control plane
//! (`tests/tests/real_cluster/install.rs`).

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Secret;
use orca_db::DatabaseUrl;
use orca_operator::crd::{Scheduler, WarmPool};
use serde::Deserialize;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("invariant: the tests crate sits in the workspace root")
        .to_path_buf()
}

/// Every YAML document of every `.yaml` file in `examples/` (not its
/// subdirectories, where the local mode writes status), with its file.
fn examples() -> Vec<(PathBuf, Value)> {
    let dir = repo().join("examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a readable directory entry").path())
        .filter(|p| p.is_file() && matches!(p.extension(), Some(x) if x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .flat_map(|file| documents(&file).into_iter().map(move |d| (file.clone(), d)))
        .collect()
}

fn documents(file: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| {
            Value::deserialize(doc)
                .unwrap_or_else(|e| panic!("{} is not valid YAML: {e}", file.display()))
        })
        .filter(|doc| !doc.is_null())
        .collect()
}

/// The one object of `examples/<name>`, of `kind`.
fn example(name: &str, kind: &str) -> Value {
    let file = repo().join("examples").join(name);
    let mut docs = documents(&file);
    assert_eq!(docs.len(), 1, "{}: one object", file.display());
    let doc = docs.remove(0);
    assert_eq!(doc["kind"], kind, "{}", file.display());
    doc
}

fn scheduler_example() -> Value {
    example("scheduler.yaml", "Scheduler")
}

fn warm_pool_example() -> Value {
    example("warmpool.yaml", "WarmPool")
}

fn secret_example() -> Value {
    example("secret.yaml", "Secret")
}

/// The generated CRD of `kind`, as `orca-operator crds` prints it.
fn crd(kind: &str) -> Value {
    let yaml = orca_operator::crd::crds_yaml();
    let found = serde_yaml::Deserializer::from_str(&yaml)
        .map(|doc| Value::deserialize(doc).expect("the generated CRDs are YAML"))
        .find(|crd| crd["spec"]["names"]["kind"] == kind);
    found.unwrap_or_else(|| panic!("no CRD of kind {kind}"))
}

fn open_api_schema(kind: &str) -> Value {
    let crd = crd(kind);
    let versions = crd["spec"]["versions"]
        .as_array()
        .expect("a CRD has versions");
    assert_eq!(versions.len(), 1, "one version, v1alpha1");
    versions[0]["schema"]["openAPIV3Schema"].clone()
}

fn names(doc: &Value) -> String {
    format!(
        "{} {}",
        doc["kind"].as_str().unwrap_or("?"),
        doc["metadata"]["name"].as_str().unwrap_or("?")
    )
}

#[test]
fn every_example_is_the_type_its_kind_names() {
    let docs = examples();
    for kind in ["Scheduler", "Secret", "WarmPool"] {
        assert!(
            docs.iter().any(|(_, d)| d["kind"] == kind),
            "no {kind} in examples/"
        );
    }

    for (file, doc) in &docs {
        let at = format!("{} ({})", file.display(), names(doc));
        // The types, as the operator and the local mode read them.
        let parsed = match doc["kind"].as_str() {
            Some("Scheduler") => serde_json::from_value::<Scheduler>(doc.clone()).map(drop),
            Some("WarmPool") => serde_json::from_value::<WarmPool>(doc.clone()).map(drop),
            Some("Secret") => serde_json::from_value::<Secret>(doc.clone()).map(drop),
            Some("WarmPoolClass") => {
                serde_json::from_value::<orca_operator::crd::WarmPoolClass>(doc.clone()).map(drop)
            }
            other => panic!(
                "{at}: kind {other:?} is neither Scheduler, WarmPool, WarmPoolClass nor Secret"
            ),
        };
        if let Err(e) = parsed {
            panic!("{at} does not parse as its kind: {e}");
        }
        if doc["kind"] == "Secret" {
            assert_eq!(doc["apiVersion"], "v1", "{at}");
            continue;
        }
        assert_eq!(doc["apiVersion"], "orca.dev/v1alpha1", "{at}");
    }

    let scheduler: Scheduler =
        serde_json::from_value(scheduler_example()).expect("examples' Scheduler");
    let pool: WarmPool = serde_json::from_value(warm_pool_example()).expect("examples' WarmPool");
    let secret: Secret = serde_json::from_value(secret_example()).expect("examples' Secret");

    // What the CEL rules check when the API server admits them.
    assert!(!scheduler.spec.image.is_empty());
    let idle = &pool.spec.idle;
    assert!(idle.min <= idle.max && idle.max <= pool.spec.max_instances);
    assert_eq!((idle.min, idle.max), (2, 4));

    // The local mode runs the reference scheduler in place of morca.
    assert_eq!(scheduler.spec.command, ["orca-sim", "scheduler"]);
    assert!(
        secret.string_data.is_some(),
        "the example Secret is written as stringData, for the eye"
    );
}

/// The class example admits its pool example, in a namespace labelled as
/// it asks.
#[test]
fn the_class_example_runs_its_pool_example() {
    let docs = documents(&repo().join("examples/warmpoolclass.yaml"));
    let of = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in examples/warmpoolclass.yaml"))
            .clone()
    };
    let class: orca_operator::crd::WarmPoolClass =
        serde_json::from_value(of("WarmPoolClass")).expect("the class");
    let pool: WarmPool = serde_json::from_value(of("WarmPool")).expect("its pool");
    let labels = [("team".to_string(), "pipelines".to_string())].into();
    let tenant = orca_operator::warmpool::class::Tenant::new("pipelines", &labels);
    let spec = orca_operator::warmpool::class::resolve("shared", &class.spec, &tenant, &pool.spec)
        .unwrap_or_else(|e| panic!("the class refuses its example pool: {e:?}"));
    assert_eq!(spec.launch.instance_types, ["m6i.large"]);
    assert_eq!(spec.launch.image_id, class.spec.launch.image_id);
    assert_eq!(
        spec.launch.iam_instance_profile.as_deref(),
        Some("orca-pool-pipelines"),
        "the namespace's own profile"
    );
}

#[test]
fn the_examples_refer_to_each_other() {
    let scheduler: Scheduler = serde_json::from_value(scheduler_example()).unwrap();
    let pool: WarmPool = serde_json::from_value(warm_pool_example()).unwrap();
    let secret: Secret = serde_json::from_value(secret_example()).unwrap();

    let scheduler_name = scheduler.metadata.name.as_deref().unwrap();
    assert_eq!(
        pool.spec.scheduler, scheduler_name,
        "the WarmPool's scheduler"
    );

    let reference = &scheduler.spec.database.url_secret_ref;
    assert_eq!(
        secret.metadata.name.as_deref(),
        Some(reference.name.as_str())
    );
    let data = secret.string_data.unwrap_or_default();
    let url = data.get(&reference.key).unwrap_or_else(|| {
        panic!(
            "the Secret has no key {:?}: {:?}",
            reference.key,
            data.keys()
        )
    });
    // A placeholder in the form a real URL takes, on a host that can never
    // resolve (.invalid, RFC 2606).
    let parsed = DatabaseUrl::parse(url).expect("the example URL parses");
    let host = parsed.target();
    assert!(
        host.split(':').next().unwrap().ends_with(".invalid"),
        "the example URL must be an obvious placeholder, not {host}"
    );
}

#[test]
fn a_scheduler_without_an_image_does_not_parse_as_the_type_either() {
    let mut doc = scheduler_example();
    doc["spec"].as_object_mut().unwrap().remove("image");
    let err = serde_json::from_value::<Scheduler>(doc).unwrap_err();
    assert!(err.to_string().contains("image"), "{err}");
}

/// The CEL rules of `x-kubernetes-validations` at `pointer` in a CRD's schema.
fn cel_rules(kind: &str, pointer: &str) -> Vec<String> {
    let schema = open_api_schema(kind);
    let node = schema
        .pointer(pointer)
        .unwrap_or_else(|| panic!("no {pointer} in the {kind} schema"));
    node["x-kubernetes-validations"]
        .as_array()
        .unwrap_or_else(|| panic!("no CEL rules at {pointer} in the {kind} schema"))
        .iter()
        .map(|r| r["rule"].as_str().expect("a rule is text").to_string())
        .collect()
}

#[test]
fn the_crds_carry_the_cel_rules_that_relate_fields() {
    for (kind, pointer, rule) in [
        (
            "WarmPool",
            "/properties/spec",
            "self.idle.max <= self.maxInstances",
        ),
        (
            "WarmPool",
            "/properties/spec/properties/idle",
            "self.min <= self.max",
        ),
        (
            "Scheduler",
            "/properties/spec/properties/image",
            "self.size() > 0",
        ),
    ] {
        let rules = cel_rules(kind, pointer);
        assert!(
            rules.iter().any(|r| r == rule),
            "{kind} {pointer}: {rule:?} not among {rules:?}"
        );
    }
}
