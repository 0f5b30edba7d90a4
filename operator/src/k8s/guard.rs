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

use std::{any::Any, future::Future, panic::AssertUnwindSafe};

use futures::FutureExt;

use super::server::Progress;

/// The condition reason of a caught panic.
pub const INTERNAL_ERROR: &str = "InternalError";
/// The condition reason of a call the operator's RBAC does not allow.
pub const FORBIDDEN: &str = "Forbidden";

/// A reconcile panicked; its message, first line, at most 300 characters.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the operator panicked while reconciling it: {message}")]
pub struct Panicked {
    pub message: String,
}

/// Runs `pass`, the reconcile of `what` (e.g. `Scheduler ns/name`): in
/// flight for `/healthz` until it ends, its panic caught.
pub async fn guarded<F, T>(progress: &Progress, what: String, pass: F) -> Result<T, Panicked>
where
    F: Future<Output = T>,
{
    let _in_flight = progress.begin(what);
    // The state a panic may leave half-changed is each object's own (its
    // maps are locked with poison ignored, and the caller drops what it
    // kept of the object), so unwinding out of it is safe.
    AssertUnwindSafe(pass)
        .catch_unwind()
        .await
        .map_err(|panic| Panicked {
            message: panic_message(panic.as_ref()),
        })
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
