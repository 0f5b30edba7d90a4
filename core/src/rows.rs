//! The rows of `orca.instances` and `orca.pool_demand` the pool's plan
//! reads, as plain values: `orca_db::pool` reads them (and re-exports
//! them under the names it always had); the plan, free of the database
//! driver, decides from them.

/// A live `orca.instances` row of the pool, with the ages the database
/// computed when it was read.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolRow {
    id: i64,
    instance: String,
    run: Option<i64>,
    /// Seconds since the row went `idle`; `None` while the instance is busy.
    idle_secs: Option<f64>,
    /// Seconds since the agent last `polled`; `None` if it never did.
    polled_secs: Option<f64>,
    /// Runs the instance has been handed (its rows with a run).
    uses: i64,
    /// The operator's own claim on an instance it is terminating (see
    /// `orca_db::pool::claim`): live, never idle, so never handed out.
    claim: bool,
    /// Taken for the stopped reserve (`orca_db::pool::reserve_idle_rows`): never idle,
    /// never handed out, its instance stopped or being stopped.
    reserved: bool,
    /// Seconds since the operator started the reserve instance
    /// (`orca_db::pool::wake_rows`), while its agent has not marked the row idle yet.
    woken_secs: Option<f64>,
    /// Its agent recorded a spot notice (`notice`): an idle row is being
    /// ended by its agent; `interrupted`: EC2 takes the instance back in
    /// about two minutes.
    noticed: bool,
    interrupted: bool,
}

impl PoolRow {
    /// These, with `run` set.
    pub fn with_run(self, run: Option<i64>) -> Self {
        PoolRow { run, ..self }
    }

    /// These, with `idle_secs` set.
    pub fn with_idle_secs(self, idle_secs: Option<f64>) -> Self {
        PoolRow { idle_secs, ..self }
    }

    /// These, with `polled_secs` set.
    pub fn with_polled_secs(self, polled_secs: Option<f64>) -> Self {
        PoolRow {
            polled_secs,
            ..self
        }
    }

    /// These, with `uses` set.
    pub fn with_uses(self, uses: i64) -> Self {
        PoolRow { uses, ..self }
    }

    /// These, with `claim` set.
    pub fn with_claim(self, claim: bool) -> Self {
        PoolRow { claim, ..self }
    }

    /// These, with `reserved` set.
    pub fn with_reserved(self, reserved: bool) -> Self {
        PoolRow { reserved, ..self }
    }

    /// These, with `woken_secs` set.
    pub fn with_woken_secs(self, woken_secs: Option<f64>) -> Self {
        PoolRow { woken_secs, ..self }
    }

    /// These, with `noticed` set.
    pub fn with_noticed(self, noticed: bool) -> Self {
        PoolRow { noticed, ..self }
    }

    /// These, with `interrupted` set.
    pub fn with_interrupted(self, interrupted: bool) -> Self {
        PoolRow {
            interrupted,
            ..self
        }
    }

    /// Row `id` of `instance` with nothing else known of it: no run, not
    /// idle, never polled, never used, no claim, reserve or notice.
    pub fn new(id: i64, instance: String) -> Self {
        PoolRow {
            id,
            instance,
            run: None,
            idle_secs: None,
            polled_secs: None,
            uses: 0,
            claim: false,
            reserved: false,
            woken_secs: None,
            noticed: false,
            interrupted: false,
        }
    }

    /// The row's id in `orca.pool`.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The EC2 instance id the row is of.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The run the instance was handed, if any.
    pub fn run(&self) -> Option<i64> {
        self.run
    }

    /// Seconds since the row went `idle`; `None` while the instance is busy.
    pub fn idle_secs(&self) -> Option<f64> {
        self.idle_secs
    }

    /// Seconds since the agent last `polled`; `None` if it never did.
    pub fn polled_secs(&self) -> Option<f64> {
        self.polled_secs
    }

    /// Runs the instance has been handed (its rows with a run).
    pub fn uses(&self) -> i64 {
        self.uses
    }

