//! Leader election on a `coordination.k8s.io` Lease (kube-lease-manager):
//! only the replica holding the lease runs the controllers, so two replicas
//! never act at once. Losing the lease (or failing to renew it) stops them
//! at once — the controllers' task is aborted, in-flight reconciles with it;
//! every step is idempotent and re-derived, so the next leader carries on.

use std::{future::Future, time::Duration};

use kube::Client;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::server::Readiness;

/// Which Lease, and who this replica is.
#[derive(Clone, Debug)]
pub struct Election {
    pub lease_name: String,
    pub namespace: String,
    /// Unique among the replicas: the pod's name.
    pub identity: String,
    /// How long a lease holds without renewal.
    pub duration_seconds: u64,
    /// Renewal comes this long before expiry.
    pub grace_seconds: u64,
}

impl Election {
    pub fn new(lease_name: &str, namespace: &str, identity: &str) -> Self {
        Election {
            lease_name: lease_name.into(),
            namespace: namespace.into(),
            identity: identity.into(),
            duration_seconds: 15,
            grace_seconds: 5,
        }
    }

    async fn manager(
        &self,
        client: Client,
    ) -> Result<LeaseManager, kube_lease_manager::LeaseManagerError> {
        LeaseManagerBuilder::new(client, &self.lease_name)
            .with_namespace(&self.namespace)
            .with_identity(&self.identity)
            .with_duration(self.duration_seconds)
            .with_grace(self.grace_seconds)
            .build()
            .await
    }
}

/// Runs `work()` while this replica holds the lease, until `shutdown`
/// completes (then the work stops and the lease is released, so a standby
/// takes over at once). `ready` is set once the lease is settled either way.
/// Returns an error if the work ends on its own: the process should exit.
pub async fn lead<W, F>(
    client: Client,
    election: Election,
    ready: Readiness,
    work: W,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()>
where
    W: Fn() -> F,
    F: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    tokio::pin!(shutdown);
    loop {
        let manager = tokio::select! {
            built = election.manager(client.clone()) => built,
            _ = &mut shutdown => return Ok(()),
        };
        let manager = match manager {
            Ok(m) => m,
            Err(e) => {
                warn!(lease = %election.lease_name, "cannot reach the lease: {e}; trying again");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(election.grace_seconds)) => continue,
                    _ = &mut shutdown => return Ok(()),
                }
            }
        };
        ready.set(true);
        let mut running: Option<JoinHandle<anyhow::Result<()>>> = None;
        let ended = loop {
            tokio::select! {
                changed = manager.changed() => match changed {
                    Ok(true) => {
                        info!(lease = %election.lease_name, identity = %election.identity, "holds the lease: starting the controllers");
                        running = Some(tokio::spawn(work()));
                    }
                    Ok(false) => {
                        stop(&mut running, "lost the lease").await;
                    }
                    Err(e) => {
                        stop(&mut running, "cannot renew the lease").await;
                        warn!(lease = %election.lease_name, "lease error: {e}");
                        break None;
                    }
                },
                done = wait(&mut running) => break Some(done),
                _ = &mut shutdown => {
                    stop(&mut running, "shutting down").await;
                    if let Err(e) = manager.release().await {
                        warn!(lease = %election.lease_name, "releasing the lease: {e}");
                    }
                    return Ok(());
                }
            }
        };
        if let Some(done) = ended {
            let _ = manager.release().await;
            return match done {
                Ok(Ok(())) => Err(anyhow::anyhow!("the controllers stopped")),
                Ok(Err(e)) => Err(e.context("the controllers failed")),
                Err(e) => Err(anyhow::anyhow!("the controllers' task failed: {e}")),
            };
        }
        // A renewal failed: this replica no longer counts itself leader; a
        // fresh manager finds out whether it still holds the lease.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn stop(running: &mut Option<JoinHandle<anyhow::Result<()>>>, why: &str) {
    if let Some(task) = running.take() {
        info!("{why}: stopping the controllers");
        task.abort();
        let _ = task.await;
    }
}

/// The work's end, or never when there is none.
async fn wait(
    running: &mut Option<JoinHandle<anyhow::Result<()>>>,
) -> Result<anyhow::Result<()>, tokio::task::JoinError> {
    match running {
        Some(task) => {
            let done = task.await;
            *running = None;
            done
        }
        None => std::future::pending().await,
    }
}
