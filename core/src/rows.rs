//! The rows of `orca.instances` and `orca.pool_demand` the pool's plan
//! reads, as plain values: `orca_db::pool` reads them (and re-exports
//! them under the names it always had); the plan, free of the database
//! driver, decides from them.

/// A live `orca.instances` row of the pool, with the ages the database
/// computed when it was read.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolRow {
    pub id: i64,
    pub instance: String,
    pub run: Option<i64>,
    /// Seconds since the row went `idle`; `None` while the instance is busy.
    pub idle_secs: Option<f64>,
    /// Seconds since the agent last `polled`; `None` if it never did.
    pub polled_secs: Option<f64>,
    /// Runs the instance has been handed (its rows with a run).
    pub uses: i64,
    /// The operator's own claim on an instance it is terminating (see
    /// `orca_db::pool::claim`): live, never idle, so never handed out.
    pub claim: bool,
    /// Taken for the stopped reserve (`orca_db::pool::reserve_idle_rows`): never idle,
    /// never handed out, its instance stopped or being stopped.
    pub reserved: bool,
    /// Seconds since the operator started the reserve instance
    /// (`orca_db::pool::wake_rows`), while its agent has not marked the row idle yet.
    pub woken_secs: Option<f64>,
    /// Its agent recorded a spot notice (`notice`): an idle row is being
    /// ended by its agent; `interrupted`: EC2 takes the instance back in
    /// about two minutes.
    pub noticed: bool,
    pub interrupted: bool,
}

/// Where the runs handed an instance since a mark were served from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Served {
    /// An instance idle already: the run did not wait.
    pub idle: u64,
    /// An instance started from the stopped reserve.
    pub reserve: u64,
    /// After the run asked and waited (a cold launch, or one that went idle
    /// meanwhile).
    pub cold: u64,
}

impl Served {
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
    pub instance: String,
    pub source: Source,
    /// Its time to start: from the run's first ask that found no instance
    /// to the hand-out, in seconds by the database's clock; 0 for a run
    /// that found one at once.
    pub waited: f64,
    /// When it was handed out (the database's epoch seconds).
    pub at: f64,
}
