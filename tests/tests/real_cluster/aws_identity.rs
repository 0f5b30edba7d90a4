//! The operator's AWS identity as the chart wires it on EKS, for real: the
//! chart's `serviceAccount.roleArn` annotates its ServiceAccount, and the
//! replica gets what EKS's pod identity webhook gives a pod of it — the
//! role's ARN and a service-account token for the `sts.amazonaws.com`
//! audience (a TokenRequest of the real API server, as the projected
//! volume's), no AWS keys at all. The AWS SDK exchanges the token with STS
//! (moto's, reached by the standard `AWS_ENDPOINT_URL_STS`), and the pool
//! launches with the temporary credentials STS gave. The recording proxy in
//! front of moto sees both: the exchange (the role, the token) and every
//! EC2 call signed with an STS session key (`ASIA…`).
//!
//! moto cannot enforce IAM here: with its authorisation on it fails every
//! unsigned call, and AssumeRoleWithWebIdentity is unsigned by design.

use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::{Api, ResourceExt};
use orca_tests::{
    ec2_faults::Ec2Faults, eventually::eventually, on_cluster::OnCluster, release::Replica, warm,
};

/// `%XX` escapes undone (the form-encoded parameters the proxy records).
fn decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

/// Moto behind the recording proxy, replica `a` started with `env` and no
/// AWS keys of its own, Scheduler `orca` Ready and a WarmPool of one idle
/// instance on the proxy: once a launch went through, the proxy (its
/// calls), moto (kept running) and the replica.
async fn launched_with(
    stage: &OnCluster,
    env: &[(&str, &str)],
) -> (Ec2Faults, orca_tests::moto::Moto, Replica) {
    let moto = orca_tests::moto::Moto::start();
    let proxy = Ec2Faults::start(&moto.endpoint());
    let aws = proxy.endpoint();
    let mut env = env.to_vec();
    env.extend([
        ("AWS_ENDPOINT_URL_STS", aws.as_str()),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ]);
    let replica = Replica::start_as(
        stage.cp(),
        stage.client(),
        stage.release(),
        "a",
        &[],
        &env,
        false,
    )
    .await;
    let subnets = warm::subnets(&warm::ec2(&moto.endpoint()).await).await;
    super::v1_ready(stage).await;
    let mut spec = warm::spec(&aws, &["t3.micro"], &subnets, 1, 1, 2);
    spec.scheduler = "orca".into();
    stage
        .create_pool(&orca_operator::crd::WarmPool::new("runners", spec))
        .await;
    eventually(
        "a launch that went through",
        Duration::from_secs(60),
        || async {
            let launched = proxy
                .calls_of("RunInstances")
                .into_iter()
                .any(|c| c.fault().is_none());
            launched.then_some(()).ok_or_else(|| {
                format!(
                    "none yet; the replica logged:\n{}",
                    replica
                        .log()
                        .lines()
                        .rev()
                        .take(10)
                        .collect::<Vec<_>>()
                        .join("\n")
                )
            })
        },
    )
    .await;
    (proxy, moto, replica)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_launches_on_its_service_accounts_web_identity() {
    let role = "arn:aws:iam::123456789012:role/orca-operator";
    let stage =
        OnCluster::installed_with("irsa", &[&format!("serviceAccount.roleArn={role}")]).await;
    let release = &stage.release();
    let accounts: Api<ServiceAccount> =
        Api::namespaced(stage.client().clone(), release.namespace());
    let account = accounts.get(&release.fullname()).await.unwrap();
    let annotated = account
        .annotations()
        .get("eks.amazonaws.com/role-arn")
        .cloned()
        .expect("the chart annotates its ServiceAccount with serviceAccount.roleArn");
    assert_eq!(annotated, role);

    // What the webhook mounts: the token, for STS's audience.
    let token = orca_tests::release::token_for(
        stage.client(),
        release.namespace(),
        &release.fullname(),
        &["sts.amazonaws.com"],
    )
    .await;
    let claims = token.split('.').nth(1).expect("a JWT");
    let claims: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(claims)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(claims["aud"], serde_json::json!(["sts.amazonaws.com"]));
    let dir = std::env::temp_dir().join(format!("orca-irsa-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("token");
    std::fs::write(&token_file, &token).unwrap();
    let token_path = token_file.display().to_string();

    let env = [
        ("AWS_ROLE_ARN", annotated.as_str()),
        ("AWS_WEB_IDENTITY_TOKEN_FILE", token_path.as_str()),
        ("AWS_ROLE_SESSION_NAME", "orca-operator"),
    ];
    let (proxy, _moto, replica) = launched_with(&stage, &env).await;

    // The exchange: this role, this token.
    let exchanges = proxy.calls_of("AssumeRoleWithWebIdentity");
    assert!(
        !exchanges.is_empty(),
        "no AssumeRoleWithWebIdentity reached STS"
    );
    for call in &exchanges {
        assert_eq!(call.param("RoleArn").map(decoded).as_deref(), Some(role));
        assert_eq!(
            call.param("WebIdentityToken").map(decoded).as_deref(),
            Some(token.as_str())
        );
        assert_eq!(call.key_id(), None, "the exchange is unsigned");
    }
    // Every EC2 call signed with an STS session's key, none with keys of
    // the replica's own (it has none).
    let ec2_calls: Vec<_> = proxy
        .calls()
        .into_iter()
        .filter(|c| c.action() != "AssumeRoleWithWebIdentity")
        .collect();
    assert!(!ec2_calls.is_empty());
    for call in &ec2_calls {
        let key = call.key_id().unwrap_or("");
        assert!(
            key.starts_with("ASIA"),
            "{} signed with {key:?}, not an STS session's key",
            call.action()
        );
    }
    assert!(
        !replica.log().contains(&token),
        "the service-account token was logged"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A stand-in for the EKS Pod Identity agent (169.254.170.23 on a node):
/// answers `GET /v1/credentials` carrying `Authorization: <token>` with
/// temporary credentials of key id `key`, anything else with 403; counts
/// the answers it gave.
async fn pod_identity_agent(
    token: String,
    key: &'static str,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::{atomic::Ordering, Arc};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/credentials", listener.local_addr().unwrap());
    let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = served.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let mut buf = vec![0u8; 16 * 1024];
            let mut got = 0;
            while !buf[..got].windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf[got..]).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got += n,
                }
            }
            let head = String::from_utf8_lossy(&buf[..got]).to_string();
            let authorised = head.starts_with("GET /v1/credentials ")
                && head.lines().any(|l| {
                    l.split_once(':').is_some_and(|(k, v)| {
                        k.eq_ignore_ascii_case("authorization") && v.trim() == token
                    })
                });
            let (status, body) = if authorised {
                count.fetch_add(1, Ordering::SeqCst);
                let body = serde_json::json!({
                    "AccessKeyId": key,
                    "SecretAccessKey": "pod-identity-secret",
                    "Token": "pod-identity-session",
                    "AccountId": "123456789012",
                    "Expiration": "2099-01-01T00:00:00Z",
                });
                ("200 OK", body.to_string())
            } else {
                ("403 Forbidden", "{}".to_string())
            };
            let answer = format!(
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(answer.as_bytes()).await;
        }
    });
    (url, served)
}

