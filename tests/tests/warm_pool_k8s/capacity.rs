//! Capacity errors: shown in the status while an instance type is held,
//! gone once the hold is over.

use super::*;

/// An instance type without capacity shows in `capacityErrors` while it is
/// skipped, and is gone from the WarmPool's status once the hold is over.
#[tokio::test]
async fn capacity_errors_show_while_held_and_then_are_gone() {
    let real = warm::Stage::new().await;
    let faults = Ec2Faults::start(&real.moto().endpoint());
    faults.fail(
        "RunInstances",
        &["InstanceType=t3.small"],
        Fault::error("InsufficientInstanceCapacity"),
        usize::MAX,
    );
    let mut spec = spec(&real, &faults.endpoint(), 1, 1);
    spec.launch.instance_types = vec!["t3.small".into(), "t3.micro".into()];
    let wp = warm_pool(spec, 1);
    let (mut k8s, client) =
        Cluster::new(wp.clone(), Some(scheduler()), Some(url_secret(real.url())));
    let ctx = Arc::new(Context::new(
        client,
        config(Fence::always()).with_tuning(
            warm::tuning(Duration::from_secs(60)).with_capacity_hold(Duration::from_secs(2)),
        ),
    ));
    k8s.reconcile(&ctx, wp).await;
    k8s.until("t3.small shown without capacity", |k| {
        k.status()["capacityErrors"]
            .as_array()
            .is_some_and(|errors| errors.iter().any(|e| e["instanceType"] == "t3.small"))
    })
    .await;
    let status = k8s.status();
    assert_eq!(
        status["capacityErrors"][0]["code"], "InsufficientInstanceCapacity",
        "{status}"
    );
    assert_eq!(status["launching"], 1, "launched as t3.micro: {status}");
    let warnings = k8s.events_of("CapacityUnavailable");
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert_eq!(warnings[0]["type"], "Warning");

    k8s.until("no capacity errors once the hold is over", |k| {
        k.status()["capacityErrors"]
            .as_array()
            .is_none_or(Vec::is_empty)
    })
    .await;
    // Left out of the applied status, not emptied or nulled: server-side
    // apply removes the field.
    let last = k8s.statuses.last().unwrap();
    assert!(last.get("capacityErrors").is_none(), "{last}");
    assert_eq!(condition(&k8s.status(), "Degraded")["status"], "False");
    assert_eq!(instances(&real).await.len(), 1);
}