    /// The operator's own claim on an instance it is terminating (see
    /// `orca_db::pool::claim`): live, never idle, so never handed out.
    pub fn claim(&self) -> bool {
        self.claim
    }

    /// Taken for the stopped reserve (`orca_db::pool::reserve_idle_rows`): never idle,
    /// never handed out, its instance stopped or being stopped.
    pub fn reserved(&self) -> bool {
        self.reserved
    }

    /// Seconds since the operator started the reserve instance
    /// (`orca_db::pool::wake_rows`), while its agent has not marked the row idle yet.
    pub fn woken_secs(&self) -> Option<f64> {
        self.woken_secs
    }

    /// Its agent recorded a spot notice (`notice`): an idle row is being
    /// ended by its agent; `interrupted`: EC2 takes the instance back in
    /// about two minutes.
    pub fn noticed(&self) -> bool {
        self.noticed
    }

    /// EC2 takes the instance back in about two minutes (its agent's spot
    /// notice says so).
    pub fn interrupted(&self) -> bool {
        self.interrupted
    }
}

/// Where the runs handed an instance since a mark were served from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Served {
    /// An instance idle already: the run did not wait.
    idle: u64,
    /// An instance started from the stopped reserve.
    reserve: u64,
    /// After the run asked and waited (a cold launch, or one that went idle
    /// meanwhile).
    cold: u64,
}

impl std::ops::AddAssign for Served {
    fn add_assign(&mut self, other: Served) {
        self.idle += other.idle;
        self.reserve += other.reserve;
        self.cold += other.cold;
    }
}

impl Served {
    /// An instance idle already: the run did not wait.
    pub fn idle(&self) -> u64 {
        self.idle
    }

    /// An instance started from the stopped reserve.
    pub fn reserve(&self) -> u64 {
        self.reserve
    }

    /// After the run asked and waited (a cold launch, or one that went idle
    /// meanwhile).
    pub fn cold(&self) -> u64 {
        self.cold
    }

    /// Of its parts, as the fields say.
    pub fn new(idle: u64, reserve: u64, cold: u64) -> Self {
        Served {
            idle,
            reserve,
            cold,
        }
    }

    /// Counts one hand-out from `source`.
    pub fn add(&mut self, source: Source) {
        match source {
            Source::Idle => self.idle += 1,
            Source::Reserve => self.reserve += 1,
            Source::Cold => self.cold += 1,
        }
    }
}

/// Where the instance handed to a run came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// Idle already when the run asked.
    Idle,
    /// Started from the stopped reserve.
    Reserve,
    /// The run asked, found none, and waited: a cold launch, or an instance
    /// that went idle meanwhile.
    Cold,
}

impl Source {
    /// Every source, in the order the status and the metrics show them.
    pub const ALL: [Source; 3] = [Source::Idle, Source::Reserve, Source::Cold];

    /// The metrics' `from` label: `idle`, `reserve` or `cold`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Idle => "idle",
            Source::Reserve => "reserve",
            Source::Cold => "cold",
        }
    }
}

/// One run handed an instance of the pool.
#[derive(Clone, Debug, PartialEq)]
pub struct HandOut {
    /// The instance handed out.
    instance: String,
    source: Source,
    /// Its time to start: from the run's first ask that found no instance
    /// to the hand-out, in seconds by the database's clock; 0 for a run
    /// that found one at once.
    waited: f64,
    /// When it was handed out (the database's epoch seconds).
    at: f64,
}

impl HandOut {
    /// Of its parts, as the fields say.
    pub fn new(instance: String, source: Source, waited: f64, at: f64) -> Self {
        HandOut {
            instance,
            source,
            waited,
            at,
        }
    }

    /// The instance handed out.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Where the run was served from.
    pub fn source(&self) -> Source {
        self.source
    }

    /// Its time to start: from the run's first ask that found no instance
    /// to the hand-out, in seconds by the database's clock; 0 for a run
    /// that found one at once.
    pub fn waited(&self) -> f64 {
        self.waited
    }

    /// When it was handed out (the database's epoch seconds).
    pub fn at(&self) -> f64 {
        self.at
    }
}
