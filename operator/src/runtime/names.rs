//! The names the operator writes under: the labels of a Scheduler's pods
//! and Jobs, and the manager and reporter it writes objects and Events as.

/// Every pod and Job of a Scheduler carries its name.
pub const LABEL_SCHEDULER: &str = "orca.dev/scheduler";
/// The revision: a hash of what goes into the pod
/// (docs/protocol.md#the-operators-rollout).
pub const LABEL_REVISION: &str = "orca.dev/revision";
/// The pod's sequence number: the highest is the newest.
pub const LABEL_SEQUENCE: &str = "orca.dev/sequence";
/// What a register Job's pod is (`register`), to tell it from a scheduler.
pub const LABEL_COMPONENT: &str = "orca.dev/component";
/// The name the operator writes objects and events as.
pub const MANAGER: &str = "orca-operator";

/// Reconciles each controller runs at once (kube's controller queues the
/// rest): a replica starting over a thousand objects sends the API server
/// a steady stream of requests rather than a thousand at once, and holds
/// the memory of so many passes, not of all.
pub const RECONCILE_CONCURRENCY: u16 = 32;

/// How long after a controller's start its passes wait for the watches'
/// first listing rather than read from the API: the passes of a start
/// over a thousand objects all find their Secret and Scheduler in the
/// stores, and a watch that cannot list (RBAC) holds them up no longer.
pub const FIRST_LISTING: std::time::Duration = std::time::Duration::from_secs(5);
