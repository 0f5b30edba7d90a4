//! Launches: capacity fall-back, throttling, and restarts that neither
//! duplicate a launch nor reuse a batch's token.

use orca_operator::crd::WarmPoolStatus;
use orca_operator::fence::Fence;

use super::*;

#[tokio::test]
async fn capacity_errors_move_launches_to_the_next_type_or_subnet() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let faults = Ec2Faults::start(&moto.endpoint());
    let (s1, s2) = (&subnets[0], &subnets[1]);
    let pool = "ice/pool";
    let db = pg::connect(&url).await;
    for run in 1..=3 {
        ask(&db, &request(pool, run, "")).await;
    }
    faults.fail(
        "RunInstances",
        &["InstanceType=t3.small"],
        Fault::error("InsufficientInstanceCapacity"),
        usize::MAX,
    );
    faults.fail(
        "RunInstances",
        &["InstanceType=t3.medium", &format!("SubnetId={s1}")],
        Fault::error("InsufficientFreeAddressesInSubnet"),
        usize::MAX,
    );
    let spec = warm::spec(
        &faults.endpoint(),
        &["t3.small", "t3.medium"],
        &[s1.clone(), s2.clone()],
        0,
        0,
        10,
    );
    let mut lp = warm::pool_loop("ice/pool", spec, &url).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    let launched = present(&ec2, pool).await;
    assert_eq!(launched.len(), 3, "one instance per unserved demand");
    for i in &launched {
        assert_eq!(
            (i.offering().instance_type(), i.offering().subnet()),
            ("t3.medium", s2.as_str())
        );
    }
    let errors: Vec<(String, String, String)> = report
        .status()
        .capacity_errors
        .iter()
        .map(|c| (c.instance_type.clone(), c.subnet.clone(), c.code.clone()))
        .collect();
    let ice = "InsufficientInstanceCapacity".to_string();
    assert_eq!(
        errors,
        [
            (
                "t3.medium".to_string(),
                s1.clone(),
                "InsufficientFreeAddressesInSubnet".to_string()
            ),
            ("t3.small".to_string(), s1.clone(), ice.clone()),
            ("t3.small".to_string(), s2.clone(), ice),
        ]
    );
    assert_eq!(
        report
            .events()
            .iter()
            .filter(|e| e.reason() == "CapacityUnavailable" && e.is_warning())
            .count(),
        3
    );
    let degraded = report
        .status()
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .unwrap();
    assert_eq!(degraded.status, "True");
    // Nothing is launched again for the same demand, and the offerings
    // without capacity are not tried while they are held.
    let calls = faults.calls_of("RunInstances").len();
    lp.pass(Utc::now()).await.unwrap();
    assert_eq!(faults.calls_of("RunInstances").len(), calls);
    assert_eq!(present(&ec2, pool).await.len(), 3);
}

/// A subnet deleted from under a pool's list (a class's, shared by many
/// pools, not yet mended): EC2 refuses every launch in it. The pool
/// launches in its other subnet, holds the deleted one, says so for as
/// long as it holds it, and asks EC2 no more about it. Once, that one
/// refusal held back every launch of the pool for the launch back-off,
/// doubling to half an hour, and tried the same subnet first again after
/// each.
#[tokio::test]
async fn a_deleted_subnet_is_held_and_the_pool_launches_in_its_other_subnet() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let faults = Ec2Faults::start(&moto.endpoint());
    let pool = "gone-subnet/pool";
    let db = pg::connect(&url).await;
    let gone = "subnet-0000000000000dead".to_string();
    let good = subnets[0].clone();
    for run in 1..=2 {
        ask(&db, &request(pool, run, "")).await;
    }
    let spec = warm::spec(
        &faults.endpoint(),
        &["t3.small"],
        &[gone.clone(), good.clone()],
        0,
        0,
        10,
    );
    let mut lp = warm::pool_loop(pool, spec, &url).await;
    let first = lp.pass(Utc::now()).await.unwrap();
    let launched = present(&ec2, pool).await;
    assert_eq!(launched.len(), 2, "{:?}", first.events());
    assert!(
        launched.iter().all(|i| i.offering().subnet() == good),
        "{launched:?}"
    );
    let degraded = |r: &orca_operator::warmpool::PassReport| {
        let c = r
            .status()
            .conditions
            .iter()
            .find(|c| c.type_ == "Degraded")
            .cloned()
            .unwrap();
        (c.status, c.reason, c.message)
    };
    let (status, reason, message) = degraded(&first);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "SubnetRefused")
    );
    assert!(
        message.contains(&gone) && message.contains("InvalidSubnetID.NotFound"),
        "{message}"
    );
    let held: Vec<(String, String)> = first
        .status()
        .capacity_errors
        .iter()
        .map(|c| (c.subnet.clone(), c.code.clone()))
        .collect();
    assert_eq!(
        held,
        [(gone.clone(), "InvalidSubnetID.NotFound".to_string())]
    );

    // More demand: launched in the good subnet, the deleted one not asked
    // again, and still said.
    ask(&db, &request(pool, 3, "")).await;
    faults.forget_calls();
    let second = lp.pass(Utc::now()).await.unwrap();
    let third = lp.pass(Utc::now()).await.unwrap();
    assert_eq!(present(&ec2, pool).await.len(), 3, "{:?}", second.events());
    let asked: Vec<String> = faults
        .calls_of("RunInstances")
        .iter()
        .map(|c| c.param("SubnetId").unwrap_or_default().to_string())
        .collect();
    assert_eq!(asked, [good.as_str()]);
    for report in [&second, &third] {
        let (status, reason, message) = degraded(report);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("True", "SubnetRefused")
        );
        assert!(message.contains(&gone), "{message}");
    }
}

