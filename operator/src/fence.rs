//! The fence: until when this replica may act. The Kubernetes mode's
//! election ([`crate::runtime::leader`]) opens it after each successful write of
//! its Lease and it closes on its own when the Lease would run out; every
//! EC2 call, statement, pod, Job, status and Event write of the controllers
//! checks it first. Each EC2 and SSM client and each pool loop takes its
//! fence when it is made: none can be made without one. The local mode,
//! which has no election, passes [`Fence::always`] by name. Neither
//! `warmpool/` nor `scheduler/` needs Kubernetes to know of it.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use tokio::time::Instant;

/// Until when this replica may act as the leader: cheap to clone and to
/// check, shared by every task of the controllers. Times are tokio's
/// monotonic [`Instant`]s (a paused clock in tests).
#[derive(Clone, Debug)]
pub struct Fence(Option<Arc<Until>>);

#[derive(Debug)]
struct Until {
    base: Instant,
    /// Nanoseconds after `base` the fence closes; 0: closed.
    nanos: AtomicU64,
}

/// The fence is closed: this replica does not hold the Lease, or cannot
/// tell that it still does. Whatever was about to happen must not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("fenced: this replica does not hold the leader lease, or cannot tell that it still does")]
pub struct Fenced;

/// When a reconcile that found the fence closed looks again: by then this
/// replica has renewed its Lease, or another leads and the controllers here
/// have been stopped.
pub const FENCED_RETRY: std::time::Duration = std::time::Duration::from_secs(15);

/// The one question both controllers ask of an error before they count it
/// as a failure: is it only the fence closing? Answered here once for
/// every error: it is, when a [`Fenced`] is among its causes (the error
/// itself, or any error its `source()` chain leads to). An error that
/// wraps one therefore names it as its source (thiserror's `#[source]` or
/// `#[from]`, not `#[error(transparent)]`, which skips over it), and no
/// caller maps a fenced error from one type into another by hand.
pub trait MaybeFenced {
    /// The fence, if that is all this error is.
    fn fenced(&self) -> Option<Fenced>;

    /// Whether this error is only the fence closing: this replica may not
    /// act, and there is nothing to report or retry as a failure.
    fn is_fenced(&self) -> bool {
        self.fenced().is_some()
    }
}

impl<E: std::error::Error + 'static> MaybeFenced for E {
    fn fenced(&self) -> Option<Fenced> {
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(e) = next {
            if let Some(f) = e.downcast_ref::<Fenced>() {
                return Some(*f);
            }
            next = e.source();
        }
        None
    }
}

impl Fence {
    /// A fence closed until [`Fence::hold_until`] opens it.
    pub fn new() -> Fence {
        Fence(Some(Arc::new(Until {
            base: Instant::now(),
            nanos: AtomicU64::new(0),
        })))
    }

    /// A fence that is always open: where there is no election (the local
    /// mode, tests).
    pub fn always() -> Fence {
        Fence(None)
    }

    /// Ok only while now is before the end of the lease last renewed.
    pub fn check(&self) -> Result<(), Fenced> {
        self.check_at(Instant::now())
    }

    /// [`Fence::check`] at `now`.
    pub fn check_at(&self, now: Instant) -> Result<(), Fenced> {
        let Some(until) = &self.0 else {
            return Ok(());
        };
        let at = now.saturating_duration_since(until.base).as_nanos();
        if at < u128::from(until.nanos.load(Ordering::Acquire)) {
            Ok(())
        } else {
            Err(Fenced)
        }
    }

    /// Opens the fence until `until` (the election, after each successful
    /// write of the Lease). No effect on [`Fence::always`].
    pub fn hold_until(&self, until: Instant) {
        if let Some(u) = &self.0 {
            let nanos = until.saturating_duration_since(u.base).as_nanos();
            let nanos = u64::try_from(nanos).unwrap_or(u64::MAX);
            u.nanos.store(nanos, Ordering::Release);
        }
    }

    /// Closes the fence now.
    pub fn close(&self) {
        if let Some(u) = &self.0 {
            u.nanos.store(0, Ordering::Release);
        }
    }
}

impl Default for Fence {
    fn default() -> Self {
        Fence::new()
    }
}
