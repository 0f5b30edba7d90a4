//! The loop's knobs that are not in the spec.

use std::time::Duration;

/// The loop's knobs that are not in the spec. The defaults are for
/// production; tests shorten `resync`, `stale` and `leak_grace`.
#[derive(Clone, Debug)]
pub struct Tuning {
    /// A pass at least this often, notification or not.
    resync: Duration,
    /// Passes are at least this far apart (notifications come in bursts).
    min_gap: Duration,
    /// An idle row not `polled` for this long is stale (its agent is dead).
    stale: Duration,
    /// An instance this loop did not launch, with no row, is leaked once
    /// this old. `None`: the larger of 60 s and `bootTimeoutSeconds`.
    /// Never set it below 60 s in production: an instance launched by an
    /// operator that restarted since is "not ours" until its agent reports.
    leak_grace: Option<Duration>,
    /// How long an offering without capacity is skipped.
    capacity_hold: Duration,
    /// At most this many instances per `RunInstances`.
    max_batch: u32,
    /// The value of the `orca.dev/operator` tag.
    operator: String,
    /// The value of the `orca.dev/cluster` tag: this cluster's name
    /// (`--cluster-name`), in every launch's tags and every listing's
    /// filter, so that operators of two clusters sharing an account never
    /// touch each other's instances.
    cluster: String,
    /// The operator replica (its pod's name) the loop runs in, if there are
    /// several: part of its connections' `application_name`, so the
    /// database tells the replicas apart (`pg_stat_activity`, the logs).
    replica: Option<String>,
    /// A listing serves the passes of the pools of its place (see
    /// [`super::listings`]) for this long, except a pass of a pool that
    /// acted (terminated, ended, stopped or started something) since it
    /// was asked for, changed its spec, or is being deleted: a hand-out's
    /// launch then waits for no listing, and the operator's idle pools of
    /// one region make one `DescribeInstances` per this long between them.
    /// What a loop launched since is counted from what EC2 answered. Zero:
    /// every pass lists.
    listing_reuse: Duration,
    /// `RunInstances` calls per batch when throttled, same `ClientToken`.
    throttle_attempts: u32,
    /// After boot time-outs in a row (see [`super::boot`]), launches wait
    /// this long, doubling with each one more, up to the cap.
    boot_backoff_base: Duration,
    boot_backoff_cap: Duration,
    backoff_base: Duration,
    backoff_cap: Duration,
    /// What a launch template's `$Latest` or `$Default` resolves to is
    /// asked of EC2 again after this long (see [`super::drift`]).
    template_every: Duration,
}

impl Tuning {
    /// These, with `resync` set.
    pub fn with_resync(self, resync: Duration) -> Self {
        Tuning { resync, ..self }
    }

    /// These, with `min_gap` set.
    pub fn with_min_gap(self, min_gap: Duration) -> Self {
        Tuning { min_gap, ..self }
    }

    /// These, with `stale` set.
    pub fn with_stale(self, stale: Duration) -> Self {
        Tuning { stale, ..self }
    }

    /// These, with `leak_grace` set.
    pub fn with_leak_grace(self, leak_grace: Option<Duration>) -> Self {
        Tuning { leak_grace, ..self }
    }

    /// These, with `capacity_hold` set.
    pub fn with_capacity_hold(self, capacity_hold: Duration) -> Self {
        Tuning {
            capacity_hold,
            ..self
        }
    }

    /// These, with `max_batch` set.
    pub fn with_max_batch(self, max_batch: u32) -> Self {
        Tuning { max_batch, ..self }
    }

    /// These, with `operator` set.
    pub fn with_operator(self, operator: String) -> Self {
        Tuning { operator, ..self }
    }

    /// These, with `cluster` set.
    pub fn with_cluster(self, cluster: String) -> Self {
        Tuning { cluster, ..self }
    }

    /// These, with `replica` set.
    pub fn with_replica(self, replica: Option<String>) -> Self {
        Tuning { replica, ..self }
    }

    /// These, with `listing_reuse` set.
    pub fn with_listing_reuse(self, listing_reuse: Duration) -> Self {
        Tuning {
            listing_reuse,
            ..self
        }
    }

    /// These, with `throttle_attempts` set.
    pub fn with_throttle_attempts(self, throttle_attempts: u32) -> Self {
        Tuning {
            throttle_attempts,
            ..self
        }
    }

