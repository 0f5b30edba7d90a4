//! Instances EC2 refuses to act on — termination or stop protection, set
//! on one instance by hand — never hold back the others of the same call,
//! and the refusal is named. Once, one protected instance failed the whole
//! TerminateInstances call every pass, and a refused stop retired every
//! instance stopped with it.

use aws_sdk_ec2::types::AttributeBooleanValue;
use orca_operator::crd::StoppedRange;
use orca_operator::fence::Fence;

use super::*;

/// Sets protection on `id`: from termination, or from a stop.
async fn protect(ec2: &Ec2, id: &str, from_stop: bool, on: bool) {
    let value = AttributeBooleanValue::builder().value(on).build();
    let call = ec2.client().modify_instance_attribute().instance_id(id);
    let call = if from_stop {
        call.disable_api_stop(value)
    } else {
        call.disable_api_termination(value)
    };
    call.send()
        .await
        .unwrap_or_else(|e| panic!("moto's ModifyInstanceAttribute failed: {e}"));
}

#[tokio::test]
async fn a_protected_instance_is_named_and_the_others_terminated_in_the_same_pass() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let pool = "protected/pool";
    let leaked = warm::launch_by_hand(&ec2, pool, &subnets[0], 3, "protected").await;
    let kept = &leaked[1];
    protect(&ec2, kept, false, true).await;
    let spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 0, 0, 5);
    let mut lp = PoolLoop::new(
        "protected",
        "pool",
        spec,
        &url,
        warm::tuning(Duration::ZERO),
        Fence::always(),
    )
    .await
    .unwrap();
    let report = lp.pass(Utc::now()).await.unwrap();
    let mut terminated = report.terminated().to_vec();
    terminated.sort();
    let mut others: Vec<String> = leaked.iter().filter(|i| *i != kept).cloned().collect();
    others.sort();
    assert_eq!(terminated, others, "the unprotected ones went at once");
    assert_eq!(state_of(&ec2, pool, kept).await, Some(Ec2State::Running));
    let failed: Vec<&str> = report
        .events()
        .iter()
        .filter(|e| e.reason() == "TerminateFailed" && e.is_warning())
        .map(|e| e.message())
        .collect();
    assert_eq!(failed.len(), 1, "{:?}", report.events());
    assert!(failed[0].starts_with(kept.as_str()), "{}", failed[0]);

    // Protection lifted: the next pass terminates it.
    protect(&ec2, kept, false, false).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    assert_eq!(report.terminated(), std::slice::from_ref(kept));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reserve_instance_ec2_will_not_stop_is_retired_and_the_other_stopped() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let pool = "nostop/pool";
    let mut spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 0, 0, 4);
    spec.stopped = Some(StoppedRange { min: 2, max: None });
    warm::aws_env();
    let mut lp = warm::pool_loop(pool, spec, &url).await;
    let launched = lp.pass(Utc::now()).await.unwrap().launched().to_vec();
    assert_eq!(launched.len(), 2, "two launched for the reserve");
    let kept = &launched[0];
    protect(&ec2, kept, true, true).await;

    // Both boot (their agents report idle) before the pass that stops
    // them, so they are stopped in one call.
    let hosts = warm::hosts(&moto.endpoint(), &url, pool, "true").await;
    let (_stop_hosts, stopped) = oneshot::channel::<()>();
    tokio::spawn(hosts.run(async move {
        let _ = stopped.await;
    }));
    let db = pg::connect(&url).await;
    eventually_true("both agents report", Duration::from_secs(30), || async {
        idle_fresh(&db, pool).await.len() == 2
    })
    .await;
    let report = lp.pass(Utc::now()).await.unwrap();
    let reasons: Vec<&str> = report.events().iter().map(|e| e.reason()).collect();
    assert_eq!(
        reasons,
        ["Stopped", "StopFailed", "Terminated"],
        "{:?}",
        report.events()
    );
    let failed = &report.events()[1];
    assert!(failed.is_warning());
    assert!(
        failed.message().contains(kept.as_str()) && failed.message().contains("ReserveFailed"),
        "{}",
        failed.message()
    );
    assert_eq!(report.terminated(), std::slice::from_ref(kept));
    let other = &launched[1];
    assert!(
        matches!(
            state_of(&ec2, pool, other).await,
            Some(Ec2State::Stopping | Ec2State::Stopped)
        ),
        "the other one stopped into the reserve"
    );
}

