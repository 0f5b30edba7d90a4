//! One snapshot of everything a rollout depends on, and the actions that
//! change it. Plain data: no Kubernetes client, no database.

use std::time::Duration;

pub use crate::crd::Problem;
use crate::crd::{SchedulerSpec, SchedulerStatus};

/// A point in time, in UTC: every time a snapshot holds.
pub type Time = chrono::DateTime<chrono::Utc>;

/// A scheduler pod (or, in the local mode, process).
#[derive(Clone, Debug, PartialEq)]
pub struct PodView {
    pub name: String,
    /// The host name its scheduler writes as `host` in its instance row: the
    /// pod's `spec.hostname` (see [`crate::scheduler::host_name`]), or its name
    /// for a pod made without one.
    pub host: String,
    /// The hash of its pod template (label `orca.dev/revision`).
    pub revision: String,
    /// Every pod the operator creates gets the next number (label
    /// `orca.dev/sequence`): the highest is the newest.
    pub sequence: u32,
    pub image: String,
    pub created: Time,
    /// When its scheduler container started running, if known; with
    /// overlap off it is up once it has run `settleSeconds` since then.
    pub started: Option<Time>,
    pub state: PodState,
    /// Why its scheduler container is not running yet, as the kubelet
    /// says (`state.waiting`); `None` when it is not waiting, and in the
    /// local mode, where a process has no image to pull.
    pub waiting: Option<Waiting>,
    /// Deletion asked, not finished.
    pub deleting: bool,
    /// When a pod being deleted should be gone: its `deletionTimestamp`,
    /// which the API server sets to the deletion's time plus its grace.
    pub deletion_due: Option<Time>,
}

/// A container waiting to run: the kubelet's reason (`ErrImagePull`,
/// `ContainerCreating`, …) and message.
#[derive(Clone, Debug, PartialEq)]
pub struct Waiting {
    pub reason: String,
    pub message: String,
}

/// Where a pod's scheduler process is: not started yet, running, or ended.
#[derive(Clone, Debug, PartialEq)]
pub enum PodState {
    Pending,
    Running,
    /// The scheduler process ended: its exit code and termination message.
    Exited {
        code: i32,
        message: String,
        finished: Time,
    },
}

impl PodView {
    /// Its exit code, once its scheduler process has ended.
    pub fn exited(&self) -> Option<i32> {
        match self.state {
            PodState::Exited { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// A register Job (or local process).
#[derive(Clone, Debug, PartialEq)]
pub struct JobView {
    pub name: String,
    pub revision: String,
    /// The hash of the `spec.register` it runs (label `orca.dev/register`;
    /// see [`crate::scheduler::register_hash`]); `None` for a Job made before
    /// Jobs carried it.
    pub register: Option<String>,
    pub created: Time,
    pub state: JobState,
}

/// What became of a register Job: still running, succeeded, or failed.
#[derive(Clone, Debug, PartialEq)]
pub enum JobState {
    Running,
    Succeeded {
        at: Time,
    },
    /// It failed (its reason and message), at `at`: when it was seen to
    /// fail, else its creation.
    Failed {
        message: String,
        at: Time,
    },
}

/// A row of `orca.schedulers`, with what `pg_locks` says of it.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceView {
    pub id: i64,
    /// Its scheduler's host name (`HOSTNAME`): its pod's [`PodView::host`].
    pub host: String,
    pub image: String,
    /// waiting, leading or draining.
    pub role: String,
    /// Not ended and seen within the stale limit.
    pub live: bool,
    pub ended: Option<Time>,
    /// Its `backend_pid` holds LEAD_LOCK in `pg_locks`.
    pub holds_lock: bool,
    pub joined: Time,
    pub led: Option<Time>,
    pub drain_asked: Option<Time>,
    pub runs: i32,
}

/// Everything [`crate::scheduler::decide()`] looks at.
#[derive(Clone, Debug)]
pub struct Observed {
    pub namespace: String,
    pub name: String,
    pub generation: Option<i64>,
    pub spec: SchedulerSpec,
    /// The status as last written: what the operator remembers.
    pub status: SchedulerStatus,
    pub pods: Vec<PodView>,
    pub jobs: Vec<JobView>,
    /// The rows of `orca.schedulers` not long gone, or why they could not be
    /// read (a missing Secret, an unreachable database).
    pub instances: Result<Vec<InstanceView>, Problem>,
    pub now: Time,
    /// How far the pods' and Jobs' times were moved onto the database clock
    /// (see [`Observed::on_database_clock`]); zero when they were not.
    pub clock_offset: chrono::TimeDelta,
    /// The annotation [`super::ROLLOUT_NOW`]: the revision to roll out
    /// now, outside the maintenance windows.
    pub rollout_now: Option<String>,
}

/// What the operator does next. Each is idempotent: the next snapshot shows
/// whether it happened.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    CreatePod {
        name: String,
        /// Its host name (see [`crate::scheduler::host_name`]).
        host: String,
        revision: String,
        sequence: u32,
        image: String,
    },
    DeletePod {
        name: String,
    },
    /// `ask_drain` (docs/protocol.md#the-calls).
    AskDrain {
        instance: i64,
    },
    CreateRegisterJob {
        name: String,
        revision: String,
        image: String,
    },
    DeleteJob {
        name: String,
    },
}

/// A Kubernetes Event (or, locally, a printed line).
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// CamelCase.
    pub reason: String,
    pub message: String,
    pub warning: bool,
}

