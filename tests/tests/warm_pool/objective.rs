//! A pool sized to a time-to-start objective (`spec.objective`): from its
//! hand-out history in Postgres it keeps the idle instances that would
//! have started its share of runs within the target, within its limits,
//! says what it keeps and what from, and is `Degraded`
//! `ObjectiveUnreachable` naming the limit that keeps it short.

use orca_operator::crd::{Objective, StartTarget};

use super::*;

fn objective(percentile: i32, seconds: i64) -> Option<Objective> {
    Some(Objective {
        time_to_start: StartTarget {
            percentile,
            seconds,
        },
        stopped_cost_ratio: None,
        prices: Default::default(),
    })
}

/// The pool's `Degraded` condition, when True: its reason and message.
fn degraded(status: &WarmPoolStatus) -> Option<(String, String)> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded" && c.status == "True")
        .map(|c| (c.reason.clone(), c.message.clone()))
}

/// Four runs at once in this hour a week ago: no launch made for the
/// first serves the others within 20 s, so the pool keeps four idle.
async fn busy_hour_a_week_ago(db: &orca_db::Db, pool: &str) {
    let week_ago = (Utc::now() - chrono::Duration::days(7)).timestamp();
    let slice = chrono::DateTime::from_timestamp(week_ago - week_ago % 300, 0).unwrap();
    hand_outs_at(db, pool, slice, 4).await;
}

#[tokio::test]
async fn a_pool_with_an_objective_keeps_what_its_busiest_slice_needed_and_says_so() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let pool = "objective/pool";
    let db = pg::connect(&url).await;
    // Before any history: its idle range, and no runs to plan from.
    let mut spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 1, 6, 8);
    spec.objective = objective(95, 20);
    let mut lp = warm::pool_loop(pool, spec.clone(), &url).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    assert_eq!(report.idle_min(), 1);
    let status = report.status().objective.clone().expect("status.objective");
    assert_eq!((status.idle, status.attained_percent), (1, None));
    assert!(status.planned_from.contains("no runs"), "{status:?}");

    // With the busy hour in the history (read again after a new spec).
    busy_hour_a_week_ago(&db, pool).await;
    lp.set_spec(spec.clone()).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    assert_eq!(report.idle_min(), 4);
    assert_eq!(present(&ec2, pool).await.len(), 4);
    let status = report.status().objective.clone().expect("status.objective");
    assert_eq!((status.idle, status.stopped), (4, 0), "{status:?}");
    assert_eq!(status.expected_percent, 100.0);
    assert!(status.planned_from.contains(": 4;"), "{status:?}");
    assert_eq!(degraded(report.status()), None);
    // Four idle for this hour (and the next, planned ahead): the next 24
    // hours hold at least four instance-hours; four runs of four weeks'
    // at once take a static idle.min of 4, 96 instance-hours a day.
    assert!(status.expected_instance_hours >= 4.0, "{status:?}");
    assert!(status.expected_instance_hours < 96.0, "{status:?}");
    let floor = status.static_floor.clone().expect("a static floor");
    assert_eq!((floor.idle, floor.instance_hours), (4, 96.0));
    assert_eq!((floor.cost, status.expected_cost), (None, None));
    // The last day's runs: none yet; then three, one of which waited 90 s
    // for a cold launch.
    assert_eq!((status.day_attained_percent, status.day_runs), (None, 0));
    let two_hours_ago = Utc::now() - chrono::Duration::hours(2);
    hand_outs_at(&db, pool, two_hours_ago, 3).await;
    db.execute(
        "insert into orca.pool_demand (pool, run, start, role, asked, served)
         values ($1, 1000, 1, 'head', $2::timestamptz - interval '90 seconds', $2)",
        &[&pool, &two_hours_ago],
    )
    .await
    .unwrap();
    lp.set_spec(spec.clone()).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    let status = report.status().objective.clone().expect("status.objective");
    assert_eq!(status.day_runs, 3, "{status:?}");
    assert_eq!(status.day_attained_percent, Some(66.7), "{status:?}");

    // With the type's prices, what it holds is in money too.
    let mut priced = spec.clone();
    if let Some(o) = priced.objective.as_mut() {
        let price = orca_operator::crd::TypePrice {
            on_demand: 0.0104,
            spot: None,
            stopped: 0.0016,
        };
        o.prices.insert("t3.micro".into(), price);
    }
    lp.set_spec(priced).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    let status = report.status().objective.clone().expect("status.objective");
    assert_eq!(status.priced_as.as_deref(), Some("t3.micro"));
    let floor = status.static_floor.clone().expect("a static floor");
    assert_eq!(floor.cost, Some(1.0)); // 96 h at 0.0104
    let expected = status.expected_cost.expect("an expected cost");
    assert!(
        (expected - status.expected_instance_hours * 0.0104).abs() < 0.01,
        "{status:?}"
    );

    // A lower share asks for fewer: 75 % of four runs is three.
    spec.objective = objective(75, 20);
    lp.set_spec(spec).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    assert_eq!(report.idle_min(), 3);
}

