//! What every reconcile of the Scheduler controller shares.

use kube::{
    runtime::events::{Recorder, Reporter},
    Client,
};

use super::{memory, metrics::Metrics, watched};
use crate::{
    backoff::PerObject,
    fence::Fence,
    runtime::{database, names::MANAGER, server::Progress},
};

/// What every reconcile shares: the client, the event recorder, the
/// metrics, the database connections and the fence.
pub struct Context {
    client: Client,
    recorder: Recorder,
    metrics: Metrics,
    connections: database::Connections,
    /// Until when this replica may act (see [`crate::runtime::leader`]).
    fence: Fence,
    backoff: PerObject,
    memory: memory::StatusMemory,
    /// The stores of the controller's watches, and what this replica's
    /// writes make them owe (see [`watched`]).
    watched: watched::Watched,
    /// The reconciles in flight, for `/healthz`.
    progress: Progress,
}

impl Context {
    /// `instance` names this operator replica in the Events it posts (the
    /// pod's name); `fence` is its election's ([`Fence::always`] without
    /// one).
    pub fn new(client: Client, metrics: Metrics, instance: &str, fence: Fence) -> Self {
        let reporter = Reporter {
            controller: MANAGER.into(),
            instance: Some(instance.into()),
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics,
            connections: database::Connections::of_replica(instance),
            fence,
            backoff: PerObject::default(),
            memory: memory::StatusMemory::default(),
            watched: watched::Watched::default(),
            progress: Progress::default(),
        }
    }

    /// This context's reconciles count for `progress` (the replica's
    /// `/healthz`).
    pub fn with_progress(mut self, progress: Progress) -> Self {
        self.progress = progress;
        self
    }

    /// The client the controller acts with.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The stores of the controller's watches, and what this replica's
    /// writes make them owe.
    pub fn watched(&self) -> &watched::Watched {
        &self.watched
    }

    /// The reconciles in flight, for `/healthz`.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// The Events' recorder.
    pub(super) fn recorder(&self) -> &Recorder {
        &self.recorder
    }

    /// The controller's metrics.
    pub(super) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The database connections, one per database.
    pub(super) fn connections(&self) -> &database::Connections {
        &self.connections
    }

    /// Until when this replica may act.
    pub(super) fn fence(&self) -> &Fence {
        &self.fence
    }

    /// The back-off of each Scheduler's failed reconciles.
    pub(super) fn backoff(&self) -> &PerObject {
        &self.backoff
    }

    /// What this replica wrote to each status, for the watches to catch up.
    pub(super) fn memory(&self) -> &memory::StatusMemory {
        &self.memory
    }
}
