//! Why a reconcile of a Scheduler failed, by stage: what `error_policy`
//! logs, counts and retries.

use super::act::ActError;
use crate::{
    fence::{Fenced, MaybeFenced},
    k8s::{database, finalizer, guard, status::StatusWriteError},
};

/// Why the observe stage of a reconcile failed: the Scheduler's pods or
/// Jobs could not be listed, its Secret could not be read, or the fence
/// closed.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    #[error("listing the pods of Scheduler {scheduler}: {source}")]
    Pods {
        scheduler: String,
        #[source]
        source: kube::Error,
    },
    #[error("listing the Jobs of Scheduler {scheduler}: {source}")]
    Jobs {
        scheduler: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Secret(#[from] database::SecretError),
    #[error(transparent)]
    Fenced(#[from] Fenced),
}

impl MaybeFenced for ObserveError {
    fn fenced(&self) -> Option<Fenced> {
        match self {
            ObserveError::Fenced(f) => Some(*f),
            _ => None,
        }
    }
}

/// Why the status stage of a reconcile failed: the Scheduler's status could
/// not be written.
#[derive(Debug, thiserror::Error)]
#[error("writing the status of Scheduler {scheduler}: {source}")]
pub struct StatusError {
    pub(super) scheduler: String,
    #[source]
    pub(super) source: StatusWriteError,
}

/// Why a reconcile failed, by stage; `error_policy` retries it.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("observe: {0}")]
    Observe(#[from] ObserveError),
    #[error("act: {0}")]
    Act(#[from] ActError),
    #[error("status: {0}")]
    Status(#[from] StatusError),
    #[error("finalizer: {0}")]
    Finalizer(#[from] FinalizerError),
    #[error("{0}")]
    Panicked(guard::Panicked),
}

impl MaybeFenced for ReconcileError {
    fn fenced(&self) -> Option<Fenced> {
        match self {
            ReconcileError::Observe(e) => e.fenced(),
            ReconcileError::Act(e) => e.fenced(),
            ReconcileError::Status(e) => e.source.fenced(),
            ReconcileError::Finalizer(e) => e.source.fenced(),
            ReconcileError::Panicked(_) => None,
        }
    }
}

impl ReconcileError {
    /// The stage that failed (`observe`, `act`, `status`, `finalizer` or
    /// `panic`): the `stage` label of the errors metric and of the log.
    pub fn stage(&self) -> &'static str {
        match self {
            ReconcileError::Observe(_) => "observe",
            ReconcileError::Act(_) => "act",
            ReconcileError::Status(_) => "status",
            ReconcileError::Finalizer(_) => "finalizer",
            ReconcileError::Panicked(_) => "panic",
        }
    }
}

/// Adding or removing the Scheduler's own finalizer failed.
#[derive(Debug, thiserror::Error)]
#[error("{what} the finalizer of Scheduler {scheduler}: {source}")]
pub struct FinalizerError {
    pub(super) what: &'static str,
    pub(super) scheduler: String,
    #[source]
    pub(super) source: finalizer::FinalizerError,
}
