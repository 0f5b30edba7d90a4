//! A namespace editor who turns hostile (the built-in `edit` role, a token
//! of their own) cannot hold more than their class allows, whatever they do
//! with the verbs the chart gives them: orphan a full pool and make
//! another, again; switch the pool's class, then its Scheduler, then move
//! it back; bring a pool whose status still counts instances under a class
//! that does not admit them. What EC2 lists under each class's tag for the
//! namespace is sampled four times a second over the whole cycle; its most
//! never passes the limit. The class's lifetimes and orphaning bound them
//! at admission and in the operator, and a pool being deleted keeps the
//! place it is torn down in.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use kube::{
    api::{DeleteParams, Patch, PatchParams, PostParams},
    Api, Client,
};
use orca_operator::crd::{OnDelete, Scheduler, WarmPool, WarmPoolStatus};
use orca_tests::{cluster::random_hex, eventually::eventually, on_cluster::OnCluster};
use tokio::sync::oneshot;

use super::{
    classes::{apply_class, class, create_as, degraded_for, editor, label, pool_of},
    warm_pool::Ec2Stage,
};

/// A paused Scheduler `name` on the stage's database: a pool needs its
/// Scheduler and that Scheduler's Secret, not its pods. Its stale limit is
/// long, so a run held busy by the test does not look hung.
fn paused_scheduler(name: &str) -> Scheduler {
    let yaml = format!(
        "apiVersion: orca.dev/v1alpha1\nkind: Scheduler\nmetadata: {{name: {name}}}\n\
         spec:\n  image: v1\n  command: [\"{sim}\"]\n  paused: true\n\
         \x20 database:\n    urlSecretRef: {{name: orca-db, key: url}}\n\
         \x20 handover: {{staleSeconds: 600}}\n",
        sim = orca_tests::on_cluster::orca_sim(),
    );
    serde_yaml::from_str(&yaml).unwrap_or_else(|e| panic!("a paused Scheduler: {e}\n{yaml}"))
}

/// A pool of `class` holding `min` instances that boot for ever (no agent
/// reports): the test decides when they are busy.
fn held_pool(name: &str, class: &str, min: i32) -> WarmPool {
    let mut pool = pool_of(name, class, min);
    pool.spec.boot_timeout_seconds = 600;
    pool
}

/// What EC2 lists present for one namespace (its pools' tag, which every
/// release sets), four times a second: the most at once in all, and of
/// each class by the class tag an instance carries.
struct Sampler {
    most: Arc<Mutex<BTreeMap<String, usize>>>,
    _stop: oneshot::Sender<()>,
}

/// The sampler's key for all of a namespace's instances.
const ALL: &str = "(all)";

impl Sampler {
    fn start(ec2: &Ec2Stage, ns: &str) -> Sampler {
        let client = ec2.ec2.client().clone();
        let ns = ns.to_string();
        let most: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
        let (stop, mut stopped) = oneshot::channel::<()>();
        let kept = most.clone();
        tokio::spawn(async move {
            loop {
                let listed = present(&client, &ns, None).await;
                {
                    let mut most = kept.lock().unwrap();
                    let mut now: BTreeMap<String, usize> = BTreeMap::new();
                    for (_, class) in &listed {
                        *now.entry(class.clone()).or_default() += 1;
                    }
                    now.insert(ALL.into(), listed.len());
                    for (class, n) in now {
                        let m = most.entry(class).or_default();
                        *m = (*m).max(n);
                    }
                }
                tokio::select! {
                    _ = &mut stopped => return,
                    () = tokio::time::sleep(Duration::from_millis(250)) => {}
                }
            }
        });
        Sampler { most, _stop: stop }
    }

    /// The most instances of `class` (or [`ALL`]) present at once so far.
    fn most(&self, class: &str) -> usize {
        self.most.lock().unwrap().get(class).copied().unwrap_or(0)
    }
}

