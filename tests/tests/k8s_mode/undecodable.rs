//! One object that does not read as its kind — a number beyond its
//! field's type, which an API server may let through for an `int32` field
//! — is left out of the shared watch's store, and every other object is
//! in it. A typed list failed whole on it: the WarmPools of every team, at
//! every listing, for as long as that one object lasted.

use kube::api::{ApiResource, DynamicObject};
use kube::{Api, ResourceExt};
use orca_operator::crd::WarmPool;
use orca_operator::runtime::watches::Watch;

use super::*;

/// A WarmPool `name` of the tests' namespace, as the API server lists it.
fn listed(name: &str) -> Value {
    let spec = orca_tests::warm::spec(
        "http://127.0.0.1:1",
        &["t3.micro"],
        &["subnet-1".to_string()],
        0,
        0,
        1,
    );
    let mut pool = WarmPool::new(name, spec);
    pool.metadata.namespace = Some(NS.into());
    pool.metadata.resource_version = Some("5".into());
    serde_json::to_value(pool).unwrap()
}

#[tokio::test]
async fn one_pool_that_does_not_read_leaves_every_other_listed() {
    let (client, mut verifier) = mock_client();
    let json: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NS, &ApiResource::erase::<WarmPool>(&()));
    let mut watch = Watch::<WarmPool>::new(Api::namespaced(client, NS)).each_read_alone(json);
    let feed = watch.subscribe();
    let running = tokio::spawn(watch.run());

    let list = verifier.next("the WarmPools' listing").await;
    assert!(list.path().ends_with("/warmpools"), "{}", list.path());
    let mut hostile = listed("hostile");
    hostile["spec"]["maxUses"] = json!(2_147_483_648_i64);
    list.answer(
        http::StatusCode::OK,
        &json!({
            "apiVersion": "orca.dev/v1alpha1",
            "kind": "WarmPoolList",
            "metadata": {"resourceVersion": "5"},
            "items": [listed("a"), hostile, listed("b")],
        }),
    );
    // The watch that follows is left waiting.
    let watching = verifier.next("the WarmPools' watch").await;
    assert!(
        watching.query().contains("watch=true"),
        "the listing failed and was asked again: {}?{}",
        watching.path(),
        watching.query()
    );
    let listed = tokio::time::timeout(Duration::from_secs(10), feed.listed().wait()).await;
    assert_eq!(listed.ok(), Some(true), "the store never listed");
    let mut names: Vec<String> = feed.store().state().iter().map(|p| p.name_any()).collect();
    names.sort();
    assert_eq!(names, ["a", "b"]);
    running.abort();
}
