//! WarmPoolClasses on the real cluster, with the chart's RBAC and its
//! ValidatingAdmissionPolicy: a namespace editor (a token of their own, not
//! the admin's) cannot name an AMI or a profile; a class holds each
//! namespace to its limit, launches again when the limit is raised and
//! terminates nothing when it is lowered; two pools racing for the last
//! places of a class never pass it together; a pool and its class deleted
//! in either order leave no instance; an inline pool moved onto a class
//! keeps its instances.

use std::{collections::BTreeSet, time::Duration};

use k8s_openapi::api::{
    core::v1::{Namespace, ServiceAccount},
    rbac::v1::{RoleBinding, RoleRef, Subject},
};
use kube::{
    api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams},
    Api, Client,
};
use orca_operator::{
    crd::{WarmPool, WarmPoolClass, WarmPoolStatus},
    warmpool::Ownership,
};
use orca_tests::{cluster::random_hex, eventually::eventually, on_cluster::OnCluster, warm};

use super::{kubectl_orca::kubectl_orca, warm_pool::Ec2Stage};

/// A class `name` launching on `ec2`'s moto (through its proxy), admitting
/// the namespaces labelled `team=<team>`, with `limits` (YAML) added.
pub(super) fn class(name: &str, ec2: &Ec2Stage, team: &str, limits: &str) -> WarmPoolClass {
    let yaml = format!(
        r#"apiVersion: orca.dev/v1alpha1
kind: WarmPoolClass
metadata: {{name: {name}}}
spec:
  region: {region}
  endpoint: {endpoint}
  ssmEndpoint: {endpoint}
  launch: {{imageId: {image}, subnetIds: [{subnet}], runCommand: "true"}}
  instanceTypes: [t3.micro, t3.small]
  capacityTypes: [onDemand]
  namespaces: {{matchLabels: {{team: {team}}}}}
{limits}"#,
        region = warm::REGION,
        endpoint = ec2.proxy.endpoint(),
        image = warm::IMAGE,
        subnet = ec2.subnets[0],
    );
    serde_yaml::from_str(&yaml).unwrap_or_else(|e| panic!("a test class: {e}\n{yaml}"))
}

/// A WarmPool `name` of Scheduler `orca` on class `class`: idle `min` to
/// `min`, `min` instances at most.
pub(super) fn pool_of(name: &str, class: &str, min: i32) -> WarmPool {
    let yaml = format!(
        r#"apiVersion: orca.dev/v1alpha1
kind: WarmPool
metadata: {{name: {name}}}
spec:
  scheduler: orca
  classRef: {{name: {class}}}
  idle: {{min: {min}, max: {min}}}
  maxInstances: {min}
"#
    );
    serde_yaml::from_str(&yaml).unwrap_or_else(|e| panic!("a test pool: {e}\n{yaml}"))
}

pub(super) fn classes(client: &Client) -> Api<WarmPoolClass> {
    Api::all(client.clone())
}

pub(super) async fn apply_class(stage: &OnCluster, class: &WarmPoolClass) {
    let name = class.metadata.name.clone().expect("a class has a name");
    stage.apply(&classes(stage.client()), &name, class).await;
}

/// Labels namespace `ns` `team=<team>`.
pub(super) async fn label(client: &Client, ns: &str, team: &str) {
    Api::<Namespace>::all(client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {"team": team}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("labelling {ns}: {e}"));
}

/// The ids of `owner`'s instances EC2 lists as present.
pub(super) async fn present(ec2: &Ec2Stage, owner: &Ownership) -> BTreeSet<String> {
    ec2.ec2
        .describe(owner)
        .await
        .unwrap_or_else(|e| panic!("listing {}: {e}", owner.pool()))
        .into_iter()
        .filter(|i| i.state().is_present())
        .map(|i| i.id().to_string())
        .collect()
}

pub(super) fn owner(ns: &str, pool: &str) -> Ownership {
    Ownership::new(
        ns,
        pool,
        "orca",
        "orca-operator",
        orca_tests::release::TEST_CLUSTER,
    )
}

pub(super) fn condition<'a>(
    s: &'a WarmPoolStatus,
    kind: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    s.conditions.iter().find(|c| c.type_ == kind)
}

