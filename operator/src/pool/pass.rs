//! One pool, its loop and one pass of it: observe (EC2 first, then the
//! database) → [`plan`] → act (see `act.rs`) → status and events. Every
//! EC2 call and every statement checks the loop's [`Fence`] just before it
//! goes out; a fenced pass ends there, with [`PoolError::Fenced`].

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    fmt,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use orca_db::{ConnectOptions, DatabaseUrl, Db, DbError, Reconnect};
use tokio::sync::watch;

use crate::backoff::Backoff;

use super::{
    ec2::{Ec2, Ec2Config, Ec2Error, Ownership},
    metrics::PoolMetrics,
    plan::{plan, Ec2Instance, Limits, Offering, PoolPlan, Snapshot},
    schedule,
};
use crate::crd::{WarmPoolSpec, WarmPoolStatus};
use crate::fence::{Fence, Fenced};

/// The loop's knobs that are not in the spec. The defaults are for
/// production; tests shorten `resync`, `stale` and `leak_grace`.
#[derive(Clone, Debug)]
pub struct Tuning {
    /// A pass at least this often, notification or not.
    pub resync: Duration,
    /// Passes are at least this far apart (notifications come in bursts).
    pub min_gap: Duration,
    /// An idle row not `polled` for this long is stale (its agent is dead).
    pub stale: Duration,
    /// An instance this loop did not launch, with no row, is leaked once
    /// this old. `None`: the larger of 60 s and `bootTimeoutSeconds`.
    /// Never set it below 60 s in production: an instance launched by an
    /// operator that restarted since is "not ours" until its agent reports.
    pub leak_grace: Option<Duration>,
    /// How long an offering without capacity is skipped.
    pub capacity_hold: Duration,
    /// At most this many instances per `RunInstances`.
    pub max_batch: u32,
    /// The value of the `orca.dev/operator` tag.
    pub operator: String,
    /// The value of the `orca.dev/cluster` tag: this cluster's name
    /// (`--cluster-name`), in every launch's tags and every listing's
    /// filter, so that operators of two clusters sharing an account never
    /// touch each other's instances.
    pub cluster: String,
    /// The operator replica (its pod's name) the loop runs in, if there are
    /// several: part of its connections' `application_name`, so the
    /// database tells the replicas apart (`pg_stat_activity`, the logs).
    pub replica: Option<String>,
    /// A pass within this long of the last EC2 listing reuses it, unless a
    /// pass since terminated or ended something or failed, the spec
    /// changed, or the pool is being deleted: a hand-out's launch then waits for no listing. What
    /// the loop launched since is counted from what EC2 answered. Zero:
    /// every pass lists.
    pub listing_reuse: Duration,
    /// `RunInstances` calls per batch when throttled, same `ClientToken`.
    pub throttle_attempts: u32,
    /// After boot time-outs in a row (see [`super::boot`]), launches wait
    /// this long, doubling with each one more, up to the cap.
    pub boot_backoff_base: Duration,
    pub boot_backoff_cap: Duration,
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
}

impl Tuning {
    /// The `application_name` of the loop's `kind` of connection:
    /// `orca-operator-<kind>`, and `/<replica>` when there is one.
    pub fn application_name(&self, kind: &str) -> String {
        match &self.replica {
            Some(replica) => format!("orca-operator-{kind}/{replica}"),
            None => format!("orca-operator-{kind}"),
        }
    }
}

/// The cluster name of a [`Tuning`] nobody named: the Kubernetes mode
/// always names its own (`--cluster-name`).
pub const DEFAULT_CLUSTER: &str = "default";

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            resync: Duration::from_secs(20),
            min_gap: Duration::from_millis(25),
            listing_reuse: Duration::from_secs(5),
            stale: Duration::from_secs(30),
            leak_grace: None,
            capacity_hold: Duration::from_secs(180),
            max_batch: 100,
            operator: "orca-operator".into(),
            cluster: DEFAULT_CLUSTER.into(),
            replica: None,
            throttle_attempts: 5,
            boot_backoff_base: Duration::from_secs(60),
            boot_backoff_cap: Duration::from_secs(1800),
            backoff_base: Duration::from_millis(200),
            backoff_cap: Duration::from_secs(30),
        }
    }
}

/// An EC2 listing of the pool, kept for the passes that follow it closely.
#[derive(Clone, Debug)]
struct Listing {
    /// When the listing was asked for.
    taken: Instant,
    /// The database's clock just before.
    clock: f64,
    instances: Vec<Ec2Instance>,
}

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

