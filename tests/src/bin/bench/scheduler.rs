//! `bench scheduler`: the Scheduler controller of the Kubernetes mode
//! (docs/architecture.md#benchmarks), in this process against the test
//! control plane (its test node running the pods), with a client whose
//! requests are counted, printed as `| figure | value | target |` lines:
//! - what Schedulers that are Available (leading) ask of the API server in a
//!   steady minute (the watches' long-running GETs apart);
//! - how long a controller started over 1000 Schedulers takes to reconcile
//!   each once (to its first status), and what they ask in a minute after.

use std::time::{Duration, Instant};

use crate::figures::{self, row};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    api::{ListParams, ObjectMeta, PostParams},
    client::ClientBuilder,
    Api, Client,
};
use orca_operator::{
    crd::Scheduler, fence::Fence, k8s::Metrics, runtime::watches::Watches, scheduler::k8s::Context,
};
use orca_tests::{
    cluster::ControlPlane,
    counting::{per_minute, Requests},
    on_cluster::orca_sim,
    pg,
    release::Release,
};

/// A namespace with the CRDs (the chart) and the Scheduler controller
/// running over it in this process, its client's requests counted.
struct Stage {
    admin: Client,
    ns: String,
    requests: Requests,
    client: Client,
    controller: Option<tokio::task::JoinHandle<()>>,
}

impl Stage {
    async fn new(cp: &'static ControlPlane, prefix: &str) -> Stage {
        let admin = cp.client().await;
        let ns = cp.namespace(&admin, prefix).await;
        let _release = Release::install(cp, &ns, &ns, &[ns.as_str()], &[]);
        let requests = Requests::default();
        let client = ClientBuilder::try_from(cp.admin_config().await)
            .unwrap_or_else(|e| panic!("a client: {e}"))
            .with_layer(&requests)
            .build();
        Stage {
            admin,
            ns,
            requests,
            client,
            controller: None,
        }
    }

    /// Starts the controller.
    fn start(&mut self) {
        let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
        let ctx = std::sync::Arc::new(Context::new(
            self.client.clone(),
            metrics,
            "bench",
            Fence::always(),
        ));
        let scope = Some(self.ns.clone());
        let mut watches = Watches::new(&self.client, &scope);
        let run = orca_operator::scheduler::k8s::run(self.client.clone(), scope, ctx, &mut watches);
        self.controller = Some(tokio::spawn(async move {
            futures::join!(run, watches.run());
        }));
    }

    fn stop(&mut self) {
        if let Some(c) = self.controller.take() {
            c.abort();
        }
    }

    async fn secret(&self, name: &str, url: &str) {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            string_data: Some([("url".to_string(), url.to_string())].into()),
            ..Default::default()
        };
        Api::<Secret>::namespaced(self.admin.clone(), &self.ns)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap_or_else(|e| panic!("Secret {name}: {e}"));
    }

    async fn scheduler(&self, name: &str, image: &str, secret: &str) {
        let scheduler: Scheduler = serde_json::from_value(serde_json::json!({
            "apiVersion": "orca.dev/v1alpha1", "kind": "Scheduler",
            "metadata": {"name": name},
            "spec": {"image": image, "command": [orca_sim()],
                     "args": ["scheduler", "--tick-ms", "200", "--stale-seconds", "3"],
                     "database": {"urlSecretRef": {"name": secret, "key": "url"}},
                     "handover": {"staleSeconds": 3}},
        }))
        .expect("invariant: a valid Scheduler");
        Api::<Scheduler>::namespaced(self.admin.clone(), &self.ns)
            .create(&PostParams::default(), &scheduler)
            .await
            .unwrap_or_else(|e| panic!("Scheduler {name}: {e}"));
    }

    /// How many Schedulers pass `check`.
    async fn count(&self, check: impl Fn(&Scheduler) -> bool) -> usize {
        Api::<Scheduler>::namespaced(self.admin.clone(), &self.ns)
            .list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("listing Schedulers: {e}"))
            .items
            .iter()
            .filter(|s| check(s))
            .count()
    }

    /// Counts the controller's requests for a minute.
    async fn minute(&self) -> Vec<String> {
        self.requests.take();
        tokio::time::sleep(Duration::from_secs(60)).await;
        self.requests.take()
    }
}

/// Available: its instance leads.
fn ready(s: &Scheduler) -> bool {
    s.status.as_ref().is_some_and(|st| {
        st.conditions
            .iter()
            .any(|c| c.type_ == "Available" && c.status == "True")
    })
}

fn reconciled(s: &Scheduler) -> bool {
    s.status
        .as_ref()
        .is_some_and(|st| st.observed_generation == s.metadata.generation)
}

const LEADING: usize = 5;
const MANY: usize = 1000;

async fn bench_leading(cp: &'static ControlPlane) {
    let mut stage = Stage::new(cp, "bench-sched-steady").await;
    stage.start();
    for i in 0..LEADING {
        let url = pg::Cluster::shared().migrated_db().await;
        stage.secret(&format!("db-{i}"), &url).await;
        stage
            .scheduler(&format!("orca-{i}"), "v1", &format!("db-{i}"))
            .await;
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while stage.count(ready).await < LEADING {
        if Instant::now() > deadline {
            let all = Api::<Scheduler>::namespaced(stage.admin.clone(), &stage.ns)
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            let seen: Vec<String> = all
                .iter()
                .map(|s| format!("{:?}", s.status.as_ref().map(|st| &st.conditions)))
                .collect();
            panic!("{LEADING} Schedulers not Available within 120 s: {seen:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    let requests = stage.minute().await;
    stage.stop();
    row(
        &format!("Kubernetes mode: API requests per Scheduler per steady-state minute ({LEADING} Available, leading; watches apart)"),
        per_minute(&requests, LEADING),
        "none",
    );
}

async fn bench_many(cp: &'static ControlPlane) {
    let mut stage = Stage::new(cp, "bench-sched-many").await;
    // No database to reach (the URL does not parse), so no pod: each pass
    // is the controller's own work — the stores, the Secret's version, the
    // decision, the status — with no process behind it.
    stage.secret("no-db", "not a database url").await;
    for i in 0..MANY {
        stage.scheduler(&format!("s-{i:04}"), "v1", "no-db").await;
    }
    // All there before the controller starts (a new leader's first
    // minute): how long until each has its first status.
    let started = Instant::now();
    stage.start();
    let deadline = Instant::now() + Duration::from_secs(600);
    while stage.count(reconciled).await < MANY {
        assert!(
            Instant::now() < deadline,
            "{MANY} Schedulers not reconciled within 600 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let all = started.elapsed();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let requests = stage.minute().await;
    stage.stop();
    row(
        &format!("Kubernetes mode: {MANY} Schedulers, the controller started → each reconciled to its first status (a status write and an Event each)"),
        format!(
            "{:.1} s, {:.1} ms per Scheduler",
            all.as_secs_f64(),
            all.as_secs_f64() * 1000.0 / MANY as f64
        ),
        "—",
    );
    row(
        &format!("Kubernetes mode: API requests per Scheduler per steady-state minute ({MANY}, database unreachable)"),
        per_minute(&requests, MANY),
        "none",
    );
}

pub fn run() {
    let runtime = figures::runtime();
    let cp = ControlPlane::shared();
    runtime.block_on(async {
        bench_leading(cp).await;
        bench_many(cp).await;
    });
}
