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
    name: String,
    /// The host name its scheduler writes as `host` in its instance row: the
    /// pod's `spec.hostname` (see [`crate::scheduler::host_name`]), or its name
    /// for a pod made without one.
    host: String,
    /// The hash of its pod template (label `orca.dev/revision`).
    revision: String,
    /// Every pod the operator creates gets the next number (label
    /// `orca.dev/sequence`): the highest is the newest.
    sequence: u32,
    image: String,
    created: Time,
    /// When its scheduler container started running, if known; with
    /// overlap off it is up once it has run `settleSeconds` since then.
    started: Option<Time>,
    state: PodState,
    /// Why its scheduler container is not running yet, as the kubelet
    /// says (`state.waiting`); `None` when it is not waiting, and in the
    /// local mode, where a process has no image to pull.
    waiting: Option<Waiting>,
    /// Deletion asked, not finished.
    deleting: bool,
    /// When a pod being deleted should be gone: its `deletionTimestamp`,
    /// which the API server sets to the deletion's time plus its grace.
    deletion_due: Option<Time>,
}

impl PodView {
    /// The hash of its pod template (label `orca.dev/revision`).
    pub fn revision(&self) -> &str {
        &self.revision
    }

    /// The pod's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host name its scheduler writes as `host` in its instance row: the
    /// pod's `spec.hostname` (see [`crate::scheduler::host_name`]), or its name
    /// for a pod made without one.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Every pod the operator creates gets the next number (label
    /// `orca.dev/sequence`): the highest is the newest.
    pub fn sequence(&self) -> u32 {
        self.sequence
    }

    /// The image its scheduler container runs.
    pub fn image(&self) -> &str {
        &self.image
    }

    /// When it was created.
    pub fn created(&self) -> Time {
        self.created
    }

    /// When its scheduler container started running, if known; with
    /// overlap off it is up once it has run `settleSeconds` since then.
    pub fn started(&self) -> Option<Time> {
        self.started
    }

    /// Where its scheduler process is.
    pub fn state(&self) -> &PodState {
        &self.state
    }

    /// Why its scheduler container is not running yet, as the kubelet
    /// says (`state.waiting`); `None` when it is not waiting, and in the
    /// local mode, where a process has no image to pull.
    pub fn waiting(&self) -> Option<&Waiting> {
        self.waiting.as_ref()
    }

    /// Deletion asked, not finished.
    pub fn deleting(&self) -> bool {
        self.deleting
    }

    /// When a pod being deleted should be gone: its `deletionTimestamp`,
    /// which the API server sets to the deletion's time plus its grace.
    pub fn deletion_due(&self) -> Option<Time> {
        self.deletion_due
    }

    /// These, with `image` set.
    pub fn with_image(self, image: String) -> Self {
        PodView { image, ..self }
    }

    /// These, with `created` set.
    pub fn with_created(self, created: Time) -> Self {
        PodView { created, ..self }
    }

    /// These, with `started` set.
    pub fn with_started(self, started: Option<Time>) -> Self {
        PodView { started, ..self }
    }

    /// These, with `state` set.
    pub fn with_state(self, state: PodState) -> Self {
        PodView { state, ..self }
    }

    /// These, with `waiting` set.
    pub fn with_waiting(self, waiting: Option<Waiting>) -> Self {
        PodView { waiting, ..self }
    }

    /// These, with `deleting` set.
    pub fn with_deleting(self, deleting: bool) -> Self {
        PodView { deleting, ..self }
    }

    /// These, with `deletion_due` set.
    pub fn with_deletion_due(self, deletion_due: Option<Time>) -> Self {
        PodView {
            deletion_due,
            ..self
        }
    }

    /// Pod `name` (scheduler host name `host`) of `revision`, the
    /// `sequence`th the operator made, running `image`, created at
    /// `created`, in `state`: its start not known, not waiting, not being
    /// deleted.
    pub fn new(
        name: String,
        host: String,
        revision: String,
        sequence: u32,
        image: String,
        created: Time,
        state: PodState,
    ) -> Self {
        PodView {
            name,
            host,
            revision,
            sequence,
            image,
            created,
            started: None,
            state,
            waiting: None,
            deleting: false,
            deletion_due: None,
        }
    }
}

/// A container waiting to run: the kubelet's reason (`ErrImagePull`,
/// `ContainerCreating`, …) and message.
#[derive(Clone, Debug, PartialEq)]
pub struct Waiting {
    reason: String,
    message: String,
}

