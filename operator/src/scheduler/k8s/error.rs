//! Why a reconcile of a Scheduler failed, by stage: what `error_policy`
//! logs, counts and retries.

use super::act::ActError;
use crate::{
    fence::Fenced,
    runtime::{database, finalizer, guard, status::StatusWriteError},
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
    // Its source, not transparent: the fence is found among the causes
    // (see `MaybeFenced`).
    #[error("{0}")]
    Fenced(#[from] Fenced),
}

/// Why the status stage of a reconcile failed: the Scheduler's status could
/// not be written.
#[derive(Debug, thiserror::Error)]
#[error("writing the status of Scheduler {scheduler}: {source}")]
pub struct StatusError {
    scheduler: String,
    #[source]
    source: StatusWriteError,
}

impl StatusError {
    /// Writing the status of the Scheduler `scheduler` failed.
    pub(super) fn new(scheduler: String, source: StatusWriteError) -> Self {
        StatusError { scheduler, source }
    }
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
    Stopped(guard::Stopped),
}

impl ReconcileError {
    /// The stage that failed (`observe`, `act`, `status`, `finalizer` or
    /// `panic` or `deadline`): the `stage` label of the errors metric and of the log.
    pub fn stage(&self) -> &'static str {
        match self {
            ReconcileError::Observe(_) => "observe",
            ReconcileError::Act(_) => "act",
            ReconcileError::Status(_) => "status",
            ReconcileError::Finalizer(_) => "finalizer",
            ReconcileError::Stopped(stop) => stop.stage(),
        }
    }
}

/// Adding or removing the Scheduler's own finalizer failed.
#[derive(Debug, thiserror::Error)]
#[error("{what} the finalizer of Scheduler {scheduler}: {source}")]
pub struct FinalizerError {
    what: &'static str,
    scheduler: String,
    #[source]
    source: finalizer::FinalizerError,
}

impl FinalizerError {
    /// `what` (`adding`, `removing`) the finalizer of the Scheduler
    /// `scheduler` failed.
    pub(super) fn new(
        what: &'static str,
        scheduler: String,
        source: finalizer::FinalizerError,
    ) -> Self {
        FinalizerError {
            what,
            scheduler,
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fence::MaybeFenced;
    use crate::runtime::finalizer::FinalizerError as Patching;

    fn not_json() -> serde_json::Error {
        serde_json::from_str::<u8>("x").unwrap_err()
    }

    /// Each stage's error is the fence closing when a `Fenced` is among its
    /// causes, however deep (and said once in its message); otherwise it is
    /// a failure, counted and retried.
    #[test]
    fn an_error_is_fenced_when_the_fence_is_among_its_causes() {
        let fenced: Vec<ReconcileError> = vec![
            ObserveError::Fenced(Fenced).into(),
            ActError::Fenced {
                action: "creating pod s-1".into(),
                source: Fenced,
            }
            .into(),
            StatusError {
                scheduler: "ns/s".into(),
                source: StatusWriteError::Fenced(Fenced),
            }
            .into(),
            FinalizerError {
                what: "adding",
                scheduler: "ns/s".into(),
                source: Patching::Fenced(Fenced),
            }
            .into(),
        ];
        for e in &fenced {
            assert!(e.is_fenced(), "{} ({}) is fenced", e, e.stage());
            assert_eq!(e.to_string().matches("fenced:").count(), 1, "{e}");
        }
        let failed: Vec<ReconcileError> = vec![
            ReconcileError::Stopped(guard::Stopped::panic("fenced: a panic's own words")),
            FinalizerError {
                what: "adding",
                scheduler: "ns/s".into(),
                source: Patching::Build(not_json()),
            }
            .into(),
        ];
        for e in &failed {
            assert!(!e.is_fenced(), "{e} is a failure");
        }
    }
}
