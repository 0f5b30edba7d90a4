//! What the operator's unit tests share: the objects many of them start
//! from. A module's own tests are its child `tests` (inline, or in
//! `<module>_tests.rs` or `<module>_tests/` beside it); a fixture two
//! modules' tests use lives here, not in either.

use k8s_openapi::api::core::v1::{EnvVar, PodSecurityContext, SecurityContext, Toleration};

use crate::crd::{
    Database, IdleRange, Launch, OnDelete, PodTemplate, Scheduler, SchedulerSpec, WarmPoolSpec,
};

/// A WarmPool's spec: idle `min`..`max` of at most `max_instances`, two
/// types in two subnets, on-demand, terminated on deletion.
pub fn pool_spec(min: i32, max: i32, max_instances: i32) -> WarmPoolSpec {
    WarmPoolSpec {
        ssm_endpoint: None,
        scheduler: "sched".into(),
        class_ref: None,
        region: "us-east-1".into(),
        endpoint: None,
        idle: IdleRange { min, max },
        schedules: vec![],
        forecast: None,
        objective: None,
        stopped: None,
        max_instances,
        idle_seconds: 600,
        max_uses: 0,
        boot_timeout_seconds: 300,
        launch: Launch {
            image_id: Some("ami-1".into()),
            instance_types: vec!["t3.small".into(), "t3.medium".into()],
            subnet_ids: vec!["subnet-a".into(), "subnet-b".into()],
            run_command: "run".into(),
            ..Launch::default()
        },
        paused: false,
        on_delete: OnDelete::Terminate,
        drain_timeout_seconds: 3600,
        disruption: Default::default(),
        maintenance_windows: vec![],
    }
}

/// A Scheduler `jobs/orca` on `orca:v2` with every field of its pod
/// template set, and in its env a password and the variables the operator
/// sets itself (to show they are overridden).
pub fn scheduler() -> Scheduler {
    let mut s = Scheduler::new(
        "orca",
        SchedulerSpec {
            image: "orca:v2".into(),
            command: vec!["orca".into(), "scheduler".into()],
            args: vec!["--tick".into(), "1".into()],
            env: vec![
                literal("ORCA_IMAGE", "spoofed"),
                literal("ORCA_DATABASE_URL", "postgres://u:hunter2@db/orca"),
                literal("TZ", "UTC"),
            ],
            resources: None,
            database: Database::in_secret("orca-db", "url"),
            overlap: true,
            register: None,
            handover: Default::default(),
            pod_template: Some(PodTemplate {
                labels: [("team".to_string(), "data".to_string())].into(),
                annotations: [("note".to_string(), "hi".to_string())].into(),
                node_selector: [("pool".to_string(), "ops".to_string())].into(),
                tolerations: vec![Toleration {
                    key: Some("ops".into()),
                    operator: Some("Exists".into()),
                    ..Default::default()
                }],
                affinity: None,
                service_account_name: Some("orca".into()),
                image_pull_secrets: vec![],
                security_context: Some(PodSecurityContext {
                    run_as_non_root: Some(true),
                    ..Default::default()
                }),
                container_security_context: Some(SecurityContext {
                    allow_privilege_escalation: Some(false),
                    ..Default::default()
                }),
                priority_class_name: Some("orca-critical".into()),
            }),
            paused: false,
            maintenance_windows: vec![],
        },
    );
    s.metadata.namespace = Some("jobs".into());
    s.metadata.uid = Some("uid-1".into());
    s
}

fn literal(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}
