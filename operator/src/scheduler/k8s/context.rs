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
    pub client: Client,
    pub(super) recorder: Recorder,
    pub(super) metrics: Metrics,
    pub(super) connections: database::Connections,
    /// Until when this replica may act (see [`crate::runtime::leader`]).
    pub(super) fence: Fence,
    pub(super) backoff: PerObject,
    pub(super) memory: memory::StatusMemory,
    /// The stores of the controller's watches, and what this replica's
    /// writes make them owe (see [`watched`]).
    pub watched: watched::Watched,
    /// The reconciles in flight, for `/healthz`.
    pub progress: Progress,
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
}