/// The URL text as the user-data needs it; never shown.
#[derive(Clone)]
pub(super) struct SecretUrl(pub(super) String);

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretUrl(***)")
    }
}

/// A loop's own name for its launches, when it has no uid to remember:
/// the pool, this process and when the loop was made, so no two loops share
/// one.
fn own_launch_id(pool: &str) -> String {
    format!("{pool}/{}", nonce())
}

/// A value no other loop, of this process or another, ever had: the time,
/// the process and a random number. It names a loop's launches (their
/// `ClientToken`s), so that a batch count read back from a status that is
/// behind — a write lost before a failover, a status restored from a
/// backup — never makes a new batch repeat an old batch's token.
fn nonce() -> String {
    use std::hash::{BuildHasher, Hasher};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    // RandomState is seeded from the system's randomness.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    format!("{nanos:x}.{:x}.{random:x}", std::process::id())
}

/// The world a loop acts on for real: its database connection and its EC2
/// client, both behind its fence.
pub struct Live {
    pool: String,
    pub(super) ec2: Ec2,
    ec2_config: Ec2Config,
    reconnect: Reconnect,
    db: Option<Db>,
    /// Until when the loop may act; always open unless set.
    fence: Fence,
}

impl Live {
    pub(super) fn db_error(&mut self, source: DbError) -> PoolError {
        if source.is_connection() {
            self.db = None;
        }
        PoolError::Db {
            pool: self.pool.clone(),
            source,
        }
    }

    fn fenced(&self, source: Fenced) -> PoolError {
        PoolError::Fenced {
            pool: self.pool.clone(),
            source,
        }
    }

    /// The connection for the next statement, once the fence is checked:
    /// call it before each statement.
    pub(super) async fn connected(&mut self) -> Result<&mut Db, PoolError> {
        self.fence.check().map_err(|e| self.fenced(e))?;
        if self.db.as_ref().is_none_or(Db::is_closed) {
            self.db = None;
            let db = self
                .reconnect
                .try_connect()
                .await
                .map_err(|e| self.db_error(e))?;
            self.db = Some(db);
            // Connecting took a while: the fence again.
            self.fence.check().map_err(|e| self.fenced(e))?;
        }
        self.db.as_mut().ok_or_else(|| PoolError::Db {
            pool: self.pool.clone(),
            source: DbError::Connect {
                target: self.reconnect.url().target(),
                reason: "no connection".into(),
            },
        })
    }
}

/// The controller of one WarmPool, acting on `W`: the [`Live`] world, or
/// a table of answers in the act step's tests.
pub struct PoolLoop<W = Live> {
    pub(super) pool: String,
    pub(super) spec: WarmPoolSpec,
    pub(super) owner: Ownership,
    pub(super) world: W,
    pub(super) url: SecretUrl,
    pub(super) tuning: Tuning,
    /// Offerings without capacity, until when.
    pub(super) unavailable: BTreeMap<Offering, DateTime<Utc>>,
    /// The error code that made each of them unavailable.
    pub(super) capacity_codes: HashMap<Offering, String>,
    /// Instances this loop launched, and when it learnt their ids.
    pub(super) ours: HashMap<String, Instant>,
    pub(super) backoff: Backoff,
    pub(super) metrics: Option<PoolMetrics>,
    served_mark: Option<f64>,
    /// Instance-seconds and runs served so far, and when they were last
    /// counted.
    pub(super) cost: super::cost::Cost,
    cost_at: Option<Instant>,
    /// The last EC2 listing, while a pass may reuse it.
    listing: Option<Listing>,
    /// Busy rows seen hung, and the database's clock at the listing of the
    /// pass that first saw each so.
    hung_since: HashMap<i64, f64>,
    pub(super) conditions: Vec<Condition>,
    /// The WarmPool's deletion (`onDelete: Terminate`), once it began; the
    /// sender is the controller's ([`PoolLoop::with_deletion`]).
    deletion: watch::Receiver<Option<Deletion>>,
    /// The `Deleting` event was posted.
    deletion_announced: bool,
    /// Instances of the pool without the cluster's tag were looked for
    /// (see [`PoolLoop::list`]).
    adopted: bool,
    /// Those of them the last listing adopted, for the pass to say so.
    just_adopted: Vec<String>,
    /// The launch spec whose drifted instances a `Drifted` event announced.
    drift_announced: Option<String>,
    /// The Scheduler's stale limit: a busy instance whose run has not beaten
    /// for this long looks hung. `None`: [`Tuning::stale`].
    run_stale: Option<Duration>,
    /// Boot time-outs in a row, and the launch back-off they earned.
    pub(super) boot: super::boot::BootFailures,
    /// Instances this loop launched that reported (had a row).
    booted: HashSet<String>,
    /// What names this pool's launches in their `ClientToken`s: its uid
    /// once [`PoolLoop::remember`]ed, else one of this loop's own.
    pub(super) launch_id: String,
    /// Launch batches EC2 answered (`status.launchBatches`): the number of
    /// the next one.
    pub(super) launch_batches: u64,
}