impl Event {
    /// A Normal event of `reason`, saying `message`.
    pub fn normal(reason: &str, message: impl Into<String>) -> Self {
        Event {
            reason: reason.into(),
            message: message.into(),
            warning: false,
        }
    }

    /// A Warning event of `reason`, saying `message`.
    pub fn warning(reason: &str, message: impl Into<String>) -> Self {
        Event {
            reason: reason.into(),
            message: message.into(),
            warning: true,
        }
    }
}

/// How soon to look again while something is in motion.
pub const BUSY: Duration = Duration::from_secs(1);
/// How soon to look again when all is quiet (watches wake it sooner).
pub const QUIET: Duration = Duration::from_secs(30);

/// The outcome of one [`decide`](fn@super::decide): what to do, what to say,
/// and the status that follows from them.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// What to do, in order.
    actions: Vec<Action>,
    /// What to say.
    events: Vec<Event>,
    /// The status that follows.
    status: SchedulerStatus,
    /// Look again after this, even if nothing is watched to change.
    requeue: Duration,
}

impl Decision {
    /// Doing `actions` and saying `events`, the status becomes `status`;
    /// look again after `requeue`.
    pub fn new(
        actions: Vec<Action>,
        events: Vec<Event>,
        status: SchedulerStatus,
        requeue: Duration,
    ) -> Self {
        Decision {
            actions,
            events,
            status,
            requeue,
        }
    }

    /// What to do, in order.
    pub fn actions(&self) -> &[Action] {
        &self.actions
    }

    /// What to say.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The status that follows.
    pub fn status(&self) -> &SchedulerStatus {
        &self.status
    }

    /// Look again after this, even if nothing is watched to change.
    pub fn requeue(&self) -> Duration {
        self.requeue
    }

    /// These, saying `more` after what they say.
    pub fn saying(mut self, more: impl IntoIterator<Item = Event>) -> Self {
        self.events.extend(more);
        self
    }
}

impl Observed {
    /// Only the database clock judges the rows' times
    /// (docs/architecture.md#time-and-clocks): `now`
    /// becomes the database's, and the pods' and jobs' times, taken on this
    /// side's clock, are moved onto it by the difference.
    pub fn on_database_clock(mut self, db_now: Time) -> Self {
        let offset = db_now - self.now;
        for p in &mut self.pods {
            p.created += offset;
            if let Some(started) = &mut p.started {
                *started += offset;
            }
            if let PodState::Exited { finished, .. } = &mut p.state {
                *finished += offset;
            }
        }
        for j in &mut self.jobs {
            j.created += offset;
            match &mut j.state {
                JobState::Succeeded { at } | JobState::Failed { at, .. } => *at += offset,
                JobState::Running => {}
            }
        }
        self.now = db_now;
        self.clock_offset = offset;
        self
    }
}