/// The present instances of namespace `ns`'s pools (of `class` only, if
/// given): each id with the class tag it carries ("" for none).
async fn present(
    client: &aws_sdk_ec2::Client,
    ns: &str,
    class: Option<&str>,
) -> Vec<(String, String)> {
    let filter = |name: &str, values: &[&str]| {
        aws_sdk_ec2::types::Filter::builder()
            .name(name)
            .set_values(Some(values.iter().map(|v| v.to_string()).collect()))
            .build()
    };
    let mut ask = client
        .describe_instances()
        .filters(filter("tag:orca.dev/pool", &[&format!("{ns}/*")]))
        .filters(filter(
            "instance-state-name",
            &["pending", "running", "stopping", "stopped"],
        ));
    if let Some(class) = class {
        ask = ask.filters(filter("tag:orca.dev/class", &[class]));
    }
    let listed = ask
        .send()
        .await
        .unwrap_or_else(|e| panic!("listing {ns}'s instances: {e}"));
    let mut out: Vec<(String, String)> = listed
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter_map(|i| {
            let class = i
                .tags()
                .iter()
                .find(|t| t.key() == Some("orca.dev/class"))
                .and_then(|t| t.value())
                .unwrap_or("");
            Some((i.instance_id()?.to_string(), class.to_string()))
        })
        .collect();
    out.sort();
    out
}

/// The ids of the present instances of namespace `ns`'s pools.
async fn ids_of(ec2: &Ec2Stage, ns: &str) -> Vec<String> {
    present(ec2.ec2.client(), ns, None)
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect()
}