impl<W> PoolLoop<W> {
    /// A loop acting on `world`, for the pool `owner` names: what
    /// [`PoolLoop::new`] makes with the [`Live`] world, and the act step's
    /// tests with a table of answers.
    pub(super) fn with_world(
        owner: Ownership,
        spec: WarmPoolSpec,
        database_url: &str,
        tuning: Tuning,
        world: W,
    ) -> PoolLoop<W> {
        let pool = owner.pool.clone();
        PoolLoop {
            backoff: Backoff::new(tuning.backoff_base, tuning.backoff_cap),
            spec,
            owner,
            world,
            url: SecretUrl(database_url.to_string()),
            tuning,
            unavailable: BTreeMap::new(),
            capacity_codes: HashMap::new(),
            ours: HashMap::new(),
            metrics: None,
            served_mark: None,
            cost: Default::default(),
            cost_at: None,
            listing: None,
            hung_since: HashMap::new(),
            conditions: Vec::new(),
            deletion: watch::channel(None).1,
            deletion_announced: false,
            adopted: false,
            just_adopted: Vec::new(),
            drift_announced: None,
            run_stale: None,
            boot: Default::default(),
            booted: HashSet::new(),
            launch_id: own_launch_id(&pool),
            launch_batches: 0,
            pool,
        }
    }

    /// Takes up where the pool's last writer left off, from its observed
    /// `status` (the Kubernetes mode: a restarted or newly elected operator):
    /// the offerings still held for want of capacity, each condition's
    /// transition time, and the launch batch count; `uid` (the WarmPool's)
    /// and a value of this loop's own name its launches, so their tokens
    /// are unique to the pool and never repeat, whatever the status says.
    /// (A batch whose answer was lost is retried with its token by this
    /// loop; after a failover the next leader launches afresh, and what a
    /// lost batch launched after all is surplus the next passes retire.)
    pub fn remember(mut self, uid: &str, status: &WarmPoolStatus) -> Self {
        self.launch_id = format!("{uid}/{}", nonce());
        self.launch_batches = status.launch_batches.max(0) as u64;
        self.conditions = status.conditions.clone();
        self.cost
            .restore(&status.instance_seconds, status.runs_served.as_ref());
        for held in &status.capacity_errors {
            let Ok(until) = DateTime::parse_from_rfc3339(&held.until) else {
                tracing::warn!(pool = %self.pool, until = %held.until,
                    "a capacity hold in the status has no valid time; dropped");
                continue;
            };
            let offering = Offering {
                instance_type: held.instance_type.clone(),
                subnet: held.subnet.clone(),
                spot: held.spot,
            };
            self.unavailable
                .insert(offering.clone(), until.with_timezone(&Utc));
            self.capacity_codes.insert(offering, held.code.clone());
        }
        self
    }

    /// The stale limit of the Scheduler the pool serves (its
    /// `handover.staleSeconds`): its runs' heartbeats older than this look
    /// hung, and a busy instance that looks so for twice it is retired
    /// (`Hung`). Without it, [`Tuning::stale`].
    pub fn set_run_stale(&mut self, stale: Duration) {
        self.run_stale = Some(stale);
    }

    fn run_stale(&self) -> Duration {
        self.run_stale.unwrap_or(self.tuning.stale)
    }

    /// No metrics: a loop draining where the pool ran before must not set
    /// the pool's gauges, which are the current loop's.
    pub fn without_metrics(mut self) -> Self {
        self.metrics = None;
        self
    }

