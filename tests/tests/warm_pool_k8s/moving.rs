//! A pool that moves — its `endpoint` (or region, or Scheduler) changed —
//! launches in the new place and drains the old one: what it launched
//! there is terminated, never left running out of its view. Once, the old
//! instances vanished from the listing: never counted, never terminated.

use super::*;

/// The pool's instances in `stage`'s EC2 that are not going away.
async fn left_in(stage: &warm::Stage) -> Vec<String> {
    instances(stage).await
}

/// How many former places `status.retiring` names.
fn retiring(k: &Cluster) -> usize {
    k.status()["retiring"].as_array().map_or(0, Vec::len)
}

/// Reconciles, a second at a time for at most 20, until `status.retiring`
/// is empty.
async fn until_no_former_place(k8s: &mut Cluster, ctx: &Arc<Context>) {
    for _ in 0..20 {
        reconciled_a_while(k8s, ctx, 1).await;
        if retiring(k8s) == 0 {
            break;
        }
    }
}

/// Where the pool runs, as its status says.
fn place_of(k8s: &Cluster) -> FormerPlace {
    let status = k8s.pool.status.as_ref().expect("a status");
    status.place.clone().expect("status.place")
}

/// `old` in `status.retiring` again, left when the pool began where it
/// runs now: what an operator that drained the old place wrote (this one,
/// its listing of the new place failing at the move, or the one before).
fn retiring_again(k8s: &mut Cluster, mut old: FormerPlace) {
    let status = k8s.pool.status.as_mut().expect("a status");
    old.since = status.place.as_ref().expect("status.place").since.clone();
    status.retiring = vec![old];
}

/// The same moto by another name.
fn alias_of(stage: &warm::Stage) -> String {
    stage.moto().endpoint().replace("127.0.0.1", "localhost")
}

/// `alias`, another endpoint of the same EC2 as where the pool runs in
/// `k8s`: the pool moves there with its one instance busy, and launches a warm one
/// beside it. Where the pool ran before, as its status said.
async fn moved_to_an_alias(
    stage: &warm::Stage,
    k8s: &mut Cluster,
    ctx: &Arc<Context>,
    alias: &str,
) -> (Vec<String>, FormerPlace) {
    let first = left_in(stage).await;
    assert_eq!(first.len(), 1);
    busy(stage, &first[0]).await;
    let before = place_of(k8s);
    // The same moto, by another name: the busy one is listed by both
    // places, and the new one launches a warm one beside it.
    edit(k8s, ctx, spec(stage, alias, 1, 1)).await;
    k8s.until("the move seen", |k| retiring_after_edit(k).is_some())
        .await;
    for _ in 0..40 {
        if left_in(stage).await.len() == 2 {
            break;
        }
        reconciled_a_while(k8s, ctx, 1).await;
    }
    let running = left_in(stage).await;
    assert_eq!(running.len(), 2, "a warm one beside the busy one");
    (running, before)
}

