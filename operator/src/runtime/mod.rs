//! What both controllers of the Kubernetes mode run on: the shell each
//! reconcile runs in, the election and its fence, the watches, the
//! status and Event writes, the finalizers, the HTTP endpoints.
//!
//! The map, one line a file:

// crd_check — before a replica stands for the Lease, and while it leads: CRDs older than this build hold it back.
pub mod crd_check;
// database — a Scheduler's Secret → its database URL, a connection kept per database.
pub mod database;
// finalizer — one finalizer of any object, by JSON patches that test what they change.
pub(crate) mod finalizer;
// guard — what keeps one object's trouble its own: deadlines, back-off, panics caught.
pub(crate) mod guard;
// in_use — what the controllers need, kept from deletion while they need it.
pub(crate) mod in_use;
// leader — the election on a Lease, and the fence that says until when this replica may act.
pub mod leader;
// names — the labels, annotations and field manager the operator writes under.
pub(crate) mod names;
// server — /metrics, /healthz and /readyz.
pub mod server;
// shell — the shell every object's reconcile runs in, whichever controller's.
pub(crate) mod shell;
// status — status by server-side apply, and the Events.
pub(crate) mod status;
// watches — one watch of each kind the controllers share, per scope.
pub mod watches;