    pub fn with_metrics(mut self, metrics: PoolMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    pub(super) fn ec2_error(&self, source: Ec2Error) -> PoolError {
        match source {
            Ec2Error::Fenced { source, .. } => PoolError::Fenced {
                pool: self.pool.clone(),
                source,
            },
            source => PoolError::Ec2 {
                pool: self.pool.clone(),
                source,
            },
        }
    }
}

impl PoolLoop {
    /// The loop of WarmPool `namespace/name`, over the database at
    /// `database_url` (libpq-style; it reaches the instances' user-data
    /// unless `launch.databaseUrlFile` is set).
    pub async fn new(
        namespace: &str,
        name: &str,
        spec: WarmPoolSpec,
        database_url: &str,
        tuning: Tuning,
    ) -> Result<PoolLoop, PoolError> {
        let pool = format!("{namespace}/{name}");
        let url = DatabaseUrl::parse(database_url).map_err(|source| PoolError::Db {
            pool: pool.clone(),
            source,
        })?;
        let ec2_config = Ec2Config::new(&spec.region, spec.endpoint.as_deref());
        let ec2 = Ec2::new(&ec2_config).await;
        let owner = Ownership::new(
            namespace,
            name,
            &spec.scheduler,
            &tuning.operator,
            &tuning.cluster,
        );
        let world = Live {
            pool: pool.clone(),
            ec2,
            ec2_config,
            reconnect: Reconnect::new(url, ConnectOptions::named(&tuning.application_name("pool")))
                .listen("orca_pool"),
            db: None,
            fence: Fence::always(),
        };
        Ok(PoolLoop::with_world(
            owner,
            spec,
            database_url,
            tuning,
            world,
        ))
    }

    /// No `LISTEN` on the loop's connection: whoever drives its passes
    /// listens for it (the Kubernetes mode, one connection per database).
    pub fn not_listening(mut self) -> Self {
        let url = self.world.reconnect.url().clone();
        let name = self.tuning.application_name("pool");
        self.world.reconnect = Reconnect::new(url, ConnectOptions::named(&name));
        self
    }

    /// Every EC2 call and statement of the loop checks `fence` first. A
    /// loop is built with [`Fence::always`] (the local mode, which has no
    /// election); the Kubernetes mode sets its Lease's.
    pub fn with_fence(mut self, fence: Fence) -> Self {
        self.world.ec2 = self.world.ec2.with_fence(fence.clone());
        self.world.fence = fence;
        self
    }

    /// The WarmPool's deletion with `onDelete: Terminate`, as `deletion`
    /// tells it: from the first pass after it holds one, the loop launches
    /// nothing and terminates the pool's instances (see [`super::plan()`]),
    /// and each pass says whether any is left ([`PassReport::deleted`]). A
    /// change cuts the wait for the next pass short.
    pub fn with_deletion(mut self, deletion: watch::Receiver<Option<Deletion>>) -> Self {
        self.deletion = deletion;
        self
    }

    /// `namespace/name`.
    pub fn pool(&self) -> &str {
        &self.pool
    }

    pub fn ownership(&self) -> &Ownership {
        &self.owner
    }

    pub fn spec(&self) -> &WarmPoolSpec {
        &self.spec
    }

    /// A changed spec (Kubernetes: a new generation); a changed region or
    /// endpoint gets a new EC2 client, and the next pass lists afresh.
    pub async fn set_spec(&mut self, spec: WarmPoolSpec) {
        self.listing = None;
        let cfg = Ec2Config::new(&spec.region, spec.endpoint.as_deref());
        if cfg != self.world.ec2_config {
            self.world.ec2 = Ec2::new(&cfg).await.with_fence(self.world.fence.clone());
            self.world.ec2_config = cfg;
        }
        let (ns, name) = self.pool.split_once('/').unwrap_or(("", &self.pool));
        self.owner = Ownership::new(
            ns,
            name,
            &spec.scheduler,
            &self.tuning.operator,
            &self.tuning.cluster,
        );
        self.spec = spec;
    }

    fn limits(&self) -> Limits {
        let grace = self.tuning.leak_grace.unwrap_or_else(|| {
            Duration::from_secs(60).max(Duration::from_secs(
                self.spec.boot_timeout_seconds.max(0) as u64
            ))
        });
        Limits {
            stale_secs: self.tuning.stale.as_secs_f64(),
            leak_grace_secs: grace.as_secs_f64(),
            max_batch: self.tuning.max_batch,
            hung_grace_secs: 2.0 * self.run_stale().as_secs_f64(),
            unlisted_grace_secs: 60.0,
        }
    }

