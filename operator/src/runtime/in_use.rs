//! What the controllers need while they need it, kept from deletion with
//! the finalizer [`FINALIZER`], as Kubernetes keeps a volume in use:
//!
//! - **the Secrets** that Schedulers and WarmPools read their database URL
//!   from. A Secret deleted first — `kubectl delete -f` of a directory
//!   removes it in milliseconds, a namespace's deletion removes everything
//!   at once — stays readable until its last user has gone: the Scheduler's
//!   deletion still reaches the database to drain its instances (no run is
//!   lost), and the WarmPool's to end its rows race-free before it
//!   terminates its instances (none is left behind), however long that
//!   takes and whether or not the operator restarts in between. Users of
//!   Secret `ns/s`: every Scheduler of `ns` naming it (while it exists,
//!   being deleted or not), and every WarmPool of `ns` whose Scheduler names
//!   it or whose `status.databaseSecret` does (the one its pool last ran on:
//!   a WarmPool may outlive its Scheduler). A Secret being deleted while
//!   used gets a Warning Event on each user, once.
//! - **the operator's own RoleBinding** in each watched namespace (the
//!   chart's `watchNamespaces`; `--role-binding`; it binds a ClusterRole):
//!   deleting the namespace deletes it with everything else, and without it
//!   the operator could not finish — remove the finalizers of — the
//!   Schedulers and WarmPools being deleted there. It is kept while any of
//!   those is left, and let go last.
//!
//! Two kube `Controller`s, one over the Secrets' metadata and one over the
//! RoleBinding's, follow the watches of Schedulers and WarmPools that the
//! controllers share, which trigger them; each adds the finalizer to what is in use and removes it
//! from what is not any more.
//!
//! The in-use guard — its watches, its two
//! finalizer rules and what it says when it may not act.

