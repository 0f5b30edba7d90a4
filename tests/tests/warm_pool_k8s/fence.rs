//! The fence and the lease: behind a closed fence nothing is written and a
//! running loop acts no more; an aborted controller stops every pool loop.

use super::*;
use orca_operator::runtime::watches::{ClusterWatches, Watches};

/// The finalizer is a write like any other: behind a closed fence the
/// reconcile of a new WarmPool makes no call at all and starts no loop.
#[tokio::test]
async fn a_closed_fence_puts_no_finalizer_on() {
    let subnets = ["subnet-a".to_string()];
    let spec = warm::spec("http://127.0.0.1:9", &["t3.micro"], &subnets, 1, 1, 1);
    let wp = warm_pool(spec, 1);
    let url = url_secret("postgres://orca@127.0.0.1:9/orca");
    let (mut k8s, client) = Cluster::new(wp.clone(), Some(scheduler()), Some(url));
    let ctx = Arc::new(Context::new(client, config(Fence::new())));
    let err = reconcile(Arc::new(wp), ctx)
        .await
        .expect_err("a closed fence");
    assert!(matches!(err, ReconcileError::Fenced { .. }), "{err}");
    // No call came, and no task holds the client: no loop started.
    k8s.api.client_dropped(Duration::from_secs(1)).await;
}

/// The shape of a lost lease: the WarmPool controller's `run` is aborted,
/// as `lead` aborts the controllers — and with it every pool loop and its
/// write-back: no more EC2 calls, no more API calls.
#[tokio::test]
async fn aborting_the_controller_stops_every_pool_loop() {
    let real = warm::Stage::new().await;
    let faults = Ec2Faults::start(&real.moto().endpoint());
    let mut wp = warm_pool(spec(&real, &faults.endpoint(), 1, 2), 1);
    // With its finalizer already: the mock's watches never tell the
    // controller of a change.
    wp.metadata.finalizers = Some(vec![FINALIZER.into()]);
    let (mut k8s, client) =
        Cluster::new(wp.clone(), Some(scheduler()), Some(url_secret(real.url())));
    let mut watches = Watches::new(&client, &Some(NS.into()));
    // No classes here: their watches are subscribed to and never run.
    let mut cluster = ClusterWatches::new(&client);
    let run = orca_operator::warmpool::k8s::run(
        client,
        config(Fence::always()),
        &mut watches,
        &mut cluster,
    );
    let controller = tokio::spawn(async move {
        // Held (not run: the mock serves no classes) and dropped with the
        // controller, as `k8s::run` holds them.
        let _cluster = cluster;
        futures::join!(run, watches.run());
    });
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
    let calls: Vec<String> = faults
        .calls()
        .into_iter()
        .map(|c| c.action().to_string())
        .collect();
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
    let faults = Ec2Faults::start(&real.moto().endpoint());
    let wp = warm_pool(spec(&real, &faults.endpoint(), 1, 2), 1);
    let (mut k8s, client) =
        Cluster::new(wp.clone(), Some(scheduler()), Some(url_secret(real.url())));
    let fence = Fence::new();
    fence.hold_until(tokio::time::Instant::now() + Duration::from_secs(3600));
    let ctx = Arc::new(Context::new(client, config(fence.clone())));
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
        assert!(matches!(err, ReconcileError::Fenced { .. }), "{err}");
    }
    k8s.quiet(Duration::from_secs(1), "the fence is closed")
        .await;
    let calls: Vec<String> = faults
        .calls()
        .into_iter()
        .map(|c| c.action().to_string())
        .collect();
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
