//! Drain (`kubectl orca drain`, the annotation `orca.dev/drain`): an idle
//! instance asked to go is retired at once and replaced; the pass says why.

use super::*;

#[tokio::test]
async fn a_drained_idle_instance_is_terminated_and_replaced() {
    let (moto, url, ec2, subnets) = warm::Stage::new().await.parts();
    let pool = "drain/pool";
    let db = pg::connect(&url).await;
    let spec = warm::spec(&moto.endpoint(), &["t3.micro"], &subnets[..1], 1, 1, 3);
    let mut lp = warm::pool_loop(pool, spec, &url).await;
    lp.pass(Utc::now()).await.unwrap();
    let [first] = &present(&ec2, pool).await[..] else {
        panic!("one launched for idle.min");
    };
    report_idle(&db, pool, first.id()).await;
    let report = lp.pass(Utc::now()).await.unwrap();
    assert!(report.terminated().is_empty() && report.launched().is_empty());

    lp.set_drain([first.id().to_string()].into());
    let report = lp.pass(Utc::now()).await.unwrap();
    assert_eq!(report.terminated(), std::slice::from_ref(&first.id()));
    assert_eq!(report.launched().len(), 1, "its replacement");
    assert!(
        report
            .events()
            .iter()
            .any(|e| e.reason() == "Terminated" && e.message().contains("(Drained)")),
        "{:?}",
        report.events()
    );
    assert_ne!(
        state_of(&ec2, pool, first.id()).await,
        Some(Ec2State::Running)
    );
}
