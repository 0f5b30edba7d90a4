//! What keeps one object's trouble its own. Every reconcile of either
//! controller runs [`guarded`]: it counts as in flight for `/healthz` (see
//! [`Progress`]), and a panic inside it — a bug meeting an input nobody
//! foresaw — is caught and becomes an error of that object alone: it is
//! `Degraded` (`InternalError`) with a Warning Event, retried after a
//! back-off, and every other object goes on being reconciled. Without
//! this, one panic ends the controllers' task, the process exits, and a
//! restarted replica meets the same object again.
//!
//! And [`forbidden`]: a call the operator's RBAC does not allow (403) is
//! something only the user can fix, so it is said on the object — the
//! condition `Degraded` with reason `Forbidden` and the API server's own
//! message, which names the verb and the resource — not only in the log.

use std::{any::Any, future::Future, panic::AssertUnwindSafe, time::Duration};

use futures::FutureExt;

use super::server::Progress;

/// The condition reason of a caught panic.
pub const INTERNAL_ERROR: &str = "InternalError";
/// The condition reason of a call the operator's RBAC does not allow.
pub const FORBIDDEN: &str = "Forbidden";
/// The condition reason of a reconcile stopped at its deadline.
pub const DEADLINE_EXCEEDED: &str = "ReconcileDeadlineExceeded";

/// A reconcile that did not end by itself: it panicked (its message, first
/// line, at most 300 characters), or ran past its deadline and was
/// dropped where it waited.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Stopped {
    /// The condition reason: [`INTERNAL_ERROR`] or [`DEADLINE_EXCEEDED`].
    reason: &'static str,
    message: String,
}

impl Stopped {
    /// The condition reason: [`INTERNAL_ERROR`] or [`DEADLINE_EXCEEDED`].
    pub fn reason(&self) -> &'static str {
        self.reason
    }

    /// A panic's stop, with its message.
    pub fn panic(message: &str) -> Stopped {
        Stopped {
            reason: INTERNAL_ERROR,
            message: format!("the operator panicked while reconciling it: {message}"),
        }
    }

    /// A stop at the deadline `after`.
    pub fn deadline(after: Duration) -> Stopped {
        Stopped {
            reason: DEADLINE_EXCEEDED,
            message: format!(
                "its reconcile ran past its deadline of {}s and was stopped (its database, \
                 or a call it makes, answers too slowly); it is tried again after a back-off, \
                 and holds up no other object",
                after.as_secs()
            ),
        }
    }

    /// The failure metric's and the log's stage label.
    pub fn stage(&self) -> &'static str {
        if self.reason == DEADLINE_EXCEEDED {
            "deadline"
        } else {
            "panic"
        }
    }
}

/// Runs `pass`, the reconcile of `what` (e.g. `Scheduler ns/name`): in
/// flight for `/healthz` until it ends, its panic caught, and dropped at
/// the progress's deadline ([`Progress::deadline`]), well before
/// `/healthz` would call the replica stuck: a database that answers
/// slowly holds up its own objects, never the replica and every other
/// tenant's with it.
pub async fn guarded<F, T>(progress: &Progress, what: String, pass: F) -> Result<T, Stopped>
where
    F: Future<Output = T>,
{
    let _in_flight = progress.begin(what);
    let deadline = progress.deadline();
    // The state a panic may leave half-changed is each object's own (its
    // maps are locked with poison ignored, and the caller drops what it
    // kept of the object), so unwinding out of it is safe; so is dropping
    // it at an await, for the same reason.
    match tokio::time::timeout(deadline, AssertUnwindSafe(pass).catch_unwind()).await {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(panic)) => Err(Stopped::panic(&panic_message(panic.as_ref()))),
        Err(_) => Err(Stopped::deadline(deadline)),
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into());
    text.lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(300)
        .collect()
}

/// The API server's message if `error`, or any error it was caused by, is
/// a 403: the operator may not make that call.
pub fn forbidden(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(kube::Error::Api(status)) = e.downcast_ref::<kube::Error>() {
            if status.code == 403 {
                return Some(format!(
                    "the operator's RBAC does not allow it: {}",
                    status.message
                ));
            }
        }
        next = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_panic_is_the_objects_alone_and_it_is_in_flight_until_then() {
        let progress = Progress::new(Duration::from_secs(60));
        let caught = guarded(&progress, "WarmPool a/b".into(), async {
            let duration = chrono::TimeDelta::MAX;
            // What a schedule of 300000 years once did to every pass.
            chrono::Utc::now() - duration
        })
        .await
        .expect_err("the overflow panics");
        assert!(caught.message.contains("overflow"), "{caught}");
        assert!(progress.check().is_ok(), "nothing left in flight");
        let fine = guarded(&progress, "WarmPool a/c".into(), async { 7 }).await;
        assert_eq!(fine.unwrap(), 7);
    }

    #[tokio::test]
    async fn a_reconcile_past_its_deadline_is_stopped_well_before_the_replica_is_stuck() {
        let progress = Progress::new(Duration::from_secs(5));
        assert_eq!(progress.deadline(), Duration::from_secs(1));
        let started = std::time::Instant::now();
        let stopped = guarded(&progress, "Scheduler a/slow".into(), async {
            // A database that never answers.
            std::future::pending::<()>().await
        })
        .await
        .expect_err("stopped at the deadline");
        assert!(started.elapsed() < Duration::from_secs(3));
        assert_eq!(stopped.reason, DEADLINE_EXCEEDED);
        assert_eq!(stopped.stage(), "deadline");
        assert!(stopped.message.contains("deadline of 1s"), "{stopped}");
        assert!(progress.check().is_ok(), "nothing left in flight");
    }

    #[test]
    fn a_403_anywhere_in_the_chain_is_forbidden() {
        #[derive(Debug, thiserror::Error)]
        #[error("reading Secret ns/db: {0}")]
        struct Wrapped(#[source] kube::Error);
        let refused = |code| {
            kube::Error::Api(
                kube::core::Status::failure(
                    r#"secrets "db" is forbidden: User "system:serviceaccount:ns:op" cannot get resource "secrets" in API group "" in the namespace "ns""#,
                    "Forbidden",
                )
                .with_code(code)
                .boxed(),
            )
        };
        let e = Wrapped(refused(403));
        let message = forbidden(&e).expect("a 403");
        assert!(
            message.contains(r#"cannot get resource "secrets""#),
            "{message}"
        );
        let other = Wrapped(refused(409));
        assert_eq!(forbidden(&other), None);
    }
}