#[tokio::test]
async fn request_limit_exceeded_backs_off_then_succeeds_with_the_same_token() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let faults = Ec2Faults::start(&moto.endpoint());
    let pool = "throttle/pool";
    let db = pg::connect(&url).await;
    for run in 1..=2 {
        ask(&db, &request(pool, run, "")).await;
    }
    // Seven throttled answers: more than one pass retries (5 calls).
    faults.fail("RunInstances", &[], Fault::error("RequestLimitExceeded"), 7);
    let spec = warm::spec(&faults.endpoint(), &["t3.micro"], &subnets[..1], 0, 0, 10);
    let mut lp = warm::pool_loop("throttle/pool", spec, &url).await;
    let first = lp.pass(Utc::now()).await.unwrap();
    assert!(first.throttled() && first.launched().is_empty());
    assert!(first
        .events()
        .iter()
        .any(|e| e.reason() == "Throttled" && e.is_warning()));
    let second = lp.pass(Utc::now()).await.unwrap();
    assert!(!second.throttled());
    assert_eq!(second.launched().len(), 2);
    assert_eq!(
        present(&ec2, pool).await.len(),
        2,
        "no demand lost, none doubled"
    );
    let calls = faults.calls_of("RunInstances");
    assert_eq!(calls.len(), 8);
    assert!(calls[..7].iter().all(|c| c.fault().is_some()) && calls[7].fault().is_none());
    let token = calls[0].param("ClientToken").unwrap();
    assert!(calls.iter().all(|c| c.param("ClientToken") == Some(token)));
    // Within a pass the waits grow: the k-th is drawn from the upper half
    // of 50 ms · 2^k, so the gap before the next call is at least its
    // lower half. A loaded machine only lengthens a gap (a sleep never
    // ends early), so only the lower bounds are asserted.
    let gaps: Vec<Duration> = calls[..5]
        .windows(2)
        .map(|w| w[1].at() - w[0].at())
        .collect();
    for (k, gap) in gaps.iter().enumerate() {
        let floor = Duration::from_millis(25) * (1 << k);
        assert!(*gap >= floor, "wait {k} was below {floor:?}: {gaps:?}");
    }
}

