//! The forecast warm-up: the pool's hand-out history in Postgres raises its
//! idle floor for the hours that were busy, within idle.max.

use orca_operator::crd::Forecast;

use super::*;

#[tokio::test]
async fn a_busy_hour_a_week_ago_raises_the_floor_now_within_idle_max() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let pool = "fc/pool";
    let db = pg::connect(&url).await;
    // Four runs within one five-minute slice (the lead) of this hour last
    // week; and one, hours away, that is no concern of this hour.
    let now = Utc::now();
    let week_ago = (now - chrono::Duration::days(7)).timestamp();
    let slice = chrono::DateTime::from_timestamp(week_ago - week_ago % 300, 0).unwrap();
    hand_outs_at(&db, pool, slice, 4).await;
    hand_outs_at(
        &db,
        pool,
        now - chrono::Duration::days(7) + chrono::Duration::hours(5),
        1,
    )
    .await;
    let mut spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 0, 3, 5);
    spec.forecast = Some(Forecast {
        weeks: 2,
        percentile: 100,
        ..Forecast::default()
    });
    let mut lp = warm::pool_loop(pool, spec.clone(), &url).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    // Four foreseen, idle.max 3: three launched.
    assert_eq!(present(&ec2, pool).await.len(), 3);
    assert_eq!(report.idle_min(), 3);
    let f = report.status().forecast.clone().expect("status.forecast");
    // Weeks count back from now: the runs of a week ago fall in the second,
    // the one five hours later in the first.
    assert_eq!(f.weeks, 2);
    assert_eq!(f.next.len(), 6);
    assert_eq!(f.next[0].idle_min, 3, "{f:?}");
    // Without the forecast the same history keeps idle.min, 0.
    spec.forecast = None;
    lp.set_spec(spec).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    assert_eq!(report.idle_min(), 0);
    assert_eq!(report.status().forecast, None);
    assert_eq!(report.plan().launch_count(), 0);
}