pub(super) fn degraded_for(reason: &'static str) -> impl Fn(&WarmPoolStatus) -> bool {
    move |s| condition(s, "Degraded").is_some_and(|c| c.status == "True" && c.reason == reason)
}

/// A client acting as a ServiceAccount `user` of `ns` bound to the
/// cluster's built-in `edit` role there, with a token of its own.
pub(super) async fn editor(stage: &OnCluster, ns: &str, user: &str) -> Client {
    let sas = Api::<ServiceAccount>::namespaced(stage.client().clone(), ns);
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(user.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    sas.create(&PostParams::default(), &sa)
        .await
        .unwrap_or_else(|e| panic!("ServiceAccount {user}: {e}"));
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some(format!("{user}-edit")),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: "edit".into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: user.into(),
            namespace: Some(ns.into()),
            ..Default::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(stage.client().clone(), ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap_or_else(|e| panic!("RoleBinding of {user}: {e}"));
    let token = orca_tests::release::token_of(stage.client(), ns, user).await;
    orca_tests::cluster::client_from(&stage.cp().kubeconfig_text(&token, ns)).await
}

/// The API server's answer to `client` creating `pool` in `ns`: Ok, or
/// its message.
pub(super) async fn create_as(client: &Client, ns: &str, pool: &WarmPool) -> Result<(), String> {
    Api::<WarmPool>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), pool)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_editor_cannot_name_an_ami_or_a_profile_but_may_name_a_class() {
    let stage = OnCluster::installed_with("cls-edit", &["tenancy.requireClass=true"]).await;
    let team = format!("edit-{}", random_hex(3));
    label(stage.client(), stage.ns(), &team).await;
    let alice = editor(&stage, stage.ns(), "alice").await;

    // The aggregated role reaches `edit` once kube-controller-manager has
    // aggregated it: until then the editor may not create WarmPools at all.
    let mut inline = warm::spec(
        "http://127.0.0.1:1",
        &["p5.48xlarge"],
        &["subnet-1".into()],
        1,
        1,
        2,
    );
    inline.scheduler = "orca".into();
    let inline = WarmPool::new("mine", inline);
    let refused = eventually(
        "the editor reaching the admission policy",
        Duration::from_secs(90),
        || async {
            match create_as(&alice, stage.ns(), &inline).await {
                Err(e) if e.contains("forbidden") && !e.contains("ValidatingAdmissionPolicy") => {
                    Err(e)
                }
                // Admitted before the policy was loaded: again.
                Ok(()) => {
                    let _ = Api::<WarmPool>::namespaced(stage.client().clone(), stage.ns())
                        .delete("mine", &DeleteParams::default())
                        .await;
                    Err("admitted before the policy was active".into())
                }
                Err(e) => Ok(e),
            }
        },
    )
    .await;
    assert!(refused.contains("spec.classRef is required"), "{refused}");

    let mut profile = pool_of("theirs", "shared", 1);
    profile.spec.launch.iam_instance_profile = Some("orca-pool-team-b".into());
    let refused = create_as(&alice, stage.ns(), &profile)
        .await
        .expect_err("a profile is refused");
    assert!(
        refused.contains("spec.launch.iamInstanceProfile may not be set"),
        "{refused}"
    );
    let mut ami = pool_of("theirs", "shared", 1);
    ami.spec.launch.image_id = Some("ami-mine".into());
    let refused = create_as(&alice, stage.ns(), &ami)
        .await
        .expect_err("an AMI is refused");
    assert!(
        refused.contains("spec.launch.imageId may not be set"),
        "{refused}"
    );
    let mut region = pool_of("theirs", "shared", 1);
    region.spec.region = "us-east-1".into();
    let refused = create_as(&alice, stage.ns(), &region)
        .await
        .expect_err("a region is refused");
    assert!(refused.contains("spec.region may not be set"), "{refused}");

    create_as(&alice, stage.ns(), &pool_of("ours", "shared", 1))
        .await
        .unwrap_or_else(|e| panic!("a pool naming a class is admitted: {e}"));
    // The class is not theirs to write.
    let own_class: WarmPoolClass = serde_yaml::from_str(
        "apiVersion: orca.dev/v1alpha1\nkind: WarmPoolClass\nmetadata: {name: alices}\n\
         spec: {region: r, launch: {launchTemplate: {name: t}, runCommand: 'true'}}\n",
    )
    .unwrap();
    let refused = classes(&alice)
        .create(&PostParams::default(), &own_class)
        .await
        .expect_err("an editor may not write a class");
    assert!(refused.to_string().contains("forbidden"), "{refused}");
    // And may read its pools (view).
    Api::<WarmPool>::namespaced(alice.clone(), stage.ns())
        .get("ours")
        .await
        .unwrap_or_else(|e| panic!("the editor reads its pool: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_holds_each_namespace_to_its_limit_and_terminates_nothing_for_it() {
    let client = orca_tests::cluster::ControlPlane::shared().client().await;
    let team_b = orca_tests::cluster::ControlPlane::shared()
        .namespace(&client, "cls-team-b")
        .await;
    let stage = OnCluster::watching(
        "cls-team-a",
        std::slice::from_ref(&team_b),
        &["tenancy.requireClass=true"],
    )
    .await
    .with_replica("a")
    .await;
    let team = format!("a-{}", random_hex(3));
    label(stage.client(), stage.ns(), &team).await;
    label(stage.client(), &team_b, "b").await;
    super::v1_ready(&stage).await;
    let ec2 = Ec2Stage::new(&stage, "runners").await;
    let name = format!("shared-{}", random_hex(3));
    apply_class(
        &stage,
        &class(&name, &ec2, &team, "  namespaceLimits: {instances: 3}"),
    )
    .await;

    stage.create_pool(&pool_of("runners", &name, 5)).await;
    Api::<WarmPool>::namespaced(stage.client().clone(), &team_b)
        .create(&PostParams::default(), &pool_of("runners", &name, 2))
        .await
        .unwrap_or_else(|e| panic!("team-b's pool: {e}"));

    let held = stage
        .wait_pool(
            "runners",
            "3 idle and LimitReached",
            Duration::from_secs(90),
            |s| s.idle == 3 && degraded_for("LimitReached")(s),
        )
        .await;
    let said = &condition(&held, "Degraded").expect("Degraded").message;
    assert!(
        said.contains("hold 3 of their 3 instances (namespaceLimits.instances)"),
        "{said}"
    );
    stage
        .wait_event("runners", "LimitReached", Duration::from_secs(10))
        .await;
    let b_status = eventually("team-b's pool refused", Duration::from_secs(30), || async {
        let s = Api::<WarmPool>::namespaced(stage.client().clone(), &team_b)
            .get("runners")
            .await
            .map_err(|e| e.to_string())?
            .status
            .unwrap_or_default();
        if degraded_for("NamespaceNotAllowed")(&s) {
            Ok(s)
        } else {
            Err(format!("{s:?}"))
        }
    })
    .await;
    assert_eq!(b_status.launching + b_status.idle, 0);
    assert!(present(&ec2, &owner(&team_b, "runners")).await.is_empty());
    assert_eq!(
        ec2.launched(),
        3,
        "{:?}",
        ec2.proxy.calls_of("RunInstances")
    );
    // The class shows it at a glance.
    let shown = eventually("the class's usage", Duration::from_secs(20), || async {
        let c = classes(stage.client())
            .get(&name)
            .await
            .map_err(|e| e.to_string())?;
        match c.status {
            Some(s) if s.instances == 3 && s.pool_count == 2 => Ok(s),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let a = shown
        .namespaces
        .iter()
        .find(|n| n.namespace == stage.ns())
        .expect("team-a listed");
    assert!(a.allowed && a.instances == 3 && a.vcpus == 6, "{a:?}");
    let b = shown
        .namespaces
        .iter()
        .find(|n| n.namespace == team_b)
        .expect("team-b listed");
    assert!(!b.allowed && b.instances == 0, "{b:?}");
    let (instances, table) = stage.column("warmpoolclasses", &name, "INSTANCES");
    assert_eq!(instances.as_deref(), Some("3"), "{table}");

    // Raised: the rest.
    apply_class(
        &stage,
        &class(&name, &ec2, &team, "  namespaceLimits: {instances: 10}"),
    )
    .await;
    stage
        .wait_pool("runners", "5 idle", Duration::from_secs(90), |s| {
            s.idle == 5 && !degraded_for("LimitReached")(s)
        })
        .await;
    let five = present(&ec2, &ec2.owner).await;
    assert_eq!(five.len(), 5);

    // Lowered: nothing is terminated for it.
    ec2.proxy.forget_calls();
    apply_class(
        &stage,
        &class(&name, &ec2, &team, "  namespaceLimits: {instances: 1}"),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        present(&ec2, &ec2.owner).await,
        five,
        "a lowered limit terminated nothing"
    );
    assert!(ec2.proxy.calls_of("TerminateInstances").is_empty());
    assert!(ec2.proxy.calls_of("RunInstances").is_empty());
}

/// Two pools of one class, 4 instances for the class, each wanting 4, made
/// at once: never more than 4 together. (Against an operator whose grant
/// counted the asking pool alone, 8 were launched.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pools_racing_for_the_last_places_never_pass_the_class_limit() {
    let stage = OnCluster::installed_with("cls-race", &["tenancy.requireClass=true"])
        .await
        .with_replica("a")
        .await;
    let team = format!("race-{}", random_hex(3));
    label(stage.client(), stage.ns(), &team).await;
    super::v1_ready(&stage).await;
    let ec2 = Ec2Stage::new(&stage, "p").await;
    let name = format!("race-{}", random_hex(3));
    apply_class(
        &stage,
        &class(&name, &ec2, &team, "  limits: {instances: 4, vcpus: 100}"),
    )
    .await;
    let (p, q) = (pool_of("p", &name, 4), pool_of("q", &name, 4));
    tokio::join!(stage.create_pool(&p), stage.create_pool(&q));

    let both = |s: &WarmPoolStatus| s.launching + s.idle + s.busy;
    eventually(
        "the class's 4 places taken",
        Duration::from_secs(60),
        || async {
            let mut n = 0;
            for name in ["p", "q"] {
                n += stage
                    .pools()
                    .get(name)
                    .await
                    .map_err(|e| e.to_string())?
                    .status
                    .map_or(0, |s| both(&s));
            }
            (n >= 4).then_some(()).ok_or(format!("{n} so far"))
        },
    )
    .await;
    // Passes go on for a while: still 4.
    for _ in 0..10 {
        let held = present(&ec2, &owner(stage.ns(), "p")).await.len()
            + present(&ec2, &owner(stage.ns(), "q")).await.len();
        assert!(held <= 4, "{held} instances for a class of 4");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(
        ec2.launched(),
        4,
        "{:?}",
        ec2.proxy.calls_of("RunInstances")
    );
}

/// Waits up to 90 s for the WarmPool `pool` to be gone.
async fn gone(stage: &OnCluster, pool: &str) {
    let api = stage.pools();
    eventually(&format!("{pool} gone"), Duration::from_secs(90), || async {
        match api.get_opt(pool).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(p) => Err(format!("{:?}", p.status)),
        }
    })
    .await;
}

/// A pool deleted before its class, and another after it: every instance
/// terminated, both WarmPools gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_pools_and_their_class_in_either_order_terminates_every_instance() {
    let stage = OnCluster::installed_with("cls-del", &["tenancy.requireClass=true"])
        .await
        .with_replica("a")
        .await;
    let team = format!("del-{}", random_hex(3));
    label(stage.client(), stage.ns(), &team).await;
    super::v1_ready(&stage).await;
    let ec2 = Ec2Stage::new(&stage, "first").await;
    let name = format!("del-{}", random_hex(3));
    apply_class(&stage, &class(&name, &ec2, &team, "")).await;
    stage.create_pool(&pool_of("first", &name, 1)).await;
    stage.create_pool(&pool_of("second", &name, 1)).await;
    for pool in ["first", "second"] {
        stage
            .wait_pool(pool, "an instance", Duration::from_secs(90), |s| {
                s.launching + s.idle == 1
            })
            .await;
    }
    stage
        .pools()
        .delete("first", &DeleteParams::default())
        .await
        .unwrap();
    gone(&stage, "first").await;
    assert!(present(&ec2, &owner(stage.ns(), "first")).await.is_empty());
    classes(stage.client())
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    stage
        .wait_pool(
            "second",
            "ClassNotFound",
            Duration::from_secs(30),
            degraded_for("ClassNotFound"),
        )
        .await;
    stage
        .pools()
        .delete("second", &DeleteParams::default())
        .await
        .unwrap();
    gone(&stage, "second").await;
    assert!(present(&ec2, &owner(stage.ns(), "second")).await.is_empty());
}

/// A pool without a class pointed at a class that does not exist (a name
/// mistyped; the class's admission lets it through) and then deleted: it
/// is torn down where it ran, and goes. Once, the deletion waited for the
/// class for ever, and nothing terminated its instances.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_pointed_at_a_missing_class_is_torn_down_where_it_ran() {
    let stage = OnCluster::new("cls-typo").await;
    super::v1_ready(&stage).await;
    let ec2 = Ec2Stage::new(&stage, "runners").await;
    pointed_and_deleted(&stage, &ec2, "no-such-class", "ClassNotFound").await;
}

/// WarmPool `runners` with its one instance, pointed at class `class`,
/// which refuses it (`reason`), then deleted: gone, and none of its
/// instances left. The instances it had.
async fn pointed_and_deleted(
    stage: &OnCluster,
    ec2: &Ec2Stage,
    class: &str,
    reason: &'static str,
) -> BTreeSet<String> {
    stage.create_pool(&ec2.pool("runners", 1, 1, 4)).await;
    stage
        .wait_pool("runners", "an instance", Duration::from_secs(90), |s| {
            s.launching + s.idle == 1 && s.place.is_some()
        })
        .await;
    let had = present(ec2, &ec2.owner).await;
    assert_eq!(had.len(), 1);
    let pointed = serde_json::json!({"spec": {"classRef": {"name": class}}});
    stage
        .pools()
        .patch("runners", &PatchParams::default(), &Patch::Merge(pointed))
        .await
        .unwrap_or_else(|e| panic!("pointing the pool at the class: {e}"));
    stage
        .wait_pool(
            "runners",
            reason,
            Duration::from_secs(30),
            degraded_for(reason),
        )
        .await;

    stage
        .pools()
        .delete("runners", &DeleteParams::default())
        .await
        .unwrap();
    gone(stage, "runners").await;
    assert!(present(ec2, &ec2.owner).await.is_empty());
    had
}

/// A pool pointed at another team's class (admission lets the name
/// through; the operator refuses it, `NamespaceNotAllowed`) and then deleted is
/// torn down outside that class: its instance gets no tag of the class,
/// whose census would count it against the other team's limits until it
/// was gone. Once, the deleted pool's loop tagged it with the class that
/// refused the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_pointed_at_a_class_that_refuses_it_is_torn_down_outside_it() {
    let stage = OnCluster::new("cls-theirs").await;
    super::v1_ready(&stage).await;
    let ec2 = Ec2Stage::new(&stage, "runners").await;
    // Another team's class, at the same place as the pool.
    let theirs = format!("theirs-{}", random_hex(3));
    apply_class(&stage, &class(&theirs, &ec2, "another-team", "")).await;
    let ids = pointed_and_deleted(&stage, &ec2, &theirs, "NamespaceNotAllowed").await;
    for id in &ids {
        let listed = ec2
            .ec2
            .client()
            .describe_instances()
            .instance_ids(id)
            .send()
            .await
            .unwrap_or_else(|e| panic!("moto's DescribeInstances: {e}"));
        let tags: Vec<(String, String)> = listed
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .flat_map(|i| i.tags())
            .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
            .collect();
        assert!(
            !tags.iter().any(|(k, _)| k == "orca.dev/class"),
            "{id} was tagged for a class that refused its pool: {tags:?}"
        );
    }
}

/// An inline pool with two idle instances moved onto the class `kubectl
/// orca class from-pool` prints: the same instances, nothing launched or
/// terminated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_pool_moved_onto_a_class_keeps_its_instances() {
    let stage = OnCluster::new("cls-move").await;
    super::v1_ready(&stage).await;
    let ec2 = Ec2Stage::new(&stage, "runners").await;
    stage.create_pool(&ec2.pool("runners", 2, 2, 4)).await;
    stage
        .wait_pool("runners", "two idle", Duration::from_secs(90), |s| {
            s.idle == 2
        })
        .await;
    let before = present(&ec2, &ec2.owner).await;

    let name = format!("moved-{}", random_hex(3));
    let (ok, printed, err) = kubectl_orca(
        &stage,
        &["class", "from-pool", "runners", "--class-name", &name],
    );
    assert!(ok, "{err}");
    let class: WarmPoolClass =
        serde_yaml::from_str(&printed).unwrap_or_else(|e| panic!("{e}\n{printed}"));
    apply_class(&stage, &class).await;
    ec2.proxy.forget_calls();
    let patch = printed
        .lines()
        .find_map(|l| l.trim_start_matches('#').trim().strip_prefix('\''))
        .and_then(|l| l.strip_suffix('\''))
        .unwrap_or_else(|| panic!("no patch printed:\n{printed}"));
    let patch: serde_json::Value = serde_json::from_str(patch).unwrap();
    stage
        .pools()
        .patch("runners", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap_or_else(|e| panic!("moving the pool: {e}"));
    let moved = stage.pools().get("runners").await.unwrap();
    assert!(
        moved.spec.class_ref.is_some() && moved.spec.region.is_empty(),
        "{:?}",
        moved.spec
    );
    // A few passes on the class.
    stage
        .wait_pool(
            "runners",
            "a status on the class",
            Duration::from_secs(30),
            |s| s.class_region.is_some(),
        )
        .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let s = stage
        .pools()
        .get("runners")
        .await
        .unwrap()
        .status
        .unwrap_or_default();
    assert_eq!((s.idle, s.drifted), (2, 0), "{s:?}");
    assert_eq!(present(&ec2, &ec2.owner).await, before);
    assert!(ec2.proxy.calls_of("RunInstances").is_empty());
    assert!(ec2.proxy.calls_of("TerminateInstances").is_empty());
}

/// With `tenancy.requireClass` turned on over a pool made without a class
/// (an upgrade's): its editors may still resize, pause and resume it — the
/// policy refuses only a change of a field a class owns, and a new pool
/// without a class.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_pool_under_require_class_is_resized_and_paused_not_relaunched() {
    let stage = OnCluster::new("cls-inline").await;
    stage
        .apply_scheduler(&orca_tests::hostile::paused("orca", "orca-db"))
        .await;
    let ec2 = Ec2Stage::new(&stage, "runners").await;
    stage.create_pool(&ec2.pool("runners", 1, 1, 3)).await;
    stage
        .release()
        .upgrade(stage.cp(), &["tenancy.requireClass=true"]);
    let alice = editor(&stage, stage.ns(), "alice").await;
    let patch_with = |v: serde_json::Value, params: PatchParams| {
        let alice = alice.clone();
        let ns = stage.ns().to_string();
        async move {
            Api::<WarmPool>::namespaced(alice, &ns)
                .patch("runners", &params, &Patch::Merge(v))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    };
    let patch = |v: serde_json::Value| patch_with(v, PatchParams::default());
    let other_image = || serde_json::json!({"spec": {"launch": {"imageId": "ami-other"}}});
    // Once the role and the policy are in force: its image is the class's
    // to own, and stays as it was made.
    // The API server loads a new policy from its informer: seconds, or
    // more on a busy 2-core machine. It is awaited with dry runs, which
    // admission judges but which change nothing: a real change admitted
    // before, then refused to be put back, would leave a spec that the
    // next try no longer changes (and so no policy judges).
    eventually("the policy in force", Duration::from_secs(90), || async {
        match patch_with(other_image(), PatchParams::default().dry_run()).await {
            Err(e) if e.contains("may not change on a WarmPool without a class") => Ok(()),
            Err(e) => Err(e),
            Ok(()) => Err("admitted before the policy was in force".into()),
        }
    })
    .await;
    let refused = patch(other_image())
        .await
        .expect_err("the image of a pool without a class is refused");
    assert!(refused.contains("spec.launch.imageId"), "{refused}");
    let pool = Api::<WarmPool>::namespaced(stage.client().clone(), stage.ns())
        .get("runners")
        .await
        .unwrap();
    assert_eq!(pool.spec.launch.image_id.as_deref(), Some(warm::IMAGE));
    for (what, change) in [
        (
            "resized",
            serde_json::json!({"spec": {"idle": {"min": 2, "max": 2}}}),
        ),
        ("paused", serde_json::json!({"spec": {"paused": true}})),
        ("resumed", serde_json::json!({"spec": {"paused": false}})),
    ] {
        patch(change)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    let mut another = ec2.pool("another", 1, 1, 1);
    another.spec.scheduler = "orca".into();
    let refused = create_as(&alice, stage.ns(), &another)
        .await
        .expect_err("a new pool without a class is refused");
    assert!(refused.contains("spec.classRef is required"), "{refused}");
}