#[tokio::test]
async fn a_changed_endpoint_drains_the_old_place_and_leaves_nothing_there() {
    let old = warm::Stage::new().await;
    let new = warm::Stage::new().await;
    let (mut k8s, ctx) = one_launching(&old).await;
    let there = left_in(&old).await;
    // Its agent reports: an idle warm row.
    let db = orca_tests::pg::connect(old.url()).await;
    db.execute(
        "insert into orca.instances (instance, pool, role, idle, polled)
         values ($1, $2, 'warm', now(), now())",
        &[&there[0], &format!("{NS}/{POOL}")],
    )
    .await
    .unwrap();

    // Moved to another EC2 endpoint (the same database).
    edit(&mut k8s, &ctx, moved_onto(&new)).await;
    k8s.until("one launching in the new place, the old one drained", |k| {
        retiring_after_edit(k) == Some(0)
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

/// Only the Scheduler's database changes (its Secret); the EC2 place stays.
/// That is no move: the new loop takes the instance there over, and nothing
/// is terminated and launched again pass after pass. Once, a loop of the
/// old database drained the same place — whose listing is the new loop's
/// too — and terminated what the new loop launched, every pass.
#[tokio::test]
async fn another_database_alone_is_no_move_and_nothing_fights() {
    let stage = warm::Stage::new().await;
    let (mut k8s, ctx) = one_launching(&stage).await;
    let first = instances(&stage).await;

    let other = orca_tests::pg::Cluster::shared().migrated_db().await;
    k8s.secret = Some(url_secret(&other));
    reconciled_a_while(&mut k8s, &ctx, 6).await;
    assert_eq!(
        instances(&stage).await,
        first,
        "the instance there is taken over, not terminated; events: {:#?}",
        k8s.events
    );
    assert!(
        k8s.events_of("Terminated").is_empty(),
        "nothing terminated: {:#?}",
        k8s.events
    );
    assert!(
        k8s.status()["retiring"]
            .as_array()
            .is_none_or(|r| r.is_empty()),
        "no former place: {}",
        k8s.status()
    );
}

/// Another endpoint of the same EC2 (the region's interface endpoint
/// rather than its public one, say): a move as the spec reads, but both
/// places list the same instances. The loop left at the old place drains
/// what was launched there before the move and leaves alone what the new
/// loop launches; it goes, and the pool keeps its instance. Once, it
/// terminated each instance the new loop launched, pass after pass, and
/// the runs on them, for as long as the pool lived.
#[tokio::test]
async fn another_endpoint_of_the_same_ec2_settles_and_nothing_fights() {
    let stage = warm::Stage::new().await;
    let (mut k8s, ctx) = one_launching(&stage).await;

    // The same moto, by another name.
    let alias = stage.moto().endpoint().replace("127.0.0.1", "localhost");
    edit(&mut k8s, &ctx, spec(&stage, &alias, 1, 1)).await;
    k8s.until("the old place drained and gone", |k| {
        retiring_after_edit(k) == Some(0)
    })
    .await;
    let kept = instances(&stage).await;
    assert_eq!(kept.len(), 1, "the pool's one instance");
    reconciled_a_while(&mut k8s, &ctx, 8).await;
    assert_eq!(
        instances(&stage).await,
        kept,
        "the new loop's instance stays; events: {:#?}",
        k8s.events
    );
    let launched: usize = k8s
        .events_of("Launched")
        .iter()
        .map(|e| e["note"].as_str().unwrap_or_default().matches("i-").count())
        .sum();
    assert!(
        launched <= 2,
        "one launch before the move, at most one after: {launched}; events: {:#?}",
        k8s.events
    );
}

/// A former place whose database a new operator cannot have (its Secret
/// deleted while the pool drained there; a new leader's read of it that
/// failed) stays in `status.retiring` and is said, its busy instance left
/// to its run; once the drain time-out since the move is past, EC2 alone
/// terminates it there, and the place goes when EC2 lists none. Once, the
/// first status the new operator wrote dropped the place: the instance
/// ran on with nothing left to terminate it, the pool's deletion included.
#[tokio::test]
async fn a_former_place_without_its_database_is_kept_until_ec2_lists_none_there() {
    let old = warm::Stage::new().await;
    let new = warm::Stage::new().await;
    let (mut k8s, client, ctx, there) = moved_leaving_one_busy(&old, &new).await;

    // The operator restarts, and the old place's Secret is gone.
    ctx.stop_all();
    let ctx = context(client);
    if let Some(status) = k8s.pool.status.as_mut() {
        status.retiring[0].database_secret.name = "orca-db-deleted".into();
    }
    reconciled_a_while(&mut k8s, &ctx, 3).await;
    assert_eq!(retiring(&k8s), 1, "kept: {}", k8s.status());
    assert_eq!(left_in(&old).await, there, "busy: left to its run for now");
    let said = k8s.events_of("FormerPlaceUnreached");
    assert!(
        said.iter().any(|e| e["note"]
            .as_str()
            .unwrap_or_default()
            .contains("orca-db-deleted")),
        "{said:?}"
    );

    // The drain time-out is past: EC2 alone terminates it, and the place
    // goes once EC2 lists none there.
    k8s.pool.spec.drain_timeout_seconds = 0;
    for _ in 0..20 {
        reconciled_a_while(&mut k8s, &ctx, 1).await;
        if left_in(&old).await.is_empty() && retiring(&k8s) == 0 {
            break;
        }
    }
    assert_eq!(left_in(&old).await, Vec::<String>::new());
    assert_eq!(retiring(&k8s), 0, "{}", k8s.status());
    assert!(!k8s.events_of("Terminated").is_empty());
}

/// A former place without its database on the same EC2 as the place the
/// pool runs in now (another endpoint of its region): both list the same
/// instances, and what the pool's place lists is its loop's to keep or
/// end. Once, past the drain time-out, EC2 alone terminated every one of
/// them, busy or not, pass after pass: the pool launched, and lost what
/// it launched, for as long as the place stayed unreached.
#[tokio::test]
async fn a_former_place_without_its_database_terminates_nothing_the_pool_runs_now() {
    let stage = warm::Stage::new().await;
    let (mut k8s, client, ctx) = one_launching_on(&stage).await;
    let (running, mut before) = moved_to_an_alias(&stage, &mut k8s, &ctx, &alias_of(&stage)).await;

    // The operator restarts, the old place still to drain and its Secret
    // gone, and the drain time-out is past.
    ctx.stop_all();
    let ctx = context(client);
    before.database_secret.name = "orca-db-deleted".into();
    retiring_again(&mut k8s, before);
    k8s.pool.spec.drain_timeout_seconds = 0;
    until_no_former_place(&mut k8s, &ctx).await;
    assert_eq!(
        retiring(&k8s),
        0,
        "nothing of its own left there: {}",
        k8s.status()
    );
    reconciled_a_while(&mut k8s, &ctx, 4).await;
    assert_eq!(
        left_in(&stage).await,
        running,
        "what the pool runs now stays; events: {:#?}",
        k8s.events
    );
}

/// Another endpoint of the same EC2, and an operator restarts soon after
/// the move with the old place still to drain (its status written by an
/// earlier operator): the new loop knows nothing of what the pool
/// launched before the restart, and the old place's loop lists it too,
/// launched within the two minutes its launch times are given for the
/// clocks. What the pool's place lists is the pool's loop's: the old
/// place's loop leaves it, and goes. Once, it took the pool's new
/// instance for its own and terminated it.
#[tokio::test]
async fn a_restart_soon_after_a_move_terminates_nothing_the_pool_launched_since() {
    let stage = warm::Stage::new().await;
    let (mut k8s, client, ctx) = one_launching_on(&stage).await;
    let (running, before) = moved_to_an_alias(&stage, &mut k8s, &ctx, &alias_of(&stage)).await;

    // The operator restarts, the old place still to drain, its database
    // there.
    ctx.stop_all();
    let ctx = context(client);
    retiring_again(&mut k8s, before);
    reconciled_a_while(&mut k8s, &ctx, 4).await;
    assert_eq!(
        left_in(&stage).await,
        running,
        "what the pool launched since the move stays, and the busy one runs on; events: {:#?}",
        k8s.events
    );
}

/// Another endpoint of the same EC2 that cannot be listed when an
/// operator restarts with the old place still to drain (EC2 throttles
/// it): what the pool has there is not known, and the old place's loop
/// waits until it is. Once, it took everything the old place listed for
/// its own, the pool's warm instance included, and terminated it.
#[tokio::test]
async fn a_former_place_waits_while_the_pools_place_cannot_be_listed() {
    let stage = warm::Stage::new().await;
    let faults = Ec2Faults::start(&stage.moto().endpoint());
    let (mut k8s, client, ctx) = one_launching_on(&stage).await;
    let (running, before) = moved_to_an_alias(&stage, &mut k8s, &ctx, &faults.endpoint()).await;

    // The operator restarts, the old place still to drain, and the pool's
    // place answers no listing.
    ctx.stop_all();
    let ctx = context(client);
    retiring_again(&mut k8s, before);
    faults.fail(
        "DescribeInstances",
        &[],
        Fault::error("RequestLimitExceeded"),
        usize::MAX,
    );
    reconciled_a_while(&mut k8s, &ctx, 4).await;
    assert_eq!(
        left_in(&stage).await,
        running,
        "nothing terminated while the pool's place cannot be listed; events: {:#?}",
        k8s.events
    );
    assert!(
        k8s.events_of("FormerPlaceWaiting").iter().any(|e| e["note"]
            .as_str()
            .unwrap_or_default()
            .contains("where the pool ran before")),
        "the waiting place says so; events: {:#?}",
        k8s.events
    );

    // Listed again: the old place's loop leaves what the pool has, and goes.
    faults.heal();
    until_no_former_place(&mut k8s, &ctx).await;
    assert_eq!(retiring(&k8s), 0, "{}", k8s.status());
    assert_eq!(left_in(&stage).await, running, "events: {:#?}", k8s.events);
}

/// A pass that finds the pool Degraded (its Scheduler gone, say) on a copy
/// of the WarmPool older than the status this operator last wrote (the
/// watch had not brought the write back yet) writes the places it knows,
/// not the copy's. Once, it wrote the copy's back whole: the place the
/// pool had just left went from `status.retiring`, and with the loop
/// forgotten, nothing was left to terminate its instances there.
#[tokio::test]
async fn a_degraded_pass_on_an_older_copy_keeps_the_places_last_written() {
    let old = warm::Stage::new().await;
    let new = warm::Stage::new().await;
    let (mut k8s, ctx) = one_launching(&old).await;
    let there = left_in(&old).await;
    busy(&old, &there[0]).await;
    k8s.pool.spec = moved_onto(&new);
    k8s.pool.metadata.generation = Some(2);
    // The copy a watch still held when the move's status was written.
    let older = k8s.pool.clone();
    k8s.reconcile(&ctx, older.clone()).await;
    k8s.until("the old place draining", |k| {
        retiring_after_edit(k) == Some(1)
    })
    .await;

    k8s.scheduler = None;
    k8s.reconcile(&ctx, older).await;
    let last = k8s.statuses.last().cloned().unwrap_or_default();
    assert_eq!(
        condition(&last, "Degraded")["reason"],
        "SchedulerMissing",
        "{last}"
    );
    assert_eq!(
        last["retiring"].as_array().map_or(0, Vec::len),
        1,
        "the place left still draining: {last}"
    );
    assert_eq!(left_in(&old).await, there, "busy: left to its run");
}

/// A WarmPool deleted (its instances orphaned) and made again under the
/// same name is another object: the places the first one ran and drained
/// are not the second's, which starts where its spec says.
#[tokio::test]
async fn a_pool_made_again_under_its_name_does_not_take_the_places_of_the_first() {
    let old = warm::Stage::new().await;
    let new = warm::Stage::new().await;
    let (mut k8s, _, ctx, _) = moved_leaving_one_busy(&old, &new).await;

    // Another object of the same name, not yet given a status, where the
    // first one runs now.
    let mut again = warm_pool(moved_onto(&new), 1);
    again.metadata.uid = Some("warmpool-uid-2".into());
    k8s.pool = again.clone();
    k8s.reconcile(&ctx, again).await;
    let written = k8s.statuses.last().cloned().unwrap_or_default();
    assert!(
        written["retiring"].as_array().is_none_or(|r| r.is_empty()),
        "the first pool's former place is not the second's: {written}"
    );
}