    /// These, with `boot_backoff_base` set.
    pub fn with_boot_backoff_base(self, boot_backoff_base: Duration) -> Self {
        Tuning {
            boot_backoff_base,
            ..self
        }
    }

    /// These, with `boot_backoff_cap` set.
    pub fn with_boot_backoff_cap(self, boot_backoff_cap: Duration) -> Self {
        Tuning {
            boot_backoff_cap,
            ..self
        }
    }

    /// These, with `backoff_base` set.
    pub fn with_backoff_base(self, backoff_base: Duration) -> Self {
        Tuning {
            backoff_base,
            ..self
        }
    }

    /// These, with `backoff_cap` set.
    pub fn with_backoff_cap(self, backoff_cap: Duration) -> Self {
        Tuning {
            backoff_cap,
            ..self
        }
    }

    /// These, with `template_every` set.
    pub fn with_template_every(self, template_every: Duration) -> Self {
        Tuning {
            template_every,
            ..self
        }
    }

    /// A pass at least this often, notification or not.
    pub fn resync(&self) -> Duration {
        self.resync
    }

    /// Passes are at least this far apart (notifications come in bursts).
    pub fn min_gap(&self) -> Duration {
        self.min_gap
    }

    /// An idle row not `polled` for this long is stale (its agent is dead).
    pub fn stale(&self) -> Duration {
        self.stale
    }

    /// An instance this loop did not launch, with no row, is leaked once
    /// this old. `None`: the larger of 60 s and `bootTimeoutSeconds`.
    /// Never set it below 60 s in production: an instance launched by an
    /// operator that restarted since is "not ours" until its agent reports.
    pub fn leak_grace(&self) -> Option<Duration> {
        self.leak_grace
    }

    /// How long an offering without capacity is skipped.
    pub fn capacity_hold(&self) -> Duration {
        self.capacity_hold
    }

    /// At most this many instances per `RunInstances`.
    pub fn max_batch(&self) -> u32 {
        self.max_batch
    }

    /// The value of the `orca.dev/operator` tag.
    pub fn operator(&self) -> &String {
        &self.operator
    }

    /// The value of the `orca.dev/cluster` tag: this cluster's name
    /// (`--cluster-name`), in every launch's tags and every listing's
    /// filter, so that operators of two clusters sharing an account never
    /// touch each other's instances.
    pub fn cluster(&self) -> &String {
        &self.cluster
    }

    /// The operator replica (its pod's name) the loop runs in, if there are
    /// several: part of its connections' `application_name`, so the
    /// database tells the replicas apart (`pg_stat_activity`, the logs).
    pub fn replica(&self) -> &Option<String> {
        &self.replica
    }

    /// A listing serves the passes of the pools of its place (see
    /// [`super::listings`]) for this long, except a pass of a pool that
    /// acted (terminated, ended, stopped or started something) since it
    /// was asked for, changed its spec, or is being deleted: a hand-out's
    /// launch then waits for no listing, and the operator's idle pools of
    /// one region make one `DescribeInstances` per this long between them.
    /// What a loop launched since is counted from what EC2 answered. Zero:
    /// every pass lists.
    pub fn listing_reuse(&self) -> Duration {
        self.listing_reuse
    }

    /// `RunInstances` calls per batch when throttled, same `ClientToken`.
    pub fn throttle_attempts(&self) -> u32 {
        self.throttle_attempts
    }

    /// After boot time-outs in a row (see [`super::boot`]), launches wait
    /// this long, doubling with each one more, up to the cap.
    pub fn boot_backoff_base(&self) -> Duration {
        self.boot_backoff_base
    }

    /// The most launches wait after boot time-outs in a row.
    pub fn boot_backoff_cap(&self) -> Duration {
        self.boot_backoff_cap
    }

    /// The first wait after a failed or throttled pass, doubling with each one more.
    pub fn backoff_base(&self) -> Duration {
        self.backoff_base
    }

    /// The most a failed or throttled pass waits.
    pub fn backoff_cap(&self) -> Duration {
        self.backoff_cap
    }

    /// What a launch template's `$Latest` or `$Default` resolves to is
    /// asked of EC2 again after this long (see [`super::drift`]).
    pub fn template_every(&self) -> Duration {
        self.template_every
    }

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
