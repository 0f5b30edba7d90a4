//! Launching: a pool launches `idle.min` and shows it in its status and
//! Events, is `Degraded` while its Scheduler is missing, and never lets the
//! database password out.

use super::*;

/// Where a pool runs is in its status before anything is launched there:
/// while its status cannot be written (the operator's RBAC without
/// `warmpools/status`), nothing is launched. An instance launched where no
/// status says the pool runs would be lost to a replica that takes over
/// after the pool moved. Once the status can be written, the place is in
/// the first status written, and the pool launches.
#[tokio::test]
async fn a_pool_launches_nothing_before_its_status_says_where_it_runs() {
    let real = warm::Stage::new().await;
    let wp = warm_pool(spec(&real, &real.moto().endpoint(), 2, 3), 1);
    let (mut k8s, client) =
        Cluster::new(wp.clone(), Some(scheduler()), Some(url_secret(real.url())));
    let ctx = context(client);
    k8s.status_refused = true;

    assert!(k8s.try_reconcile(&ctx, wp).await.is_err());
    for _ in 0..10 {
        k8s.step("passes while the status is refused").await;
    }
    let launched = instances(&real).await;
    assert!(
        launched.is_empty(),
        "launched while no status said where: {launched:?}"
    );

    k8s.status_refused = false;
    k8s.until("a status with 2 launching", |k| {
        k.status()["launching"] == 2
    })
    .await;
    let first = &k8s.statuses[0];
    assert_eq!(first["place"]["region"], warm::REGION, "{first}");
    assert!(first.get("launching").is_none_or(|n| n == 0), "{first}");
    assert_eq!(instances(&real).await.len(), 2);
}

/// A pool with `idle.min = 2`: the reconcile reads the Scheduler, then its
/// Secret; the loop launches two instances tagged as the pool's, says so in
/// an Event and shows them in the status, for the generation it saw.
#[tokio::test]
async fn a_pool_launches_idle_min_and_shows_them_in_its_status_and_events() {
    let real = warm::Stage::new().await;
    let wp = warm_pool(spec(&real, &real.moto().endpoint(), 2, 3), 1);
    let (mut k8s, client) =
        Cluster::new(wp.clone(), Some(scheduler()), Some(url_secret(real.url())));
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
    let mut again = warm_pool(spec(&real, &real.moto().endpoint(), 2, 3), 1);
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
    let wp = warm_pool(spec(&real, &real.moto().endpoint(), 1, 1), 1);
    let (mut k8s, client) = Cluster::new(wp.clone(), None, Some(url_secret(real.url())));
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
        let wp = warm_pool(spec(&real, &real.moto().endpoint(), 1, 1), 1);
        let (k8s, client) = Cluster::new(wp.clone(), Some(scheduler()), Some(url_secret(&url)));
        (k8s, context(client), wp)
    };

    // The test cluster trusts every local connection: a password is
    // accepted (and ignored), so the loop works on this URL.
    let with_password =
        real.url()
            .replacen("postgres://postgres@", "postgres://postgres:hunter2@", 1);
    assert_ne!(with_password, real.url(), "{}", real.url());
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
    // Failing again is not a new transition (in every status written
    // after the first pass; the one before it only says where it runs).
    let since: Vec<&Value> = k8s
        .statuses
        .iter()
        .filter(|s| s.get("conditions").is_some())
        .map(|s| &condition(s, "Degraded")["lastTransitionTime"])
        .collect();
    assert!(since.iter().all(|t| *t == since[0]), "{since:?}");
    k8s.never_sent("hunter2");
    assert_eq!(instances(&real).await.len(), 1, "nothing launched blind");
}
