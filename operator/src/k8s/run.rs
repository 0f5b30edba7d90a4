//! `orca-operator run`: the Kubernetes mode. A kube-rs `Controller` on
//! Schedulers owning their Pods and Jobs, and the WarmPool controller
//! beside it (one of each per watched namespace, or one for all), run only
//! while this replica holds the Lease, each action behind the Lease's
//! fence; the HTTP server for `/metrics`, `/healthz` and `/readyz` runs all
//! along.

use std::{
    net::SocketAddr,
    sync::{atomic::AtomicI64, Arc},
    time::Duration,
};

use futures::{future, FutureExt};
use kube::Client;
use prometheus_client::{metrics::gauge::Gauge, registry::Registry};
use tracing::{info, warn};

use crate::fence::Fence;
use crate::runtime::{
    crd_check, in_use,
    leader::{self, Election},
    server::{self, Progress, Readiness},
    watches::{ClusterWatches, Watches},
};
use crate::warmpool::k8s::classes::{self, ClassSources};
use crate::warmpool::k8s::PoolControllerConfig;
use crate::warmpool::{Ownership, Tuning};

/// How long a call about the Lease may take: well within the 12 s its
/// fence stays open after a renewal starts.
const LEASE_CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// The arguments of `orca-operator run` (the Helm chart passes them).
#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    /// A namespace to watch; repeat for several; none watches all.
    #[arg(long = "namespace")]
    namespaces: Vec<String>,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    #[arg(long, default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// The Lease the replicas elect a leader on.
    #[arg(long, default_value = "orca-operator")]
    lease_name: String,
    /// The Lease's namespace; the operator's own (`POD_NAMESPACE`) by default.
    #[arg(long, env = "POD_NAMESPACE")]
    lease_namespace: Option<String>,
    /// This replica's name in the Lease and in Events.
    #[arg(long, env = "POD_NAME", hide = true)]
    pod_name: Option<String>,
    /// This cluster's name, unique among the clusters whose operators share
    /// an AWS account: every instance a WarmPool launches is tagged with it
    /// (`orca.dev/cluster`), and only instances tagged so are listed,
    /// counted or terminated. Changing it later leaves the instances
    /// launched under the old name to their agents.
    #[arg(long, env = "ORCA_CLUSTER_NAME", value_parser = crate::warmpool::tags::cluster_name)]
    cluster_name: String,
    /// The operator's RoleBinding in each watched namespace (the chart's,
    /// with `watchNamespaces`): kept while Schedulers or WarmPools are left
    /// there, so that deleting the namespace cannot take away the
    /// permissions their deletion needs.
    #[arg(long)]
    role_binding: Option<String>,
    /// A reconcile running this long has hung (every call in one has a
    /// time limit): `/healthz` then fails, so that the kubelet restarts
    /// the replica.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    stuck_after_seconds: u64,
    /// A directory whose files a database URL's `sslrootcert` may name
    /// (repeat for several; the chart's `databaseCaDirectories`). None: a
    /// URL's CA comes only from its Secret (`urlSecretRef.caKey`) — a
    /// path in a URL is its Scheduler's owner's to choose, and the
    /// operator reads no file they name elsewhere.
    #[arg(long = "database-ca-dir", value_name = "DIR")]
    database_ca_dirs: Vec<std::path::PathBuf>,
}

/// Runs the Kubernetes mode until SIGTERM or Ctrl-C.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    if let Err(was) = orca_db::ca::restrict_ca_files(args.database_ca_dirs.clone()) {
        anyhow::bail!("the CA files' directories were set already: {was:?}");
    }
    let config = kube::Config::infer().await?;
    let client = Client::try_from(config.clone())?;
    // The lease's own client gives up on a call well within the fence: a
    // renewal stuck on the network must not hold up the next one.
    let mut lease_config = config;
    lease_config.connect_timeout = Some(LEASE_CALL_TIMEOUT);
    lease_config.read_timeout = Some(LEASE_CALL_TIMEOUT);
    lease_config.write_timeout = Some(LEASE_CALL_TIMEOUT);
    let lease_client = Client::try_from(lease_config)?;
    let identity = match &args.pod_name {
        Some(name) => name.clone(),
        None => std::env::var("HOSTNAME")
            .unwrap_or_else(|_| format!("orca-operator-{}", std::process::id())),
    };
    let lease_namespace = args
        .lease_namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());

    let mut registry = Registry::default();
    let (metrics, pool_metrics, leading) = super::metrics::register_all(&mut registry);
    let registry = Arc::new(registry);
    let progress = Progress::new(Duration::from_secs(args.stuck_after_seconds));
    let ready = Readiness::with_progress(progress.clone());
    let server = tokio::spawn(server::serve(args.listen, registry, ready.clone()));

    let namespaces = args.namespaces.clone();
    let cluster = args.cluster_name.clone();
    let role_binding = args.role_binding.clone();
    // Each term of leadership gets contexts of its own, behind its fence.
    let work = {
        let client = client.clone();
        let identity = identity.clone();
        move |fence: Fence| {
            // What this process wrote to SSM in an earlier term may have
            // been deleted by the replica that led meanwhile.
            crate::warmpool::ssm::new_term();
            let ctx = Arc::new(
                crate::scheduler::k8s::Context::new(
                    client.clone(),
                    metrics.clone(),
                    &identity,
                    fence.clone(),
                )
                .with_progress(progress.clone()),
            );
            let pools = PoolControllerConfig::new(
                Tuning::default()
                    .with_replica(Some(identity.clone()))
                    .with_cluster(cluster.clone()),
                fence,
            )
            .with_progress(progress.clone())
            .with_metrics(pool_metrics.clone());
            let term = Leading::new(&leading);
            let controllers = controllers(
                client.clone(),
                namespaces.clone(),
                role_binding.clone(),
                ctx,
                pools,
            );
            // CRDs made older under the controllers end the term; a
            // replica taking the Lease from one that stepped down for them
            // looks before it acts.
            let crds = client.clone();
            async move {
                let _term = term;
                if let Some(stale) = crd_check::stale(&crds).await {
                    return Err(stale.into());
                }
                tokio::select! {
                    done = controllers => done,
                    stale = crd_check::until_stale(&crds) => Err(stale.into()),
                }
            }
        }
    };
    let lease = (args.lease_name.as_str(), lease_namespace.as_str());
    let led = elect((&client, &lease_client), &ready, lease, &identity, work).await;
    server.abort();
    led
}