/// A reserve EC2 refuses to start (the operator's role lacks
/// `ec2:StartInstances`, say): a run still gets an instance — the reserve
/// instance is retired (`ReserveFailed`, with a Warning naming it) and one
/// is launched — instead of the run waiting on a reserve that is asked to
/// start again every pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reserve_ec2_will_not_start_is_retired_and_the_run_served_by_a_launch() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let faults = Ec2Faults::start(&moto.endpoint());
    let pool = "nostart/pool";
    let mut spec = warm::spec(&faults.endpoint(), &["t3.micro"], &subnets[..1], 0, 0, 4);
    spec.stopped = Some(StoppedRange { min: 1, max: None });
    let running = start(pool, spec, &url, &faults.endpoint(), "true").await;
    eventually_true(
        "one stopped in the reserve",
        Duration::from_secs(60),
        || async { running.status().stopped == 1 },
    )
    .await;
    let parked: Vec<String> = present(&ec2, pool)
        .await
        .into_iter()
        .filter(|i| i.state() == Ec2State::Stopped)
        .map(|i| i.id().to_string())
        .collect();
    assert_eq!(parked.len(), 1);

    faults.fail(
        "StartInstances",
        &[],
        Fault::error("UnauthorizedOperation"),
        usize::MAX,
    );
    let served_by = hand_out_all(&url, pool, [1]).await;
    assert_ne!(served_by[0].1, parked[0], "served by another instance");
    eventually_true(
        "the parked one retired",
        Duration::from_secs(30),
        || async {
            matches!(
                state_of(&ec2, pool, &parked[0]).await,
                None | Some(Ec2State::ShuttingDown | Ec2State::Terminated)
            )
        },
    )
    .await;
    let events = running.events();
    let failed = events
        .iter()
        .find(|e| e.reason() == "StartFailed")
        .expect("a StartFailed event");
    assert!(failed.is_warning());
    assert!(
        failed.message().contains(&parked[0]) && failed.message().contains("ReserveFailed"),
        "{}",
        failed.message()
    );
    let starts = faults.calls_of("StartInstances").len();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        faults.calls_of("StartInstances").len(),
        starts,
        "not asked to start again"
    );
}

/// A launch whose instance profile does not exist (a class's
/// `orca-pool-{namespace}` never made for this team) is refused by EC2:
/// the pool says which profile and how to make it, and does not ask again
/// until its back-off is over or its spec changes — where it launches.
#[tokio::test]
async fn a_launch_with_a_profile_that_does_not_exist_says_so_and_backs_off() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let mut spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 1, 1, 2);
    spec.launch.iam_instance_profile = Some("orca-pool-team-b".into());
    let mut lp = PoolLoop::new(
        "team-b",
        "pool",
        spec.clone(),
        &url,
        warm::tuning(Duration::ZERO),
        Fence::always(),
    )
    .await
    .unwrap();
    let report = lp.pass(Utc::now()).await.unwrap();
    assert!(report.launched().is_empty());
    let (reason, said) = report
        .degraded()
        .cloned()
        .unwrap_or_else(|| panic!("not Degraded: {:?}", report.events()));
    assert_eq!(reason, "InstanceProfileNotFound");
    assert!(
        said.contains("the instance profile orca-pool-team-b does not exist")
            && said.contains("iam-policy --instance-role --namespace team-b"),
        "{said}"
    );
    // The next passes ask EC2 nothing: the launch waits.
    for _ in 0..3 {
        let report = lp.pass(Utc::now()).await.unwrap();
        assert!(report.launched().is_empty());
        assert_eq!(
            report.degraded().map(|d| d.0),
            Some("InstanceProfileNotFound")
        );
        assert!(
            !report
                .events()
                .iter()
                .any(|e| e.reason() == "InstanceProfileNotFound"),
            "asked again: {:?}",
            report.events()
        );
    }
    // The profile made (here: the spec fixed), it launches at once.
    spec.launch.iam_instance_profile = None;
    lp.set_spec(spec).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    assert_eq!(report.launched().len(), 1, "{:?}", report.events());
    assert_eq!(ec2.describe(lp.ownership()).await.unwrap().len(), 1);
}
