//! Deletion: a new generation restarts the loop and a deleted pool
//! terminates its instances, waits for busy ones until the drain timeout,
//! or (`onDelete: Orphan`) goes at once and leaves them.

use super::*;

/// A reconcile of the same generation leaves the loop alone; a new one
/// (idle.min 2 → 3) restarts it and the third instance is launched; a
/// deleted pool's loop terminates the instances, the finalizer goes, and
/// then no more calls, no more EC2 calls.
#[tokio::test]
async fn a_new_generation_restarts_the_loop_and_a_deleted_pool_terminates_its_instances() {
    let real = warm::Stage::new().await;
    let faults = Ec2Faults::start(&real.moto().endpoint());
    let wp = warm_pool(spec(&real, &faults.endpoint(), 2, 3), 1);
    let (mut k8s, client) =
        Cluster::new(wp.clone(), Some(scheduler()), Some(url_secret(real.url())));
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
    let calls: Vec<String> = faults
        .calls()
        .into_iter()
        .map(|c| c.action().to_string())
        .collect();
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
    let wp = warm_pool(spec(&real, &real.moto().endpoint(), 3, 3), 1);
    let (mut k8s, client) =
        Cluster::new(wp.clone(), Some(scheduler()), Some(url_secret(real.url())));
    let ctx = context(client);
    k8s.reconcile(&ctx, wp).await;
    k8s.until("three launching", |k| k.status()["launching"] == 3)
        .await;
    // Their agents report (as `pool-next 0 0` does), and two are handed
    // runs; then the pool is deleted, before any idle row goes stale.
    let pool = format!("{NS}/{POOL}");
    let mut db = orca_tests::pg::connect(real.url()).await;
    let ids = instances(&real).await;
    for id in &ids {
        mark_idle(&db, id, 0, 0, Some(&pool))
            .await
            .unwrap()
            .expect("a warm row");
    }
    let mut busy = Vec::new();
    for run in [1, 2] {
        let req = Request::new(&pool, run, 1, "head", "", true);
        let got = hand_out(&mut db, &req, Duration::from_secs(60))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("an idle instance for run {run}"));
        busy.push(got);
    }
    let idle: Vec<&String> = ids
        .iter()
        .filter(|i| busy.iter().all(|b| b.instance() != i.as_str()))
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
    let mut left: Vec<String> = busy.iter().map(|b| b.instance().to_string()).collect();
    left.sort();
    assert_eq!(
        instances(&real).await,
        left,
        "busy instances are left to their runs"
    );

    // Run 1 is over: its agent marks the run's row idle.
    mark_idle(&db, busy[0].instance(), 1, 1, None)
        .await
        .unwrap()
        .expect("run 1's row");
    k8s.until("the instance of run 1 terminated", |k| {
        terminated(k, busy[0].instance())
    })
    .await;
    assert_eq!(instances(&real).await, [busy[1].instance().to_string()]);
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
    assert!(terminated(&k8s, busy[1].instance()));
    let ended_by: Option<String> = db
        .query_one(
            "select ended_by from orca.instances where id = $1",
            &[&busy[1].row()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(ended_by.as_deref(), Some("operator"));
    assert_eq!(k8s.events_of("Deleting").len(), 1, "{:#?}", k8s.events);
    assert_eq!(k8s.events_of("Deleted").len(), 1, "{:#?}", k8s.events);
}

/// A deleted pool with no loop running (the operator restarted) whose
/// Scheduler is gone too still reaches its database, through the Secret its
/// status records (kept for it by the in-use finalizer), ends its rows and
/// terminates its instance; then the finalizer goes. Once it stayed
/// `Degraded` for good, its instance running.
#[tokio::test]
async fn a_restarted_operator_reaches_a_deleted_pools_database_through_its_status() {
    let real = warm::Stage::new().await;
    let wp = warm_pool(spec(&real, &real.moto().endpoint(), 1, 1), 1);
    let (mut k8s, client) =
        Cluster::new(wp.clone(), Some(scheduler()), Some(url_secret(real.url())));
    let ctx = context(client.clone());
    k8s.reconcile(&ctx, wp).await;
    k8s.until("one launching", |k| k.status()["launching"] == 1)
        .await;
    assert_eq!(
        k8s.status()["databaseSecret"],
        serde_json::json!({"name": "orca-db", "key": "url"}),
        "the status records the Secret the pool runs on"
    );
    assert_eq!(instances(&real).await.len(), 1);

    ctx.stop_all();
    let ctx = context(client);
    k8s.scheduler = None;
    let gone = k8s.delete();
    k8s.reconcile(&ctx, gone).await;
    k8s.until("the finalizer removed", |k| k.deleted).await;
    assert_eq!(instances(&real).await, Vec::<String>::new());
}

/// A deleted pool whose database cannot be had at all — no Scheduler, and
/// no Secret its status records — terminates its instances by EC2 alone,
/// but only once `drainTimeoutSeconds` have passed since the deletion
/// (without the rows a busy instance is not told from an idle one):
/// until then it is `Degraded`, saying when and how to let it go. Set to
/// `onDelete: Orphan`, the finalizer goes at once and the instance is left.
#[tokio::test]
async fn without_its_database_a_deleted_pool_waits_its_drain_time_out_or_orphan() {
    let real = warm::Stage::new().await;
    let wp = warm_pool(spec(&real, &real.moto().endpoint(), 1, 1), 1);
    let (mut k8s, client) =
        Cluster::new(wp.clone(), Some(scheduler()), Some(url_secret(real.url())));
    let ctx = context(client.clone());
    k8s.reconcile(&ctx, wp).await;
    k8s.until("one launching", |k| k.status()["launching"] == 1)
        .await;
    let ids = instances(&real).await;
    assert_eq!(ids.len(), 1);

    ctx.stop_all();
    let ctx = context(client);
    k8s.scheduler = None;
    if let Some(status) = k8s.pool.status.as_mut() {
        status.database_secret = None;
    }
    let gone = k8s.delete();
    k8s.reconcile(&ctx, gone).await;
    let status = k8s.status();
    let degraded = condition(&status, "Degraded");
    assert_eq!(degraded["reason"], "SchedulerMissing", "{status}");
    let message = degraded["message"].as_str().unwrap();
    assert!(message.contains("set spec.onDelete to Orphan"), "{status}");
    assert!(
        message.contains("are terminated at") && message.contains("busy or not"),
        "{status}"
    );
    assert_eq!(k8s.finalizers(), [FINALIZER]);
    assert!(!k8s.deleted);
    assert_eq!(
        instances(&real).await,
        ids,
        "nothing before the drain time-out"
    );

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

/// Past `drainTimeoutSeconds` (here 0) a deleted pool without its database
/// terminates its instances by EC2 alone, says so in a Warning, and goes
/// once EC2 lists none: never stuck for good, nothing left running.
#[tokio::test]
async fn without_its_database_a_deleted_pool_terminates_by_ec2_past_its_drain_time_out() {
    let real = warm::Stage::new().await;
    let mut pool_spec = spec(&real, &real.moto().endpoint(), 1, 1);
    pool_spec.drain_timeout_seconds = 0;
    let wp = warm_pool(pool_spec, 1);
    let (mut k8s, client) =
        Cluster::new(wp.clone(), Some(scheduler()), Some(url_secret(real.url())));
    let ctx = context(client.clone());
    k8s.reconcile(&ctx, wp).await;
    k8s.until("one launching", |k| k.status()["launching"] == 1)
        .await;
    assert_eq!(instances(&real).await.len(), 1);

    ctx.stop_all();
    let ctx = context(client);
    k8s.scheduler = None;
    if let Some(status) = k8s.pool.status.as_mut() {
        status.database_secret = None;
    }
    let gone = k8s.delete();
    k8s.reconcile(&ctx, gone).await;
    k8s.until("the finalizer removed", |k| k.deleted).await;
    assert_eq!(instances(&real).await, Vec::<String>::new());
    let terminated = k8s.events_of("Terminated");
    assert!(
        terminated.iter().any(|e| e["type"] == "Warning"
            && e["note"]
                .as_str()
                .unwrap()
                .contains("without the pool's database")),
        "{:#?}",
        k8s.events
    );
}

/// A pool that moved, its old place still draining a busy instance, then
/// deleted without its database: past `drainTimeoutSeconds` it terminates
/// by EC2 alone in the old place too, and goes only once EC2 lists none of
/// its instances there either. Once, it looked where it ran last only and
/// let go with the old place's instance running, which nothing would ever
/// terminate.
#[tokio::test]
async fn without_its_database_a_deleted_pool_terminates_in_the_places_it_was_draining_too() {
    let old = warm::Stage::new().await;
    let new = warm::Stage::new().await;
    // Moved to another EC2 (the same database): the old place drains,
    // its busy instance waiting for its run.
    let (mut k8s, client, ctx, there) = moved_leaving_one_busy(&old, &new).await;
    assert_eq!(instances(&old).await, there, "busy: left to its run");

    // Deleted without its database, no drain time-out left.
    ctx.stop_all();
    let ctx = context(client);
    k8s.scheduler = None;
    if let Some(status) = k8s.pool.status.as_mut() {
        status.database_secret = None;
    }
    deleted_past_its_drain(&mut k8s, &ctx).await;
    assert_eq!(
        instances(&old).await,
        Vec::<String>::new(),
        "left running where the pool ran before"
    );
    assert_eq!(instances(&new).await, Vec::<String>::new());
}

/// A pool moved while its loop could not run (its Secret broken: the move
/// never began draining the old place), then deleted without its
/// database: where its status says it ran last is swept too. Once, only
/// the new place was listed, it held nothing, and the finalizer went at
/// once with the old place's instance running.
#[tokio::test]
async fn without_its_database_a_deleted_pool_terminates_where_it_ran_last_too() {
    let old = warm::Stage::new().await;
    let new = warm::Stage::new().await;
    let (mut k8s, ctx) = one_launching(&old).await;

    // The Secret goes (the loop stops), and the pool is moved meanwhile.
    k8s.secret = None;
    reconciled_a_while(&mut k8s, &ctx, 1).await;
    edit(&mut k8s, &ctx, moved_onto(&new)).await;
    assert_eq!(
        condition(&k8s.status(), "Degraded")["reason"],
        "SecretMissing"
    );
    assert_eq!(k8s.status()["retiring"].as_array().map_or(0, Vec::len), 0);

    // Deleted without its database, no drain time-out left.
    deleted_past_its_drain(&mut k8s, &ctx).await;
    assert_eq!(
        instances(&old).await,
        Vec::<String>::new(),
        "left running where the pool ran last"
    );
}

/// The pool deleted with no drain time-out left, reconciled until its
/// finalizer is removed.
async fn deleted_past_its_drain(k8s: &mut Cluster, ctx: &Arc<Context>) {
    k8s.pool.spec.drain_timeout_seconds = 0;
    let gone = k8s.delete();
    k8s.reconcile(ctx, gone).await;
    k8s.until("the finalizer removed", |k| k.deleted).await;
}
