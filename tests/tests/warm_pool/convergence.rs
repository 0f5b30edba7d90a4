//! A pool converges when its spec changes under it: instances of an
//! out-of-date launch spec are replaced, never dropping the pool below
//! `idle.min` for it. Once, a pool whose AMI changed kept its old instances
//! warm and serving until they idled out — and a stopped reserve never did.

use super::*;
use orca_operator::fence::Fence;

/// The pool's present instances and the image each was launched from.
async fn images(ec2: &Ec2, pool: &str) -> Vec<(String, Option<String>)> {
    present(ec2, pool)
        .await
        .into_iter()
        .map(|i| (i.id().to_string(), i.image().map(str::to_string)))
        .collect()
}

/// The loop of `pool` (`namespace/name`) with `spec`, agents on local
/// hosts answering for its instances, passes made until `idle` are idle;
/// the loop, the database, and what keeps the hosts running.
async fn warmed_up(
    moto: &orca_tests::moto::Moto,
    url: &str,
    pool: &str,
    spec: orca_operator::crd::WarmPoolSpec,
    idle: usize,
) -> (PoolLoop, orca_db::Db, oneshot::Sender<()>) {
    warm::aws_env();
    let (ns, name) = pool.split_once('/').expect("namespace/name");
    let mut lp = PoolLoop::new(
        ns,
        name,
        spec,
        url,
        warm::tuning(Duration::from_secs(60)),
        Fence::always(),
    )
    .await
    .unwrap();
    let hosts = warm::hosts(&moto.endpoint(), url, pool, "true").await;
    let (stop_hosts, stopped) = oneshot::channel::<()>();
    tokio::spawn(hosts.run(async move {
        let _ = stopped.await;
    }));
    let db = pg::connect(url).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while idle_fresh(&db, pool).await.len() < idle {
        assert!(Instant::now() < deadline, "never {idle} idle");
        lp.pass(Utc::now()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    (lp, db, stop_hosts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ami_change_replaces_every_instance_one_at_a_time_never_below_idle_min() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let pool = "drift/pool";
    let spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 3, 3, 8);
    let (mut lp, db, _stop_hosts) = warmed_up(&moto, &url, pool, spec.clone(), 3).await;
    let old: HashSet<String> = present(&ec2, pool)
        .await
        .into_iter()
        .map(|i| i.id().to_string())
        .collect();
    assert_eq!(old.len(), 3);

    // Patch day: a new AMI.
    let new_image = warm::ANOTHER_IMAGE.to_string();
    let mut patched = spec.clone();
    patched.launch.image_id = Some(new_image.clone());
    lp.set_spec(patched).await;
    let mut events = Vec::new();
    let mut lowest_idle = usize::MAX;
    let mut most_launching = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let report = lp.pass(Utc::now()).await.unwrap();
        events.extend(report.events().to_vec());
        most_launching = most_launching.max(report.status().launching);
        lowest_idle = lowest_idle.min(idle_fresh(&db, pool).await.len());
        let now = images(&ec2, pool).await;
        let done = now.len() == 3
            && now
                .iter()
                .all(|(_, image)| image.as_deref() == Some(new_image.as_str()))
            && report.status().drifted == 0;
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "old instances left after 2 minutes: {now:?}, {:?}",
            report.status()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(
        lowest_idle >= 3,
        "the pool dropped to {lowest_idle} idle of 3"
    );
    assert!(
        most_launching <= 1,
        "more than maxDrifted (1) replaced at a time: {most_launching}"
    );
    let drifted: Vec<&PoolEvent> = events.iter().filter(|e| e.reason() == "Drifted").collect();
    assert_eq!(drifted.len(), 1, "{events:#?}");
    assert!(
        drifted[0].message().contains(warm::IMAGE) && drifted[0].message().contains(&new_image),
        "{}",
        drifted[0].message()
    );
    // Each old instance was retired as drifted, and is gone (the loop
    // ended with three present, all of the new image). One whose
    // TerminateInstances moto answered with an error after it had begun
    // to terminate it (`InvalidAttachment.NotFound`, seen under load when
    // the SDK retried a slow call) is named by a `TerminateFailed` and
    // gone by the next listing: the pass tried to retire it, and it went.
    let retired: Vec<&PoolEvent> = events
        .iter()
        .filter(|e| {
            (e.reason() == "Terminated" && e.message().contains("Drifted"))
                || e.reason() == "TerminateFailed"
        })
        .collect();
    for id in &old {
        assert!(
            retired.iter().any(|e| e.message().contains(id.as_str())),
            "{id} not retired as Drifted: {events:#?}"
        );
    }
    assert!(
        retired.iter().any(|e| e.reason() == "Terminated"),
        "{events:#?}"
    );
}

/// An AMI whose agent never reports: each instance dies as `BootTimeout`.
/// After three in a row the pool is `Degraded` (`BootFailing`, naming the
/// last) and its launches back off, doubling, so that launches over time
/// stay few. Once, it launched one every few seconds, for ever, with
/// `Degraded` False.
#[tokio::test]
async fn boots_that_keep_failing_back_off_and_say_so() {
    let (moto, url, _ec2, subnets) = warm::Stage::new().await.parts();
    let faults = Ec2Faults::start(&moto.endpoint());
    let mut spec = warm::spec(&faults.endpoint(), &["t3.micro"], &subnets[..1], 1, 1, 4);
    spec.boot_timeout_seconds = 1;
    let tuning = warm::tuning(Duration::from_secs(60))
        .with_boot_backoff_base(Duration::from_secs(4))
        .with_boot_backoff_cap(Duration::from_secs(60));
    warm::aws_env();
    // No local hosts: no agent ever reports.
    let mut lp = PoolLoop::new("noagent", "pool", spec, &url, tuning, Fence::always())
        .await
        .unwrap();
    let started = Instant::now();
    let mut events = Vec::new();
    let mut last = None;
    while started.elapsed() < Duration::from_secs(24) {
        let report = lp.pass(Utc::now()).await.unwrap();
        events.extend(report.events().to_vec());
        last = Some(report.status().clone());
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    let launches = faults
        .calls_of("RunInstances")
        .iter()
        .filter(|c| c.fault().is_none())
        .count();
    assert!(
        (3..=7).contains(&launches),
        "{launches} launches in 24 s of boots failing"
    );
    let status = last.unwrap();
    let degraded = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .unwrap();
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "BootFailing"),
        "{status:?}"
    );
    assert!(
        degraded.message.contains("before their agent reported") && degraded.message.contains("i-"),
        "{}",
        degraded.message
    );
    assert!(events
        .iter()
        .any(|e| e.reason() == "BootFailing" && e.is_warning()));
}

/// A pool on a launch template's `$Latest`: its instances name the version
/// number they were launched from, and publishing a new version replaces
/// them one at a time, as any drift, never below `idle.min`. Once, a pool
/// on `$Latest` never replaced anything: the spec, `$Latest` as written,
/// had not changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_version_of_a_latest_launch_template_replaces_the_instances() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let pool = "latest/pool";
    let created = ec2
        .client()
        .create_launch_template()
        .launch_template_name("orca-latest")
        .launch_template_data(
            aws_sdk_ec2::types::RequestLaunchTemplateData::builder()
                .image_id(warm::IMAGE)
                .build(),
        )
        .send()
        .await
        .expect("moto's CreateLaunchTemplate");
    let template_id = created
        .launch_template()
        .and_then(|t| t.launch_template_id())
        .expect("a template id")
        .to_string();
    let mut spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 2, 2, 6);
    spec.launch.image_id = None;
    spec.launch.launch_template = Some(orca_operator::crd::LaunchTemplateRef {
        id: Some(template_id.clone()),
        name: None,
        version: Some("$Latest".into()),
    });
    let (mut lp, db, _stop_hosts) = warmed_up(&moto, &url, pool, spec, 2).await;
    let old = present(&ec2, pool).await;
    assert_eq!(old.len(), 2);
    for i in &old {
        assert_eq!(i.template_version(), Some("1"), "{i:?}");
    }
    // A pass or two later, with no new version, nothing has drifted.
    for _ in 0..3 {
        let report = lp.pass(Utc::now()).await.unwrap();
        assert_eq!(report.status().drifted, 0);
        tokio::time::sleep(Duration::from_millis(400)).await;
    }

    // A new version under $Latest: another image.
    let new_image = warm::ANOTHER_IMAGE.to_string();
    ec2.client()
        .create_launch_template_version()
        .launch_template_id(&template_id)
        .launch_template_data(
            aws_sdk_ec2::types::RequestLaunchTemplateData::builder()
                .image_id(&new_image)
                .build(),
        )
        .send()
        .await
        .expect("moto's CreateLaunchTemplateVersion");
    let mut lowest_idle = usize::MAX;
    let mut most_launching = 0;
    let mut saw_drift = false;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let report = lp.pass(Utc::now()).await.unwrap();
        saw_drift |= report.status().drifted > 0;
        most_launching = most_launching.max(report.status().launching);
        lowest_idle = lowest_idle.min(idle_fresh(&db, pool).await.len());
        let now = present(&ec2, pool).await;
        let done = saw_drift
            && now.len() == 2
            && now.iter().all(|i| i.template_version() == Some("2"))
            && report.status().drifted == 0;
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "instances of version 1 left after 2 minutes: {now:?}, {:?}",
            report.status()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(
        lowest_idle >= 2,
        "the pool dropped to {lowest_idle} idle of 2"
    );
    assert!(most_launching <= 1, "more than maxDrifted (1) at a time");
    for i in &old {
        assert_ne!(state_of(&ec2, pool, i.id()).await, Some(Ec2State::Running));
    }
}