    /// Observes: EC2 first (or the last listing, see
    /// [`Tuning::listing_reuse`]), then the rows and the demand.
    async fn observe(&mut self) -> Result<(Snapshot, Listing), PoolError> {
        let (snap, listing, reused) = self.observe_once().await?;
        // An instance the reused listing shows alive lost its last row since
        // (its agent powered it off, say): the listing cannot tell whether it
        // still runs, so look again rather than terminate it twice.
        if reused
            && snap
                .instances
                .iter()
                .any(|i| i.state.is_present() && snap.known.contains(&i.id))
        {
            let (snap, listing, _) = self.observe_once().await?;
            return Ok((snap, listing));
        }
        Ok((snap, listing))
    }

    /// One observation: the last listing if it may be reused (taking it;
    /// then `true`), else a new one.
    async fn observe_once(&mut self) -> Result<(Snapshot, Listing, bool), PoolError> {
        let reusable = self.listing.take().filter(|l| {
            l.taken.elapsed() < self.tuning.listing_reuse && self.deletion.borrow().is_none()
        });
        let reused = reusable.is_some();
        let (taken, listed, instances) = match reusable {
            Some(l) => (l.taken, l.clock, l.instances),
            None => {
                // The database's clock just before the listing: a row made
                // after it may be of an instance the listing does not show.
                let db = self.world.connected().await?;
                let read = orca_db::pool::clock(db).await;
                let clock = read.map_err(|e| self.world.db_error(e))?;
                let taken = Instant::now();
                let instances = self.list().await?;
                (taken, clock, instances)
            }
        };
        let pool = self.pool.clone();
        let count_uses = self.spec.max_uses > 0;
        let mark = self.served_mark;
        let db = self.world.connected().await?;
        let read = orca_db::pool::live_rows(db, &pool, count_uses).await;
        let live = read.map_err(|e| self.world.db_error(e))?;
        // Present, or launched by this loop and not listed yet, without a
        // live row: had it rows once?
        let unlisted = self
            .ours
            .keys()
            .filter(|id| !instances.iter().any(|i| &i.id == *id));
        let without: Vec<String> = instances
            .iter()
            .filter(|i| i.state.is_present())
            .map(|i| &i.id)
            .chain(unlisted)
            .filter(|id| !live.iter().any(|r| &r.instance == *id))
            .cloned()
            .collect();
        let db = self.world.connected().await?;
        let read = orca_db::pool::known(db, &without).await;
        let known = read.map_err(|e| self.world.db_error(e))?;
        let (stale, db) = (self.run_stale(), self.world.connected().await?);
        let read = orca_db::pool::check_rows(db, &pool, listed, stale).await;
        let checks = read.map_err(|e| self.world.db_error(e))?;
        let mut made_before_listing = HashMap::with_capacity(checks.len());
        let (mut hung, mut hung_since) = (HashMap::new(), HashMap::new());
        for c in checks {
            made_before_listing.insert(c.row, c.made_before_listing);
            if c.hung {
                let since = self.hung_since.get(&c.row).copied().unwrap_or(listed);
                hung_since.insert(c.row, since);
                hung.insert(c.row, listed - since);
            }
        }
        self.hung_since = hung_since;
        let db = self.world.connected().await?;
        let read = orca_db::pool::open_demand(db, &pool).await;
        let demand = read.map_err(|e| self.world.db_error(e))?;
        let db = self.world.connected().await?;
        let read = orca_db::pool::served_waits(db, &pool, mark).await;
        let (waits, newest) = read.map_err(|e| self.world.db_error(e))?;
        self.served_mark = newest;
        let (handed_mark, db) = (self.cost.handed_mark, self.world.connected().await?);
        let read = orca_db::pool::hand_outs_since(db, &pool, handed_mark).await;
        let (served, newest) = read.map_err(|e| self.world.db_error(e))?;
        self.cost.handed_mark = newest;
        self.cost.add_served(served);
        if let Some(m) = &self.metrics {
            m.served(&self.pool, served);
        }
        if let Some(m) = &self.metrics {
            for w in waits {
                m.demand_waited(&self.pool, w);
            }
        }
        // An id stays ours while EC2 lists it, or briefly before it does.
        self.ours.retain(|id, at| {
            instances
                .iter()
                .any(|i| &i.id == id && i.state.is_present())
                || at.elapsed() < Duration::from_secs(300)
        });
        let listing = Listing {
            taken,
            clock: listed,
            instances: instances.clone(),
        };
        let snap = Snapshot {
            instances,
            rows: live,
            known,
            ours: self.ours.keys().cloned().collect(),
            demand,
            deleting: None,
            made_before_listing,
            hung,
        };
        Ok((snap, listing, reused))
    }

