//! The register step: a failed register Job is retried as a new Job.

use super::*;

/// The register Jobs (local processes) that exist now.
fn register_jobs(local: &LocalMode) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(local.dir().join(".status/jobs"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// A register Job that fails is retried as a new Job after its back-off
/// (10 s), the handover completes only once one succeeded, and a changed
/// register step registers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_register_job_is_retried_as_a_new_job() {
    let url = pg::Cluster::shared().migrated_db().await;
    let mut local = LocalMode::new(&url, &scheduler("v1", "", ""));
    local.start();
    local.wait_for("v1 ready", Duration::from_secs(30), ready_with("v1"));

    // v2's register step fails the first time it runs.
    let mark = local.dir().join("registered-once");
    let once = format!(
        r#"command: ["sh", "-c", "if [ -e {m} ]; then echo registered $ORCA_IMAGE; else touch {m}; echo no pipelines yet >&2; exit 3; fi"]"#,
        m = mark.display()
    );
    let with_register = |image: &str, command: &str| {
        scheduler(image, "", "").replace(
            r#"command: ["sh", "-c", "echo registered $ORCA_IMAGE"]"#,
            command,
        )
    };
    local.apply(&with_register("v2", &once));
    local.wait_for("the register job failed", Duration::from_secs(30), |s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Degraded" && c.status == "True" && c.reason == "RegisterFailed")
    });
    let s = local.wait_for(
        "a second register job succeeded and the handover completed",
        Duration::from_secs(60),
        |s| {
            ready_with("v2")(s)
                && s.last_handover
                    .as_ref()
                    .is_some_and(|h| h.drained.is_some())
        },
    );
    let rev2 = s.target_revision.clone().expect("the target revision");
    let register = s.register.clone().expect("the register status");
    assert_eq!(
        (
            register.revision.as_str(),
            register.attempts,
            register.failures
        ),
        (rev2.as_str(), 2, 0),
        "{register:?}"
    );
    let jobs = register_jobs(&local);
    assert!(
        jobs.contains(&orca_operator::scheduler::register_job_name(
            "orca", &rev2, 2
        )),
        "the retry is a new job: {jobs:?}"
    );
    let out = local.output().join("\n");
    let failed = out
        .find("Warning RegisterFailed")
        .expect("a RegisterFailed warning");
    let complete = out
        .find("HandoverComplete")
        .expect("a HandoverComplete event");
    assert!(failed < complete, "{out}");
    assert_eq!(
        out.matches("Warning RegisterFailed").count(),
        1,
        "one failure, said once:\n{out}"
    );

    // A changed register step registers again, as a new Job.
    local.apply(&with_register(
        "v2",
        r#"command: ["sh", "-c", "echo registered again $ORCA_IMAGE"]"#,
    ));
    local.wait_for("registered again", Duration::from_secs(30), |s| {
        s.phase == Phase::Ready && s.register.as_ref().is_some_and(|r| r.attempts == 3)
    });
    let third = orca_operator::scheduler::register_job_name("orca", &rev2, 3);
    let log = std::fs::read_to_string(local.dir().join(".status/jobs").join(&third).join("log"))
        .unwrap_or_default();
    assert!(log.contains("registered again v2"), "{third}: {log:?}");
}
