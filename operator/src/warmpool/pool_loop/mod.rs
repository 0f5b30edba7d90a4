//! A pool's loop: what one WarmPool's controller keeps between passes —
//! its spec, its world (the database and EC2, or a table in tests), what
//! it launched, its holds and back-offs — and how it is made and told of
//! a new spec, a deletion or a fence. Its passes are in `pass.rs`
//! (with its own run), the only other file that sees its fields; the
//! stages they run are `observe.rs` and `act/` beside it.
//!
//! The map, one line a file:

// pass — one pass: observe → plan → act, and what it reports; and the loop run on its own.
mod pass;

use std::{
    collections::HashSet,
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use orca_db::{ConnectOptions, DatabaseUrl, Reconnect};
use tokio::sync::watch;

use crate::backoff::Backoff;

use crate::crd::{WarmPoolSpec, WarmPoolStatus};
use crate::fence::Fence;
use crate::warmpool::{
    act::Actuator,
    ec2::{Ec2, Ec2Config, Ownership},
    metrics::PoolMetrics,
    observe::Seen,
    plan::Limits,
};

use crate::connections::Connections;
use crate::warmpool::listings::{Listings, Place};
use crate::warmpool::live::Live;
use crate::warmpool::pass_report::{Deletion, PoolError};
use crate::warmpool::tuning::Tuning;

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

/// The controller of one WarmPool, acting on `W`: the [`Live`] world, or
/// a table of answers in the act step's tests. The loop owns the world and
/// lends it to each stage of a pass: its observer and its act step. What
/// it keeps between passes is in three owners: the act step's (`Actuator`:
/// what its calls teach), the observer's (`Seen`), and the loop's own
/// below (the spec, what the status says, the cost).
pub struct PoolLoop<W = Live> {
    world: W,
    spec: WarmPoolSpec,
    act: Actuator,
    seen: Seen,
    backoff: Backoff,
    /// Instance-seconds and runs served so far, and when they were last
    /// counted.
    cost: crate::warmpool::cost::Cost,
    cost_at: Option<Instant>,
    /// Where the loop lists EC2: a place of its own, or one it shares with
    /// the operator's other pools there ([`PoolLoop::with_listings`]).
    place: Arc<Place>,
    listings: Option<Listings>,
    conditions: Vec<Condition>,
    /// The WarmPool's deletion (`onDelete: Terminate`), once it began; the
    /// sender is the controller's ([`PoolLoop::with_deletion`]).
    deletion: watch::Receiver<Option<Deletion>>,
    /// The `Deleting` event was posted.
    deletion_announced: bool,
    /// The launch spec whose drifted instances a `Drifted` event announced.
    drift_announced: Option<String>,
    /// The Scheduler's stale limit: a busy instance whose run has not beaten
    /// for this long looks hung. `None`: [`Tuning::stale`].
    run_stale: Option<Duration>,
    /// Instances to drain ([`PoolLoop::set_drain`]).
    drain: HashSet<String>,
    /// Left where the pool ran: what the loop of the new place launched
    /// or listed ([`PoolLoop::set_successor`]).
    successor: HashSet<String>,
    /// The instances the last observation listed, in any state; `None`
    /// until one has.
    listed: Option<HashSet<String>>,
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
        let launch_id = own_launch_id(owner.pool());
        PoolLoop {
            backoff: Backoff::new(tuning.backoff_base(), tuning.backoff_cap()),
            world,
            act: Actuator::new(owner, database_url, tuning, launch_id),
            seen: Seen::new(),
            spec,
            cost: Default::default(),
            cost_at: None,
            place: Place::own(),
            listings: None,
            drain: HashSet::new(),
            successor: HashSet::new(),
            listed: None,
            conditions: Vec::new(),
            deletion: watch::channel(None).1,
            deletion_announced: false,
            drift_announced: None,
            run_stale: None,
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
        self.act.restore(format!("{uid}/{}", nonce()), status);
        self.conditions = status.conditions.clone();
        self.cost
            .restore(&status.instance_seconds, status.runs_served.as_ref());
        self
    }

    /// The stale limit of the Scheduler the pool serves (its
    /// `handover.staleSeconds`): its runs' heartbeats older than this look
    /// hung, and a busy instance that looks so for twice it is retired
    /// (`Hung`). Without it, [`Tuning::stale`].
    pub fn set_run_stale(&mut self, stale: Duration) {
        self.run_stale = Some(stale);
    }

    /// The instances a person asked to drain (the WarmPool's annotation
    /// [`crate::warmpool::drain::DRAIN`]): each is retired once it is not in a run, and replaced
    /// as any retirement is.
    pub fn set_drain(&mut self, instances: HashSet<String>) {
        self.drain = instances;
    }

    /// For a loop left where the pool ran: what the loop of the new place
    /// has there ([`PoolLoop::successor`]), which this one leaves alone
    /// should its listing show it (see
    /// [`crate::warmpool::Deletion::left_behind`]).
    pub fn set_successor(&mut self, instances: HashSet<String>) {
        self.successor = instances;
    }

    /// What this loop has where it runs, for a loop left where the pool ran
    /// before: the instances it launched (as long as EC2 lists them, or
    /// for a few minutes before it does) and those its last listing showed
    /// (after a restart, what it launched before it too). `None` until it
    /// has listed its place: what it has there is not known yet.
    pub fn successor(&self) -> Option<HashSet<String>> {
        let mut has = self.listed.clone()?;
        has.extend(self.act.launches().ours().map(String::from));
        Some(has)
    }

    pub(super) fn run_stale(&self) -> Duration {
        self.run_stale.unwrap_or(self.act.tuning().stale())
    }

    /// The book of the pool's class, which grants its launches (`None`: a
    /// pool without a class, held by maxInstances only). Another class
    /// than before has the pool's instances tagged for it anew.
    pub fn set_budget(&mut self, budget: Option<crate::warmpool::budget::Budget>) {
        let before = self.budget_class().map(String::from);
        self.act.set_budget(budget);
        if self.budget_class() != before.as_deref() {
            self.seen.class_changed();
        }
    }

    /// The class whose book grants the pool's launches, if any.
    pub fn budget_class(&self) -> Option<&str> {
        self.act.budget().map(|b| b.class())
    }

    /// No metrics: a loop draining where the pool ran before must not set
    /// the pool's gauges, which are the current loop's.
    pub fn without_metrics(mut self) -> Self {
        self.act.set_metrics(None);
        self
    }

    /// The same loop, counting into `metrics` and setting the pool's gauges.
    pub fn with_metrics(mut self, metrics: PoolMetrics) -> Self {
        self.act.set_metrics(Some(metrics));
        self
    }
}

impl PoolLoop {
    /// The loop of WarmPool `namespace/name`, over the database at
    /// `database_url` (libpq-style; it reaches the instances' user-data
    /// unless `launch.databaseUrlFile` is set). Every EC2 and SSM call and
    /// every statement of the loop checks `fence` first: the Lease's in the
    /// Kubernetes mode, [`Fence::always`] in the local mode, which has no
    /// election.
    pub async fn new(
        namespace: &str,
        name: &str,
        spec: WarmPoolSpec,
        database_url: &str,
        tuning: Tuning,
        fence: Fence,
    ) -> Result<PoolLoop, PoolError> {
        let pool = format!("{namespace}/{name}");
        let url = DatabaseUrl::parse(database_url).map_err(|source| PoolError::Db {
            pool: pool.clone(),
            source,
        })?;
        let ec2_config = Ec2Config::new(&spec.region, spec.endpoint.as_deref());
        let ec2 = Ec2::new(&ec2_config, fence.clone()).await;
        let owner = Ownership::new(
            namespace,
            name,
            &spec.scheduler,
            tuning.operator(),
            tuning.cluster(),
        );
        let reconnect =
            Reconnect::new(url, ConnectOptions::named(&tuning.application_name("pool")))
                .listen("orca_pool");
        let world = Live::new(pool, (ec2, ec2_config), reconnect, fence);
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
        let name = self.act.tuning().application_name("pool");
        self.world.not_listening(&name);
        self
    }

    /// The loop's statements go over its database's connection in
    /// `connections`, shared with the controller's other pools there,
    /// rather than a connection of its own; nothing listens on it (the
    /// controller listens, one connection per database).
    pub fn sharing(mut self, connections: &Arc<Connections>) -> Self {
        self.world.share(connections, self.act.database_url());
        self
    }

    /// EC2 through `ec2` (say, [`Ec2::with_credentials`]: the tests' IAM
    /// principal) rather than the default chain's client for the spec's
    /// region and endpoint, until a spec moves the pool to another.
    pub fn with_ec2(mut self, ec2: Ec2) -> Self {
        self.world.use_ec2(ec2);
        // Its credentials are its own: so are its listings.
        self.listings = None;
        self.place = Place::own();
        self
    }

    /// The loop lists EC2 with the operator's other pools of its region,
    /// endpoint and cluster (see [`crate::warmpool::listings`]): one
    /// `DescribeInstances` for all of them, each pass taking one that is
    /// new enough for it.
    pub fn with_listings(mut self, listings: &Listings) -> Self {
        self.place = listings.place(self.world.ec2_config(), self.act.owner());
        self.seen.fresh_after(Some(listings.floor(self.act.pool())));
        self.listings = Some(listings.clone());
        self
    }

    /// The WarmPool's deletion with `onDelete: Terminate`, as `deletion`
    /// tells it: from the first pass after it holds one, the loop launches
    /// nothing and terminates the pool's instances (see [`crate::warmpool::plan()`]),
    /// and each pass says whether any is left ([`crate::warmpool::PassReport::deleted`]). A
    /// change cuts the wait for the next pass short.
    pub fn with_deletion(mut self, deletion: watch::Receiver<Option<Deletion>>) -> Self {
        self.deletion = deletion;
        self
    }

    /// `namespace/name`.
    pub fn pool(&self) -> &str {
        self.act.pool()
    }

    /// Whose instances the pool's are: the tags it launches with and lists
    /// by.
    pub fn ownership(&self) -> &Ownership {
        self.act.owner()
    }

    /// The spec the loop runs on now.
    pub fn spec(&self) -> &WarmPoolSpec {
        &self.spec
    }

    /// A changed spec (Kubernetes: a new generation); a changed region or
    /// endpoint gets a new EC2 client, and the next pass lists afresh.
    pub async fn set_spec(&mut self, spec: WarmPoolSpec) {
        self.seen.fresh_after(Some(Instant::now()));
        let cfg = Ec2Config::new(&spec.region, spec.endpoint.as_deref());
        self.world.move_to(cfg).await;
        let pool = self.act.pool();
        let (ns, name) = pool.split_once('/').unwrap_or(("", pool));
        let owner = Ownership::new(
            ns,
            name,
            &spec.scheduler,
            self.act.tuning().operator(),
            self.act.tuning().cluster(),
        );
        self.act.set_owner(owner);
        if let Some(listings) = &self.listings {
            self.place = listings.place(self.world.ec2_config(), self.act.owner());
        }
        let template_changed = spec.launch.launch_template != self.spec.launch.launch_template;
        self.seen.spec_changed(template_changed);
        self.spec = spec;
        self.act.spec_changed();
    }

    pub(super) fn limits(&self) -> Limits {
        let grace = self.act.tuning().leak_grace().unwrap_or_else(|| {
            Duration::from_secs(60).max(Duration::from_secs(
                self.spec.boot_timeout_seconds.max(0) as u64
            ))
        });
        Limits::new(
            self.act.tuning().stale().as_secs_f64(),
            grace.as_secs_f64(),
            self.act.tuning().max_batch(),
            2.0 * self.run_stale().as_secs_f64(),
            60.0,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::warmpool::ec2::client_token;

    /// Two loops of one pool that read one status — a replica after a
    /// failover, whose predecessor's last status write was lost, or a
    /// status restored from a backup — never launch a new batch under an
    /// old batch's token. Once, both asked with (uid, 0).
    #[test]
    fn a_status_that_is_behind_never_repeats_a_launch_token() {
        let status = WarmPoolStatus {
            launch_batches: 3,
            ..Default::default()
        };
        let remembered = || {
            let owner = Ownership::new("ns", "p", "sched", "orca-operator", "c");
            let spec = crate::test_support::pool_spec(0, 0, 100);
            PoolLoop::with_world(
                owner,
                spec,
                "postgres://orca@db/orca",
                Tuning::default(),
                (),
            )
            .remember("uid-1", &status)
        };
        let (a, b) = (remembered(), remembered());
        let (a, b) = (a.act.launches(), b.act.launches());
        assert_eq!((a.batches(), b.batches()), (3, 3));
        assert!(a.id().starts_with("uid-1/") && b.id().starts_with("uid-1/"));
        assert_ne!(client_token(a.id(), 3), client_token(b.id(), 3));
    }
}