use std::{
    collections::HashSet,
    future::Future,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::{channel::mpsc, future, StreamExt};
use k8s_openapi::api::{
    core::v1::{ObjectReference, Secret},
    rbac::v1::RoleBinding,
};
use kube::{
    core::PartialObjectMeta,
    runtime::{
        controller::Action,
        events::{Recorder, Reporter},
        reflector::{self, ObjectRef, Store},
        watcher, Controller, WatchStreamExt,
    },
    Api, Client, Resource, ResourceExt,
};

use super::{
    finalizer::{self, FinalizerError},
    guard,
    names::MANAGER,
    server::Progress,
    shell::{self, Reconciler},
    status::post_event,
    watches::{Listed, SecretMeta, Watches},
};
use crate::backoff::PerObject;
use crate::by_object::locked;
use crate::crd::{Scheduler, WarmPool};
use crate::fence::Fence;

/// The finalizer that keeps a Secret while a Scheduler or WarmPool uses it,
/// and the operator's RoleBinding while any is left in its namespace.
pub const FINALIZER: &str = "orca.dev/in-use";

type BindingMeta = PartialObjectMeta<RoleBinding>;

/// Why a Secret or the operator's RoleBinding could not be kept or let go:
/// its finalizer could not be changed, or the pass panicked. A fenced
/// pass is no failure (see [`crate::fence::MaybeFenced`]).
#[derive(Debug, thiserror::Error)]
pub enum InUseError {
    #[error("{what}: {source}")]
    Finalizer {
        what: String,
        #[source]
        source: FinalizerError,
    },
    #[error("{what}: {source}")]
    Stopped {
        what: String,
        #[source]
        source: guard::Stopped,
    },
}

struct Ctx {
    client: Client,
    fence: Fence,
    progress: Progress,
    recorder: Recorder,
    schedulers: Store<Scheduler>,
    pools: Store<WarmPool>,
    /// The Secrets' metadata: the RoleBinding goes only after every Secret
    /// kept in its namespace has been let go, or the operator could not.
    secrets: Store<SecretMeta>,
    /// Whether the watches of those three have listed.
    listed: [Listed; 3],
    /// Asks the RoleBinding's controller to look again.
    to_binding: mpsc::UnboundedSender<()>,
    /// What was said on the users already: the uids of Secrets whose
    /// deletion while in use was, and refusals' messages.
    said: Mutex<HashSet<String>>,
}

impl Ctx {
    /// Whether the watches of Schedulers, WarmPools and Secrets have
    /// listed, waiting a little for them.
    async fn listed(&self) -> bool {
        tokio::time::timeout(Duration::from_secs(5), Listed::all(&self.listed))
            .await
            .unwrap_or(false)
    }
}

/// Who uses Secret `namespace/name`: `Kind namespace/name` of each user.
/// One look at each Scheduler and each WarmPool: it runs on every change
/// of either, and a replica's start brings a change of each of thousands.
fn users(
    schedulers: &[Arc<Scheduler>],
    pools: &[Arc<WarmPool>],
    namespace: &str,
    name: &str,
) -> Vec<(ObjectReference, String)> {
    let here = |m: &kube::core::ObjectMeta| m.namespace.as_deref() == Some(namespace);
    let naming: Vec<&Scheduler> = schedulers
        .iter()
        .filter(|s| here(&s.metadata) && s.spec.database.url_secret_ref.name == name)
        .map(|s| s.as_ref())
        .collect();
    // A WarmPool uses the Secret through its Scheduler.
    let through: HashSet<&str> = naming
        .iter()
        .filter_map(|s| s.metadata.name.as_deref())
        .collect();
    let mut out: Vec<(ObjectReference, String)> = naming
        .iter()
        .map(|s| {
            (
                s.object_ref(&()),
                format!("Scheduler {namespace}/{}", s.name_any()),
            )
        })
        .collect();
    for p in pools.iter().filter(|p| here(&p.metadata)) {
        let recorded = p.status.as_ref().is_some_and(|s| {
            s.database_secret.as_ref().is_some_and(|r| r.name == name)
                || s.retiring.iter().any(|r| r.database_secret.name == name)
        });
        if recorded || through.contains(p.spec.scheduler.as_str()) {
            out.push((
                p.object_ref(&()),
                format!("WarmPool {namespace}/{}", p.name_any()),
            ));
        }
    }
    out
}

/// The guard over `scope` (a namespace; `None`: all), following the
/// Schedulers, WarmPools and Secrets of `watches` (shared with the
/// controllers; see [`super::watches`]); with `binding` (the operator's
/// RoleBinding in `scope`), it keeps that too. The future runs until the
/// watches end.
pub fn run(
    client: Client,
    scope: Option<String>,
    binding: Option<String>,
    (fence, progress): (Fence, Progress),
    watches: &mut Watches,
) -> impl Future<Output = ()> + Send + 'static {
    let (secret_store, secrets_listed, secret_stream) = watches.secrets().subscribe().stream();
    let (scheduler_store, schedulers_listed, schedulers) =
        watches.schedulers().subscribe().stream();
    let (pool_store, pools_listed, pools) = watches.pools().subscribe().stream();
    async move {
        let secret_stream = secret_stream.applied_objects();
        // Each change of a Scheduler or WarmPool — a deletion included: the
        // last user gone is what frees a Secret — triggers the Secrets it
        // concerns and the RoleBinding.
        let (to_secrets, secret_triggers) = mpsc::unbounded::<ObjectRef<SecretMeta>>();
        let (to_binding, binding_triggers) = mpsc::unbounded::<()>();
        let to_binding_after_secrets = to_binding.clone();
        let schedulers = {
            let (to_secrets, to_binding) = (to_secrets.clone(), to_binding.clone());
            schedulers.touched_objects().for_each(move |s| {
                if let Ok(s) = s {
                    let ns = crate::crd::namespace_of(&s);
                    let secret = &s.spec.database.url_secret_ref.name;
                    let _ = to_secrets.unbounded_send(ObjectRef::new(secret).within(&ns));
                    let _ = to_binding.unbounded_send(());
                }
                future::ready(())
            })
        };
        let pools = {
            let by_pool = scheduler_store.clone();
            pools.touched_objects().for_each(move |p| {
                if let Ok(p) = p {
                    let ns = crate::crd::namespace_of(&p);
                    if let Some(status) = &p.status {
                        let recorded = status.database_secret.iter();
                        let former = status.retiring.iter().map(|r| &r.database_secret);
                        for r in recorded.chain(former) {
                            let _ = to_secrets.unbounded_send(ObjectRef::new(&r.name).within(&ns));
                        }
                    }
                    if let Some(s) = by_pool.get(&ObjectRef::new(&p.spec.scheduler).within(&ns)) {
                        let secret = &s.spec.database.url_secret_ref.name;
                        let _ = to_secrets.unbounded_send(ObjectRef::new(secret).within(&ns));
                    }
                    let _ = to_binding.unbounded_send(());
                }
                future::ready(())
            })
        };
        let ctx = Arc::new(Ctx {
            recorder: Recorder::new(client.clone(), Reporter::from(MANAGER)),
            client: client.clone(),
            fence,
            progress,
            schedulers: scheduler_store,
            pools: pool_store,
            secrets: secret_store.clone(),
            listed: [schedulers_listed, pools_listed, secrets_listed],
            to_binding: to_binding_after_secrets,
            said: Mutex::new(HashSet::new()),
        });
        let guard_secrets = Controller::for_stream(secret_stream, secret_store)
            .reconcile_on(secret_triggers)
            .run(
                shell::reconcile,
                shell::error_policy,
                Guard::<SecretMeta>::new(ctx.clone()),
            )
            .for_each(|result| async move {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "secret in-use guard");
                }
            });
        let guard_binding = keep_binding(client, scope.zip(binding), binding_triggers, ctx);
        futures::join!(schedulers, pools, guard_secrets, guard_binding);
    }
}

