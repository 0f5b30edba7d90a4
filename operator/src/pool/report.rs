//! What a pass says: its report (status, events, what it did) and its
//! errors; and the deletion a loop is told of.

use chrono::{DateTime, Utc};
use orca_db::DbError;

use super::{ec2::Ec2Error, plan::PoolPlan};
use crate::crd::WarmPoolStatus;
use crate::fence::Fenced;

/// Something worth a Kubernetes Event; `reason` is CamelCase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolEvent {
    pub reason: &'static str,
    pub message: String,
    pub warning: bool,
}

impl PoolEvent {
    /// An event of `reason`, a Warning if `warning`.
    pub fn new(reason: &'static str, message: String, warning: bool) -> Self {
        PoolEvent {
            reason,
            message,
            warning,
        }
    }
}

/// A WarmPool's deletion with `onDelete: Terminate`, as its loop is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deletion {
    /// Its `deletionTimestamp`.
    pub since: DateTime<Utc>,
    /// `spec.drainTimeoutSeconds` as it is now: an edit made during the
    /// deletion (say, to 0 to stop waiting for busy instances) counts.
    pub drain_timeout_seconds: i64,
}

/// What one pass saw and did.
#[derive(Clone, Debug, Default)]
pub struct PassReport {
    /// `observedGeneration` is left for the caller.
    pub status: WarmPoolStatus,
    pub events: Vec<PoolEvent>,
    pub plan: PoolPlan,
    /// Instances launched and terminated by this pass.
    pub launched: Vec<String>,
    pub terminated: Vec<String>,
    /// Instances started from the stopped reserve by this pass.
    pub started: Vec<String>,
    /// A call was answered `RequestLimitExceeded` to the end: back off.
    pub throttled: bool,
    /// The WarmPool is being deleted with `onDelete: Terminate`.
    pub deleting: bool,
    /// Why the pool is `Degraded` beyond this pass's warnings: boots that
    /// keep failing (reason, message).
    pub degraded: Option<(&'static str, String)>,
    /// Being deleted, and EC2 listed none of its instances pending or
    /// running, nor lacks one this loop launched: its finalizer may go.
    pub deleted: bool,
    /// The idle range the pass kept: `spec.idle`, or an active schedule's.
    pub idle_min: i32,
    /// The schedule whose period is under way (`status.activeSchedule`).
    pub active_schedule: Option<String>,
}

/// Why a pool's loop could not start or a pass failed: an EC2 call, the
/// database, or the fence closed.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("pool {pool}: {source}")]
    Ec2 {
        pool: String,
        #[source]
        source: Ec2Error,
    },
    #[error("pool {pool}: database: {source}")]
    Db {
        pool: String,
        #[source]
        source: DbError,
    },
    #[error("pool {pool}: {source}")]
    Fenced {
        pool: String,
        #[source]
        source: Fenced,
    },
}

impl PoolError {
    /// The fence closed: this replica may not act; nothing to report.
    pub fn is_fenced(&self) -> bool {
        matches!(self, PoolError::Fenced { .. })
    }
}