/// Waits until EC2 lists `n` present instances of namespace `ns`'s pools;
/// if it does not, says what the namespace's pools say.
async fn until_present(stage: &OnCluster, ec2: &Ec2Stage, ns: &str, n: usize) -> Vec<String> {
    eventually(
        &format!("{n} instances of {ns}'s pools"),
        Duration::from_secs(90),
        || async {
            let ids = ids_of(ec2, ns).await;
            if ids.len() == n {
                return Ok(ids);
            }
            let pools = Api::<WarmPool>::namespaced(stage.client().clone(), ns)
                .list(&Default::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            let said: Vec<String> = pools
                .iter()
                .map(|p| {
                    let conditions = p
                        .status
                        .as_ref()
                        .map(|s| &s.conditions[..])
                        .unwrap_or_default()
                        .iter()
                        .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
                        .collect::<Vec<_>>();
                    format!("{:?}: {conditions:?}", p.metadata.name)
                })
                .collect();
            Err(format!("{ids:?}; pools: {said:?}"))
        },
    )
    .await
}

/// The editor's first write waits for kube-controller-manager to have
/// aggregated the chart's role into `edit`.
async fn create_as_editor(client: &Client, ns: &str, pool: &WarmPool) {
    eventually(
        "the editor creating a pool",
        Duration::from_secs(30),
        || async { create_as(client, ns, pool).await },
    )
    .await;
}

async fn patch_as(
    client: &Client,
    ns: &str,
    name: &str,
    patch: serde_json::Value,
) -> Result<(), String> {
    Api::<WarmPool>::namespaced(client.clone(), ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Waits until EC2 lists none of namespace `ns`'s pools' instances, of
/// which `launched` were; `what` says what that means.
async fn none_left(ec2: &Ec2Stage, ns: &str, launched: &[String], what: &str) {
    eventually(what, Duration::from_secs(60), || async {
        let now = ids_of(ec2, ns).await;
        now.is_empty()
            .then_some(())
            .ok_or(format!("{now:?} of {launched:?}"))
    })
    .await;
}

async fn gone(api: &Api<WarmPool>, name: &str) {
    eventually(&format!("{name} gone"), Duration::from_secs(60), || async {
        match api.get_opt(name).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(p) => Err(format!("{:?}", p.metadata.finalizers)),
        }
    })
    .await;
}

/// Holds `ids` busy: each serving a run that beats, as an agent's row in
/// the pool's database says, until the test lets them go.
async fn hold_busy(url: &str, pool: &str, ids: &[String]) {
    let db = orca_tests::pg::connect(url).await;
    for id in ids {
        let run: i64 = db
            .query_one(
                "insert into orca.runs (pipeline, status, start, owner, heartbeat)
                 values ('held', 'running', 1, 'test', now()) returning id",
                &[],
            )
            .await
            .unwrap_or_else(|e| panic!("a run for {id}: {e}"))
            .get(0);
        db.execute(
            "insert into orca.instances (instance, pool, run, start, role, joined, polled)
             values ($1, $2, $3, 1, 'head', now(), now())",
            &[id, &pool, &run],
        )
        .await
        .unwrap_or_else(|e| panic!("{id} busy: {e}"));
    }
}

/// An editor with a limit of 3 orphans her full pool and makes another,
/// twice: 3 instances at most, ever (against an operator whose class
/// counted WarmPools, 6 and then 9 ran).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaning_a_full_pool_and_starting_again_never_passes_the_namespace_limit() {
    let stage = OnCluster::installed_with("hostile-orphan", &["tenancy.requireClass=true"])
        .await
        .with_replica("a")
        .await;
    let team = format!("o-{}", random_hex(3));
    label(stage.client(), stage.ns(), &team).await;
    stage.apply_scheduler(&paused_scheduler("orca")).await;
    let ec2 = Ec2Stage::new(&stage, "unused").await;
    let name = format!("orphan-{}", random_hex(3));
    apply_class(
        &stage,
        &class(&name, &ec2, &team, "  namespaceLimits: {instances: 3}"),
    )
    .await;
    let alice = editor(&stage, stage.ns(), "alice").await;
    let hers = Api::<WarmPool>::namespaced(alice.clone(), stage.ns());
    let sampler = Sampler::start(&ec2, stage.ns());

    create_as_editor(&alice, stage.ns(), &held_pool("first", &name, 3)).await;
    let first = until_present(&stage, &ec2, stage.ns(), 3).await;
    for (left, next) in [("first", "second"), ("second", "third")] {
        patch_as(
            &alice,
            stage.ns(),
            left,
            serde_json::json!({"spec": {"onDelete": "Orphan"}}),
        )
        .await
        .unwrap_or_else(|e| panic!("orphaning {left}: {e}"));
        hers.delete(left, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting {left}: {e}"));
        gone(&hers, left).await;
        create_as(&alice, stage.ns(), &held_pool(next, &name, 3))
            .await
            .unwrap_or_else(|e| panic!("{next}: {e}"));
        let held = stage
            .wait_pool(next, "LimitReached", Duration::from_secs(60), |s| {
                degraded_for("LimitReached")(s)
            })
            .await;
        assert_eq!(held.launching + held.idle, 0, "{held:?}");
    }
    // Passes go on for a while: the orphans are still counted.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        ids_of(&ec2, stage.ns()).await,
        first,
        "only the first pool's ran"
    );
    assert!(sampler.most(ALL) <= 3, "{} at once", sampler.most(ALL));
    assert!(
        sampler.most(&name) <= 3,
        "{} of the class at once",
        sampler.most(&name)
    );
    assert_eq!(
        ec2.launched(),
        3,
        "{:?}",
        ec2.proxy.calls_of("RunInstances")
    );
}

/// A pool switched to another class, then to another Scheduler, then back
/// where it ran: each class holds the namespace to its limit over the
/// whole cycle; the instances it left busy in the first place are never
/// terminated once it is back (against an operator that kept the first
/// place's draining loop beside the pool's new one there, they were at
/// the drain time-out, runs and all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_class_and_scheduler_and_moving_back_never_passes_a_limit() {
    let stage = OnCluster::installed_with("hostile-switch", &["tenancy.requireClass=true"])
        .await
        .with_replica("a")
        .await;
    let team = format!("s-{}", random_hex(3));
    label(stage.client(), stage.ns(), &team).await;
    stage.apply_scheduler(&paused_scheduler("orca")).await;
    stage.apply_scheduler(&paused_scheduler("orca2")).await;
    let ec2 = Ec2Stage::new(&stage, "unused").await;
    let (a, b) = (
        format!("a-{}", random_hex(3)),
        format!("b-{}", random_hex(3)),
    );
    for c in [&a, &b] {
        apply_class(
            &stage,
            &class(c, &ec2, &team, "  namespaceLimits: {instances: 2}"),
        )
        .await;
    }
    let alice = editor(&stage, stage.ns(), "alice").await;
    let sampler = Sampler::start(&ec2, stage.ns());
    let mut p = held_pool("p", &a, 2);
    p.spec.drain_timeout_seconds = 25;
    create_as_editor(&alice, stage.ns(), &p).await;
    let first = until_present(&stage, &ec2, stage.ns(), 2).await;
    hold_busy(stage.url(), &format!("{}/p", stage.ns()), &first).await;

    // Another class: the instances class a counts stay with the pool, and
    // a second pool of class a gets nothing beside them.
    patch_as(
        &alice,
        stage.ns(),
        "p",
        serde_json::json!({"spec": {"classRef": {"name": b}}}),
    )
    .await
    .unwrap_or_else(|e| panic!("switching class: {e}"));
    create_as(&alice, stage.ns(), &held_pool("q", &a, 2))
        .await
        .unwrap_or_else(|e| panic!("q: {e}"));
    stage
        .wait_pool(
            "q",
            "LimitReached",
            Duration::from_secs(60),
            degraded_for("LimitReached"),
        )
        .await;

    // Another Scheduler: the busy instances drain where they are, still
    // class a's; the new place launches in class b.
    patch_as(
        &alice,
        stage.ns(),
        "p",
        serde_json::json!({"spec": {"scheduler": "orca2"}}),
    )
    .await
    .unwrap_or_else(|e| panic!("switching Scheduler: {e}"));
    let moved_at = std::time::Instant::now();
    // Two busy where it was, two launched in the new place.
    until_present(&stage, &ec2, stage.ns(), 4).await;
    stage
        .wait_pool(
            "p",
            "the first place draining",
            Duration::from_secs(30),
            |s: &WarmPoolStatus| s.retiring.iter().any(|r| r.scheduler == "orca"),
        )
        .await;

    // Back where it ran: its loop takes the busy instances over; past the
    // drain time-out they are still there.
    patch_as(
        &alice,
        stage.ns(),
        "p",
        serde_json::json!({"spec": {"scheduler": "orca"}}),
    )
    .await
    .unwrap_or_else(|e| panic!("moving back: {e}"));
    let past = Duration::from_secs(35).saturating_sub(moved_at.elapsed());
    tokio::time::sleep(past).await;
    let still = ids_of(&ec2, stage.ns()).await;
    assert!(
        first.iter().all(|id| still.contains(id)),
        "busy instances terminated after the pool came back: {first:?}, now {still:?}"
    );
    for c in [&a, &b] {
        assert!(
            sampler.most(c) <= 2,
            "{} of class {c} at once",
            sampler.most(c)
        );
    }
    assert!(sampler.most(ALL) <= 4, "{} at once", sampler.most(ALL));
}