/// The guard of the operator's RoleBinding `namespace/name`, looking
/// at it on each of `triggers`; without one, the triggers go nowhere.
async fn keep_binding(
    client: Client,
    binding: Option<(String, String)>,
    triggers: mpsc::UnboundedReceiver<()>,
    ctx: Arc<Ctx>,
) {
    let Some((ns, name)) = binding else {
        triggers.for_each(|_| future::ready(())).await;
        return;
    };
    let bindings: Api<BindingMeta> = Api::namespaced(client, &ns);
    let only = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let (store, writer) = reflector::store::<BindingMeta>();
    let stream = reflector::reflector(writer, watcher(bindings, only))
        .default_backoff()
        .applied_objects();
    let this = ObjectRef::<BindingMeta>::new(&name).within(&ns);
    Controller::for_stream(stream, store)
        .reconcile_on(triggers.map(move |()| this.clone()))
        .run(
            shell::reconcile,
            shell::error_policy,
            Guard::<BindingMeta>::new(ctx),
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "role binding in-use guard");
            }
        })
        .await;
}

/// What the guard keeps — a Secret's or the RoleBinding's metadata — and
/// how: its pass, and who hears what it cannot do.
trait Kept: Resource + Send + Sync + 'static {
    const KIND: &'static str;

    /// One pass over this object: its finalizer added or removed.
    fn keep(
        &self,
        ctx: &Ctx,
        ns: &str,
    ) -> impl Future<Output = Result<Action, FinalizerError>> + Send;

    /// Who depends on this object (only they can grant a permission the
    /// guard lacks), and how a note to them begins.
    fn dependents(&self, ctx: &Ctx) -> (Vec<(ObjectReference, String)>, String);
}

impl Kept for SecretMeta {
    const KIND: &'static str = "Secret";

    async fn keep(&self, ctx: &Ctx, ns: &str) -> Result<Action, FinalizerError> {
        guard_secret(self, ctx, ns).await
    }