    /// One pass at `now` (the operator's clock, for EC2's launch times).
    pub async fn pass(&mut self, now: DateTime<Utc>) -> Result<PassReport, PoolError> {
        let (mut snap, listing) = self.observe().await?;
        let adopted = std::mem::take(&mut self.just_adopted);
        // Read after the observation: a deletion that began meanwhile
        // launches nothing in this pass already.
        let deletion = *self.deletion.borrow();
        if let Some(d) = deletion {
            self.spec.drain_timeout_seconds = d.drain_timeout_seconds;
        }
        snap.deleting = deletion.map(|d| d.since);
        self.unavailable.retain(|_, until| *until > now);
        let unavailable = &self.unavailable;
        self.capacity_codes
            .retain(|o, _| unavailable.contains_key(o));
        // A schedule under way replaces the idle range; one that cannot be
        // read is a warning, and `spec.idle` holds.
        let active = schedule::active(&self.spec.schedules, now);
        let scheduled;
        let spec = match &active {
            Ok(Some(a)) => {
                scheduled = WarmPoolSpec {
                    idle: a.idle.clone(),
                    ..self.spec.clone()
                };
                &scheduled
            }
            _ => &self.spec,
        };
        let decided = plan(spec, &snap, &self.unavailable, &self.limits(), now);
        // What each instance was doing since the last pass is taken to be
        // what it does now; a gap longer than a few resyncs (the loop
        // stopped, or lost its lease) is not counted.
        let elapsed = self.cost_at.map_or(Duration::ZERO, |at| at.elapsed());
        self.cost_at = Some(Instant::now());
        if elapsed <= self.tuning.resync * 4 {
            for ((instance_type, spot), u, secs) in self.cost.tally(&snap, elapsed) {
                if let Some(m) = &self.metrics {
                    m.instance_seconds(&self.pool, &instance_type, spot, u, secs);
                }
            }
        }
        let idle_min = spec.idle.min;
        tracing::debug!(
            pool = %self.pool,
            instances = snap.instances.len(),
            rows = snap.rows.len(),
            demand = snap.demand,
            launches = decided.launch_count(),
            retirements = decided.retirements.len(),
            "planned"
        );
        let mut report = PassReport {
            plan: decided.clone(),
            deleting: snap.deleting.is_some(),
            deleted: snap.deleting.is_some() && self.nothing_left(&snap),
            idle_min,
            active_schedule: match &active {
                Ok(Some(a)) => Some(a.describe(&self.spec)),
                _ => None,
            },
            ..PassReport::default()
        };
        if let Err(e) = &active {
            report
                .events
                .push(PoolEvent::new("InvalidSchedule", e.to_string(), true));
        }
        if decided.counts.drifted > 0 {
            self.announce_drift(&snap, &mut report);
        }
        if !adopted.is_empty() {
            report.events.push(PoolEvent::new(
                "Adopted",
                format!(
                    "{} instance(s) launched before instances carried the cluster's tag, with rows \
                     in this pool's database, tagged {}={}: {}",
                    adopted.len(),
                    super::ec2::TAG_CLUSTER,
                    self.owner.cluster,
                    adopted.join(", ")
                ),
                false,
            ));
        }
        if let Some(since) = snap.deleting {
            self.announce_deletion(&decided, since, &mut report);
        } else {
            self.count_boot_failures(&decided, &snap, &mut report).await;
        }
        let failed_ends = self.retire(&decided, &mut report).await?;
        self.reserve(&decided, now, &mut report).await?;
        self.launch(&decided, failed_ends, now, &mut report).await?;
        // What this pass terminated, ended, stopped or started would look
        // otherwise in a reused listing; what it launched is counted as the
        // loop's own.
        if decided.retirements.is_empty()
            && decided.ends.is_empty()
            && decided.gone.is_empty()
            && decided.stops.is_empty()
            && decided.restops.is_empty()
            && decided.starts.is_empty()
        {
            self.listing = Some(listing);
        }
        report.status = self.status(&report, now);
        self.deletion_announced |= report.deleting;
        if let Some(m) = &self.metrics {
            m.counts(
                &self.pool,
                report.status.idle as u32,
                report.status.busy as u32,
                report.status.stopped as u32,
            );
        }
        Ok(report)
    }

