//! A pool's loop run on its own (the local mode): passes on the pool's
//! notifications, every resync, and after a back-off.

use std::time::Duration;

use chrono::Utc;

use super::pool_loop::PoolLoop;
use super::report::{PassReport, PoolError};
use crate::fence::MaybeFenced;

impl PoolLoop {
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
    pub(super) async fn wake(&mut self, wait: Duration) {
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
