//! Maintenance windows: whether a new revision waits for one
//! (`spec.maintenanceWindows`). Pure: decided from the snapshot alone.
//!
//! Only a rollout that would *start* waits: a Scheduler with a revision
//! other than the target leading, settled, and no pod of the target
//! revision made yet. A rollout in motion goes on past its window's end; a
//! first deployment and the replacement of a current pod that exited never
//! wait, since nothing else would run the scheduler meanwhile.

use chrono::{DateTime, Utc};

use super::snapshot::{Observed, PodState};
use crate::window::standing;

/// The annotation that starts a waiting revision at once: its value is the
/// revision (`kubectl orca rollout now` sets it). Naming the revision makes
/// it good for that rollout only.
pub const ROLLOUT_NOW: &str = "orca.dev/rollout-now";

/// Why a new revision waits.
#[derive(Clone, Debug, PartialEq)]
pub struct Deferral {
    /// When the next window starts; none if no window ever starts again
    /// (a cron expression of a date gone by).
    next: Option<DateTime<Utc>>,
    /// A window the operator cannot read (`spec.maintenanceWindows[1].
    /// timezone: …`): the revision waits, as it would outside any window,
    /// until the spec is fixed.
    invalid: Option<String>,
}

impl Deferral {
    /// When the next window starts; none if no window ever starts again
    /// (a cron expression of a date gone by).
    pub fn next(&self) -> Option<DateTime<Utc>> {
        self.next
    }

    /// A window the operator cannot read (`spec.maintenanceWindows[1].
    /// timezone: …`): the revision waits, as it would outside any window,
    /// until the spec is fixed.
    pub fn invalid(&self) -> Option<&str> {
        self.invalid.as_deref()
    }

    /// Of its parts, as the fields say.
    pub fn new(next: Option<DateTime<Utc>>, invalid: Option<String>) -> Self {
        Deferral { next, invalid }
    }
}

/// The deferral of rolling out `target`, if it waits: the Scheduler has
/// maintenance windows, none is under way at `o.now`, `target` is a new
/// revision not started yet, the running one leads, and
/// `o.rollout_now` does not name `target`.
pub fn deferral(o: &Observed, target: &str) -> Option<Deferral> {
    let windows = &o.spec().maintenance_windows;
    if windows.is_empty() || o.rollout_now() == Some(target) {
        return None;
    }
    let last = o.status().target_revision.as_deref()?;
    if last == target || o.pods().iter().any(|p| p.revision() == target) {
        return None;
    }
    if !running_one_leads(o, target) {
        return None;
    }
    match standing(windows, o.now()) {
        Ok(s) if s.open() => None,
        Ok(s) => Some(Deferral {
            next: s.next(),
            invalid: None,
        }),
        Err((i, e)) => Some(Deferral {
            next: None,
            invalid: Some(format!("spec.maintenanceWindows[{i}].{e}")),
        }),
    }
}

/// A pod of another revision than `target` runs, not being deleted, and
/// (overlap on) its instance holds the lead.
fn running_one_leads(o: &Observed, target: &str) -> bool {
    let rows = o.instances().as_deref().unwrap_or_default();
    o.pods().iter().any(|p| {
        p.revision() != target
            && *p.state() == PodState::Running
            && !p.deleting()
            && (!o.spec().overlap
                || rows
                    .iter()
                    .any(|i| i.host() == p.host() && i.live() && i.holds_lock()))
    })
}
