//! The leader election's timing: only the Lease holder runs the
//! controllers, a leader that cannot renew stops when its fence closes, a
//! standby takes over only after the record stood still.

use super::*;

/// The timings of the leader-election tests: 2 s leases, renewed every
/// 200 ms, the fence closing 500 ms early.
fn quick_election(identity: &str) -> orca_operator::runtime::leader::Election {
    orca_operator::runtime::leader::Election::new("orca-operator", "ops", identity).with_timings(
        Duration::from_secs(2),
        Duration::from_millis(200),
        Duration::from_millis(500),
        Duration::from_secs(1),
    )
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
    use orca_operator::runtime::leader::lead;
    use orca_operator::runtime::server::Readiness;

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
    let log = leases.log().lock().unwrap().clone();
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
    use orca_operator::runtime::leader::lead;
    use orca_operator::runtime::server::Readiness;
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

    leases.failing().store(true, Ordering::SeqCst);
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

    leases.failing().store(false, Ordering::SeqCst);
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
    use orca_operator::runtime::leader::lead;
    use orca_operator::runtime::server::Readiness;

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
