//! Time to start: how long runs waited for an instance, by where it came
//! from, as the status shows it.

use super::*;

/// One run handed the idle instance at once, one that found none and waited
/// for a cold launch: the status says 0 for the first and, for the second,
/// a wait no longer than the run saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_that_waited_for_a_cold_launch_shows_its_wait_and_an_idle_one_none() {
    let (moto, url, _ec2, subnets) = warm::Stage::new().await.parts();
    let pool = "tts/pool";
    let spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 1, 1, 3);
    let running = start(pool, spec, &url, &moto.endpoint(), "sleep 30").await;
    eventually_true("one idle", Duration::from_secs(60), || async {
        running.status().idle == 1
    })
    .await;
    let mut sched = pg::connect(&url).await;
    // The second run asks before the first takes the only idle instance,
    // so it waits for the launch that replaces it, however fast that is.
    // (Asked after the hand-out, it raced the replacement the idle floor
    // launches at once: one up before the ask is an idle hand-out.)
    let asked = Instant::now();
    let req = request(pool, 2, "");
    ask(&sched, &req).await;
    let first = hand_out(&mut sched, &request(pool, 1, ""), Duration::from_secs(3))
        .await
        .unwrap();
    assert!(first.is_some(), "the idle instance was not handed out");
    let second = loop {
        if let Some(h) = hand_out(&mut sched, &req, Duration::from_secs(3))
            .await
            .unwrap()
        {
            break h;
        }
        ask(&sched, &req).await;
        assert!(
            asked.elapsed() < Duration::from_secs(60),
            "run 2 never handed out"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let seen = asked.elapsed();
    assert_ne!(
        Some(second.instance()),
        first.as_ref().map(|h| h.instance())
    );
    eventually_true(
        "the status shows both runs' time to start",
        Duration::from_secs(10),
        || async {
            running
                .status()
                .time_to_start
                .is_some_and(|t| t.idle.is_some() && t.cold.is_some())
        },
    )
    .await;
    let t = running.status().time_to_start.unwrap();
    assert_eq!(t.window_seconds, 3600);
    let (idle, cold) = (t.idle.unwrap(), t.cold.unwrap());
    assert_eq!((idle.runs, idle.max_millis), (1, 0), "{idle:?}");
    assert_eq!(cold.runs, 1, "{cold:?}");
    // The run waited for a launch (an idle hand-out counts 0), no longer
    // than it saw: the database's wait runs from its ask, after the test's
    // clock started. (How long a launch takes here, moto and a local
    // agent, is a matter of milliseconds: no floor is asserted.)
    assert!(cold.p50_millis > 0, "{cold:?}");
    assert!(
        cold.max_millis <= seen.as_millis() as i64 + 100,
        "{cold:?} > {seen:?}"
    );
    assert_eq!(t.reserve, None);
    let served = running.status().runs_served.unwrap();
    assert_eq!((served.idle, served.cold), (1, 1), "{served:?}");
}