#[tokio::test]
async fn an_operator_restarted_in_the_middle_of_a_launch_launches_no_duplicates() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let faults = Ec2Faults::start(&moto.endpoint());
    let db = pg::connect(&url).await;

    // EC2 launched, the operator never heard: the next one sees them.
    let pool = "restart/a";
    for run in 1..=2 {
        ask(&db, &request(pool, run, "")).await;
    }
    faults.fail("RunInstances", &[], Fault::DropResponse, 1);
    let spec = warm::spec(&faults.endpoint(), &["t3.micro"], &subnets[..1], 0, 0, 10);
    let mut first = PoolLoop::new(
        "restart",
        "a",
        spec.clone(),
        &url,
        warm::tuning(Duration::from_secs(60)),
        Fence::always(),
    )
    .await
    .unwrap();
    let report = first.pass(Utc::now()).await.unwrap();
    assert!(report.launched().is_empty());
    assert!(report.events().iter().any(|e| e.reason() == "LaunchFailed"));
    drop(first);
    assert_eq!(
        present(&ec2, pool).await.len(),
        2,
        "moto launched the lost call"
    );
    let mut second = warm::pool_loop("restart/a", spec, &url).await;
    let report = second.pass(Utc::now()).await.unwrap();
    assert!(report.launched().is_empty());
    assert_eq!(report.status().launching, 2);
    assert_eq!(present(&ec2, pool).await.len(), 2, "no duplicate instances");
    assert_eq!(faults.calls_of("RunInstances").len(), 1);

    // The call never reached EC2: the restarted operator launches them,
    // once, under a token of its own — a token is never reused across
    // loops, since a status that is behind (a lost write, a backup) would
    // otherwise make a new batch repeat an old one's.
    let pool = "restart/b";
    for run in 1..=2 {
        ask(&db, &request(pool, run, "")).await;
    }
    faults.forget_calls();
    faults.fail("RunInstances", &[], Fault::DropRequest, 1);
    let spec = warm::spec(&faults.endpoint(), &["t3.micro"], &subnets[..1], 0, 0, 10);
    // Both remember the WarmPool's uid and its status (no batch answered
    // yet), as a restarted operator reads them back.
    let remembered = WarmPoolStatus::default();
    let mut third = PoolLoop::new(
        "restart",
        "b",
        spec.clone(),
        &url,
        warm::tuning(Duration::from_secs(60)),
        Fence::always(),
    )
    .await
    .unwrap()
    .remember("uid-b", &remembered);
    assert!(third.pass(Utc::now()).await.unwrap().launched().is_empty());
    drop(third);
    let mut fourth = warm::pool_loop("restart/b", spec, &url)
        .await
        .remember("uid-b", &remembered);
    let report = fourth.pass(Utc::now()).await.unwrap();
    assert_eq!(report.launched().len(), 2);
    assert_eq!(report.status().launch_batches, 1);
    assert_eq!(present(&ec2, pool).await.len(), 2);
    let calls = faults.calls_of("RunInstances");
    assert_eq!(calls.len(), 2);
    assert_ne!(calls[0].param("ClientToken"), calls[1].param("ClientToken"));
}

/// An operator that takes over a pool (restarted, or newly elected) reads
/// back what the last one knew from the status: the offerings held for
/// want of capacity, the conditions' transition times, and how many launch
/// batches EC2 answered — so its first batch does not repeat a token.
#[tokio::test]
async fn a_restarted_operator_keeps_capacity_holds_transition_times_and_tokens() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let faults = Ec2Faults::start(&moto.endpoint());
    let pool = "memory/pool";
    let db = pg::connect(&url).await;
    let spec = small_refused(&faults, &subnets, "InsufficientInstanceCapacity", 0, 0);
    let new_loop = || async {
        PoolLoop::new(
            "memory",
            "pool",
            spec.clone(),
            &url,
            warm::tuning(Duration::from_secs(60)),
            Fence::always(),
        )
        .await
        .unwrap()
    };
    ask(&db, &request(pool, 1, "")).await;
    let mut first = new_loop()
        .await
        .remember("uid-m", &WarmPoolStatus::default());
    let before = first.pass(Utc::now()).await.unwrap().status().clone();
    drop(first);
    assert_eq!(before.capacity_errors.len(), 1, "{before:?}");
    assert_eq!(
        before.launch_batches, 2,
        "t3.small refused, t3.medium launched"
    );
    let progressing = |s: &WarmPoolStatus| {
        let c = s.conditions.iter().find(|c| c.type_ == "Progressing");
        c.map(|c| (c.status.clone(), c.last_transition_time.clone()))
    };

    // A second later (transition times are in seconds), another run waits.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    ask(&db, &request(pool, 2, "")).await;
    let mut second = new_loop().await.remember("uid-m", &before);
    let after = second.pass(Utc::now()).await.unwrap().status().clone();
    assert_eq!(present(&ec2, pool).await.len(), 2);
    assert_eq!(
        after.capacity_errors, before.capacity_errors,
        "the hold held"
    );
    assert_eq!(progressing(&after), progressing(&before));
    assert_eq!(after.launch_batches, 3);
    let calls = faults.calls_of("RunInstances");
    let types: Vec<_> = calls.iter().map(|c| c.param("InstanceType")).collect();
    assert_eq!(
        types,
        [Some("t3.small"), Some("t3.medium"), Some("t3.medium")],
        "the held t3.small was not tried again"
    );
    let tokens: HashSet<_> = calls.iter().map(|c| c.param("ClientToken")).collect();
    assert_eq!(tokens.len(), 3, "three batches, three tokens: {calls:#?}");
}

