//! The Kubernetes mode's WarmPool controller
//! (docs/architecture.md#the-warmpool-controller): `reconcile` puts the
//! finalizer on the WarmPool and runs a pass of its pool on the database of
//! the Scheduler the pool names, writing its status and Events back; on
//! deletion the passes terminate the instances (or leave them) before the
//! finalizer goes. kube's client runs against the HTTP-level mock of
//! `k8s_mode`, answered by path, with a real PostgreSQL and moto's EC2
//! server. The harness reconciles again as the controller's requeue would;
//! the whole controller, with its watches, runs on a real API server in
//! `real_cluster`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::controller::Action;
use orca_db::pool::{hand_out, mark_idle, Request};
use orca_operator::crd::{OnDelete, Scheduler, SchedulerSpec, WarmPool, WarmPoolSpec};
use orca_operator::k8s::warmpool::{
    reconcile, ControllerError, PoolContext, PoolControllerConfig, FINALIZER,
};
use orca_operator::pool::Fence;
use orca_tests::mock_api::{mock_client, not_found, secret, ApiServerVerifier, Call, NS};
use orca_tests::{
    ec2_faults::{Ec2Faults, Fault},
    warm,
};
use serde_json::{json, Value};

/// The WarmPool's name; `warm::owner` tags its instances as `default/warm`.
const POOL: &str = "warm";
const SCHEDULER: &str = "sched";
const API: &str = "/apis/orca.dev/v1alpha1/namespaces/default";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/default/events";

fn warm_pool(spec: WarmPoolSpec, generation: i64) -> WarmPool {
    let mut wp = WarmPool::new(POOL, spec);
    wp.metadata.namespace = Some(NS.into());
    wp.metadata.uid = Some("warmpool-uid".into());
    wp.metadata.generation = Some(generation);
    wp.metadata.resource_version = Some(generation.to_string());
    wp
}

fn scheduler() -> Scheduler {
    let spec: SchedulerSpec = serde_json::from_value(json!({
        "image": "orca:v1",
        "command": ["orca-sim", "scheduler"],
        "database": {"urlSecretRef": {"name": "orca-db", "key": "url"}},
    }))
    .unwrap();
    let mut s = Scheduler::new(SCHEDULER, spec);
    s.metadata.namespace = Some(NS.into());
    s.metadata.uid = Some("scheduler-uid".into());
    s
}

fn config(fence: Fence) -> PoolControllerConfig {
    PoolControllerConfig {
        tuning: warm::tuning(Duration::from_secs(60)),
        metrics: None,
        reporter: "orca-operator".into(),
        fence,
    }
}

fn context(client: kube::Client) -> Arc<PoolContext> {
    Arc::new(PoolContext::new(client, config(Fence::always())))
}

/// A pool of t3.micro on the first subnet, through `endpoint`.
fn spec(stage: &warm::Stage, endpoint: &str, min: i32, max: i32) -> WarmPoolSpec {
    warm::spec(endpoint, &["t3.micro"], &stage.subnets[..1], min, max, 4)
}

/// The pool's instances in EC2 that are not going away, by their
/// ownership tags as EC2 itself reports them.
async fn instances(stage: &warm::Stage) -> Vec<String> {
    let out = stage
        .ec2
        .client()
        .describe_instances()
        .send()
        .await
        .unwrap_or_else(|e| panic!("moto's DescribeInstances failed: {e}"));
    let owner = warm::owner(&format!("{NS}/{POOL}"));
    let mut ids = Vec::new();
    for i in out.reservations().iter().flat_map(|r| r.instances()) {
        let tag = |k: &str| {
            i.tags()
                .iter()
                .find(|t| t.key() == Some(k))
                .and_then(|t| t.value())
                .map(String::from)
        };
        let state = i.state().and_then(|s| s.name()).map(|n| n.as_str());
        let ours = owner
            .tags()
            .iter()
            .all(|(k, v)| tag(k).as_deref() == Some(v));
        if ours && matches!(state, Some("pending" | "running")) {
            ids.push(i.instance_id().unwrap_or_default().to_string());
        }
    }
    ids.sort();
    ids
}

/// The API server as the WarmPool controller meets it: one WarmPool (its
/// status merged from the patches, as the API server would), the Scheduler
/// and the Secret when they exist, and a record of what was written.
struct Cluster {
    api: ApiServerVerifier,
    pool: WarmPool,
    deleted: bool,
    scheduler: Option<Scheduler>,
    secret: Option<Secret>,
    /// The `status` of every status patch, in order.
    statuses: Vec<Value>,
    /// Every Event as posted, or as patched when it repeats (a series).
    events: Vec<Value>,
    /// The paths read (GET).
    reads: Vec<String>,
    /// Watches of WarmPools, never answered (nothing changes).
    watches: Vec<Call>,
    /// Every JSON patch of the WarmPool (its finalizers), as sent.
    patches: Vec<Value>,
    /// The context of the last [`Cluster::reconcile`]: reconciled again, as
    /// the controller's requeue would, while the harness waits.
    ctx: Option<Arc<PoolContext>>,
    /// Why no call may write now, if none may.
    no_writes: Option<String>,
}

impl Cluster {
    fn new(
        pool: WarmPool,
        scheduler: Option<Scheduler>,
        secret: Option<Secret>,
    ) -> (Self, kube::Client) {
        let (client, api) = mock_client();
        let cluster = Cluster {
            api,
            pool,
            deleted: false,
            scheduler,
            secret,
            statuses: Vec::new(),
            events: Vec::new(),
            reads: Vec::new(),
            watches: Vec::new(),
            patches: Vec::new(),
            ctx: None,
            no_writes: None,
        };
        (cluster, client)
    }