/// EKS Pod Identity, as its webhook wires a pod: the container credentials
/// endpoint and a service-account token for `pods.eks.amazonaws.com`,
/// which the SDK sends in `Authorization`; no keys, no role annotation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_launches_on_eks_pod_identity_credentials() {
    let stage = OnCluster::installed_with("podid", &[]).await;
    let release = &stage.release();
    let token = orca_tests::release::token_for(
        stage.client(),
        release.namespace(),
        &release.fullname(),
        &["pods.eks.amazonaws.com"],
    )
    .await;
    let dir = std::env::temp_dir().join(format!("orca-podid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("eks-pod-identity-token");
    std::fs::write(&token_file, &token).unwrap();
    let token_path = token_file.display().to_string();
    const KEY: &str = "ASIAPODIDENTITYTEST1";
    let (agent, served) = pod_identity_agent(token.clone(), KEY).await;

    let env = [
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", agent.as_str()),
        (
            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
            token_path.as_str(),
        ),
    ];
    let (proxy, _moto, replica) = launched_with(&stage, &env).await;
    assert!(served.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    for call in proxy.calls() {
        assert_eq!(
            call.key_id(),
            Some(KEY),
            "{} signed otherwise",
            call.action()
        );
    }
    assert!(
        !replica.log().contains(&token),
        "the service-account token was logged"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