/// A quota error (`InstanceLimitExceeded`: the account's instances of that
/// type are used up) is held like a capacity error, shown in the status,
/// and the next type is launched; held, it is not asked again each pass.
/// Once, every pass asked for it again.
#[tokio::test]
async fn a_quota_error_is_held_and_the_next_type_launched() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let faults = Ec2Faults::start(&moto.endpoint());
    let pool = "quota/pool";
    let spec = small_refused(&faults, &subnets, "InstanceLimitExceeded", 1, 1);
    let mut lp = warm::pool_loop("quota/pool", spec, &url).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    let launched = present(&ec2, pool).await;
    assert_eq!(launched.len(), 1);
    assert_eq!(launched[0].offering().instance_type(), "t3.medium");
    assert!(
        report
            .status()
            .capacity_errors
            .iter()
            .any(|c| c.instance_type == "t3.small" && c.code == "InstanceLimitExceeded"),
        "{:?}",
        report.status().capacity_errors
    );
    let small = |calls: &[orca_tests::ec2_faults::Call]| {
        calls
            .iter()
            .filter(|c| c.param("InstanceType") == Some("t3.small"))
            .count()
    };
    let asked = small(&faults.calls_of("RunInstances"));
    // Its instance gone, the pool launches again: not in the held type.
    lp.pass(Utc::now()).await.unwrap();
    ec2.terminate(&[launched[0].id().to_string()])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    lp.pass(Utc::now()).await.unwrap();
    assert_eq!(
        small(&faults.calls_of("RunInstances")),
        asked,
        "held: not asked again"
    );
}

/// A class with a vCPU limit whose census counts a type no pool of it
/// lists any more (taken out of the class, an orphaned pool's): the pool
/// asks EC2 about that type too, and launches. Once, a pool described its
/// own types only, and after a new leader's first census (which knows no
/// vCPUs) every pool of the class was held ("the vCPUs of m5.large are not
/// known yet") for as long as such an instance ran.
#[tokio::test]
async fn a_type_only_the_class_census_counts_is_described_and_the_pool_launches() {
    use orca_operator::crd::{ClassLimits, WarmPoolClassSpec};
    use orca_operator::warmpool::budget::{Budgets, Census, Counted};
    let (moto, url, _, subnets) = warm::Stage::new().await.parts();
    let pool = "classed/vcpus";
    let spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 1, 1, 4);
    let mut class: WarmPoolClassSpec =
        serde_yaml::from_str("region: r\nlaunch: {runCommand: run}\n").unwrap();
    class.limits = Some(ClassLimits {
        instances: None,
        vcpus: Some(100),
    });
    let budgets = Arc::new(Budgets::default());
    budgets.set_limits("shared", &class);
    budgets.census(
        "shared",
        Census::new(
            Instant::now(),
            vec![Counted::new(
                "i-0123456789abcdef0".into(),
                "other".into(),
                "m5.large".into(),
            )],
        ),
    );
    let mut lp = warm::pool_loop(pool, spec, &url).await;
    lp.set_budget(Some(budgets.budget("shared", pool, "classed")));
    let report = lp.pass(Utc::now()).await.unwrap();
    assert_eq!(report.launched().len(), 1, "events: {:?}", report.events());
    assert!(budgets.unknown_vcpus(&["m5.large".into()]).is_empty());
}

