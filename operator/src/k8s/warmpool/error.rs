//! Why a reconcile of a WarmPool failed, by stage (`stage()` labels the
//! failure metric), and why a pool's database cannot be had.

use crate::k8s::finalizer::FinalizerError;
use crate::{
    k8s::{database::SecretError, guard, leader::Fenced, status::StatusWriteError},
    pool::PoolError,
};

/// Why a reconcile of a WarmPool failed, by stage; `error_policy` counts
/// it and retries.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("WarmPool {pool}: {source}")]
    Kube {
        pool: String,
        #[source]
        source: kube::Error,
    },
    #[error("WarmPool {pool}: {source}")]
    Secret {
        pool: String,
        #[source]
        source: SecretError,
    },
    #[error("WarmPool {pool}: {source}")]
    Start {
        pool: String,
        #[source]
        source: PoolError,
    },
    #[error("WarmPool {pool}: writing its status: {source}")]
    Status {
        pool: String,
        #[source]
        source: StatusWriteError,
    },
    #[error("WarmPool {pool}: {source}")]
    Fenced {
        pool: String,
        #[source]
        source: Fenced,
    },
    #[error("WarmPool {pool}: {source}")]
    Finalizer {
        pool: String,
        #[source]
        source: FinalizerError,
    },
    #[error("WarmPool {pool}: {source}")]
    Ec2 {
        pool: String,
        #[source]
        source: crate::pool::ec2::Ec2Error,
    },
    #[error("WarmPool {pool}: {source}")]
    Panicked {
        pool: String,
        #[source]
        source: guard::Panicked,
    },
}

impl ControllerError {
    /// The stage that failed, for the failure metric's `stage` label.
    pub fn stage(&self) -> &'static str {
        match self {
            ControllerError::Kube { .. } => "api",
            ControllerError::Secret { .. } => "secret",
            ControllerError::Start { .. } => "start",
            ControllerError::Status { .. } => "status",
            ControllerError::Fenced { .. } => "fenced",
            ControllerError::Finalizer { .. } => "finalizer",
            ControllerError::Ec2 { .. } => "ec2",
            ControllerError::Panicked { .. } => "panic",
        }
    }

    /// A finalizer's failure; fenced, as every fenced error is.
    pub(super) fn finalizer(pool: &str, e: FinalizerError) -> Self {
        let pool = pool.to_string();
        match e {
            FinalizerError::Fenced(source) => ControllerError::Fenced { pool, source },
            source => ControllerError::Finalizer { pool, source },
        }
    }

    /// A status write's failure; fenced, as every fenced error is.
    pub(super) fn status(pool: &str, e: StatusWriteError) -> Self {
        let pool = pool.to_string();
        match e {
            StatusWriteError::Fenced(source) => ControllerError::Fenced { pool, source },
            source => ControllerError::Status { pool, source },
        }
    }
}

/// Why the database URL of a pool cannot be had: a `Degraded` reason and
/// message (never the password).
pub(super) struct UrlProblem {
    pub(super) reason: String,
    pub(super) message: String,
}