impl Waiting {
    /// The kubelet's reason, e.g. `ErrImagePull`.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The kubelet's message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Waiting for `reason`, as `message` says.
    pub fn new(reason: String, message: String) -> Self {
        Waiting { reason, message }
    }
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
    name: String,
    revision: String,
    /// The hash of the `spec.register` it runs (label `orca.dev/register`;
    /// see [`crate::scheduler::register_hash`]); `None` for a Job made before
    /// Jobs carried it.
    register: Option<String>,
    created: Time,
    state: JobState,
}

impl JobView {
    /// What became of it.
    pub fn state(&self) -> &JobState {
        &self.state
    }

    /// The Job's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The revision it registers.
    pub fn revision(&self) -> &str {
        &self.revision
    }

    /// The hash of the `spec.register` it runs (label `orca.dev/register`;
    /// see [`crate::scheduler::register_hash`]); `None` for a Job made before
    /// Jobs carried it.
    pub fn register(&self) -> Option<&str> {
        self.register.as_deref()
    }

    /// When it was created.
    pub fn created(&self) -> Time {
        self.created
    }

    /// These, with `created` set.
    pub fn with_created(self, created: Time) -> Self {
        JobView { created, ..self }
    }

    /// These, with `state` set.
    pub fn with_state(self, state: JobState) -> Self {
        JobView { state, ..self }
    }

    /// These, with `register` set.
    pub fn with_register(self, register: Option<String>) -> Self {
        JobView { register, ..self }
    }

    /// Job `name` of `revision`, running the `spec.register` of hash
    /// `register`, created at `created`, in `state`.
    pub fn new(
        name: String,
        revision: String,
        register: Option<String>,
        created: Time,
        state: JobState,
    ) -> Self {
        JobView {
            name,
            revision,
            register,
            created,
            state,
        }
    }
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
    id: i64,
    /// Its scheduler's host name (`HOSTNAME`): its pod's [`PodView::host`].
    host: String,
    image: String,
    /// waiting, leading or draining.
    role: String,
    /// Not ended and seen within the stale limit.
    live: bool,
    ended: Option<Time>,
    /// Its `backend_pid` holds LEAD_LOCK in `pg_locks`.
    holds_lock: bool,
    joined: Time,
    led: Option<Time>,
    drain_asked: Option<Time>,
    runs: i32,
}

impl InstanceView {
    /// The row's id.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// Its scheduler's host name (`HOSTNAME`): its pod's [`PodView::host`].
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The image its scheduler runs.
    pub fn image(&self) -> &str {
        &self.image
    }

    /// waiting, leading or draining.
    pub fn role(&self) -> &str {
        &self.role
    }

    /// Not ended and seen within the stale limit.
    pub fn live(&self) -> bool {
        self.live
    }

    /// When it ended, if it did.
    pub fn ended(&self) -> Option<Time> {
        self.ended
    }

    /// Its `backend_pid` holds LEAD_LOCK in `pg_locks`.
    pub fn holds_lock(&self) -> bool {
        self.holds_lock
    }

    /// When it joined.
    pub fn joined(&self) -> Time {
        self.joined
    }

    /// When it began to lead, if it did.
    pub fn led(&self) -> Option<Time> {
        self.led
    }

    /// When it was asked to drain, if it was.
    pub fn drain_asked(&self) -> Option<Time> {
        self.drain_asked
    }

    /// The runs it holds.
    pub fn runs(&self) -> i32 {
        self.runs
    }

    /// These, with `image` set.
    pub fn with_image(self, image: String) -> Self {
        InstanceView { image, ..self }
    }

    /// These, with `role` set.
    pub fn with_role(self, role: String) -> Self {
        InstanceView { role, ..self }
    }

    /// These, with `live` set.
    pub fn with_live(self, live: bool) -> Self {
        InstanceView { live, ..self }
    }

    /// These, with `ended` set.
    pub fn with_ended(self, ended: Option<Time>) -> Self {
        InstanceView { ended, ..self }
    }

    /// These, with `holds_lock` set.
    pub fn with_holds_lock(self, holds_lock: bool) -> Self {
        InstanceView { holds_lock, ..self }
    }

    /// These, with `led` set.
    pub fn with_led(self, led: Option<Time>) -> Self {
        InstanceView { led, ..self }
    }

    /// These, with `drain_asked` set.
    pub fn with_drain_asked(self, drain_asked: Option<Time>) -> Self {
        InstanceView {
            drain_asked,
            ..self
        }
    }

    /// These, with `runs` set.
    pub fn with_runs(self, runs: i32) -> Self {
        InstanceView { runs, ..self }
    }

    /// Row `id` of the scheduler on `host` running `image`, in `role`,
    /// joined at `joined`: live, not ended, not holding the lock, never
    /// led, no drain asked, no runs.
    pub fn new(id: i64, host: String, image: String, role: String, joined: Time) -> Self {
        InstanceView {
            id,
            host,
            image,
            role,
            live: true,
            ended: None,
            holds_lock: false,
            joined,
            led: None,
            drain_asked: None,
            runs: 0,
        }
    }
}

