//! The Kubernetes mode's Scheduler controller (SPEC §6), one `reconcile`
//! at a time: kube's client against an HTTP-level mock that answers each
//! call in order and checks it, and a real PostgreSQL holding the rows of
//! `orca.schedulers` each step is staged with (the lead lock really held by
//! a session whose `backend_pid` the row records).

#[path = "k8s_mode/fixtures.rs"]
mod fixtures;

use std::sync::Arc;
use std::time::Duration;

use fixtures::{mock_client, secret, ApiServerVerifier, NAME, NS};
use k8s_openapi::api::{batch::v1::Job, core::v1::Pod};
use kube::runtime::controller::Action;
use orca_operator::crd::{Scheduler, SchedulerSpec};
use orca_operator::k8s::{reconcile, Context, Metrics};
use orca_operator::rollout::{job_name, pod_name, revision_of};
use orca_tests::pg;
use prometheus_client::registry::Registry;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

const LEAD_LOCK: i64 = 1869767525;

fn scheduler(image: &str) -> Scheduler {
    let spec: SchedulerSpec = serde_json::from_value(json!({
        "image": image,
        "command": ["orca-sim", "scheduler"],
        "database": {"urlSecretRef": {"name": "orca-db", "key": "url"}},
        "register": {"command": ["orca-sim", "register"], "timeoutSeconds": 120},
        "handover": {"staleSeconds": 60},
    }))
    .unwrap();
    let mut s = Scheduler::new(NAME, spec);
    s.metadata.namespace = Some(NS.into());
    s.metadata.uid = Some("scheduler-uid".into());
    s.metadata.generation = Some(1);
    s
}

fn context(client: kube::Client) -> (Arc<Context>, Registry) {
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    (
        Arc::new(Context::new(client, metrics, "orca-operator-0")),
        registry,
    )
}

fn start(
    s: &Scheduler,
    ctx: &Arc<Context>,
) -> JoinHandle<Result<Action, orca_operator::k8s::ReconcileError>> {
    tokio::spawn(reconcile(Arc::new(s.clone()), ctx.clone()))
}

/// The reconcile ends without another call, and without an error.
async fn settle(
    task: JoinHandle<Result<Action, orca_operator::k8s::ReconcileError>>,
    api: &mut ApiServerVerifier,
) {
    tokio::select! {
        done = task => {
            let result = done.expect("reconcile panicked");
            assert!(result.is_ok(), "reconcile failed: {:?}", result.err());
        }
        call = api.next("no further call") => {
            panic!("an unexpected call: {} {}?{} {}", call.method, call.path, call.query, call.body)
        }
    }
}

fn running(mut pod: Pod) -> Pod {
    pod.status = Some(
        serde_json::from_value(json!({
            "phase": "Running",
            "containerStatuses": [{"name": "scheduler", "image": "x", "imageID": "", "ready": true,
                                   "restartCount": 0, "state": {"running": {"startedAt": fixtures::now()}}}],
        }))
        .unwrap(),
    );
    pod
}

fn exited(mut pod: Pod, code: i32) -> Pod {
    pod.status = Some(
        serde_json::from_value(json!({
            "phase": if code == 0 { "Succeeded" } else { "Failed" },
            "containerStatuses": [{"name": "scheduler", "image": "x", "imageID": "", "ready": false,
                                   "restartCount": 0, "state": {"terminated": {"exitCode": code,
                                   "finishedAt": fixtures::now()}}}],
        }))
        .unwrap(),
    );
    pod
}

fn complete(mut job: Job) -> Job {
    job.status = Some(
        serde_json::from_value(json!({
            "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": fixtures::now()}],
            "completionTime": fixtures::now(),
        }))
        .unwrap(),
    );
    job
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} condition in {status}"))
}

/// The rows of `orca.schedulers`, staged with plain SQL.
struct Rows {
    db: orca_db::Db,
    url: String,
}

impl Rows {
    async fn new(url: &str) -> Rows {
        Rows {
            db: pg::connect(url).await,
            url: url.into(),
        }
    }

