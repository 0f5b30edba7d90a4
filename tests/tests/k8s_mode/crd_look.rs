//! The leader's look at the CRDs while it leads: only what the API server
//! says (a CRD older than this build, or not installed) ends its term; a
//! read that fails ends nothing.

use http::StatusCode;
use orca_operator::runtime::crd_check;
use orca_tests::mock_api::{mock_client, not_found, ApiServerVerifier};
use serde_json::{json, Value};

/// This build's CRD of the path `/…/customresourcedefinitions/<name>`.
fn ours(path: &str) -> Value {
    let name = path.rsplit('/').next().unwrap_or_default();
    let crd = orca_operator::crd::crds()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no CRD {name} in this build"));
    serde_json::to_value(crd).unwrap()
}

/// Answers the look's three reads: `odd` for the WarmPools' CRD, this
/// build's CRDs for the others.
async fn answer(api: &mut ApiServerVerifier, odd: (StatusCode, Value)) {
    for _ in 0..3 {
        let call = api.next("a CRD read").await;
        assert!(
            call.path()
                .starts_with("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"),
            "{}",
            call.path()
        );
        if call.path().ends_with("/warmpools.orca.dev") {
            call.answer(odd.0, &odd.1);
        } else {
            let crd = ours(call.path());
            call.answer(StatusCode::OK, &crd);
        }
    }
}

#[tokio::test]
async fn only_crds_found_older_or_gone_end_the_term_not_a_failed_read() {
    let (client, mut api) = mock_client();

    // A read the API server fails (it is restarting, say): nothing found.
    let look = tokio::spawn({
        let client = client.clone();
        async move { crd_check::stale(&client).await }
    });
    let failed = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "etcdserver: request timed out", "reason": "InternalError", "code": 500});
    answer(&mut api, (StatusCode::INTERNAL_SERVER_ERROR, failed)).await;
    assert!(
        look.await.unwrap().is_none(),
        "a failed read ended the term"
    );

    // Not installed (deleted): found.
    let look = tokio::spawn({
        let client = client.clone();
        async move { crd_check::stale(&client).await }
    });
    let gone = not_found("customresourcedefinitions", "warmpools.orca.dev");
    answer(&mut api, (StatusCode::NOT_FOUND, gone)).await;
    let stale = look
        .await
        .unwrap()
        .expect("a CRD not installed ends the term");
    assert!(
        stale
            .to_string()
            .contains("warmpools.orca.dev is not installed"),
        "{stale}"
    );

    // Older: a field of this release's status missing from its schema.
    let look = tokio::spawn({
        let client = client.clone();
        async move { crd_check::stale(&client).await }
    });
    let mut older = ours("/warmpools.orca.dev");
    let status = &mut older["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
        ["status"]["properties"];
    status
        .as_object_mut()
        .expect("the WarmPool's status has properties")
        .remove("retiring")
        .expect("this release's WarmPool status has `retiring`");
    older["metadata"]["annotations"] = json!({});
    answer(&mut api, (StatusCode::OK, older)).await;
    let stale = look.await.unwrap().expect("an older CRD ends the term");
    assert!(
        stale
            .to_string()
            .contains("warmpools.orca.dev is older than this operator (it lacks"),
        "{stale}"
    );
    assert!(stale.to_string().contains("retiring"), "{stale}");
    assert!(stale.to_string().contains("releases the lease"), "{stale}");

    // This release's: nothing found.
    let look = tokio::spawn(async move { crd_check::stale(&client).await });
    let crd = ours("/warmpools.orca.dev");
    answer(&mut api, (StatusCode::OK, crd)).await;
    assert!(
        look.await.unwrap().is_none(),
        "this release's CRDs ended the term"
    );
}
