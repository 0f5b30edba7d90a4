//! The Kubernetes mode's Scheduler controller where an HTTP-level mock of
//! the API shows quickly what a real server would take long to: one
//! `reconcile` at a time against a mock that answers each call in order and
//! checks it (a bad database reference, a fence closing mid-reconcile,
//! fields an older writer left), and the election's timing under a paused
//! clock. The handover itself is tested on a real control plane
//! (tests/tests/real_cluster/).

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use orca_operator::crd::{Scheduler, SchedulerSpec};
use orca_operator::k8s::leader::Fence;
use orca_operator::k8s::{reconcile, Context, Metrics};
use orca_tests::mock_api::{self as fixtures, mock_client, secret, ApiServerVerifier, NAME, NS};
use orca_tests::pg;
use prometheus_client::registry::Registry;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

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
    // As an earlier pass left it: these tests are about what comes after.
    s.metadata.finalizers = Some(vec![
        orca_operator::k8s::scheduler::deletion::FINALIZER.into()
    ]);
    s
}

fn context(client: kube::Client) -> (Arc<Context>, Registry) {
    fenced_context(client, Fence::always())
}

fn fenced_context(client: kube::Client, fence: Fence) -> (Arc<Context>, Registry) {
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    (
        Arc::new(Context::new(client, metrics, "orca-operator-0", fence)),
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

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} condition in {status}"))
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

/// A status written by an older operator (merge patches) keeps what it
/// set owned by that writer, and server-side apply leaves such a field
/// even once the operator leaves it out: the operator removes exactly
/// those leftovers with a merge patch after its apply.
#[tokio::test]
async fn status_fields_an_older_writer_left_are_removed() {
    let url = pg::Cluster::shared().migrated_db().await;
    let (client, mut api) = mock_client();
    let (ctx, _registry) = context(client);
    let mut s = scheduler("orca:v1");
    // A leader that is gone (no pod, no row), an aborted revision that is
    // not the spec's.
    s.status = Some(
        serde_json::from_value(json!({
            "phase": "Ready", "abortedRevision": "legacy",
            "leader": {"instance": 9, "pod": "orca-old-1", "image": "orca:v0"},
        }))
        .unwrap(),
    );
    let task = start(&s, &ctx);
    api.observe(&[], &[], Some(&secret(&[("url", &url)]))).await;
    api.create_pod().await;
    assert_eq!(api.events(1).await, ["Creating"]);
    let (applied, removal) = api.patch_status_over_legacy(&mut s).await;
    assert!(applied.get("leader").is_none(), "{applied}");
    assert!(applied.get("abortedRevision").is_none(), "{applied}");
    assert_eq!(
        removal,
        json!({"leader": null, "abortedRevision": null}),
        "{removal}"
    );
    settle(task, &mut api).await;
    let status = s.status.clone().unwrap();
    assert_eq!(status.aborted_revision, None);
    assert_eq!(
        serde_json::to_value(&status).unwrap(),
        applied,
        "the stored status is the applied one"
    );
}

/// A replica whose fence is closed — or closes during a reconcile —
/// writes nothing: no pod, no Event, no status, no database statement.
#[tokio::test]
async fn a_replica_whose_fence_closed_writes_nothing() {
    use orca_operator::k8s::ReconcileError;
    let url = pg::Cluster::shared().migrated_db().await;

    // Closed from the start: not even a read.
    let (client, mut api) = mock_client();
    let (ctx, _registry) = fenced_context(client, Fence::new());
    let task = start(&scheduler("orca:v1"), &ctx);
    let done = tokio::select! {
        done = task => done.unwrap(),
        call = api.next("no call") => panic!("a fenced replica called {} {}", call.method, call.path),
    };
    assert!(matches!(done, Err(ReconcileError::Observe(_))), "{done:?}");

    // Closed while the Secret is read: a missing Secret would be a
    // Degraded status, which is not written.
    let fence = Fence::new();
    fence.hold_until(tokio::time::Instant::now() + Duration::from_secs(3600));
    let (client, mut api) = mock_client();
    let (ctx, _registry) = fenced_context(client, fence.clone());
    let mut task = start(&scheduler("orca:v1"), &ctx);
    api.observe_until_secret(&[], &[], None, || fence.close())
        .await;
    let done = tokio::select! {
        done = &mut task => done.unwrap(),
        call = api.next("no call") => panic!("a fenced replica called {} {} {}", call.method, call.path, call.body),
    };
    assert!(matches!(done, Err(ReconcileError::Status(_))), "{done:?}");

    // The same with a database: neither its rows are read, nor a pod
    // created, nor an Event posted.
    let fence = Fence::new();
    fence.hold_until(tokio::time::Instant::now() + Duration::from_secs(3600));
    let (client, mut api) = mock_client();
    let (ctx, _registry) = fenced_context(client, fence.clone());
    let mut task = start(&scheduler("orca:v1"), &ctx);
    let secret = secret(&[("url", &url)]);
    api.observe_until_secret(&[], &[], Some(&secret), || fence.close())
        .await;
    let done = tokio::select! {
        done = &mut task => done.unwrap(),
        call = api.next("no call") => panic!("a fenced replica called {} {} {}", call.method, call.path, call.body),
    };
    let error = done.expect_err("fenced");
    assert!(error.to_string().contains("fenced"), "{error}");
}

/// The timings of the leader-election tests: 2 s leases, renewed every
/// 200 ms, the fence closing 500 ms early.
fn quick_election(identity: &str) -> orca_operator::k8s::leader::Election {
    orca_operator::k8s::leader::Election {
        duration: Duration::from_secs(2),
        renew_period: Duration::from_millis(200),
        margin: Duration::from_millis(500),
        call_timeout: Duration::from_secs(1),
        ..orca_operator::k8s::leader::Election::new("orca-operator", "ops", identity)
    }
}

/// What the controllers of a `lead` under test say: "started" with their
/// fence, and "stopped" when their future is dropped (aborted).
struct Work {
    seen: tokio::sync::mpsc::UnboundedReceiver<(&'static str, Fence)>,
}

impl Work {
    #[allow(clippy::type_complexity)]
    fn new() -> (
        Work,
        impl Fn(
            Fence,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + Send>>,
    ) {
        let (events, seen) = tokio::sync::mpsc::unbounded_channel::<(&'static str, Fence)>();
        struct Running(
            tokio::sync::mpsc::UnboundedSender<(&'static str, Fence)>,
            Fence,
        );
        impl Drop for Running {
            fn drop(&mut self) {
                let _ = self.0.send(("stopped", self.1.clone()));
            }
        }
        let work = move |fence: Fence| {
            let events = events.clone();
            Box::pin(async move {
                let _running = Running(events.clone(), fence.clone());
                events.send(("started", fence)).unwrap();
                std::future::pending::<anyhow::Result<()>>().await
            }) as std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>>
        };
        (Work { seen }, work)
    }

    /// The next thing said, within `within`.
    async fn next(&mut self, within: Duration, what: &str) -> (&'static str, Fence) {
        tokio::time::timeout(within, self.seen.recv())
            .await
            .unwrap_or_else(|_| panic!("not within {within:?}: {what}"))
            .expect("the work is gone")
    }

    /// Nothing said for `quiet`.
    async fn quiet(&mut self, quiet: Duration, why: &str) {
        if let Ok(said) = tokio::time::timeout(quiet, self.seen.recv()).await {
            panic!("{why}, but the controllers said {:?}", said.map(|s| s.0));
        }
    }
}

/// Only the holder of the Lease runs the controllers, each of their
/// actions behind its fence; when another replica holds it, they stop and
/// the fence is closed.
#[tokio::test]
async fn only_the_lease_holder_runs_the_controllers() {
    use orca_operator::k8s::leader::lead;
    use orca_operator::k8s::server::Readiness;

    let (client, api) = mock_client();
    let leases = fixtures::LeaseServer::default();
    let server = leases.serve(api);
    let (mut work, run) = Work::new();
    let ready = Readiness::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let leader = tokio::spawn(lead(
        client,
        quick_election("orca-operator-a"),
        ready.clone(),
        run,
        async move {
            let _ = stopped.await;
        },
    ));

    let (said, fence) = work
        .next(Duration::from_secs(15), "the controllers start")
        .await;
    assert_eq!(said, "started");
    assert!(fence.check().is_ok(), "the fence is open while leading");
    assert_eq!(leases.holder().as_deref(), Some("orca-operator-a"));
    assert!(ready.get());
    // Renewed by merge patches conditional on the resourceVersion.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let log = leases.log.lock().unwrap().clone();
    assert!(log[0].starts_with("GET "), "{log:#?}");
    assert!(
        log[1].starts_with("POST ") && log[1].contains("orca-operator-a"),
        "{log:#?}"
    );
    let renewals: Vec<&String> = log
        .iter()
        .filter(|c| c.starts_with("PATCH application/merge-patch+json"))
        .collect();
    assert!(!renewals.is_empty(), "{log:#?}");
    for r in &renewals {
        assert!(r.contains("\"resourceVersion\""), "{r}");
        assert!(r.contains("\"renewTime\""), "{r}");
    }
    assert_eq!(leases.spec()["leaseDurationSeconds"], 2);
    assert!(fence.check().is_ok());

    leases.taken_by("orca-operator-b");
    let (said, _) = work
        .next(Duration::from_secs(5), "the controllers stop")
        .await;
    assert_eq!(said, "stopped");
    assert!(
        fence.check().is_err(),
        "the fence is closed once the lease is lost"
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

/// A leader that cannot renew (the API server does not answer, or the
/// process was frozen) stops its controllers when its fence closes — the
/// start of its last renewal + the lease duration − the margin — not at the
/// first failed call, and not later; it leads again once it renews; on
/// shutdown it gives the Lease back.
#[tokio::test]
async fn a_leader_that_cannot_renew_stops_when_its_fence_closes() {
    use orca_operator::k8s::leader::lead;
    use orca_operator::k8s::server::Readiness;
    use std::sync::atomic::Ordering;

    let (client, api) = mock_client();
    let leases = fixtures::LeaseServer::default();
    let server = leases.serve(api);
    let (mut work, run) = Work::new();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let leader = tokio::spawn(lead(
        client,
        quick_election("orca-operator-a"),
        Readiness::default(),
        run,
        async move {
            let _ = stopped.await;
        },
    ));
    let (said, fence) = work
        .next(Duration::from_secs(15), "the controllers start")
        .await;
    assert_eq!(said, "started");
    tokio::time::sleep(Duration::from_millis(500)).await;

    leases.failing.store(true, Ordering::SeqCst);
    let failing = std::time::Instant::now();
    let (said, _) = work
        .next(Duration::from_secs(5), "the controllers stop")
        .await;
    let after = failing.elapsed();
    assert_eq!(said, "stopped");
    assert!(fence.check().is_err());
    // The last renewal started at most 200 ms (and a call) before the
    // failures: the fence closed 1.5 s after it.
    assert!(
        after >= Duration::from_millis(1000) && after <= Duration::from_millis(2500),
        "stopped {after:?} after the renewals began to fail"
    );
    assert_eq!(leases.holder().as_deref(), Some("orca-operator-a"));

    leases.failing.store(false, Ordering::SeqCst);
    let (said, fence) = work
        .next(Duration::from_secs(5), "the controllers start again")
        .await;
    assert_eq!(said, "started");
    assert!(fence.check().is_ok());

    stop.send(()).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(15), leader)
        .await
        .expect("lead returns");
    assert!(ended.unwrap().is_ok());
    assert!(fence.check().is_err());
    assert_eq!(leases.holder(), None, "released: {}", leases.spec());
    server.abort();
}

/// A standby takes a held Lease only once it has seen the same record for
/// a full lease duration on its own clock — not because the holder's
/// renewTime looks old (it says 2000 here) — and counts the transition.
#[tokio::test]
async fn a_standby_takes_over_only_after_the_record_stood_still_a_lease_duration() {
    use orca_operator::k8s::leader::lead;
    use orca_operator::k8s::server::Readiness;

    let (client, api) = mock_client();
    let leases = fixtures::LeaseServer::default();
    leases.held_by("orca-operator-b");
    let server = leases.serve(api);
    let (mut work, run) = Work::new();
    let ready = Readiness::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let leader = tokio::spawn(lead(
        client,
        quick_election("orca-operator-a"),
        ready.clone(),
        run,
        async move {
            let _ = stopped.await;
        },
    ));

    // b renews every 300 ms for 3 s: a stands by.
    for _ in 0..10 {
        work.quiet(Duration::from_millis(300), "b renews its lease")
            .await;
        leases.taken_by("orca-operator-b");
    }
    assert!(ready.get(), "a standby is ready");
    assert_eq!(leases.holder().as_deref(), Some("orca-operator-b"));

    // b stops renewing: a takes over a lease duration after the last change.
    let last = std::time::Instant::now();
    let (said, fence) = work.next(Duration::from_secs(5), "a takes over").await;
    let after = last.elapsed();
    assert_eq!(said, "started");
    assert!(fence.check().is_ok());
    assert!(
        after >= Duration::from_millis(1950) && after <= Duration::from_millis(3500),
        "took over {after:?} after the last renewal"
    );
    let spec = leases.spec();
    assert_eq!(spec["holderIdentity"], "orca-operator-a", "{spec}");
    assert_eq!(spec["leaseTransitions"], 5, "{spec}");

    stop.send(()).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(15), leader)
        .await
        .expect("lead returns");
    assert!(ended.unwrap().is_ok());
    assert_eq!(leases.holder(), None);
    server.abort();
}
