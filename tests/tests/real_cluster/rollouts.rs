//! The other rollouts on the real cluster: recreate (`overlap: false`),
//! stop-the-world after an exit 75, a join time-out's abort, a Scheduler
//! whose name has a dot, and one in a namespace enforcing the `restricted`
//! Pod Security Standard.

use std::time::Duration;

use k8s_openapi::api::{core::v1::Namespace, scheduling::v1::PriorityClass};
use kube::{
    api::{ListParams, Patch, PatchParams, PostParams},
    Api, ResourceExt,
};
use orca_operator::{crd::Phase, k8s::LABEL_COMPONENT};
use orca_tests::{eventually::eventually, on_cluster::OnCluster, pg};
use serde_json::json;

use super::{ready_with, scheduler, v1_ready};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_off_recreates_and_settles_ready_with_its_register_job() {
    let stage = OnCluster::new("recreate").await;
    let off = "  overlap: false\n";
    stage
        .apply_scheduler(&scheduler("orca", "v1", &[], off))
        .await;
    let s = stage
        .wait_scheduler("orca", "v1 up and Ready", Duration::from_secs(60), |s| {
            s.phase == Phase::Ready
        })
        .await;
    assert_eq!(s.current_image.as_deref(), Some("v1"), "{s:?}");
    stage
        .wait_event("orca", "Registering", Duration::from_secs(30))
        .await;
    let v1_pods: Vec<String> = stage
        .scheduler_pods("orca")
        .await
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();

    stage
        .apply_scheduler(&scheduler("orca", "v2", &[], off))
        .await;
    let s = stage
        .wait_scheduler("orca", "v2 up and Ready", Duration::from_secs(90), |s| {
            s.phase == Phase::Ready && s.current_image.as_deref() == Some("v2")
        })
        .await;
    assert_eq!(s.revisions.len(), 1, "only v2 is left: {s:?}");
    let pods = stage.scheduler_pods("orca").await;
    assert!(
        pods.iter()
            .all(|p| !v1_pods.contains(p.metadata.name.as_ref().unwrap())),
        "v1's pod is still there"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_75_rolls_stop_the_world() {
    let stage = OnCluster::new("exit75").await;
    // v1 says it knows 1 migration; v2's floor is 2: it must not overlap.
    stage
        .apply_scheduler(&scheduler("orca", "v1", &["--migrations", "1"], ""))
        .await;
    stage
        .wait_scheduler(
            "orca",
            "v1 Ready",
            Duration::from_secs(60),
            ready_with("v1"),
        )
        .await;
    stage
        .apply_scheduler(&scheduler("orca", "v2", &["--floor", "2"], ""))
        .await;
    stage
        .wait_scheduler(
            "orca",
            "v2 leads after stop-the-world",
            Duration::from_secs(90),
            ready_with("v2"),
        )
        .await;
    let events = stage.events("orca").await;
    assert!(
        events.iter().any(|e| e.starts_with("OverlapRefused:")),
        "{events:#?}"
    );
    let db = pg::connect(stage.url()).await;
    let row = db
        .query_one(
            "select (select max(ended) from orca.schedulers where image = 'v1'), \
                    (select min(joined) from orca.schedulers where image = 'v2')",
            &[],
        )
        .await
        .expect("the instances");
    let v1_ended: Option<chrono::DateTime<chrono::Utc>> = row.get(0);
    let v2_joined: Option<chrono::DateTime<chrono::Utc>> = row.get(1);
    assert!(
        v1_ended.expect("v1's row ended") <= v2_joined.expect("v2 joined"),
        "v2 joined before v1's row ended"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_time_out_aborts_and_the_old_instance_keeps_leading() {
    let stage = OnCluster::new("abort").await;
    v1_ready(&stage).await;
    // v2 never joins: it sleeps instead of scheduling.
    let mut v2 = scheduler("orca", "v2", &[], "");
    v2.spec.command = vec!["sleep".into()];
    v2.spec.args = vec!["600".into()];
    v2.spec.handover.join_timeout_seconds = 5;
    stage.apply_scheduler(&v2).await;
    let s = stage
        .wait_scheduler(
            "orca",
            "the rollout aborted",
            Duration::from_secs(60),
            |s| {
                s.conditions.iter().any(|c| {
                    c.type_ == "Degraded" && c.status == "True" && c.reason == "JoinTimeout"
                })
            },
        )
        .await;
    assert_eq!(
        s.leader.as_ref().map(|l| l.image.as_str()),
        Some("v1"),
        "v1 keeps leading: {s:?}"
    );
    stage
        .wait_event("orca", "JoinTimeout", Duration::from_secs(10))
        .await;
    // The new pod goes; v1's stays, never asked to drain.
    orca_tests::eventually::eventually("v2's pod is gone", Duration::from_secs(30), || async {
        let pods = stage.scheduler_pods("orca").await;
        let images: Vec<String> = pods
            .iter()
            .filter_map(|p| p.spec.as_ref()?.containers.first()?.image.clone())
            .collect();
        if images == ["v1"] {
            Ok(())
        } else {
            Err(format!("{images:?}"))
        }
    })
    .await;
    let db = pg::connect(stage.url()).await;
    let asked: i64 = db
        .query_one(
            "select count(*) from orca.schedulers where image = 'v1' and drain_asked is not null",
            &[],
        )
        .await
        .expect("v1's row")
        .get(0);
    assert_eq!(asked, 0, "v1 was asked to drain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_named_with_a_dot_gets_its_pod_and_leads() {
    let stage = OnCluster::new("dotted").await;
    stage
        .apply_scheduler(&scheduler("team.pipelines", "v1", &[], ""))
        .await;
    let s = stage
        .wait_scheduler(
            "team.pipelines",
            "team.pipelines Ready",
            Duration::from_secs(60),
            ready_with("v1"),
        )
        .await;
    let leader = s.leader.expect("a leader");
    let pods = stage.scheduler_pods("team.pipelines").await;
    assert_eq!(pods.len(), 1, "{pods:?}");
    let pod = &pods[0];
    assert_eq!(pod.metadata.name.as_deref(), Some(leader.pod.as_str()));
    assert!(
        !leader.pod.contains('.'),
        "a pod's host name is a DNS label: {}",
        leader.pod
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_the_api_server_refuses_shows_as_degraded_with_its_message() {
    let stage = OnCluster::new("refused").await;
    // The CRD takes any toleration; the API server refuses the pod.
    let extra = "  podTemplate:\n    tolerations:\n    - {key: ops, operator: Sometimes}\n";
    stage
        .apply_scheduler(&scheduler("orca", "v1", &[], extra))
        .await;
    let s = stage
        .wait_scheduler(
            "orca",
            "Degraded with the server's reason",
            Duration::from_secs(60),
            |s| {
                s.phase == Phase::Degraded
                    && s.conditions.iter().any(|c| {
                        c.type_ == "Degraded" && c.status == "True" && c.reason == "PodRefused"
                    })
            },
        )
        .await;
    let degraded = s
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .expect("the Degraded condition");
    assert!(
        degraded.message.contains("tolerations") && degraded.message.contains("Sometimes"),
        "the condition carries the server's own message: {}",
        degraded.message
    );
    let events = stage
        .wait_event("orca", "PodRefused", Duration::from_secs(10))
        .await;
    assert_eq!(
        events
            .iter()
            .filter(|e| e.starts_with("PodRefused:"))
            .count(),
        1,
        "said once: {events:#?}"
    );
}

/// A namespace that enforces the `restricted` Pod Security Standard admits
/// a Scheduler's pods — scheduler and register Job — once its podTemplate
/// sets the pod's and the container's securityContext; the pods also get
/// the podTemplate's PriorityClass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restricted_namespace_admits_pods_with_the_templates_security_context() {
    let stage = OnCluster::new("restricted").await;
    let namespaces: Api<Namespace> = Api::all(stage.client().clone());
    namespaces
        .patch(
            stage.ns(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": "restricted"
            }}})),
        )
        .await
        .expect("labelling the namespace restricted");
    let class = format!("orca-{}", stage.ns());
    let classes: Api<PriorityClass> = Api::all(stage.client().clone());
    let priority: PriorityClass = serde_json::from_value(json!({
        "metadata": {"name": class},
        "value": 100000,
    }))
    .unwrap();
    classes
        .create(&PostParams::default(), &priority)
        .await
        .expect("creating the PriorityClass");
    let template = format!(
        r#"  podTemplate:
    priorityClassName: {class}
    securityContext:
      runAsNonRoot: true
      runAsUser: 1000
      seccompProfile: {{type: RuntimeDefault}}
    containerSecurityContext:
      allowPrivilegeEscalation: false
      capabilities: {{drop: [ALL]}}
"#
    );
    stage
        .apply_scheduler(&scheduler("orca", "v1", &[], &template))
        .await;
    stage
        .wait_scheduler(
            "orca",
            "v1 Ready",
            Duration::from_secs(60),
            ready_with("v1"),
        )
        .await;
    let pods = eventually(
        "a scheduler pod and a register Job's pod",
        Duration::from_secs(30),
        || async {
            let pods = stage.pods().list(&ListParams::default()).await;
            let pods = pods.map_err(|e| e.to_string())?.items;
            let register = pods
                .iter()
                .any(|p| p.labels().get(LABEL_COMPONENT).map(String::as_str) == Some("register"));
            if register && pods.len() >= 2 {
                Ok(pods)
            } else {
                Err(format!("{} pods, a register pod: {register}", pods.len()))
            }
        },
    )
    .await;
    for pod in &pods {
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.priority_class_name.as_deref(), Some(class.as_str()));
        assert_eq!(spec.priority, Some(100000), "admission resolved the class");
        let container = &spec.containers[0];
        let sc = container.security_context.as_ref().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false));
    }
    classes
        .delete(&class, &Default::default())
        .await
        .expect("deleting the PriorityClass");
}