    /// The stored WarmPool, deleted as the API server marks it (a
    /// deletion timestamp, the generation bumped) while finalizers hold it.
    fn delete(&mut self) -> WarmPool {
        let meta = &mut self.pool.metadata;
        meta.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        ));
        meta.generation = meta.generation.map(|g| g + 1);
        if meta.finalizers.as_ref().is_none_or(Vec::is_empty) {
            self.deleted = true;
        }
        self.pool.clone()
    }

    fn finalizers(&self) -> Vec<String> {
        self.pool.metadata.finalizers.clone().unwrap_or_default()
    }

    /// The WarmPool's stored status (`{}` when it has none).
    fn status(&self) -> Value {
        serde_json::to_value(&self.pool.status)
            .ok()
            .filter(|s| !s.is_null())
            .unwrap_or_else(|| json!({}))
    }

    fn events_of(&self, reason: &str) -> Vec<&Value> {
        self.events
            .iter()
            .filter(|e| e["reason"] == reason)
            .collect()
    }

    /// Answers `call` as the API server would.
    fn answer(&mut self, call: Call) {
        if let Some(why) = &self.no_writes {
            assert_eq!(
                call.method,
                Method::GET,
                "{why}, but the operator sent {} {} {}",
                call.method,
                call.path,
                call.body
            );
        }
        let path = call.path.clone();
        let pool_path = format!("{API}/warmpools/{POOL}");
        match (call.method.as_str(), path.as_str()) {
            ("GET", p) if p.starts_with(&format!("{API}/schedulers/")) => {
                self.reads.push(path.clone());
                match &self.scheduler {
                    Some(s)
                        if p.ends_with(&format!("/{}", s.metadata.name.as_deref().unwrap())) =>
                    {
                        call.answer(StatusCode::OK, &serde_json::to_value(s).unwrap())
                    }
                    _ => call.answer(
                        StatusCode::NOT_FOUND,
                        &not_found("schedulers.orca.dev", p.rsplit('/').next().unwrap()),
                    ),
                }
            }
            ("GET", p) if p.starts_with("/api/v1/namespaces/default/secrets/") => {
                self.reads.push(path.clone());
                match &self.secret {
                    Some(s) if p.ends_with("/orca-db") => {
                        call.answer(StatusCode::OK, &serde_json::to_value(s).unwrap())
                    }
                    _ => call.answer(
                        StatusCode::NOT_FOUND,
                        &not_found("secrets", p.rsplit('/').next().unwrap()),
                    ),
                }
            }
            ("GET", p) if p == format!("{API}/schedulers") => {
                if call.query.contains("watch=true") {
                    self.watches.push(call);
                } else {
                    let items: Vec<Value> = self.scheduler.iter().map(|s| json!(s)).collect();
                    call.answer(
                        StatusCode::OK,
                        &json!({"apiVersion": "orca.dev/v1alpha1", "kind": "SchedulerList",
                                "metadata": {"resourceVersion": "1"}, "items": items}),
                    );
                }
            }
            ("GET", "/api/v1/namespaces/default/secrets") => {
                if call.query.contains("watch=true") {
                    self.watches.push(call);
                } else {
                    // Metadata only, as the operator asks.
                    let items: Vec<Value> = self
                        .secret
                        .iter()
                        .map(|s| {
                            json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                                   "metadata": s.metadata})
                        })
                        .collect();
                    call.answer(
                        StatusCode::OK,
                        &json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                                "metadata": {"resourceVersion": "1"}, "items": items}),
                    );
                }
            }
            ("GET", p) if p == format!("{API}/warmpools") => {
                if call.query.contains("watch=true") {
                    self.watches.push(call);
                } else {
                    let items = if self.deleted {
                        vec![]
                    } else {
                        vec![serde_json::to_value(&self.pool).unwrap()]
                    };
                    call.answer(
                        StatusCode::OK,
                        &json!({"apiVersion": "orca.dev/v1alpha1", "kind": "WarmPoolList",
                                "metadata": {"resourceVersion": "1"}, "items": items}),
                    );
                }
            }
            ("GET", p) if p == pool_path => {
                self.reads.push(path.clone());
                if self.deleted {
                    call.answer(
                        StatusCode::NOT_FOUND,
                        &not_found("warmpools.orca.dev", POOL),
                    )
                } else {
                    call.answer(StatusCode::OK, &serde_json::to_value(&self.pool).unwrap())
                }
            }
            ("PATCH", p) if p == pool_path && !self.deleted => {
                assert_eq!(
                    call.content_type, "application/json-patch+json",
                    "{}",
                    call.body
                );
                assert!(
                    call.query.contains("fieldManager=orca-operator"),
                    "{}",
                    call.query
                );
                self.patches.push(call.body.clone());
                let mut whole = serde_json::to_value(&self.pool).unwrap();
                match json_patch(&mut whole, &call.body) {
                    Ok(()) => {
                        self.pool = serde_json::from_value(whole.clone()).unwrap();
                        // The last finalizer of a deleted object gone: so is it.
                        if self.pool.metadata.deletion_timestamp.is_some()
                            && self.finalizers().is_empty()
                        {
                            self.deleted = true;
                        }
                        call.answer(StatusCode::OK, &whole)
                    }
                    Err(why) => call.answer(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                "reason": "Invalid", "code": 422, "message": why}),
                    ),
                }
            }
            ("PATCH", p) if p == pool_path => call.answer(
                StatusCode::NOT_FOUND,
                &not_found("warmpools.orca.dev", POOL),
            ),
            ("PATCH", p) if p == format!("{pool_path}/status") => {
                // Server-side apply of the whole status by the status's
                // only manager: what it leaves out is gone.
                let status = call.applied_status("WarmPool", POOL);
                let mut whole = serde_json::to_value(&self.pool).unwrap();
                whole["status"] = status.clone();
                self.pool = serde_json::from_value(whole.clone()).unwrap();
                self.statuses.push(status);
                call.answer(StatusCode::OK, &whole);
            }
            ("POST", EVENTS) => {
                self.event(&call.body);
                let body = call.body.clone();
                call.answer(StatusCode::CREATED, &body);
            }
            ("PATCH", p) if p.starts_with(&format!("{EVENTS}/")) => {
                self.event(&call.body);
                let body = call.body.clone();
                call.answer(StatusCode::OK, &body);
            }
            _ => panic!(
                "a call the WarmPool controller should not make: {} {}?{} {}",
                call.method, call.path, call.query, call.body
            ),
        }
    }

    fn event(&mut self, e: &Value) {
        assert_eq!(e["regarding"]["kind"], "WarmPool", "{e}");
        assert_eq!(e["regarding"]["name"], POOL, "{e}");
        assert_eq!(e["reportingController"], "orca-operator", "{e}");
        self.events.push(e.clone());
    }

    /// Runs `reconcile` of `wp`, answering its calls; what it returned.
    async fn reconcile(&mut self, ctx: &Arc<PoolContext>, wp: WarmPool) -> Action {
        self.try_reconcile(ctx, wp)
            .await
            .unwrap_or_else(|e| panic!("reconcile failed: {e}"))
    }

    /// Runs `reconcile` of `wp`, answering its calls; what it returned.
    async fn try_reconcile(
        &mut self,
        ctx: &Arc<PoolContext>,
        wp: WarmPool,
    ) -> Result<Action, ControllerError> {
        self.ctx = Some(ctx.clone());
        let mut task = tokio::spawn(reconcile(Arc::new(wp), ctx.clone()));
        loop {
            let call = tokio::select! {
                biased;
                call = self.api.next("the reconcile's calls") => call,
                done = &mut task => return done.expect("reconcile panicked"),
            };
            self.answer(call);
        }
    }

    /// What the controller does between the harness's checks: reconcile the
    /// stored WarmPool again (unless it is gone) a moment later, or, with no
    /// context (the whole controller runs), answer its next call.
    async fn step(&mut self, what: &str) {
        match self.ctx.clone() {
            Some(ctx) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if !self.deleted {
                    let stored = self.pool.clone();
                    // A failed pass shows in the status and Events.
                    let _ = self.try_reconcile(&ctx, stored).await;
                }
            }
            None => {
                let call = self.api.next(what).await;
                self.answer(call);
            }
        }
    }

    /// Reconciles (or answers calls) until `done` holds; fails saying
    /// `what` if it does not within 20 s.
    async fn until(&mut self, what: &str, done: impl Fn(&Cluster) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done(self) {
            assert!(
                Instant::now() < deadline,
                "not within 20 s: {what}; status {}; events {:#?}",
                self.status(),
                self.events
            );
            self.step(what).await;
        }
    }

    /// No call at all for `quiet`, nothing reconciled.
    async fn quiet(&mut self, quiet: Duration, why: &str) {
        if let Ok(call) = tokio::time::timeout(quiet, self.api.next(why)).await {
            panic!(
                "{why}, but the operator sent {} {}?{} {}",
                call.method, call.path, call.query, call.body
            );
        }
    }

    /// Reconciles (or answers calls) for `quiet`; no call may write
    /// (PATCH, POST).
    async fn no_writes(&mut self, quiet: Duration, why: &str) {
        self.no_writes = Some(why.to_string());
        let end = tokio::time::Instant::now() + quiet;
        while tokio::time::Instant::now() < end {
            if self.ctx.is_some() {
                self.step(why).await;
            } else if let Ok(call) = tokio::time::timeout_at(end, self.api.next(why)).await {
                self.answer(call);
            }
        }
        self.no_writes = None;
    }

    /// No request body sent so far holds `secret`.
    fn never_sent(&self, secret: &str) {
        assert!(!self.api.bodies.is_empty());
        for body in &self.api.bodies {
            assert!(!body.contains(secret), "the password went out: {body}");
        }
    }
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} condition in {status}"))
}