    /// Its users.
    fn dependents(&self, ctx: &Ctx) -> (Vec<(ObjectReference, String)>, String) {
        let (ns, name) = (crate::crd::namespace_of(self), self.name_any());
        let users = users(&ctx.schedulers.state(), &ctx.pools.state(), &ns, &name);
        let note =
            format!("Secret {ns}/{name} cannot be kept while it is used (finalizer {FINALIZER})");
        (users, note)
    }
}

impl Kept for BindingMeta {
    const KIND: &'static str = "RoleBinding";

    async fn keep(&self, ctx: &Ctx, ns: &str) -> Result<Action, FinalizerError> {
        guard_binding(self, ctx, ns).await
    }

    /// Each Scheduler and WarmPool of its namespace: they are what it is
    /// kept for.
    fn dependents(&self, ctx: &Ctx) -> (Vec<(ObjectReference, String)>, String) {
        let here = self.namespace();
        let (schedulers, pools) = (ctx.schedulers.state(), ctx.pools.state());
        let users = schedulers
            .iter()
            .filter(|s| s.namespace() == here)
            .map(|s| (s.object_ref(&()), s.name_any()))
            .chain(
                pools
                    .iter()
                    .filter(|p| p.namespace() == here)
                    .map(|p| (p.object_ref(&()), p.name_any())),
            )
            .collect();
        let note = format!(
            "the operator's RoleBinding {}/{} cannot be kept while this namespace has \
             Schedulers or WarmPools (finalizer {FINALIZER})",
            here.unwrap_or_default(),
            self.name_any()
        );
        (users, note)
    }
}

/// The guard of one kind `K`, in the controllers' shell
/// ([`super::shell`]), with a back-off per object of its own.
struct Guard<K> {
    ctx: Arc<Ctx>,
    backoff: PerObject,
    kind: std::marker::PhantomData<fn() -> K>,
}

impl<K> Guard<K> {
    fn new(ctx: Arc<Ctx>) -> Arc<Self> {
        Arc::new(Guard {
            ctx,
            backoff: PerObject::default(),
            kind: std::marker::PhantomData,
        })
    }
}

impl<K: Kept> Reconciler for Guard<K> {
    const KIND: &'static str = K::KIND;
    type Object = K;
    type Error = InUseError;

    async fn stages(guard: Arc<Self>, object: Arc<K>) -> Result<Action, InUseError> {
        let (ns, name) = (crate::crd::namespace_of(object.as_ref()), object.name_any());
        let action =
            object
                .keep(&guard.ctx, &ns)
                .await
                .map_err(|source| InUseError::Finalizer {
                    what: format!("{} {ns}/{name}", K::KIND),
                    source,
                })?;
        guard.backoff.succeeded(&ns, &name);
        Ok(action)
    }

    fn stopped(&self, object: &K, stop: guard::Stopped) -> InUseError {
        let (ns, name) = (crate::crd::namespace_of(object), object.name_any());
        InUseError::Stopped {
            what: format!("{} {ns}/{name}", K::KIND),
            source: stop,
        }
    }

    fn stopped_of(error: &InUseError) -> Option<&guard::Stopped> {
        match error {
            InUseError::Stopped { source, .. } => Some(source),
            InUseError::Finalizer { .. } => None,
        }
    }

    fn stage(error: &InUseError) -> &'static str {
        match error {
            InUseError::Stopped { source, .. } => source.stage(),
            InUseError::Finalizer { .. } => "finalizer",
        }
    }

    /// Said on those who depend on `object`, once a message.
    async fn degraded(&self, object: &K, reason: &'static str, message: String) {
        let (users, note) = object.dependents(&self.ctx);
        say_once(&self.ctx, &users, reason, format!("{note}: {message}")).await
    }

    fn progress(&self) -> &Progress {
        &self.ctx.progress
    }

    fn backoff(&self) -> &PerObject {
        &self.backoff
    }

    /// Not counted: the guard has no metric of its own (the log and the
    /// users' Events say it).
    fn count_failed(&self, _: &str, _: &str, _: &'static str) {}

    /// A pass of this replica's changed the finalizers a moment ago.
    fn lost_race(error: &InUseError) -> bool {
        matches!(
            error,
            InUseError::Finalizer {
                source: FinalizerError::Changed(_),
                ..
            }
        )
    }
}