    /// The pool's instances, listed: by all the ownership tags, or, for the
    /// loop's first listing, by those the instances launched before they
    /// carried the cluster's tag have too — and those of them whose agents
    /// reported to this pool's database are adopted: tagged with this
    /// cluster's name (so that later listings, which filter on it, show
    /// them) and listed as the pool's. One without a row here may be
    /// another cluster's, and is left alone (its agent powers it off once
    /// idle). One listing either way.
    async fn list(&mut self) -> Result<Vec<Ec2Instance>, PoolError> {
        if self.adopted {
            let listed = self.world.ec2.describe(&self.owner).await;
            return listed.map_err(|e| self.ec2_error(e));
        }
        let listed = self.world.ec2.describe_with_untagged(&self.owner).await;
        let (mut instances, untagged) = listed.map_err(|e| self.ec2_error(e))?;
        if !untagged.is_empty() {
            let ids: Vec<String> = untagged.iter().map(|i| i.id.clone()).collect();
            let db = self.world.connected().await?;
            let read = orca_db::pool::had_rows(db, &self.pool, &ids).await;
            let mut ours: Vec<String> = read
                .map_err(|e| self.world.db_error(e))?
                .into_iter()
                .collect();
            ours.sort();
            if ours.is_empty() {
                tracing::info!(pool = %self.pool, instances = ?ids,
                    "instances with this pool's tags but no cluster's and no row in its database: \
                     another cluster's, left alone");
            } else {
                let tagged = self.world.ec2.tag_cluster(&ours, &self.owner).await;
                tagged.map_err(|e| self.ec2_error(e))?;
                tracing::info!(pool = %self.pool, instances = ?ours, cluster = %self.owner.cluster, "adopted");
                instances.extend(untagged.into_iter().filter(|i| ours.contains(&i.id)));
                self.just_adopted = ours;
            }
        }
        self.adopted = true;
        Ok(instances)
    }

    /// Boot time-outs in a row (`plan`'s `BootTimeout` retirements, none of
    /// this loop's instances reporting): past a few, a Warning, the pool
    /// `Degraded` (`BootFailing`, with the last one's console, scrubbed of
    /// the database URL) and launches backing off (see [`super::boot`]).
    async fn count_boot_failures(
        &mut self,
        plan: &PoolPlan,
        snap: &Snapshot,
        report: &mut PassReport,
    ) {
        let timed_out: Vec<&str> = plan
            .retirements
            .iter()
            .filter(|r| r.reason == super::plan::Reason::BootTimeout)
            .map(|r| r.instance.as_str())
            .collect();
        // A boot worked: an instance this loop launched reported (a row),
        // for the first time.
        self.booted.retain(|id| snap.ours.contains(id));
        let mut reported = false;
        for r in snap.rows.iter().filter(|r| snap.ours.contains(&r.instance)) {
            reported |= self.booted.insert(r.instance.clone());
        }
        let last = match timed_out.last() {
            Some(id) => {
                let console = self.world.ec2.console_tail(id).await.unwrap_or_default();
                Some((id.to_string(), orca_db::url::scrub(&console, &self.url.0)))
            }
            None => None,
        };
        let worse = self.boot.record(
            timed_out.len() as u32,
            last,
            reported,
            self.tuning.boot_backoff_base,
            self.tuning.boot_backoff_cap,
        );
        if let Some(message) = self.boot.failing() {
            if worse {
                tracing::warn!(pool = %self.pool, "{message}");
                report
                    .events
                    .push(PoolEvent::new("BootFailing", message.clone(), true));
            }
            report.degraded = Some(("BootFailing", message));
        }
    }

    /// A `Drifted` event, once per launch spec: how many instances run an
    /// out-of-date one, of which images, and how fast they are replaced.
    fn announce_drift(&mut self, snap: &Snapshot, report: &mut PassReport) {
        let hash = super::drift::launch_hash(&self.spec.launch);
        if self.drift_announced.as_deref() == Some(hash.as_str()) {
            return;
        }
        let drifted: Vec<&Ec2Instance> = snap
            .instances
            .iter()
            .filter(|i| i.state.is_present() && super::drift::drifted(&self.spec, &hash, i))
            .collect();
        let mut images: Vec<&str> = drifted.iter().filter_map(|i| i.image.as_deref()).collect();
        images.sort_unstable();
        images.dedup();
        let was = if images.is_empty() {
            "another launch spec, instance type or subnet".to_string()
        } else {
            images.join(", ")
        };
        let pace = match self.spec.disruption.max_drifted.max(0) {
            0 => "disruption.maxDrifted is 0: they go by idleSeconds and maxUses".to_string(),
            n => format!(
                "replacing {n} at a time: idle and stopped ones once a replacement is up, \
                 busy ones after their runs"
            ),
        };
        report.events.push(PoolEvent::new(
            "Drifted",
            format!(
                "{} instance(s) run an out-of-date launch spec ({was} → {}): {pace}",
                drifted.len(),
                super::drift::image_label(&self.spec.launch)
            ),
            false,
        ));
        self.drift_announced = Some(hash);
    }