/// A vCPU quota error is the account's, for every type of that quota
/// class: the pool holds them all at once (in every subnet) and launches
/// the next class, rather than asking each held offering in turn. Once, it
/// asked all four standard offerings before the one that could launch.
#[tokio::test]
async fn a_vcpu_quota_error_holds_its_whole_class() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let faults = Ec2Faults::start(&moto.endpoint());
    let pool = "vcpu/pool";
    for t in ["t3.small", "m5.large"] {
        faults.fail(
            "RunInstances",
            &[&format!("InstanceType={t}")],
            Fault::error("VcpuLimitExceeded"),
            usize::MAX,
        );
    }
    let spec = warm::spec(
        &faults.endpoint(),
        &["t3.small", "m5.large", "g4dn.xlarge"],
        &subnets[..2],
        1,
        1,
        10,
    );
    let mut lp = warm::pool_loop("vcpu/pool", spec, &url).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    let launched = present(&ec2, pool).await;
    assert_eq!(launched.len(), 1);
    assert_eq!(launched[0].offering().instance_type(), "g4dn.xlarge");
    let types: Vec<_> = faults
        .calls_of("RunInstances")
        .iter()
        .map(|c| c.param("InstanceType").map(String::from))
        .collect();
    assert_eq!(
        types,
        [
            Some("t3.small".to_string()),
            Some("g4dn.xlarge".to_string())
        ],
        "one refusal, then the next class"
    );
    let mut held: Vec<(&str, &str)> = report
        .status()
        .capacity_errors
        .iter()
        .map(|c| (c.instance_type.as_str(), c.code.as_str()))
        .collect();
    held.sort();
    assert_eq!(
        held,
        [
            ("m5.large", "VcpuLimitExceeded"),
            ("m5.large", "VcpuLimitExceeded"),
            ("t3.small", "VcpuLimitExceeded"),
            ("t3.small", "VcpuLimitExceeded"),
        ],
        "both standard types held in both subnets"
    );
}

/// A pool of t3.small, then t3.medium, on the first of `subnets`, behind
/// `faults`, which refuse every t3.small launch with `code`.
fn small_refused(
    faults: &Ec2Faults,
    subnets: &[String],
    code: &str,
    min: i32,
    max: i32,
) -> orca_operator::crd::WarmPoolSpec {
    faults.fail(
        "RunInstances",
        &["InstanceType=t3.small"],
        Fault::error(code),
        usize::MAX,
    );
    warm::spec(
        &faults.endpoint(),
        &["t3.small", "t3.medium"],
        &subnets[..1],
        min,
        max,
        10,
    )
}

/// The agent is built for x86_64: an instance type that runs only arm64
/// would boot no agent and end as a boot time-out, billed meanwhile. EC2's
/// DescribeInstanceTypes says which; such a type is never launched and the
/// pool says so in its `Degraded` condition, naming it.
#[tokio::test]
async fn an_instance_type_of_another_architecture_is_refused_naming_it() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let faults = Ec2Faults::start(&moto.endpoint());
    let pool = "arch/pool";
    let degraded = |status: &WarmPoolStatus| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == "Degraded")
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
            .unwrap()
    };

    // Only arm64 types: nothing is launched at all.
    let spec = warm::spec(&faults.endpoint(), &["m6g.large"], &subnets, 2, 2, 4);
    let mut lp = warm::pool_loop(pool, spec, &url).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    assert!(
        present(&ec2, pool).await.is_empty(),
        "an arm64 instance was launched"
    );
    assert!(faults.calls_of("RunInstances").is_empty());
    let (status, reason, message) = degraded(report.status());
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "UnsupportedArchitecture")
    );
    assert!(
        message.contains("m6g.large (arm64)") && message.contains("nothing is launched"),
        "{message}"
    );
    assert!(report
        .status()
        .capacity_errors
        .iter()
        .all(|c| c.instance_type == "m6g.large" && c.code == "UnsupportedArchitecture"));

    // With an x86_64 type beside it, that one is launched, the other not.
    let spec = warm::spec(
        &faults.endpoint(),
        &["m6g.large", "t3.small"],
        &subnets,
        2,
        2,
        4,
    );
    lp.set_spec(spec).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    let launched = present(&ec2, pool).await;
    assert_eq!(launched.len(), 2, "the idle floor, of the x86_64 type");
    assert!(launched
        .iter()
        .all(|i| i.offering().instance_type() == "t3.small"));
    let (_, reason, message) = degraded(report.status());
    assert_eq!(reason, "UnsupportedArchitecture");
    assert!(
        message.contains("only the other types are launched"),
        "{message}"
    );

    // Listed no more: nothing held, nothing said.
    let spec = warm::spec(&faults.endpoint(), &["t3.small"], &subnets, 2, 2, 4);
    lp.set_spec(spec).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    assert!(report.status().capacity_errors.is_empty());
    assert_eq!(degraded(report.status()).1, "AsExpected");
}