    /// An instance of pod `host` joins (`waiting`).
    async fn join(&self, host: &str, image: &str) -> i64 {
        self.db
            .query_one(
                "insert into orca.schedulers (host, pid, image, migrations) values ($1, 7, $2, 2) returning id",
                &[&host, &image],
            )
            .await
            .unwrap()
            .get(0)
    }

    /// Instance `id` takes LEAD_LOCK on a dedicated session, which it keeps
    /// as long as the returned connection lives.
    async fn lead(&self, id: i64) -> orca_db::Db {
        let session = pg::connect(&self.url).await;
        session
            .query_one("select pg_advisory_lock($1)", &[&LEAD_LOCK])
            .await
            .unwrap();
        session
            .execute(
                "update orca.schedulers set role = 'leading', led = now(), backend_pid = pg_backend_pid() where id = $1",
                &[&id],
            )
            .await
            .unwrap();
        session
    }

    async fn sql(&self, statement: &str, id: i64) {
        self.db.execute(statement, &[&id]).await.unwrap();
    }

    async fn drain_asked(&self, id: i64) -> bool {
        self.db
            .query_one(
                "select drain_asked is not null from orca.schedulers where id = $1",
                &[&id],
            )
            .await
            .unwrap()
            .get(0)
    }
}

#[tokio::test]
async fn a_rollout_starts_then_hands_over_join_drain_lead_register_remove() {
    let url = pg::Cluster::shared().migrated_db().await;
    let rows = Rows::new(&url).await;
    let (client, mut api) = mock_client();
    let (ctx, registry) = context(client);
    let secret = secret(&[("url", &url)]);
    let mut s = scheduler("orca:v1");
    let rev1 = revision_of(&s.spec);

    // 1. First start: the v1 pod, an Event, a status.
    let task = start(&s, &ctx);
    api.observe(&[], &[], Some(&secret)).await;
    let pod1 = api.create_pod().await;
    let name1 = pod_name(NAME, &rev1, 1);
    assert_eq!(pod1.metadata.name.as_deref(), Some(name1.as_str()));
    let labels = pod1.metadata.labels.clone().unwrap();
    assert_eq!(labels["orca.dev/scheduler"], NAME);
    assert_eq!(labels["orca.dev/revision"], rev1);
    assert_eq!(labels["orca.dev/sequence"], "1");
    let owner = &pod1.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.uid.as_str(),
            owner.controller
        ),
        ("Scheduler", NAME, "scheduler-uid", Some(true))
    );
    let spec = pod1.spec.clone().unwrap();
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    assert_eq!(spec.hostname.as_deref(), Some(name1.as_str()));
    let env = spec.containers[0].env.clone().unwrap();
    let db_env = env.iter().find(|e| e.name == "ORCA_DATABASE_URL").unwrap();
    assert_eq!(db_env.value, None, "the URL must not be a literal");
    let r = db_env
        .value_from
        .as_ref()
        .unwrap()
        .secret_key_ref
        .as_ref()
        .unwrap();
    assert_eq!((r.name.as_str(), r.key.as_str()), ("orca-db", "url"));
    assert!(env
        .iter()
        .any(|e| e.name == "ORCA_OVERLAP" && e.value.as_deref() == Some("on")));
    assert!(env
        .iter()
        .any(|e| e.name == "ORCA_IMAGE" && e.value.as_deref() == Some("orca:v1")));
    assert_eq!(api.events(1).await, ["Creating"]);
    let status = api.patch_status(&mut s).await;
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(status["phase"], "Starting");
    assert_eq!(status["targetImage"], "orca:v1");
    assert_eq!(status["lastSequence"], 1);
    assert_eq!(condition(&status, "Available")["status"], "False");
    assert_eq!(condition(&status, "Progressing")["status"], "True");
    assert_eq!(condition(&status, "Degraded")["status"], "False");
    settle(task, &mut api).await;

    // 2. v1 joined and leads (pg_locks): its pipelines are registered.
    let id1 = rows.join(&name1, "orca:v1").await;
    let lead1 = rows.lead(id1).await;
    let pod1 = running(pod1);
    let task = start(&s, &ctx);
    api.observe(std::slice::from_ref(&pod1), &[], Some(&secret))
        .await;
    let job1 = api.create_job().await;
    assert_eq!(
        job1.metadata.name.as_deref(),
        Some(job_name(NAME, &rev1).as_str())
    );
    assert_eq!(api.events(1).await, ["Registering"]);
    let status = api.patch_status(&mut s).await;
    assert_eq!(status["phase"], "Registering");
    assert_eq!(status["leader"]["instance"], id1);
    settle(task, &mut api).await;

    // 3. Registered: Ready, nothing to do, no Event.
    let job1 = complete(job1);
    let task = start(&s, &ctx);
    api.observe(
        std::slice::from_ref(&pod1),
        std::slice::from_ref(&job1),
        Some(&secret),
    )
    .await;
    let status = api.patch_status(&mut s).await;
    assert_eq!(status["phase"], "Ready");
    assert_eq!(condition(&status, "Available")["status"], "True");
    settle(task, &mut api).await;

    // 4. A new image: the v2 pod starts beside the v1 leader; v1's register
    //    Job is superseded.
    s.spec.image = "orca:v2".into();
    s.metadata.generation = Some(2);
    let rev2 = revision_of(&s.spec);
    let name2 = pod_name(NAME, &rev2, 2);
    let task = start(&s, &ctx);
    api.observe(
        std::slice::from_ref(&pod1),
        std::slice::from_ref(&job1),
        Some(&secret),
    )
    .await;
    let pod2 = api.create_pod().await;
    assert_eq!(pod2.metadata.name.as_deref(), Some(name2.as_str()));
    let env = pod2.spec.clone().unwrap().containers[0]
        .env
        .clone()
        .unwrap();
    assert!(env
        .iter()
        .any(|e| e.name == "ORCA_IMAGE" && e.value.as_deref() == Some("orca:v2")));
    api.delete_job(&job_name(NAME, &rev1)).await;
    assert_eq!(api.events(1).await, ["HandoverStarted"]);
    let status = api.patch_status(&mut s).await;
    assert_eq!(status["observedGeneration"], 2);
    assert_eq!(status["lastHandover"]["from"], "orca:v1");
    assert_eq!(status["lastHandover"]["to"], "orca:v2");
    assert!(status["lastHandover"]["started"].is_string());
    assert_eq!(status["leader"]["instance"], id1, "v1 keeps leading");
    settle(task, &mut api).await;
    assert!(
        !rows.drain_asked(id1).await,
        "nothing is asked to drain before v2 joins"
    );

    // 5. v2 joined: v1 is asked to drain (in the database); no Job yet.
    let id2 = rows.join(&name2, "orca:v2").await;
    let pod2 = running(pod2);
    let both = [pod1.clone(), pod2.clone()];
    let task = start(&s, &ctx);
    api.observe(&both, &[], Some(&secret)).await;
    assert_eq!(api.events(2).await, ["Joined", "AskedDrain"]);
    let status = api.patch_status(&mut s).await;
    assert_eq!(status["phase"], "HandingOver");
    assert!(status["lastHandover"]["joined"].is_string());
    settle(task, &mut api).await;
    assert!(
        rows.drain_asked(id1).await,
        "ask_drain is recorded in orca.schedulers"
    );

    // 6. v1 steps down; v2's row says `leading`, but its backend holds no
    //    lock in pg_locks: no register Job, and no leader in the status.
    rows.sql(
        "update orca.schedulers set role = 'draining', drained = now() where id = $1",
        id1,
    )
    .await;
    lead1
        .query_one("select pg_advisory_unlock($1)", &[&LEAD_LOCK])
        .await
        .unwrap();
    rows.sql(
        "update orca.schedulers set role = 'leading', backend_pid = pg_backend_pid() where id = $1",
        id2,
    )
    .await;
    let task = start(&s, &ctx);
    api.observe(&both, &[], Some(&secret)).await;
    let status = api.patch_status(&mut s).await;
    assert_eq!(status["leader"], Value::Null, "{status}");
    assert_eq!(status["draining"], 1);
    settle(task, &mut api).await;

    // 7. v2 holds the lock: the register Job, with the new image.
    let _lead2 = rows.lead(id2).await;
    let task = start(&s, &ctx);
    api.observe(&both, &[], Some(&secret)).await;
    let job2 = api.create_job().await;
    assert_eq!(
        job2.metadata.name.as_deref(),
        Some(job_name(NAME, &rev2).as_str())
    );
    let c = &job2.spec.clone().unwrap().template.spec.unwrap().containers[0];
    assert_eq!(c.image.as_deref(), Some("orca:v2"));
    assert_eq!(c.command.clone().unwrap(), ["orca-sim", "register"]);
    assert_eq!(api.events(2).await, ["Leading", "Registering"]);
    let status = api.patch_status(&mut s).await;
    assert_eq!(status["phase"], "Registering");
    assert_eq!(status["leader"]["instance"], id2);
    assert_eq!(status["currentImage"], "orca:v2");
    settle(task, &mut api).await;

    // 8. Registered, and v1's row has ended and its pod exited: the old pod
    //    is deleted.
    rows.sql(
        "update orca.schedulers set ended = now() where id = $1",
        id1,
    )
    .await;
    let job2 = complete(job2);
    let task = start(&s, &ctx);
    api.observe(
        &[exited(pod1, 0), pod2.clone()],
        std::slice::from_ref(&job2),
        Some(&secret),
    )
    .await;
    api.delete_pod(&name1).await;
    assert_eq!(api.events(2).await, ["Registered", "Removed"]);
    let status = api.patch_status(&mut s).await;
    assert!(status["lastHandover"]["registered"].is_string());
    settle(task, &mut api).await;

    // 9. v1's pod is gone: the handover is complete.
    let task = start(&s, &ctx);
    api.observe(
        std::slice::from_ref(&pod2),
        std::slice::from_ref(&job2),
        Some(&secret),
    )
    .await;
    assert_eq!(api.events(1).await, ["HandoverComplete"]);
    let status = api.patch_status(&mut s).await;
    assert_eq!(status["phase"], "Ready");
    assert!(status["lastHandover"]["drained"].is_string());
    settle(task, &mut api).await;

    // 10. Nothing changed: nothing is written.
    let task = start(&s, &ctx);
    api.observe(
        std::slice::from_ref(&pod2),
        std::slice::from_ref(&job2),
        Some(&secret),
    )
    .await;
    settle(task, &mut api).await;

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains(r#"orca_scheduler_handover_duration_seconds_count{namespace="default",scheduler="orca"} 1"#),
        "{text}"
    );
    assert!(text
        .contains(r#"orca_scheduler_phase{namespace="default",scheduler="orca",phase="Ready"} 1"#));
}

#[tokio::test]
async fn a_bad_database_reference_is_degraded_with_its_reason_and_no_password() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let unreachable = format!("postgres://orca:hunter2@127.0.0.1:{closed}/orca?sslmode=disable");
    let cases = [
        (None, "SecretMissing"),
        (Some(secret(&[("password", "hunter2")])), "SecretKeyMissing"),
        (
            Some(secret(&[(
                "url",
                "postgres://orca:hunter2@db.example/orca?sslmode=bogus",
            )])),
            "DatabaseUrlInvalid",
        ),
        (
            Some(secret(&[("url", &unreachable)])),
            "DatabaseUnreachable",
        ),
    ];
    for (secret, reason) in cases {
        let (client, mut api) = mock_client();
        let (ctx, _registry) = context(client);
        let mut s = scheduler("orca:v1");
        let task = start(&s, &ctx);
        api.observe(&[], &[], secret.as_ref()).await;
        // No pod, no Event: the status says why.
        let status = api.patch_status(&mut s).await;
        assert_eq!(status["phase"], "Degraded", "{reason}: {status}");
        let degraded = condition(&status, "Degraded");
        assert_eq!(degraded["status"], "True");
        assert_eq!(degraded["reason"], reason, "{status}");
        assert!(
            degraded["message"].as_str().unwrap().contains("orca-db")
                || reason == "DatabaseUnreachable"
        );
        // Not a crash loop: the reconcile succeeds and looks again later.
        tokio::time::timeout(Duration::from_secs(15), settle(task, &mut api))
            .await
            .expect("the reconcile ends");
        for body in &api.bodies {
            assert!(
                !body.contains("hunter2"),
                "{reason}: the password went out: {body}"
            );
        }
    }
}