#[tokio::test]
async fn an_objective_beyond_max_instances_is_degraded_naming_it() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let pool = "objective/capped";
    let db = pg::connect(&url).await;
    busy_hour_a_week_ago(&db, pool).await;
    let mut spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 0, 2, 2);
    spec.objective = objective(95, 20);
    let mut lp = warm::pool_loop(pool, spec, &url).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    // As near as it gets: two idle, within maxInstances.
    assert_eq!(report.idle_min(), 2);
    assert_eq!(present(&ec2, pool).await.len(), 2);
    let (reason, message) = degraded(report.status()).expect("Degraded");
    assert_eq!(reason, "ObjectiveUnreachable");
    assert!(message.contains("maxInstances"), "{message}");
    assert!(message.contains("at most 50.0 %"), "{message}");
}

#[tokio::test]
async fn an_objective_beyond_the_class_s_room_is_degraded_naming_the_limit() {
    use orca_operator::crd::{ClassLimits, WarmPoolClassSpec};
    use orca_operator::warmpool::budget::{Budgets, Census};
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let pool = "objective/classed";
    let db = pg::connect(&url).await;
    busy_hour_a_week_ago(&db, pool).await;
    // maxInstances would allow the four the history asks for; the class
    // leaves the namespace two.
    let mut spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 0, 6, 8);
    spec.objective = objective(95, 20);
    let mut class: WarmPoolClassSpec =
        serde_yaml::from_str("region: r\nlaunch: {runCommand: run}\n").unwrap();
    class.namespace_limits = Some(ClassLimits {
        instances: Some(2),
        vcpus: None,
    });
    let budgets = Arc::new(Budgets::default());
    budgets.set_limits("shared", &class);
    let census = Census::new(Instant::now(), Vec::new());
    budgets.census("shared", census);
    let mut lp = warm::pool_loop(pool, spec, &url).await;
    lp.set_budget(Some(budgets.budget("shared", pool, "objective")));
    let report = lp.pass(Utc::now()).await.unwrap();
    assert_eq!(present(&ec2, pool).await.len(), 2);
    let status = report.status().objective.clone().expect("status.objective");
    assert_eq!(status.idle, 2, "{status:?}");
    let (reason, message) = degraded(report.status()).expect("Degraded");
    assert_eq!(reason, "ObjectiveUnreachable");
    assert!(
        message.contains("the WarmPoolClass's namespaceLimits.instances"),
        "{message}"
    );
    // Once the two run, the room is what they leave: the plan asks for no
    // more than the class allows, and says the same.
    let report = lp.pass(Utc::now()).await.unwrap();
    assert_eq!(present(&ec2, pool).await.len(), 2);
    assert_eq!(
        degraded(report.status()).map(|d| d.0).as_deref(),
        Some("ObjectiveUnreachable")
    );
}

#[tokio::test]
async fn cold_starts_are_measured_on_the_offering_the_next_launch_goes_to() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let pool = "objective/offerings";
    let db = pg::connect(&url).await;
    let mut spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..2], 3, 6, 8);
    spec.objective = objective(95, 60);
    let mut lp = warm::pool_loop(pool, spec, &url).await;
    lp.pass(Utc::now()).await.unwrap();
    let launched = present(&ec2, pool).await;
    assert_eq!(launched.len(), 3);
    // Each handed a run that waited 30 s for it: three cold starts in the
    // first subnet, where the next launch goes too.
    let at = Utc::now() - chrono::Duration::seconds(10);
    for (k, i) in (0i64..).zip(&launched) {
        db.execute(
            "insert into orca.instances (instance, pool, role, idle, polled, ended, ended_by)
             values ($1, $2, 'warm', $3::timestamptz - interval '1 minute', $3, $3, 'handout')",
            &[&i.id(), &pool, &at],
        )
        .await
        .unwrap();
        db.execute(
            "insert into orca.instances (instance, pool, run, start, role, pooled, created)
             values ($1, $2, $3, 1, 'head', true, $4)",
            &[&i.id(), &pool, &(2000 + k), &at],
        )
        .await
        .unwrap();
        db.execute(
            "insert into orca.pool_demand (pool, run, start, role, asked, served)
             values ($1, $2, 1, 'head', $3::timestamptz - interval '30 seconds', $3)",
            &[&pool, &(2000 + k), &at],
        )
        .await
        .unwrap();
    }
    // A listing newer than the launch places them (the one reused for the
    // next half second predates it).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    let status = report.status().objective.clone().expect("status.objective");
    let on = format!("cold 100 % (t3.micro in {})", subnets[0]);
    assert!(status.planned_from.contains(&on), "{status:?}");
}