fn url_secret(url: &str) -> Secret {
    secret(&[("url", url)])
}

/// Applies a JSON patch (RFC 6902) of `test`, `add` and `remove` as the API
/// server does, all or nothing; why not.
fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), String> {
    let mut out = doc.clone();
    for op in ops.as_array().ok_or("a JSON patch is an array")? {
        let path = op["path"].as_str().ok_or("an op without a path")?;
        let (parent, last) = path.rsplit_once('/').ok_or("a path without /")?;
        match op["op"].as_str() {
            Some("test") => {
                let at = out.pointer(path).cloned().unwrap_or(Value::Null);
                if at != op["value"] {
                    return Err(format!(
                        "test of {path} failed: {at} is not {}",
                        op["value"]
                    ));
                }
            }
            Some("add") => match out.pointer_mut(parent) {
                Some(Value::Array(a)) if last == "-" => a.push(op["value"].clone()),
                Some(Value::Array(a)) => {
                    let i: usize = last.parse().map_err(|_| format!("bad index in {path}"))?;
                    a.insert(i, op["value"].clone());
                }
                Some(Value::Object(m)) => {
                    m.insert(last.to_string(), op["value"].clone());
                }
                _ => return Err(format!("no parent for {path}")),
            },
            Some("remove") => match out.pointer_mut(parent) {
                Some(Value::Array(a)) => {
                    let i: usize = last.parse().map_err(|_| format!("bad index in {path}"))?;
                    if i >= a.len() {
                        return Err(format!("no {path}"));
                    }
                    a.remove(i);
                }
                Some(Value::Object(m)) => {
                    m.remove(last).ok_or(format!("no {path}"))?;
                }
                _ => return Err(format!("no parent for {path}")),
            },
            other => return Err(format!("an op the tests do not know: {other:?}")),
        }
    }
    *doc = out;
    Ok(())
}