/// Once the Secret is there the first pod starts, even on a database the
/// scheduler image has not migrated yet (the schema is the image's to make).
#[tokio::test]
async fn a_degraded_scheduler_recovers_once_the_secret_is_there() {
    let url = pg::Cluster::shared().fresh_db().await;
    let (client, mut api) = mock_client();
    let (ctx, _registry) = context(client);
    let mut s = scheduler("orca:v1");

    let task = start(&s, &ctx);
    api.observe(&[], &[], None).await;
    assert_eq!(
        condition(&api.patch_status(&mut s).await, "Degraded")["reason"],
        "SecretMissing"
    );
    settle(task, &mut api).await;

    let task = start(&s, &ctx);
    api.observe(&[], &[], Some(&secret(&[("url", &url)]))).await;
    api.create_pod().await;
    assert_eq!(api.events(1).await, ["Creating"]);
    let status = api.patch_status(&mut s).await;
    assert_eq!(condition(&status, "Degraded")["status"], "False");
    assert_eq!(status["phase"], "Starting");
    settle(task, &mut api).await;
}

/// Only the holder of the Lease runs the controllers; when another replica
/// holds it, they stop; on shutdown the lease is given back.
#[tokio::test]
async fn only_the_lease_holder_runs_the_controllers() {
    use orca_operator::k8s::leader::{lead, Election};
    use orca_operator::k8s::server::Readiness;

    let (client, api) = mock_client();
    let leases = fixtures::LeaseServer::default();
    let server = leases.serve(api);
    let (events, mut seen) = tokio::sync::mpsc::unbounded_channel::<&'static str>();
    /// Says "stopped" when the controllers' future is dropped (aborted).
    struct Running(tokio::sync::mpsc::UnboundedSender<&'static str>);
    impl Drop for Running {
        fn drop(&mut self) {
            let _ = self.0.send("stopped");
        }
    }
    let work = move || {
        let events = events.clone();
        async move {
            let _running = Running(events.clone());
            events.send("started").unwrap();
            std::future::pending::<anyhow::Result<()>>().await
        }
    };
    let election = Election {
        duration_seconds: 2,
        grace_seconds: 1,
        ..Election::new("orca-operator", "ops", "orca-operator-a")
    };
    let ready = Readiness::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let leader = tokio::spawn(lead(client, election, ready.clone(), work, async move {
        let _ = stopped.await;
    }));

    assert_eq!(
        tokio::time::timeout(Duration::from_secs(15), seen.recv())
            .await
            .expect("the controllers start")
            .unwrap(),
        "started"
    );
    assert_eq!(leases.holder().as_deref(), Some("orca-operator-a"));
    assert!(ready.get());
    let took = leases.log.lock().unwrap().clone();
    assert!(
        took.iter().any(
            |c| c.starts_with("PATCH application/apply-patch") && c.contains("orca-operator-a")
        ),
        "{took:#?}"
    );

    leases.taken_by("orca-operator-b");
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(15), seen.recv())
            .await
            .expect("the controllers stop")
            .unwrap(),
        "stopped"
    );

    stop.send(()).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(15), leader)
        .await
        .expect("lead returns");
    assert!(ended.unwrap().is_ok());
    assert_eq!(
        leases.holder().as_deref(),
        Some("orca-operator-b"),
        "a standby does not release another's lease"
    );
    server.abort();
}