    /// Whether EC2 listed none of the pool's instances as present, and
    /// every instance this loop launched at all (the listing may lag a
    /// launch): nothing of the pool is left to terminate.
    fn nothing_left(&self, snap: &Snapshot) -> bool {
        let listed: HashSet<&str> = snap.instances.iter().map(|i| i.id.as_str()).collect();
        snap.instances.iter().all(|i| !i.state.is_present())
            && self.ours.keys().all(|id| listed.contains(id.as_str()))
    }

    /// The `Deleting` event, until a pass that posted it succeeded.
    fn announce_deletion(&self, plan: &PoolPlan, since: DateTime<Utc>, report: &mut PassReport) {
        if self.deletion_announced {
            return;
        }
        let drain = crate::crd::spec_seconds(self.spec.drain_timeout_seconds);
        let until = (since + drain).to_rfc3339();
        tracing::info!(pool = %self.pool, since = %since.to_rfc3339(), busy = plan.counts.busy,
            retiring = plan.retirements.len(), "WarmPool deleted: terminating its instances");
        report.events.push(PoolEvent {
            reason: "Deleting",
            message: format!(
                "onDelete Terminate: launching no more; terminating {} idle or booting instances; \
                 {} busy may finish their runs until {until}",
                plan.retirements.len(),
                plan.counts.busy
            ),
            warning: false,
        });
    }

    /// Passes until `stop` resolves: on a notification for this pool
    /// (within `min_gap`), every `resync`, and after a back-off when a pass
    /// failed or was throttled. Each pass's outcome goes to `report`.
    pub async fn run<F, S>(mut self, mut report: F, stop: S)
    where
        F: FnMut(Result<&PassReport, &PoolError>),
        S: std::future::Future<Output = ()>,
    {
        tokio::pin!(stop);
        let mut deletion = self.deletion.clone();
        loop {
            // Back-off waits are slept in full: a notification must not
            // cut them short.
            let (wait, backing_off) = match self.pass(Utc::now()).await {
                Ok(r) => {
                    report(Ok(&r));
                    if r.throttled {
                        (self.backoff.next_wait(), true)
                    } else {
                        self.backoff.reset();
                        (self.tuning.resync, false)
                    }
                }
                Err(e) if e.is_fenced() => {
                    tracing::debug!(pool = %self.pool, error = %e, "pool pass fenced");
                    report(Err(&e));
                    (self.backoff.next_wait(), true)
                }
                Err(e) => {
                    tracing::warn!(pool = %self.pool, error = %e, "pool pass failed");
                    report(Err(&e));
                    (self.backoff.next_wait(), true)
                }
            };
            let pause = if backing_off {
                wait
            } else {
                self.tuning.min_gap
            };
            tokio::select! {
                _ = &mut stop => return,
                _ = tokio::time::sleep(pause) => {}
            }
            if backing_off {
                continue;
            }
            // A deletion's first pass need not wait for the resync.
            tokio::select! {
                _ = &mut stop => return,
                _ = self.wake(wait) => {}
                Ok(()) = deletion.changed() => {}
            }
        }
    }

    /// Returns on a notification for this pool, or after `wait`.
    async fn wake(&mut self, wait: Duration) {
        let deadline = tokio::time::Instant::now() + wait;
        let pool = self.pool.clone();
        let Some(db) = self.world.db.as_mut() else {
            tokio::time::sleep(wait.min(Duration::from_secs(1))).await;
            return;
        };
        loop {
            match tokio::time::timeout_at(deadline, db.notification()).await {
                Err(_) => return,
                Ok(None) => {
                    self.world.db = None;
                    return;
                }
                Ok(Some(n)) if n.payload() == pool => {
                    db.drain_notifications();
                    return;
                }
                Ok(Some(_)) => {}
            }
        }
    }
}
