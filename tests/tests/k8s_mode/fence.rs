//! The fence: a replica whose fence closed, or closes mid-reconcile,
//! writes nothing.

use super::*;

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
        call = api.next("no call") => panic!("a fenced replica called {} {}", call.method(), call.path()),
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
        call = api.next("no call") => panic!("a fenced replica called {} {} {}", call.method(), call.path(), call.body()),
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
        call = api.next("no call") => panic!("a fenced replica called {} {} {}", call.method(), call.path(), call.body()),
    };
    let error = done.expect_err("fenced");
    assert!(error.to_string().contains("fenced"), "{error}");
}
