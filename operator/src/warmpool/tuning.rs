//! The loop's knobs that are not in the spec.

use std::time::Duration;

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
    /// A listing serves the passes of the pools of its place (see
    /// [`super::listings`]) for this long, except a pass of a pool that
    /// acted (terminated, ended, stopped or started something) since it
    /// was asked for, changed its spec, or is being deleted: a hand-out's
    /// launch then waits for no listing, and the operator's idle pools of
    /// one region make one `DescribeInstances` per this long between them.
    /// What a loop launched since is counted from what EC2 answered. Zero:
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
    /// What a launch template's `$Latest` or `$Default` resolves to is
    /// asked of EC2 again after this long (see [`super::drift`]).
    pub template_every: Duration,
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
            listing_reuse: Duration::from_secs(15),
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
            template_every: Duration::from_secs(60),
        }
    }
}
