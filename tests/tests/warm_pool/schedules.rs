//! Schedules: a period under way replaces the idle range, its end restores
//! it, and one that cannot be read is said and changes nothing.

use chrono::{DurationRound, Timelike};
use orca_operator::crd::{IdleRange, IdleSchedule, Period};
use orca_operator::fence::Fence;

use super::*;

fn schedule(cron: String, timezone: &str, min: i32) -> IdleSchedule {
    IdleSchedule {
        period: Period {
            cron,
            timezone: timezone.into(),
            duration: "10m".into(),
        },
        idle: IdleRange { min, max: min },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_under_way_sets_the_idle_range_and_its_end_restores_it() {
    let (moto, url, _ec2, subnets) = warm::Stage::new().await.parts();
    let pool = "sched/pool";
    // A period from the next whole minute, for ten minutes; the passes are
    // told the time.
    let real = Utc::now();
    let start =
        real.duration_trunc(chrono::Duration::minutes(1)).unwrap() + chrono::Duration::minutes(1);
    let mut spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 0, 0, 3);
    let cron = format!("{} {} * * *", start.minute(), start.hour());
    spec.schedules = vec![schedule(cron, "UTC", 2)];
    warm::aws_env();
    let tuning = warm::tuning(Duration::from_secs(600));
    let mut lp = PoolLoop::new("sched", "pool", spec, &url, tuning, Fence::always())
        .await
        .unwrap();
    let db = pg::connect(&url).await;

    let before = lp.pass(real).await.unwrap();
    assert_eq!(before.launched().len(), 0, "{before:?}");
    assert_eq!(before.status().active_schedule, None);

    let during = lp
        .pass(start + chrono::Duration::seconds(30))
        .await
        .unwrap();
    assert_eq!(during.launched().len(), 2, "{during:?}");
    let active = during.status().active_schedule.clone().unwrap_or_default();
    assert!(
        active.starts_with("schedules[0]") && active.contains("idle 2..2"),
        "status.activeSchedule: {active:?}"
    );

    // The agents report idle; the period ends: back to idle.max 0.
    for id in during.launched() {
        report_idle(&db, pool, id).await;
    }
    let after = lp
        .pass(start + chrono::Duration::minutes(11))
        .await
        .unwrap();
    assert_eq!(after.status().active_schedule, None);
    let (mut gone, mut launched) = (after.terminated().to_vec(), during.launched().to_vec());
    gone.sort();
    launched.sort();
    assert_eq!(gone, launched, "{after:?}");
    assert!(after
        .events()
        .iter()
        .any(|e| e.reason() == "Terminated" && e.message().contains("IdleBeyondMax")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_that_cannot_be_read_is_named_and_spec_idle_holds() {
    let (moto, url, _ec2, subnets) = warm::Stage::new().await.parts();
    let mut spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 1, 1, 3);
    spec.schedules = vec![schedule("* * * * *".into(), "Mars/Olympus", 3)];
    warm::aws_env();
    let tuning = warm::tuning(Duration::from_secs(600));
    let mut lp = PoolLoop::new("badsched", "pool", spec, &url, tuning, Fence::always())
        .await
        .unwrap();
    let pass = lp.pass(Utc::now()).await.unwrap();
    assert_eq!(
        pass.launched().len(),
        1,
        "spec.idle.min, not the schedule's"
    );
    let degraded = pass
        .status()
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .expect("a Degraded condition");
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "InvalidSchedule")
    );
    assert!(
        degraded.message.starts_with("spec.schedules[0].timezone:"),
        "{}",
        degraded.message
    );
}