/// A pool with `idle.min = 2`: the reconcile reads the Scheduler, then its
/// Secret; the loop launches two instances tagged as the pool's, says so in
/// an Event and shows them in the status, for the generation it saw.
#[tokio::test]
async fn a_pool_launches_idle_min_and_shows_them_in_its_status_and_events() {
    let real = warm::Stage::new().await;
    let wp = warm_pool(spec(&real, &real.moto.endpoint(), 2, 3), 1);
    let (mut k8s, client) =
        Cluster::new(wp.clone(), Some(scheduler()), Some(url_secret(&real.url)));
    let ctx = context(client);

    k8s.reconcile(&ctx, wp).await;
    assert_eq!(
        k8s.reads,
        [
            format!("{API}/schedulers/{SCHEDULER}"),
            "/api/v1/namespaces/default/secrets/orca-db".to_string()
        ]
    );
    k8s.until("a status with 2 launching and a Launched event", |k| {
        k.status()["launching"] == 2 && !k.events_of("Launched").is_empty()
    })
    .await;

    let ids = instances(&real).await;
    assert_eq!(ids.len(), 2, "{ids:?}");
    let status = k8s.status();
    assert_eq!(status["observedGeneration"], 1, "{status}");
    assert_eq!(status["idle"], 0, "{status}");
    assert_eq!(condition(&status, "Available")["status"], "False");
    assert_eq!(condition(&status, "Available")["reason"], "BelowIdleMin");
    assert_eq!(condition(&status, "Progressing")["status"], "True");
    assert_eq!(condition(&status, "Degraded")["status"], "False");
    let launched = k8s.events_of("Launched");
    assert_eq!(launched.len(), 1, "{launched:#?}");
    assert_eq!(launched[0]["type"], "Normal");
    let note = launched[0]["note"].as_str().unwrap();
    for id in &ids {
        assert!(note.contains(id.as_str()), "{id} not in {note:?}");
    }
    // Later passes see the same two booting: nothing more is launched.
    k8s.no_writes(Duration::from_secs(2), "the pool is steady")
        .await;
    assert_eq!(instances(&real).await, ids);

    // The finalizer went on first, testing the uid and the empty list.
    assert_eq!(k8s.finalizers(), [FINALIZER]);
    assert_eq!(
        k8s.patches[0],
        json!([
            {"op": "test", "path": "/metadata/uid", "value": "warmpool-uid"},
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        ])
    );

    // Its finalizer removed by hand, deleted and applied again before the
    // loop noticed: the new WarmPool gets the finalizer and a loop of its
    // own at once, which finds the two instances and launches none.
    let mut again = warm_pool(spec(&real, &real.moto.endpoint(), 2, 3), 1);
    again.metadata.uid = Some("warmpool-uid-2".into());
    k8s.pool = again.clone();
    k8s.reconcile(&ctx, again).await;
    k8s.until("the new WarmPool's status", |k| {
        k.status()["launching"] == 2
    })
    .await;
    assert_eq!(k8s.finalizers(), [FINALIZER]);
    assert_eq!(instances(&real).await, ids);
}

/// A pool whose Scheduler does not exist is `Degraded` with the reason and
/// a warning Event, and launches nothing; once the Scheduler is there the
/// loop starts and `Degraded` is cleared. The same again when the Scheduler
/// goes away under a running loop and comes back.
#[tokio::test]
async fn a_missing_scheduler_is_degraded_until_it_is_there() {
    let real = warm::Stage::new().await;
    let wp = warm_pool(spec(&real, &real.moto.endpoint(), 1, 1), 1);
    let (mut k8s, client) = Cluster::new(wp.clone(), None, Some(url_secret(&real.url)));
    let ctx = context(client);

    k8s.reconcile(&ctx, wp).await;
    assert_eq!(k8s.reads, [format!("{API}/schedulers/{SCHEDULER}")]);
    let status = k8s.status();
    assert_eq!(status["observedGeneration"], 1, "{status}");
    let degraded = condition(&status, "Degraded");
    assert_eq!(degraded["status"], "True", "{status}");
    assert_eq!(degraded["reason"], "SchedulerMissing", "{status}");
    assert!(
        degraded["message"]
            .as_str()
            .unwrap()
            .contains("default/sched"),
        "{status}"
    );
    assert_eq!(k8s.events.len(), 1, "{:#?}", k8s.events);
    assert_eq!(k8s.events[0]["type"], "Warning");
    assert_eq!(k8s.events[0]["reason"], "Degraded");
    k8s.quiet(Duration::from_secs(2), "no pool loop runs").await;
    assert_eq!(instances(&real).await, Vec::<String>::new());

    // The Scheduler is created: the next reconcile starts the loop.
    k8s.scheduler = Some(scheduler());
    let stored = k8s.pool.clone();
    k8s.reconcile(&ctx, stored).await;
    k8s.until("Degraded cleared and an instance launching", |k| {
        let s = k.status();
        condition(&s, "Degraded")["status"] == "False" && s["launching"] == 1
    })
    .await;
    assert_eq!(instances(&real).await.len(), 1);

    // Deleted under the running loop, then back.
    k8s.scheduler = None;
    let stored = k8s.pool.clone();
    k8s.reconcile(&ctx, stored).await;
    assert_eq!(
        condition(&k8s.status(), "Degraded")["reason"],
        "SchedulerMissing"
    );
    k8s.no_writes(Duration::from_secs(2), "the loop left the pool Degraded")
        .await;
    assert_eq!(
        condition(&k8s.status(), "Degraded")["reason"],
        "SchedulerMissing"
    );
    k8s.scheduler = Some(scheduler());
    let stored = k8s.pool.clone();
    k8s.reconcile(&ctx, stored).await;
    k8s.until("Degraded cleared once the Scheduler is back", |k| {
        condition(&k.status(), "Degraded")["status"] == "False"
    })
    .await;
    assert_eq!(instances(&real).await.len(), 1, "no second instance");
}

