//! A bad database reference: `Degraded` with its reason and no password,
//! until the Secret is there.

use super::*;

#[tokio::test]
async fn a_bad_database_reference_is_degraded_with_its_reason_and_no_password() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let unreachable = format!("postgres://orca:hunter2@127.0.0.1:{closed}/orca?sslmode=disable");
    let cases = [
        (None, "SecretMissing"),
        (Some(secret(&[("password", "hunter2")])), "SecretKeyMissing"),
        (
            Some(secret(&[(
                "url",
                "postgres://orca:hunter2@db.example/orca?sslmode=bogus",
            )])),
            "DatabaseUrlInvalid",
        ),
        (
            Some(secret(&[("url", &unreachable)])),
            "DatabaseUnreachable",
        ),
    ];
    for (secret, reason) in cases {
        let (client, mut api) = mock_client();
        let (ctx, _registry) = context(client);
        let mut s = scheduler("orca:v1");
        let task = start(&s, &ctx);
        api.observe(&[], &[], secret.as_ref()).await;
        // No pod, no Event: the status says why.
        let status = api.patch_status(&mut s).await;
        assert_eq!(status["phase"], "Degraded", "{reason}: {status}");
        let degraded = condition(&status, "Degraded");
        assert_eq!(degraded["status"], "True");
        assert_eq!(degraded["reason"], reason, "{status}");
        assert!(
            degraded["message"].as_str().unwrap().contains("orca-db")
                || reason == "DatabaseUnreachable"
        );
        // Not a crash loop: the reconcile succeeds and looks again later.
        tokio::time::timeout(Duration::from_secs(15), settle(task, &mut api))
            .await
            .expect("the reconcile ends");
        for body in api.bodies() {
            assert!(
                !body.contains("hunter2"),
                "{reason}: the password went out: {body}"
            );
        }
    }
}

/// Once the Secret is there the first pod starts, even on a database the
/// scheduler image has not migrated yet (the schema is the image's to make).
#[tokio::test]
async fn a_degraded_scheduler_recovers_once_the_secret_is_there() {
    let url = pg::Cluster::shared().fresh_db().await;
    let (client, mut api) = mock_client();
    let (ctx, _registry) = context(client);
    let mut s = scheduler("orca:v1");

    let task = start(&s, &ctx);
    api.observe(&[], &[], None).await;
    assert_eq!(
        condition(&api.patch_status(&mut s).await, "Degraded")["reason"],
        "SecretMissing"
    );
    settle(task, &mut api).await;

    let task = start(&s, &ctx);
    api.observe(&[], &[], Some(&secret(&[("url", &url)]))).await;
    api.create_pod().await;
    assert_eq!(api.events(1).await, ["Creating"]);
    let status = api.patch_status(&mut s).await;
    assert_eq!(condition(&status, "Degraded")["status"], "False");
    assert_eq!(status["phase"], "Starting");
    settle(task, &mut api).await;
}
