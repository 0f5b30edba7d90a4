//! Whose an instance is: the ownership tags every launch sets and every
//! listing filters on, and their values as EC2 takes them.

use sha2::{Digest, Sha256};

/// The tag keys that say an instance belongs to a pool.
pub const TAG_POOL: &str = "orca.dev/pool";
/// The tag key for the `namespace/name` of the pool's Scheduler.
pub const TAG_SCHEDULER: &str = "orca.dev/scheduler";
/// The tag key for the operator installation that launched the instance.
pub const TAG_OPERATOR: &str = "orca.dev/operator";
/// The cluster the operator that launched it runs in (`--cluster-name`):
/// two clusters sharing an account, a region, a namespace and a pool name
/// never touch each other's instances.
pub const TAG_CLUSTER: &str = "orca.dev/cluster";

/// The WarmPoolClass an instance was launched through (none: an inline
/// pool's): every class's limits count the instances EC2 lists under its
/// name, whatever their pool is doing now.
pub const TAG_CLASS: &str = "orca.dev/class";
/// The namespace of the pool that launched the instance, on its own: a
/// class's per-namespace limits count by it.
pub const TAG_NAMESPACE: &str = "orca.dev/namespace";
/// The prefix of every tag the operator sets: a spec's own
/// `launch.tags` may not use it.
pub const RESERVED_PREFIX: &str = "orca.dev/";

/// The hash of the launch spec an instance came from (see
/// [`super::drift`]), and which image that was.
pub const TAG_LAUNCH: &str = "orca.dev/launch";
/// The tag key for the image the instance was launched from (see
/// [`super::drift::image_label`]).
pub const TAG_IMAGE: &str = "orca.dev/image";

/// The launch template version an instance was launched from, as the
/// number `$Latest` or `$Default` resolved to then (see [`super::drift`]).
pub const TAG_TEMPLATE_VERSION: &str = "orca.dev/template-version";

/// EC2 takes tag values of at most this many characters.
pub const TAG_VALUE_MAX: usize = 256;

/// A cluster name (`--cluster-name`), checked: 1 to 63 of letters, digits,
/// '-', '_' and '.', as a tag value and a label value take it, so that it
/// is [`TAG_CLUSTER`]'s value as it stands.
pub fn cluster_name(s: &str) -> Result<String, String> {
    let ok = (1..=63).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a cluster name: 1 to 63 of letters, digits, '-', '_' and '.'"
        ))
    }
}

/// Whose instances these are: the values of the ownership tags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ownership {
    /// `namespace/name` of the WarmPool (see [`tag_value`]).
    pool: String,
    /// `namespace/name` of its Scheduler (see [`tag_value`]).
    scheduler: String,
    /// Which operator installation launched them.
    operator: String,
    /// Which cluster's operator launched them.
    cluster: String,
    /// The WarmPool's namespace ([`TAG_NAMESPACE`] at launch; no listing
    /// filters on it).
    namespace: String,
}

impl Ownership {
    /// `namespace/name` of the WarmPool (see [`tag_value`]).
    pub fn pool(&self) -> &String {
        &self.pool
    }

    /// `namespace/name` of its Scheduler (see [`tag_value`]).
    pub fn scheduler(&self) -> &String {
        &self.scheduler
    }

    /// Which operator installation launched them.
    pub fn operator(&self) -> &String {
        &self.operator
    }

    /// Which cluster's operator launched them.
    pub fn cluster(&self) -> &String {
        &self.cluster
    }

    /// The WarmPool's namespace ([`TAG_NAMESPACE`] at launch; no listing
    /// filters on it).
    pub fn namespace(&self) -> &String {
        &self.namespace
    }

    /// The owner of WarmPool `namespace/name`'s instances, run on Scheduler
    /// `namespace/scheduler` by `operator` of `cluster`.
    pub fn new(
        namespace: &str,
        name: &str,
        scheduler: &str,
        operator: &str,
        cluster: &str,
    ) -> Self {
        Ownership {
            pool: tag_value(&format!("{namespace}/{name}")),
            scheduler: tag_value(&format!("{namespace}/{scheduler}")),
            operator: tag_value(operator),
            cluster: tag_value(cluster),
            namespace: tag_value(namespace),
        }
    }

    /// The owner of every instance `operator` of `cluster` launched, for a
    /// listing shared by the pools of a place (and a class's census): the
    /// pool's and the Scheduler's values are empty, and only a shared
    /// listing, which filters on the operator's and the cluster's tags
    /// alone, may be asked for with it.
    pub fn of_cluster(operator: &str, cluster: &str) -> Self {
        Ownership {
            pool: String::new(),
            scheduler: String::new(),
            operator: tag_value(operator),
            cluster: tag_value(cluster),
            namespace: String::new(),
        }
    }

    /// Every ownership tag: what a launch sets, and what a listing filters
    /// on.
    pub fn tags(&self) -> [(&'static str, &str); 4] {
        [
            (TAG_POOL, &self.pool),
            (TAG_SCHEDULER, &self.scheduler),
            (TAG_OPERATOR, &self.operator),
            (TAG_CLUSTER, &self.cluster),
        ]
    }

    /// The tags instances carried before they carried the cluster's.
    pub(crate) fn legacy_tags(&self) -> [(&'static str, &str); 3] {
        [
            (TAG_POOL, &self.pool),
            (TAG_SCHEDULER, &self.scheduler),
            (TAG_OPERATOR, &self.operator),
        ]
    }
}

/// `value` as a tag value EC2 takes: itself when it fits in
/// [`TAG_VALUE_MAX`] characters, else cut, with a hash of the whole after
/// the cut, so that two long names never share a value. (A namespace of 63
/// characters and a name of 253 make 317.)
pub fn tag_value(value: &str) -> String {
    if value.chars().count() <= TAG_VALUE_MAX {
        return value.to_string();
    }
    let digest = Sha256::digest(value.as_bytes());
    let hash: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let keep: String = value.chars().take(TAG_VALUE_MAX - hash.len() - 1).collect();
    format!("{keep}-{hash}")
}