/// The database URL's password never reaches the API server: not in a
/// status, not in an Event, whether the database answers or not.
#[tokio::test]
async fn the_database_password_is_never_in_a_status_or_an_event() {
    let real = warm::Stage::new().await;
    // A pool on the database at `url`, its calls answered by a mock of its own.
    let start = |url: String| {
        let wp = warm_pool(spec(&real, &real.moto.endpoint(), 1, 1), 1);
        let (k8s, client) = Cluster::new(wp.clone(), Some(scheduler()), Some(url_secret(&url)));
        (k8s, context(client), wp)
    };

    // The test cluster trusts every local connection: a password is
    // accepted (and ignored), so the loop works on this URL.
    let with_password =
        real.url
            .replacen("postgres://postgres@", "postgres://postgres:hunter2@", 1);
    assert_ne!(with_password, real.url, "{}", real.url);
    {
        let (mut k8s, ctx, wp) = start(with_password);
        k8s.reconcile(&ctx, wp).await;
        k8s.until("a Launched event and a status", |k| {
            k.status()["launching"] == 1 && !k.events_of("Launched").is_empty()
        })
        .await;
        assert_eq!(condition(&k8s.status(), "Degraded")["status"], "False");
        k8s.never_sent("hunter2");
    }

    // A database that does not answer: every pass fails, and says so.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (mut k8s, ctx, wp) = start(format!(
        "postgres://orca:hunter2@127.0.0.1:{closed}/orca?sslmode=disable"
    ));
    k8s.reconcile(&ctx, wp).await;
    // Failing for a few seconds (back-offs up to 1 s), each failure said.
    let failing = Instant::now();
    k8s.until("failed passes for 3 s", |k| {
        k.events_of("PassFailed").len() >= 3 && failing.elapsed() > Duration::from_secs(3)
    })
    .await;
    let status = k8s.status();
    let degraded = condition(&status, "Degraded");
    assert_eq!(degraded["status"], "True", "{status}");
    assert_eq!(degraded["reason"], "PassFailed", "{status}");
    assert!(
        degraded["message"].as_str().unwrap().contains("127.0.0.1"),
        "the message says which database: {status}"
    );
    assert!(k8s
        .events_of("PassFailed")
        .iter()
        .all(|e| e["type"] == "Warning"));
    // Failing again is not a new transition.
    let since: Vec<&Value> = k8s
        .statuses
        .iter()
        .map(|s| &condition(s, "Degraded")["lastTransitionTime"])
        .collect();
    assert!(since.iter().all(|t| *t == since[0]), "{since:?}");
    k8s.never_sent("hunter2");
    assert_eq!(instances(&real).await.len(), 1, "nothing launched blind");
}

