//! The status: fields an older writer left are removed.

use super::*;

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
