//! Why a reconcile of a WarmPool failed, by stage (`stage()` labels the
//! failure metric), and why a pool's database cannot be had.

use crate::k8s::finalizer::FinalizerError;
use crate::{
    k8s::{
        database::SecretError,
        guard,
        leader::{Fenced, MaybeFenced},
        status::StatusWriteError,
    },
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

    /// A finalizer's failure (fenced or not: see [`MaybeFenced`]).
    pub(super) fn finalizer(pool: &str, source: FinalizerError) -> Self {
        ControllerError::Finalizer {
            pool: pool.to_string(),
            source,
        }
    }

    /// A status write's failure (fenced or not: see [`MaybeFenced`]).
    pub(super) fn status(pool: &str, source: StatusWriteError) -> Self {
        ControllerError::Status {
            pool: pool.to_string(),
            source,
        }
    }
}

impl MaybeFenced for ControllerError {
    fn fenced(&self) -> Option<Fenced> {
        match self {
            ControllerError::Fenced { source, .. } => Some(*source),
            ControllerError::Start { source, .. } => source.fenced(),
            ControllerError::Status { source, .. } => source.fenced(),
            ControllerError::Finalizer { source, .. } => source.fenced(),
            ControllerError::Ec2 { source, .. } => source.fenced(),
            ControllerError::Kube { .. }
            | ControllerError::Secret { .. }
            | ControllerError::Panicked { .. } => None,
        }
    }
}

/// Why the database URL of a pool cannot be had: a `Degraded` reason and
/// message (never the password).
pub(super) struct UrlProblem {
    pub(super) reason: String,
    pub(super) message: String,
}
