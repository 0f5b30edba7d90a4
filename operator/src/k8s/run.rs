//! `orca-operator run`: the Kubernetes mode. A kube-rs `Controller` on
//! Schedulers owning their Pods and Jobs, and the WarmPool controller
//! beside it (one of each per watched namespace, or one for all), run only
//! while this replica holds the Lease, each action behind the Lease's
//! fence; the HTTP server for `/metrics`, `/healthz` and `/readyz` runs all
//! along.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use futures::future;
use kube::Client;
use prometheus_client::registry::Registry;
use tracing::{info, warn};

use super::{
    leader::{self, Election, Fence},
    scheduler::{self, Context},
    server::{self, Readiness},
    Metrics, MANAGER,
};
use crate::k8s::warmpool::{self, PoolControllerConfig};
use crate::pool::{PoolMetrics, Tuning};

/// How long a call about the Lease may take: well within the 12 s its
/// fence stays open after a renewal starts.
const LEASE_CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// The arguments of `orca-operator run` (the Helm chart passes them).
#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    /// A namespace to watch; repeat for several; none watches all.
    #[arg(long = "namespace")]
    pub namespaces: Vec<String>,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// The Lease the replicas elect a leader on.
    #[arg(long, default_value = "orca-operator")]
    pub lease_name: String,
    /// The Lease's namespace; the operator's own (`POD_NAMESPACE`) by default.
    #[arg(long, env = "POD_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// This replica's name in the Lease and in Events.
    #[arg(long, env = "POD_NAME", hide = true)]
    pub pod_name: Option<String>,
}

/// Runs the Kubernetes mode until SIGTERM or Ctrl-C.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
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
    let metrics = Metrics::register(&mut registry);
    let pool_metrics = PoolMetrics::register(&mut registry);
    let registry = Arc::new(registry);
    let ready = Readiness::default();
    let server = tokio::spawn(server::serve(args.listen, registry, ready.clone()));

    let namespaces = args.namespaces.clone();
    // Each term of leadership gets contexts of its own, behind its fence.
    let work = {
        let client = client.clone();
        let identity = identity.clone();
        move |fence: Fence| {
            let ctx = Arc::new(Context::new(
                client.clone(),
                metrics.clone(),
                &identity,
                fence.clone(),
            ));
            let pools = PoolControllerConfig {
                tuning: Tuning {
                    replica: Some(identity.clone()),
                    ..Tuning::default()
                },
                metrics: Some(pool_metrics.clone()),
                reporter: MANAGER.into(),
                fence,
            };
            controllers(client.clone(), namespaces.clone(), ctx, pools)
        }
    };
    let election = Election::new(&args.lease_name, &lease_namespace, &identity);
    info!(lease = %args.lease_name, namespace = %lease_namespace, identity = %identity, "waiting for the lease");
    let led = leader::lead(lease_client, election, ready, work, shutdown_signal()).await;
    server.abort();
    led
}

/// The Scheduler and WarmPool controllers of this replica: one of each per
/// namespace (the chart's RBAC may cover only those), or one over all.
async fn controllers(
    client: Client,
    namespaces: Vec<String>,
    ctx: Arc<Context>,
    pools: PoolControllerConfig,
) -> anyhow::Result<()> {
    let scopes: Vec<Option<String>> = if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.into_iter().map(Some).collect()
    };
    let pool_runs = scopes
        .iter()
        .map(|ns| warmpool::run(client.clone(), ns.clone(), pools.clone()));
    let runs = scopes
        .iter()
        .map(|ns| scheduler::run(client.clone(), ns.clone(), ctx.clone()));
    future::join(future::join_all(runs), future::join_all(pool_runs)).await;
    anyhow::bail!("the controllers' watches ended")
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