/// A pool whose status still counts three instances (of another class)
/// pointed at a class that does not admit its namespace: the admitted
/// team gets the whole class (against an operator that counted such a
/// pool by its status, at the class's largest type, it got one of four).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_the_class_does_not_admit_takes_nothing_from_those_it_does() {
    let client = orca_tests::cluster::ControlPlane::shared().client().await;
    let team_b = orca_tests::cluster::ControlPlane::shared()
        .namespace(&client, "hostile-other")
        .await;
    let stage = OnCluster::watching(
        "hostile-admit",
        std::slice::from_ref(&team_b),
        &["tenancy.requireClass=true"],
    )
    .await
    .with_replica("a")
    .await;
    let (ta, tb) = (
        format!("a-{}", random_hex(3)),
        format!("b-{}", random_hex(3)),
    );
    label(stage.client(), stage.ns(), &ta).await;
    label(stage.client(), &team_b, &tb).await;
    stage.apply_scheduler(&paused_scheduler("orca")).await;
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "orca-db"},
        "stringData": {"url": stage.url()},
    }))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(stage.client().clone(), &team_b)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap_or_else(|e| panic!("team-b's Secret: {e}"));
    Api::<Scheduler>::namespaced(stage.client().clone(), &team_b)
        .create(&PostParams::default(), &paused_scheduler("orca"))
        .await
        .unwrap_or_else(|e| panic!("team-b's Scheduler: {e}"));
    let ec2 = Ec2Stage::new(&stage, "unused").await;
    let (shared, theirs) = (
        format!("shared-{}", random_hex(3)),
        format!("theirs-{}", random_hex(3)),
    );
    apply_class(
        &stage,
        &class(&shared, &ec2, &ta, "  limits: {instances: 4}"),
    )
    .await;
    apply_class(&stage, &class(&theirs, &ec2, &tb, "")).await;
    let b_pools = Api::<WarmPool>::namespaced(stage.client().clone(), &team_b);
    b_pools
        .create(&PostParams::default(), &held_pool("full", &theirs, 3))
        .await
        .unwrap_or_else(|e| panic!("team-b's pool: {e}"));
    until_present(&stage, &ec2, &team_b, 3).await;
    eventually(
        "team-b's status counting 3",
        Duration::from_secs(30),
        || async {
            let s = b_pools
                .get("full")
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            (s.launching == 3).then_some(()).ok_or(format!("{s:?}"))
        },
    )
    .await;
    // Pointed at the class that does not admit team-b, with more wanted.
    b_pools
        .patch(
            "full",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"classRef": {"name": shared},
                "idle": {"min": 10, "max": 10}, "maxInstances": 10}})),
        )
        .await
        .unwrap_or_else(|e| panic!("pointing team-b's pool at the class: {e}"));
    eventually("team-b's pool refused", Duration::from_secs(30), || async {
        let s = b_pools
            .get("full")
            .await
            .map_err(|e| e.to_string())?
            .status
            .unwrap_or_default();
        degraded_for("NamespaceNotAllowed")(&s)
            .then_some(())
            .ok_or(format!("{s:?}"))
    })
    .await;
    // The classes are counted every 5 s: the refused pool is the class's
    // by now.
    tokio::time::sleep(Duration::from_secs(6)).await;
    stage.create_pool(&held_pool("runners", &shared, 4)).await;
    until_present(&stage, &ec2, stage.ns(), 4).await;
    assert!(present(ec2.ec2.client(), &team_b, Some(&shared))
        .await
        .is_empty());
}

