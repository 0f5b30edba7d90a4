//! Why a reconcile of a WarmPool failed, by stage (`stage()` labels the
//! failure metric), and why a pool's database cannot be had.

use crate::fence::Fenced;
use crate::runtime::finalizer::FinalizerError;
use crate::{
    runtime::{database::SecretError, guard, status::StatusWriteError},
    warmpool::PoolError,
};

/// Why a reconcile of a WarmPool failed, by stage; `error_policy` counts
/// it and retries.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
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
        source: crate::warmpool::ec2::Ec2Error,
    },
    #[error("WarmPool {pool}: {source}")]
    Stopped {
        pool: String,
        #[source]
        source: guard::Stopped,
    },
}

impl ReconcileError {
    /// The stage that failed, for the failure metric's `stage` label.
    pub fn stage(&self) -> &'static str {
        match self {
            ReconcileError::Kube { .. } => "api",
            ReconcileError::Secret { .. } => "secret",
            ReconcileError::Start { .. } => "start",
            ReconcileError::Status { .. } => "status",
            ReconcileError::Fenced { .. } => "fenced",
            ReconcileError::Finalizer { .. } => "finalizer",
            ReconcileError::Ec2 { .. } => "ec2",
            ReconcileError::Stopped { source, .. } => source.stage(),
        }
    }

    /// A finalizer's failure (fenced or not: see [`crate::fence::MaybeFenced`]).
    pub(super) fn finalizer(pool: &str, source: FinalizerError) -> Self {
        ReconcileError::Finalizer {
            pool: pool.to_string(),
            source,
        }
    }

    /// A status write's failure (fenced or not: see [`crate::fence::MaybeFenced`]).
    pub(super) fn status(pool: &str, source: StatusWriteError) -> Self {
        ReconcileError::Status {
            pool: pool.to_string(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fence::MaybeFenced;

    /// A WarmPool's reconcile error is the fence closing when a `Fenced`
    /// is among its causes, however deep: the pool's pass, an EC2 call, a
    /// status write, a finalizer, or the fence itself.
    #[test]
    fn an_error_is_fenced_when_the_fence_is_among_its_causes() {
        let pool = || "ns/p".to_string();
        let ec2 = || crate::warmpool::ec2::Ec2Error::Fenced {
            action: "RunInstances",
            source: Fenced,
        };
        let fenced = [
            ReconcileError::Fenced {
                pool: pool(),
                source: Fenced,
            },
            ReconcileError::Ec2 {
                pool: pool(),
                source: ec2(),
            },
            ReconcileError::Start {
                pool: pool(),
                source: PoolError::Ec2 {
                    pool: pool(),
                    source: ec2(),
                },
            },
            ReconcileError::status("ns/p", StatusWriteError::Fenced(Fenced)),
            ReconcileError::finalizer("ns/p", FinalizerError::Fenced(Fenced)),
        ];
        for e in &fenced {
            assert!(e.is_fenced(), "{} ({}) is fenced", e, e.stage());
        }
        let failed = ReconcileError::Stopped {
            pool: pool(),
            source: guard::Stopped::panic("fenced: a panic's own words"),
        };
        assert!(!failed.is_fenced());
    }
}
