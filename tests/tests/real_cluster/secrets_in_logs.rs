//! No secret at any log level: a replica at `RUST_LOG=trace` (the AWS SDK's
//! and kube's own tracing included) runs a WarmPool's launches and a
//! Scheduler's handover on a database URL with a password; no line of its
//! log holds the password, the database URL parameter's name or value, or
//! an instance's user-data.

use std::time::Duration;

use orca_tests::release::Replica;

use super::{handed_over_to, scheduler};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_trace_no_line_holds_the_password_or_the_user_data() {
    let mut stage = orca_tests::on_cluster::OnCluster::without_operator("trace").await;
    // The test cluster trusts local connections: any password connects.
    let with_password = stage
        .url()
        .replacen("postgres@", "postgres:trace-s3cret-pw@", 1);
    stage.secret("orca-db", "url", &with_password).await;
    let replica = Replica::start_as(
        stage.cp(),
        stage.client(),
        stage.release(),
        "a",
        &[],
        &[("RUST_LOG", "trace")],
        true,
    )
    .await;
    stage.add_replica(replica);
    let _ec2 = super::warm_pool::v1_and_one_idle(&stage).await;
    stage
        .apply_scheduler(&scheduler("orca", "v2", &[], ""))
        .await;
    stage
        .wait_scheduler(
            "orca",
            "the handover to v2 completes",
            Duration::from_secs(90),
            handed_over_to("v2"),
        )
        .await;
    let log = stage.replicas()[0].log();
    assert!(
        log.lines().count() > 1000,
        "{} lines: not logging at trace?",
        log.lines().count()
    );
    // The Secret's value as the API server sends it, too.
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(&with_password);
    for secret in [
        "trace-s3cret-pw",
        encoded.as_str(),
        "#!/bin/sh",
        // The user-data's first bytes, base64-encoded as RunInstances sends them.
        "IyEvYmluL3No",
        "ORCA_DATABASE_URL_PARAMETER",
        "halt_now",
    ] {
        if let Some(line) = log.lines().find(|l| l.contains(secret)) {
            panic!(
                "`{secret}` is in the log:\n{}",
                &line[..line.len().min(2000)]
            );
        }
    }
}