/// Everything [`crate::scheduler::decide()`] looks at.
#[derive(Clone, Debug)]
pub struct Observed {
    namespace: String,
    name: String,
    generation: Option<i64>,
    spec: SchedulerSpec,
    /// The status as last written: what the operator remembers.
    status: SchedulerStatus,
    pods: Vec<PodView>,
    jobs: Vec<JobView>,
    /// The rows of `orca.schedulers` not long gone, or why they could not be
    /// read (a missing Secret, an unreachable database).
    instances: Result<Vec<InstanceView>, Problem>,
    now: Time,
    /// How far the pods' and Jobs' times were moved onto the database clock
    /// (see [`Observed::on_database_clock`]); zero when they were not.
    clock_offset: chrono::TimeDelta,
    /// The annotation [`super::ROLLOUT_NOW`]: the revision to roll out
    /// now, outside the maintenance windows.
    rollout_now: Option<String>,
}

impl Observed {
    /// The Scheduler's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The Scheduler's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its `metadata.generation`.
    pub fn generation(&self) -> Option<i64> {
        self.generation
    }

    /// Its spec.
    pub fn spec(&self) -> &SchedulerSpec {
        &self.spec
    }

    /// The status as last written: what the operator remembers.
    pub fn status(&self) -> &SchedulerStatus {
        &self.status
    }

    /// Its pods (or, locally, processes).
    pub fn pods(&self) -> &Vec<PodView> {
        &self.pods
    }

    /// Its register Jobs.
    pub fn jobs(&self) -> &Vec<JobView> {
        &self.jobs
    }

    /// The rows of `orca.schedulers` not long gone, or why they could not be
    /// read (a missing Secret, an unreachable database).
    pub fn instances(&self) -> &Result<Vec<InstanceView>, Problem> {
        &self.instances
    }

    /// When it was observed (on the database's clock once moved there).
    pub fn now(&self) -> Time {
        self.now
    }

    /// How far the pods' and Jobs' times were moved onto the database clock
    /// (see [`Observed::on_database_clock`]); zero when they were not.
    pub fn clock_offset(&self) -> chrono::TimeDelta {
        self.clock_offset
    }

    /// The annotation [`super::ROLLOUT_NOW`]: the revision to roll out
    /// now, outside the maintenance windows.
    pub fn rollout_now(&self) -> Option<&str> {
        self.rollout_now.as_deref()
    }

    /// These, with `generation` set.
    pub fn with_generation(self, generation: Option<i64>) -> Self {
        Observed { generation, ..self }
    }

    /// These, with `status` set.
    pub fn with_status(self, status: SchedulerStatus) -> Self {
        Observed { status, ..self }
    }

    /// These, with `pods` set.
    pub fn with_pods(self, pods: Vec<PodView>) -> Self {
        Observed { pods, ..self }
    }

    /// These, with `jobs` set.
    pub fn with_jobs(self, jobs: Vec<JobView>) -> Self {
        Observed { jobs, ..self }
    }

    /// These, with `instances` set.
    pub fn with_instances(self, instances: Result<Vec<InstanceView>, Problem>) -> Self {
        Observed { instances, ..self }
    }

    /// These, with `now` set.
    pub fn with_now(self, now: Time) -> Self {
        Observed { now, ..self }
    }

    /// These, with `clock_offset` set.
    pub fn with_clock_offset(self, clock_offset: chrono::TimeDelta) -> Self {
        Observed {
            clock_offset,
            ..self
        }
    }

    /// These, with `rollout_now` set.
    pub fn with_rollout_now(self, rollout_now: Option<String>) -> Self {
        Observed {
            rollout_now,
            ..self
        }
    }

    /// The Scheduler `namespace`/`name` with `spec` and the `status` last
    /// written, at `now`: no generation, pods, Jobs or instance rows yet,
    /// on its own clock, no `rollout-now`.
    pub fn new(
        namespace: String,
        name: String,
        spec: SchedulerSpec,
        status: SchedulerStatus,
        now: Time,
    ) -> Self {
        Observed {
            namespace,
            name,
            generation: None,
            spec,
            status,
            pods: Vec::new(),
            jobs: Vec::new(),
            instances: Ok(Vec::new()),
            now,
            clock_offset: chrono::TimeDelta::zero(),
            rollout_now: None,
        }
    }
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
    reason: String,
    message: String,
    warning: bool,
}

impl Event {
    /// Its reason, CamelCase.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// What it says.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// A Warning, not a Normal event.
    pub fn is_warning(&self) -> bool {
        self.warning
    }

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