/// The class bounds what a team decides about lifetimes: a pool asking
/// for more is refused by the admission policy, naming the field and the
/// bound; orphaning is refused where the class forbids it, and a pool of
/// such a class deleted with onDelete Orphan written before is torn down
/// all the same; a pool being deleted cannot be pointed elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifetimes_orphaning_and_a_deletions_place_are_the_classs_to_bound() {
    let stage = OnCluster::installed_with("hostile-life", &["tenancy.requireClass=true"])
        .await
        .with_replica("a")
        .await;
    let team = format!("l-{}", random_hex(3));
    label(stage.client(), stage.ns(), &team).await;
    stage.apply_scheduler(&paused_scheduler("orca")).await;
    stage.apply_scheduler(&paused_scheduler("orca2")).await;
    let ec2 = Ec2Stage::new(&stage, "unused").await;
    let name = format!("life-{}", random_hex(3));
    let bounded = "  poolLimits: {maxIdleSeconds: 3600, maxBootTimeoutSeconds: 600, orphan: false}";
    apply_class(&stage, &class(&name, &ec2, &team, "")).await;
    let alice = editor(&stage, stage.ns(), "alice").await;

    // Written while the class allowed it: onDelete Orphan.
    let mut kept = held_pool("kept", &name, 1);
    kept.spec.on_delete = OnDelete::Orphan;
    create_as_editor(&alice, stage.ns(), &kept).await;
    let launched = until_present(&stage, &ec2, stage.ns(), 1).await;
    apply_class(&stage, &class(&name, &ec2, &team, bounded)).await;

    let mut year = held_pool("year", &name, 1);
    year.spec.idle_seconds = 31_536_000;
    let said = eventually(
        "the bound reaching the policy",
        Duration::from_secs(30),
        || async {
            match create_as(&alice, stage.ns(), &year).await {
                Err(e) if e.contains("poolLimits") => Ok(e),
                Err(e) => Err(e),
                Ok(()) => {
                    let _ = stage.pools().delete("year", &DeleteParams::default()).await;
                    Err("admitted before the class's bound reached the policy".into())
                }
            }
        },
    )
    .await;
    assert!(
        said.contains(&format!(
            "spec.idleSeconds: 31536000 is over WarmPoolClass {name}'s poolLimits.maxIdleSeconds (3600)"
        )),
        "{said}"
    );
    let mut orphaning = held_pool("orphaning", &name, 1);
    orphaning.spec.on_delete = OnDelete::Orphan;
    let said = create_as(&alice, stage.ns(), &orphaning)
        .await
        .expect_err("orphaning is refused");
    assert!(
        said.contains("spec.onDelete: Orphan is not allowed by WarmPoolClass"),
        "{said}"
    );

    // Deleted with onDelete Orphan from before: torn down all the same.
    let hers = Api::<WarmPool>::namespaced(alice.clone(), stage.ns());
    // Held a moment by a finalizer of the test's, to try moving it.
    stage
        .pools()
        .patch(
            "kept",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"finalizers": ["orca.dev/warm-pool", "test.orca.dev/hold"]}})),
        )
        .await
        .unwrap_or_else(|e| panic!("holding kept: {e}"));
    hers.delete("kept", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting kept: {e}"));
    let moved = serde_json::json!({"spec": {"scheduler": "orca2", "onDelete": "Terminate"}});
    let said = patch_as(&alice, stage.ns(), "kept", moved)
        .await
        .expect_err("a pool being deleted keeps its Scheduler");
    assert!(
        said.contains("spec.scheduler may not change while the WarmPool is being deleted"),
        "{said}"
    );
    none_left(&ec2, stage.ns(), &launched, "kept's instance terminated").await;
    // The operator let go once its instance was terminated.
    eventually(
        "the operator's finalizer gone",
        Duration::from_secs(30),
        || async {
            let held = stage.pools().get("kept").await.map_err(|e| e.to_string())?;
            let left = held.metadata.finalizers.unwrap_or_default();
            (left == ["test.orca.dev/hold"])
                .then_some(())
                .ok_or(format!("{left:?}"))
        },
    )
    .await;
    stage
        .pools()
        .patch(
            "kept",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap_or_else(|e| panic!("letting kept go: {e}"));
}

/// A pool of a class that forbids orphaning, pointed by its editor at a
/// class that allows it and deleted with onDelete Orphan in the same
/// breath: its busy instance, launched under the first class, is
/// terminated all the same (past the drain time-out), and the pool goes
/// once it is; nor may she take the operator's finalizer off meanwhile. Once, only the class named
/// at the deletion was asked, and the first class's instance was left
/// running for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_that_allows_orphans_orphans_none_of_a_stricter_ones_instances() {
    let stage = OnCluster::installed_with("hostile-unorphan", &["tenancy.requireClass=true"])
        .await
        .with_replica("a")
        .await;
    let team = format!("u-{}", random_hex(3));
    label(stage.client(), stage.ns(), &team).await;
    stage.apply_scheduler(&paused_scheduler("orca")).await;
    let ec2 = Ec2Stage::new(&stage, "unused").await;
    let (strict, lax) = (
        format!("strict-{}", random_hex(3)),
        format!("lax-{}", random_hex(3)),
    );
    let forbids = "  poolLimits: {orphan: false}";
    apply_class(&stage, &class(&strict, &ec2, &team, forbids)).await;
    apply_class(&stage, &class(&lax, &ec2, &team, "")).await;
    let alice = editor(&stage, stage.ns(), "alice").await;
    let mut p = held_pool("p", &strict, 1);
    p.spec.drain_timeout_seconds = 5;
    create_as_editor(&alice, stage.ns(), &p).await;
    let launched = until_present(&stage, &ec2, stage.ns(), 1).await;
    // Busy: nothing but the deletion's drain time-out ends it.
    hold_busy(stage.url(), &format!("{}/p", stage.ns()), &launched).await;
    stage
        .wait_pool(
            "p",
            "where it runs in its status",
            Duration::from_secs(30),
            |s: &WarmPoolStatus| s.place.is_some(),
        )
        .await;

    let switched = serde_json::json!({"spec": {"classRef": {"name": lax}, "onDelete": "Orphan"}});
    patch_as(&alice, stage.ns(), "p", switched)
        .await
        .unwrap_or_else(|e| panic!("switching to the lax class: {e}"));
    let hers = Api::<WarmPool>::namespaced(alice.clone(), stage.ns());
    hers.delete("p", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting p: {e}"));
    // Nor does she let it go by taking the operator's finalizer off.
    let said = patch_as(
        &alice,
        stage.ns(),
        "p",
        serde_json::json!({"metadata": {"finalizers": null}}),
    )
    .await
    .expect_err("the operator's finalizer is not an editor's to remove");
    assert!(
        said.contains("the finalizer orca.dev/warm-pool is the operator's"),
        "{said}"
    );
    none_left(
        &ec2,
        stage.ns(),
        &launched,
        "the strict class's instance terminated",
    )
    .await;
    gone(&stage.pools(), "p").await;
}