/// Stands for the Lease `lease` (name, namespace) as `identity` and runs
/// `work` while it leads, as long as the CRDs fit this build: held back
/// while they do not, at the start and after a term they ended (see
/// [`crd_check`]). Until SIGTERM or Ctrl-C, or the controllers fail.
/// `clients`: the controllers' and the Lease's own.
async fn elect<W, F>(
    clients: (&Client, &Client),
    ready: &Readiness,
    lease: (&str, &str),
    identity: &str,
    work: W,
) -> anyhow::Result<()>
where
    W: Fn(Fence) -> F,
    F: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let (client, lease_client) = clients;
    let (lease_name, lease_namespace) = lease;
    let mut shutdown = Box::pin(shutdown_signal());
    loop {
        // CRDs older than this build: stand for nothing until they are
        // upgraded, rather than write fields that are pruned.
        let reference = crd_check::lease_reference(lease_name, lease_namespace);
        tokio::select! {
            () = crd_check::wait_for_crds(client, ready, reference, identity) => {}
            () = &mut shutdown => return Ok(()),
        }
        let election = Election::new(lease_name, lease_namespace, identity);
        info!(lease = %lease_name, namespace = %lease_namespace, identity = %identity, "waiting for the lease");
        let led = leader::lead(
            lease_client.clone(),
            election,
            ready.clone(),
            &work,
            &mut shutdown,
        )
        .await;
        // The CRDs made older while it led: the fence is closed and the
        // lease released; wait for them again, as at the start.
        if let Some(stale) = led
            .as_ref()
            .err()
            .and_then(|e| e.downcast_ref::<crd_check::Stale>())
        {
            warn!("{stale}");
            ready.set(false);
            continue;
        }
        return led;
    }
}

/// The Scheduler and WarmPool controllers of this replica: one of each per
/// namespace (the chart's RBAC may cover only those), or one over all.
async fn controllers(
    client: Client,
    namespaces: Vec<String>,
    role_binding: Option<String>,
    ctx: Arc<crate::scheduler::k8s::Context>,
    pools: PoolControllerConfig,
) -> anyhow::Result<()> {
    let scopes: Vec<Option<String>> = if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.into_iter().map(Some).collect()
    };
    let mut runs = Vec::new();
    // The classes and the Namespaces' labels: one watch each, whatever the
    // scopes.
    let mut cluster = ClusterWatches::new(&client);
    let mut sources = ClassSources::new(
        &mut cluster,
        scopes.clone(),
        pools.listings().clone(),
        Ownership::of_cluster(pools.tuning().operator(), pools.tuning().cluster()),
    );
    for scope in scopes {
        // One watch each of Schedulers, WarmPools and Secrets per scope,
        // which every controller follows.
        let mut watches = Watches::new(&client, &scope);
        sources.add_pools(watches.pools());
        runs.push(
            crate::scheduler::k8s::run(client.clone(), scope.clone(), ctx.clone(), &mut watches)
                .boxed(),
        );
        runs.push(
            crate::warmpool::k8s::run(client.clone(), pools.clone(), &mut watches, &mut cluster)
                .boxed(),
        );
        runs.push(
            in_use::run(
                client.clone(),
                scope,
                role_binding.clone(),
                (pools.fence().clone(), pools.progress().clone()),
                &mut watches,
            )
            .boxed(),
        );
        runs.push(watches.run().boxed());
    }
    runs.push(
        classes::run(
            client.clone(),
            pools.fence().clone(),
            pools.budgets().clone(),
            sources,
        )
        .map(|()| future::pending::<()>())
        .flatten()
        .boxed(),
    );
    runs.push(cluster.run().boxed());
    future::join_all(runs).await;
    anyhow::bail!("the controllers' watches ended")
}

/// `orca_operator_leader` at 1 for as long as it lives: a term of
/// leadership, however it ends (the controllers failed, or were dropped).
struct Leading(Gauge<i64, AtomicI64>);

impl Leading {
    fn new(gauge: &Gauge<i64, AtomicI64>) -> Self {
        gauge.set(1);
        Leading(gauge.clone())
    }
}

impl Drop for Leading {
    fn drop(&mut self) {
        self.0.set(0);
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            warn!("cannot listen for Ctrl-C: {e}");
            future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                warn!("cannot listen for SIGTERM: {e}");
                future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => info!("Ctrl-C: stopping"),
        _ = term => info!("SIGTERM: stopping"),
    }
}
