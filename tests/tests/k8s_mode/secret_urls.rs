//! The database URL read from a Secret once for everyone on it: a replica
//! that starts over a thousand Schedulers and WarmPools on one Secret
//! reads it once per version, not once per object (each read is a GET
//! the API server answers from etcd).

use http::{Method, StatusCode};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use orca_operator::crd::SecretKeyRef;
use orca_operator::runtime::database::{ReadUrl, SecretError, SecretUrls};

use super::*;

fn orca_db() -> SecretKeyRef {
    SecretKeyRef {
        name: "orca-db".into(),
        key: "url".into(),
        ca_key: None,
    }
}

/// A read of `orca-db` at `version`, under way.
fn spawn_read(
    urls: &Arc<SecretUrls>,
    secrets: &Api<Secret>,
    version: &'static str,
) -> JoinHandle<Result<ReadUrl, SecretError>> {
    let (urls, secrets) = (urls.clone(), secrets.clone());
    tokio::spawn(async move { urls.read(&secrets, NS, &orca_db(), version).await })
}

/// Serves one GET of the Secret `orca-db` with `url`; then no other call
/// may come for a moment.
async fn serve_one_read(verifier: &mut ApiServerVerifier, url: &str) {
    let call = verifier.next("a GET of the Secret").await;
    assert_eq!(call.method(), Method::GET);
    assert!(call.path().ends_with("/secrets/orca-db"), "{}", call.path());
    let body = serde_json::to_value(secret(&[("url", url)])).unwrap();
    call.answer(StatusCode::OK, &body);
    let another = tokio::time::timeout(Duration::from_millis(500), verifier.next("nothing")).await;
    if let Ok(call) = another {
        panic!(
            "another read of the same version: {} {}",
            call.method(),
            call.path()
        );
    }
}

#[tokio::test]
async fn many_readers_at_once_of_one_version_make_one_read() {
    let (client, mut verifier) = mock_client();
    let urls = Arc::new(SecretUrls::default());
    let secrets: Api<Secret> = Api::namespaced(client, NS);
    let readers: Vec<_> = (0..16).map(|_| spawn_read(&urls, &secrets, "7")).collect();
    serve_one_read(&mut verifier, "postgres://orca:pw@db-a/orca").await;
    for r in readers {
        let (text, _) = r.await.unwrap().unwrap().unwrap();
        assert_eq!(text, "postgres://orca:pw@db-a/orca");
    }
    // A new version is read again, once.
    let again = spawn_read(&urls, &secrets, "8");
    serve_one_read(&mut verifier, "postgres://orca:pw@db-b/orca").await;
    let (text, _) = again.await.unwrap().unwrap().unwrap();
    assert_eq!(text, "postgres://orca:pw@db-b/orca");
    // The same version again: no call at all.
    let (text, _) = urls
        .read(&secrets, NS, &orca_db(), "8")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(text, "postgres://orca:pw@db-b/orca");
    drop((urls, secrets));
    verifier.client_dropped(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_failed_read_is_not_kept_and_a_deleted_secret_is_forgotten() {
    let (client, mut verifier) = mock_client();
    let urls = Arc::new(SecretUrls::default());
    let secrets: Api<Secret> = Api::namespaced(client, NS);
    let first = spawn_read(&urls, &secrets, "7");
    let call = verifier.next("a GET of the Secret").await;
    call.answer(
        StatusCode::INTERNAL_SERVER_ERROR,
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "etcd is away", "reason": "InternalError", "code": 500}),
    );
    assert!(first.await.unwrap().is_err(), "a failed read is an error");
    // Tried again, not the failure kept.
    let second = spawn_read(&urls, &secrets, "7");
    serve_one_read(&mut verifier, "postgres://orca:pw@db-a/orca").await;
    assert!(second.await.unwrap().unwrap().is_ok());
    // Deleted: what was read of it is not kept (read again if it comes
    // back at the same version).
    urls.forget(NS, "orca-db");
    let third = spawn_read(&urls, &secrets, "7");
    serve_one_read(&mut verifier, "postgres://orca:pw@db-a/orca").await;
    assert!(third.await.unwrap().unwrap().is_ok());
}
