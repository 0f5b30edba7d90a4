//! A pool that moves — its `endpoint` (or region, or Scheduler) changed —
//! launches in the new place and drains the old one: what it launched
//! there is terminated, never left running out of its view. Once, the old
//! instances vanished from the listing: never counted, never terminated.

use super::*;

/// The pool's instances in `stage`'s EC2 that are not going away.
async fn left_in(stage: &warm::Stage) -> Vec<String> {
    instances(stage).await
}

#[tokio::test]
async fn a_changed_endpoint_drains_the_old_place_and_leaves_nothing_there() {
    let old = warm::Stage::new().await;
    let new = warm::Stage::new().await;
    let wp = warm_pool(spec(&old, &old.moto.endpoint(), 1, 1), 1);
    let (mut k8s, client) = Cluster::new(wp.clone(), Some(scheduler()), Some(url_secret(&old.url)));
    let ctx = context(client);
    k8s.reconcile(&ctx, wp).await;
    k8s.until("one launching in the old place", |k| {
        k.status()["launching"] == 1
    })
    .await;
    let there = left_in(&old).await;
    assert_eq!(there.len(), 1);
    // Its agent reports: an idle warm row.
    let db = orca_tests::pg::connect(&old.url).await;
    db.execute(
        "insert into orca.instances (instance, pool, role, idle, polled)
         values ($1, $2, 'warm', now(), now())",
        &[&there[0], &format!("{NS}/{POOL}")],
    )
    .await
    .unwrap();

    // Moved to another EC2 endpoint (the same database).
    let mut moved = spec(&new, &new.moto.endpoint(), 1, 1);
    moved.launch.subnet_ids = new.subnets[..1].to_vec();
    k8s.pool.spec = moved;
    k8s.pool.metadata.generation = Some(2);
    let edited = k8s.pool.clone();
    k8s.reconcile(&ctx, edited).await;
    k8s.until("one launching in the new place, the old one drained", |k| {
        k.status()["observedGeneration"] == 2
            && k.status()["retiring"]
                .as_array()
                .is_none_or(|r| r.is_empty())
    })
    .await;
    assert_eq!(
        left_in(&old).await,
        Vec::<String>::new(),
        "left running in the old place"
    );
    assert_eq!(left_in(&new).await.len(), 1, "launched in the new place");
    let ended_by: Option<String> = db
        .query_one(
            "select ended_by from orca.instances where instance = $1",
            &[&there[0]],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        ended_by.as_deref(),
        Some("operator"),
        "ended race-free first"
    );
    let terminated = k8s.events_of("Terminated");
    assert!(
        terminated.iter().any(|e| {
            let note = e["note"].as_str().unwrap_or_default();
            note.contains("where the pool ran before") && note.contains(there[0].as_str())
        }),
        "{:#?}",
        k8s.events
    );
}