/// Posts `note` on each of `users` unless it was said already.
async fn say_once(ctx: &Ctx, users: &[(ObjectReference, String)], reason: &str, note: String) {
    let news = locked(&ctx.said).insert(note.clone());
    if news {
        warn_users(ctx, users, reason, &note).await;
    }
}

/// Posts a Warning Event `reason` with `note` on each of `users`.
async fn warn_users(ctx: &Ctx, users: &[(ObjectReference, String)], reason: &str, note: &str) {
    for (reference, _) in users {
        if post_event(&ctx.recorder, &ctx.fence, reference, true, reason, note)
            .await
            .is_err()
        {
            return;
        }
    }
}

async fn guard_secret(secret: &SecretMeta, ctx: &Ctx, ns: &str) -> Result<Action, FinalizerError> {
    let name = secret.name_any();
    let held = finalizer::has(&secret.metadata, FINALIZER);
    // "Nobody uses it" is believed only of watches that have listed: a
    // replica just started (a restart mid-teardown) knows no user yet.
    if held && !ctx.listed().await {
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let users = users(&ctx.schedulers.state(), &ctx.pools.state(), ns, &name);
    let deleting = secret.metadata.deletion_timestamp.is_some();
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    match (users.is_empty(), held) {
        // No finalizer can be added to an object being deleted: too late.
        (false, false) if !deleting => {
            finalizer::add(&api, &ctx.fence, &secret.metadata, FINALIZER).await?;
            tracing::info!(secret = %name, namespace = %ns, users = ?users.iter().map(|u| &u.1).collect::<Vec<_>>(),
                "Secret in use: finalizer added");
        }
        (false, true) if deleting => say_kept(secret, ctx, ns, &users).await,
        (true, true) => {
            let removed = finalizer::remove(&api, &ctx.fence, &secret.metadata, FINALIZER).await?;
            tracing::info!(secret = %name, namespace = %ns, removed, "Secret no longer in use: finalizer removed");
            // The RoleBinding may go now, if it was waiting for this.
            let _ = ctx.to_binding.unbounded_send(());
        }
        _ => {}
    }
    // The triggers cover every change; this is only a safety net.
    Ok(Action::requeue(Duration::from_secs(600)))
}

/// A Secret in use is being deleted: each user hears, once, why it stays.
async fn say_kept(secret: &SecretMeta, ctx: &Ctx, ns: &str, users: &[(ObjectReference, String)]) {
    let uid = secret.metadata.uid.clone().unwrap_or_default();
    let news = locked(&ctx.said).insert(uid);
    if !news {
        return;
    }
    let names: Vec<&str> = users.iter().map(|u| u.1.as_str()).collect();
    let note = format!(
        "Secret {ns}/{} is being deleted while {} use it: it is kept (finalizer {FINALIZER}) \
         until they have gone, so that they can still drain and terminate through its database",
        secret.name_any(),
        names.join(", ")
    );
    tracing::info!(secret = %secret.name_any(), namespace = %ns, "{note}");
    warn_users(ctx, users, "SecretInUse", &note).await;
}

/// The operator's RoleBinding in a watched namespace: held while any
/// Scheduler or WarmPool is left there. (The chart binds a ClusterRole, so
/// the binding is all the namespace holds of the operator's permissions.)
async fn guard_binding(
    binding: &BindingMeta,
    ctx: &Ctx,
    ns: &str,
) -> Result<Action, FinalizerError> {
    let key = format!("RoleBinding {ns}/{}", binding.name_any());
    let here = Some(ns.to_string());
    let held = finalizer::has(&binding.metadata, FINALIZER);
    if held && !ctx.listed().await {
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    // Let go last: while a Scheduler or WarmPool is left, or a Secret
    // still kept here, the operator needs the permissions it grants.
    let kept =
        |m: &Arc<SecretMeta>| m.namespace() == here && finalizer::has(&m.metadata, FINALIZER);
    let secrets_kept = ctx.secrets.state().iter().any(kept);
    let left = ctx.schedulers.state().iter().any(|s| s.namespace() == here)
        || ctx.pools.state().iter().any(|p| p.namespace() == here)
        || secrets_kept;
    let api: Api<RoleBinding> = Api::namespaced(ctx.client.clone(), ns);
    // No finalizer can be added to an object being deleted: too late.
    let deleting = binding.metadata.deletion_timestamp.is_some();
    if left && !held && !deleting {
        finalizer::add(&api, &ctx.fence, &binding.metadata, FINALIZER).await?;
        tracing::info!(binding = %key, "Schedulers or WarmPools here: the operator's RoleBinding is kept until they have gone");
    } else if !left && held {
        let removed = finalizer::remove(&api, &ctx.fence, &binding.metadata, FINALIZER).await?;
        tracing::info!(binding = %key, removed, "no Scheduler or WarmPool left here: the RoleBinding's finalizer is removed");
    }
    // A Secret's release shows in its watch a moment after it is made:
    // look again soon while only Secrets keep it.
    if secrets_kept && deleting {
        return Ok(Action::requeue(Duration::from_secs(2)));
    }
    Ok(Action::requeue(Duration::from_secs(600)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scheduler(ns: &str, name: &str, secret: &str) -> Arc<Scheduler> {
        let mut s: Scheduler = serde_json::from_value(serde_json::json!({
            "apiVersion": "orca.dev/v1alpha1", "kind": "Scheduler",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"image": "orca:v1", "database": {"urlSecretRef": {"name": secret, "key": "url"}}}
        }))
        .unwrap();
        s.metadata.uid = Some(format!("uid-{name}"));
        Arc::new(s)
    }

    fn pool(ns: &str, name: &str, scheduler: &str, recorded: Option<&str>) -> Arc<WarmPool> {
        let mut p: WarmPool = serde_json::from_value(serde_json::json!({
            "apiVersion": "orca.dev/v1alpha1", "kind": "WarmPool",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"scheduler": scheduler, "region": "us-east-1", "idle": {"min": 0, "max": 1},
                     "maxInstances": 1, "launch": {"imageId": "ami-1", "instanceTypes": ["t3.micro"],
                     "subnetIds": ["subnet-a"], "runCommand": "true"}}
        }))
        .unwrap();
        if let Some(r) = recorded {
            p.status = Some(crate::crd::WarmPoolStatus {
                database_secret: Some(crate::crd::SecretKeyRef {
                    name: r.into(),
                    key: "url".into(),
                    ca_key: None,
                }),
                ..Default::default()
            });
        }
        Arc::new(p)
    }

    fn names(u: Vec<(ObjectReference, String)>) -> Vec<String> {
        u.into_iter().map(|(_, n)| n).collect()
    }

    #[test]
    fn who_uses_a_secret() {
        let schedulers = vec![scheduler("a", "orca", "db"), scheduler("b", "orca", "db")];
        let pools = vec![
            pool("a", "runners", "orca", None),
            // Its Scheduler is gone; the Secret it last ran on is recorded.
            pool("a", "orphans", "gone", Some("db")),
            pool("a", "other", "gone", Some("other-db")),
        ];
        assert_eq!(
            names(users(&schedulers, &pools, "a", "db")),
            [
                "Scheduler a/orca",
                "WarmPool a/runners",
                "WarmPool a/orphans"
            ]
        );
        assert_eq!(
            names(users(&schedulers, &pools, "b", "db")),
            ["Scheduler b/orca"]
        );
        assert!(users(&schedulers, &pools, "c", "db").is_empty());
        assert!(users(&schedulers, &[], "a", "nobody").is_empty());
    }
}