/// A reconcile of the same generation leaves the loop alone; a new one
/// (idle.min 2 → 3) restarts it and the third instance is launched; a
/// deleted pool's loop terminates the instances, the finalizer goes, and
/// then no more calls, no more EC2 calls.
#[tokio::test]
async fn a_new_generation_restarts_the_loop_and_a_deleted_pool_terminates_its_instances() {
    let real = warm::Stage::new().await;
    let faults = Ec2Faults::start(&real.moto.endpoint());
    let wp = warm_pool(spec(&real, &faults.endpoint(), 2, 3), 1);
    let (mut k8s, client) =
        Cluster::new(wp.clone(), Some(scheduler()), Some(url_secret(&real.url)));
    let ctx = context(client);
    k8s.reconcile(&ctx, wp).await;
    k8s.until("two launching", |k| {
        k.status()["launching"] == 2 && !k.events_of("Launched").is_empty()
    })
    .await;
    k8s.no_writes(Duration::from_secs(2), "the pool is steady")
        .await;

    // The same generation again (the periodic requeue, a status change).
    let stored = k8s.pool.clone();
    let patches = k8s.statuses.len();
    k8s.reconcile(&ctx, stored).await;
    k8s.no_writes(
        Duration::from_secs(2),
        "the same generation does not restart the loop",
    )
    .await;
    assert_eq!(k8s.statuses.len(), patches);
    assert_eq!(instances(&real).await.len(), 2);
    assert_eq!(
        faults.calls_of("RunInstances").len(),
        1,
        "one RunInstances for the two"
    );

    // Generation 2: idle.min 3.
    let before = instances(&real).await;
    let mut next = k8s.pool.clone();
    next.spec.idle.min = 3;
    next.metadata.generation = Some(2);
    k8s.pool = next.clone();
    k8s.reconcile(&ctx, next).await;
    k8s.until("generation 2 observed with three launching", |k| {
        let s = k.status();
        s["observedGeneration"] == 2 && s["launching"] == 3
    })
    .await;
    let ids = instances(&real).await;
    assert_eq!(ids.len(), 3, "{ids:?}");
    let third: Vec<&String> = ids.iter().filter(|i| !before.contains(i)).collect();
    assert_eq!(third.len(), 1);
    k8s.until("an Event names the third instance", |k| {
        k.events_of("Launched")
            .iter()
            .any(|e| e["note"].as_str().unwrap_or("").contains(third[0].as_str()))
    })
    .await;

    // Deleted (onDelete Terminate, the default): the running loop is told
    // at once, launches nothing more and terminates the three booting
    // instances (claimed first); once EC2 lists none the finalizer goes.
    let ids = instances(&real).await;
    faults.forget_calls();
    let gone = k8s.delete();
    k8s.reconcile(&ctx, gone).await;
    k8s.until("the finalizer removed, and a Deleted event", |k| {
        k.deleted && !k.events_of("Deleted").is_empty()
    })
    .await;
    assert_eq!(instances(&real).await, Vec::<String>::new());
    assert!(
        faults.calls_of("RunInstances").is_empty(),
        "a launch while deleting"
    );
    let reasons: Vec<&str> = k8s
        .events
        .iter()
        .filter_map(|e| e["reason"].as_str())
        .collect();
    let at = |r: &str| {
        reasons
            .iter()
            .position(|x| *x == r)
            .unwrap_or_else(|| panic!("no {r}: {reasons:?}"))
    };
    assert!(
        at("Deleting") < at("Terminated") && at("Terminated") < at("Deleted"),
        "{reasons:?}"
    );
    let terminated = k8s.events_of("Terminated");
    let notes: String = terminated
        .iter()
        .filter_map(|e| e["note"].as_str())
        .collect();
    for id in &ids {
        assert!(notes.contains(id.as_str()), "{id} not terminated: {notes}");
    }
    assert!(notes.contains("PoolDeleted"), "{notes}");
    let terminating = k8s
        .statuses
        .iter()
        .find(|s| {
            s["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == "Terminating"))
        })
        .unwrap_or_else(|| panic!("no status showed the deletion: {:#?}", k8s.statuses));
    assert_eq!(condition(terminating, "Terminating")["status"], "True");
    assert_eq!(condition(terminating, "Available")["reason"], "Deleting");
    assert_eq!(terminating["terminating"], 3, "{terminating}");
    // The finalizer went by a patch that tests what it removes.
    assert_eq!(
        k8s.patches.last().unwrap(),
        &json!([
            {"op": "test", "path": "/metadata/uid", "value": "warmpool-uid"},
            {"op": "test", "path": "/metadata/finalizers/0", "value": FINALIZER},
            {"op": "remove", "path": "/metadata/finalizers/0"},
        ])
    );
    // Then nothing more reaches the API server, nor EC2.
    faults.forget_calls();
    k8s.quiet(Duration::from_secs(3), "the pool is gone").await;
    let calls: Vec<String> = faults.calls().into_iter().map(|c| c.action).collect();
    assert!(
        calls.is_empty(),
        "EC2 calls after the pool was gone: {calls:?}"
    );
}

/// Whether a `Terminated` event names `instance`.
fn terminated(k: &Cluster, instance: &str) -> bool {
    k.events_of("Terminated")
        .iter()
        .any(|e| e["note"].as_str().unwrap_or("").contains(instance))
}

/// A deleted pool's busy instances may finish their runs: the idle one is
/// terminated at once, a busy one once its run is over (idle, it goes like
/// the others), and the last once `drainTimeoutSeconds`, lowered during
/// the deletion, is past — its busy row ended by the operator first.
#[tokio::test]
async fn a_deleted_pool_waits_for_busy_instances_until_the_drain_time_out() {
    let real = warm::Stage::new().await;
    let wp = warm_pool(spec(&real, &real.moto.endpoint(), 3, 3), 1);
    let (mut k8s, client) =
        Cluster::new(wp.clone(), Some(scheduler()), Some(url_secret(&real.url)));
    let ctx = context(client);
    k8s.reconcile(&ctx, wp).await;
    k8s.until("three launching", |k| k.status()["launching"] == 3)
        .await;
    // Their agents report (as `pool-next 0 0` does), and two are handed
    // runs; then the pool is deleted, before any idle row goes stale.
    let pool = format!("{NS}/{POOL}");
    let mut db = orca_tests::pg::connect(&real.url).await;
    let ids = instances(&real).await;
    for id in &ids {
        mark_idle(&db, id, 0, 0, Some(&pool))
            .await
            .unwrap()
            .expect("a warm row");
    }
    let mut busy = Vec::new();
    for run in [1, 2] {
        let req = Request {
            pool: &pool,
            run,
            start: 1,
            role: "head",
            head_address: "",
            new_code: true,
        };
        let got = hand_out(&mut db, &req, Duration::from_secs(60))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("an idle instance for run {run}"));
        busy.push(got);
    }
    let idle: Vec<&String> = ids
        .iter()
        .filter(|i| busy.iter().all(|b| &b.instance != *i))
        .collect();
    let gone = k8s.delete();
    k8s.reconcile(&ctx, gone).await;
    k8s.until("the idle instance terminated", |k| terminated(k, idle[0]))
        .await;
    k8s.until("a status of the deletion", |k| k.status()["busy"] == 2)
        .await;
    let status = k8s.status();
    assert_eq!(
        condition(&status, "Terminating")["status"],
        "True",
        "{status}"
    );
    let mut left: Vec<String> = busy.iter().map(|b| b.instance.clone()).collect();
    left.sort();
    assert_eq!(
        instances(&real).await,
        left,
        "busy instances are left to their runs"
    );

    // Run 1 is over: its agent marks the run's row idle.
    mark_idle(&db, &busy[0].instance, 1, 1, None)
        .await
        .unwrap()
        .expect("run 1's row");
    k8s.until("the instance of run 1 terminated", |k| {
        terminated(k, &busy[0].instance)
    })
    .await;
    assert_eq!(instances(&real).await, [busy[1].instance.clone()]);
    assert!(!k8s.deleted);

    // drainTimeoutSeconds lowered to 0 during the deletion: the last one
    // goes too, and then the WarmPool.
    k8s.pool.spec.drain_timeout_seconds = 0;
    k8s.pool.metadata.generation = k8s.pool.metadata.generation.map(|g| g + 1);
    let edited = k8s.pool.clone();
    k8s.reconcile(&ctx, edited).await;
    k8s.until("the finalizer removed, and a Deleted event", |k| {
        k.deleted && !k.events_of("Deleted").is_empty()
    })
    .await;
    assert_eq!(instances(&real).await, Vec::<String>::new());
    assert!(terminated(&k8s, &busy[1].instance));
    let ended_by: Option<String> = db
        .query_one(
            "select ended_by from orca.instances where id = $1",
            &[&busy[1].row],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(ended_by.as_deref(), Some("operator"));
    assert_eq!(k8s.events_of("Deleting").len(), 1, "{:#?}", k8s.events);
    assert_eq!(k8s.events_of("Deleted").len(), 1, "{:#?}", k8s.events);
}

/// A deleted pool with no loop running (the operator restarted) whose
/// Scheduler is gone too cannot reach its database: `Degraded`, saying how
/// to let it go, and the finalizer stays. Set to `onDelete: Orphan`, the
/// finalizer goes at once and the instance is left running.
#[tokio::test]
async fn orphan_lets_a_deleted_pool_go_at_once_and_leaves_its_instances() {
    let real = warm::Stage::new().await;
    let wp = warm_pool(spec(&real, &real.moto.endpoint(), 1, 1), 1);
    let (mut k8s, client) =
        Cluster::new(wp.clone(), Some(scheduler()), Some(url_secret(&real.url)));
    let ctx = context(client.clone());
    k8s.reconcile(&ctx, wp).await;
    k8s.until("one launching", |k| k.status()["launching"] == 1)
        .await;
    let ids = instances(&real).await;
    assert_eq!(ids.len(), 1);

    ctx.stop_all();
    let ctx = context(client);
    k8s.scheduler = None;
    let gone = k8s.delete();
    k8s.reconcile(&ctx, gone).await;
    let status = k8s.status();
    let degraded = condition(&status, "Degraded");
    assert_eq!(degraded["reason"], "SchedulerMissing", "{status}");
    assert!(
        degraded["message"]
            .as_str()
            .unwrap()
            .contains("set spec.onDelete to Orphan"),
        "{status}"
    );
    assert_eq!(k8s.finalizers(), [FINALIZER]);
    assert!(!k8s.deleted);

    k8s.pool.spec.on_delete = OnDelete::Orphan;
    k8s.pool.metadata.generation = k8s.pool.metadata.generation.map(|g| g + 1);
    let edited = k8s.pool.clone();
    let action = k8s.reconcile(&ctx, edited).await;
    assert_eq!(action, Action::await_change());
    assert!(k8s.deleted, "the finalizer is gone");
    let deleted = k8s.events_of("Deleted");
    assert_eq!(deleted.len(), 1, "{:#?}", k8s.events);
    assert!(deleted[0]["note"].as_str().unwrap().contains("Orphan"));
    k8s.quiet(Duration::from_secs(2), "the pool is gone").await;
    assert_eq!(instances(&real).await, ids, "the instance is left");
}

/// The finalizer is a write like any other: behind a closed fence the
/// reconcile of a new WarmPool makes no call at all and starts no loop.
#[tokio::test]
async fn a_closed_fence_puts_no_finalizer_on() {
    let subnets = ["subnet-a".to_string()];
    let spec = warm::spec("http://127.0.0.1:9", &["t3.micro"], &subnets, 1, 1, 1);
    let wp = warm_pool(spec, 1);
    let url = url_secret("postgres://orca@127.0.0.1:9/orca");
    let (mut k8s, client) = Cluster::new(wp.clone(), Some(scheduler()), Some(url));
    let ctx = Arc::new(PoolContext::new(client, config(Fence::new())));
    let err = reconcile(Arc::new(wp), ctx)
        .await
        .expect_err("a closed fence");
    assert!(matches!(err, ControllerError::Fenced { .. }), "{err}");
    // No call came, and no task holds the client: no loop started.
    k8s.api.client_dropped(Duration::from_secs(1)).await;
}

/// An instance type without capacity shows in `capacityErrors` while it is
/// skipped, and is gone from the WarmPool's status once the hold is over.
#[tokio::test]
async fn capacity_errors_show_while_held_and_then_are_gone() {
    let real = warm::Stage::new().await;
    let faults = Ec2Faults::start(&real.moto.endpoint());
    faults.fail(
        "RunInstances",
        &["InstanceType=t3.small"],
        Fault::error("InsufficientInstanceCapacity"),
        usize::MAX,
    );
    let mut spec = spec(&real, &faults.endpoint(), 1, 1);
    spec.launch.instance_types = vec!["t3.small".into(), "t3.micro".into()];
    let wp = warm_pool(spec, 1);
    let (mut k8s, client) =
        Cluster::new(wp.clone(), Some(scheduler()), Some(url_secret(&real.url)));
    let ctx = Arc::new(PoolContext::new(
        client,
        PoolControllerConfig {
            tuning: orca_operator::pool::Tuning {
                capacity_hold: Duration::from_secs(2),
                ..warm::tuning(Duration::from_secs(60))
            },
            ..config(Fence::always())
        },
    ));
    k8s.reconcile(&ctx, wp).await;
    k8s.until("t3.small shown without capacity", |k| {
        k.status()["capacityErrors"]
            .as_array()
            .is_some_and(|errors| errors.iter().any(|e| e["instanceType"] == "t3.small"))
    })
    .await;
    let status = k8s.status();
    assert_eq!(
        status["capacityErrors"][0]["code"], "InsufficientInstanceCapacity",
        "{status}"
    );
    assert_eq!(status["launching"], 1, "launched as t3.micro: {status}");
    let warnings = k8s.events_of("CapacityUnavailable");
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert_eq!(warnings[0]["type"], "Warning");

    k8s.until("no capacity errors once the hold is over", |k| {
        k.status()["capacityErrors"]
            .as_array()
            .is_none_or(Vec::is_empty)
    })
    .await;
    // Left out of the applied status, not emptied or nulled: server-side
    // apply removes the field.
    let last = k8s.statuses.last().unwrap();
    assert!(last.get("capacityErrors").is_none(), "{last}");
    assert_eq!(condition(&k8s.status(), "Degraded")["status"], "False");
    assert_eq!(instances(&real).await.len(), 1);
}

/// The shape of a lost lease: the WarmPool controller's `run` is aborted,
/// as `lead` aborts the controllers — and with it every pool loop and its
/// write-back: no more EC2 calls, no more API calls.
#[tokio::test]
async fn aborting_the_controller_stops_every_pool_loop() {
    let real = warm::Stage::new().await;
    let faults = Ec2Faults::start(&real.moto.endpoint());
    let mut wp = warm_pool(spec(&real, &faults.endpoint(), 1, 2), 1);
    // With its finalizer already: the mock's watches never tell the
    // controller of a change.
    wp.metadata.finalizers = Some(vec![FINALIZER.into()]);
    let (mut k8s, client) =
        Cluster::new(wp.clone(), Some(scheduler()), Some(url_secret(&real.url)));
    let controller = tokio::spawn(orca_operator::k8s::warmpool::run(
        client,
        Some(NS.into()),
        config(Fence::always()),
    ));
    k8s.until("the pool launching", |k| {
        k.status()["launching"] == 1 && !k.events_of("Launched").is_empty()
    })
    .await;
    // Its passes go on (a pass every second lists the instances).
    faults.forget_calls();
    k8s.no_writes(Duration::from_secs(2), "the pool is steady")
        .await;
    assert!(
        !faults.calls_of("DescribeInstances").is_empty(),
        "the loop runs"
    );

    controller.abort();
    let _ = controller.await;
    // Nothing that holds the client is left: not the controller, not a
    // pool loop, not a write-back.
    k8s.api.client_dropped(Duration::from_secs(3)).await;
    // An EC2 call already on its way may land; then nothing more.
    tokio::time::sleep(Duration::from_millis(300)).await;
    faults.forget_calls();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let calls: Vec<String> = faults.calls().into_iter().map(|c| c.action).collect();
    assert!(calls.is_empty(), "EC2 calls after the abort: {calls:?}");
    assert_eq!(instances(&real).await.len(), 1);
}

/// A fence that closes under a running loop (a replica frozen past its
/// lease, thawed before it learns so): the loop calls EC2 no more, writes
/// no status and posts no Event — it does not even report the fenced
/// passes as failures.
#[tokio::test]
async fn a_closed_fence_stops_every_action_of_a_running_loop() {
    let real = warm::Stage::new().await;
    let faults = Ec2Faults::start(&real.moto.endpoint());
    let wp = warm_pool(spec(&real, &faults.endpoint(), 1, 2), 1);
    let (mut k8s, client) =
        Cluster::new(wp.clone(), Some(scheduler()), Some(url_secret(&real.url)));
    let fence = Fence::new();
    fence.hold_until(tokio::time::Instant::now() + Duration::from_secs(3600));
    let ctx = Arc::new(PoolContext::new(client, config(fence.clone())));
    k8s.reconcile(&ctx, wp).await;
    k8s.until("the pool launching", |k| {
        k.status()["launching"] == 1 && !k.events_of("Launched").is_empty()
    })
    .await;

    fence.close();
    tokio::time::sleep(Duration::from_millis(300)).await;
    faults.forget_calls();
    let statuses = k8s.statuses.len();
    for _ in 0..3 {
        let stored = k8s.pool.clone();
        let err = k8s
            .try_reconcile(&ctx, stored)
            .await
            .expect_err("a closed fence");
        assert!(matches!(err, ControllerError::Fenced { .. }), "{err}");
    }
    k8s.quiet(Duration::from_secs(1), "the fence is closed")
        .await;
    let calls: Vec<String> = faults.calls().into_iter().map(|c| c.action).collect();
    assert!(
        calls.is_empty(),
        "EC2 calls behind a closed fence: {calls:?}"
    );
    assert_eq!(k8s.statuses.len(), statuses);
    assert!(k8s.events_of("PassFailed").is_empty(), "{:#?}", k8s.events);

    // Open again (renewed): the loop carries on.
    fence.hold_until(tokio::time::Instant::now() + Duration::from_secs(3600));
    let deadline = Instant::now() + Duration::from_secs(10);
    while faults.calls_of("DescribeInstances").is_empty() {
        assert!(Instant::now() < deadline, "the pool did not carry on");
        k8s.step("the pool carrying on").await;
    }
    drop(ctx);
}
