//! The shell every object's reconcile runs in, whichever controller's:
//! what each does around its own stages is written here once.
//!
//! - [`reconcile`]: the stages run guarded (in flight for `/healthz`, a
//!   panic caught into an error of that object alone, see
//!   [`super::guard`]); a panic or a call the operator's RBAC refuses is
//!   said on the object (`Degraded` `InternalError` or `Forbidden`, with a
//!   Warning Event), a fenced pass is not.
//! - [`error_policy`]: a fenced pass is no failure and is looked at again
//!   in [`FENCED_RETRY`], nor is a race lost to this replica's own write
//!   (in [`RACE_RETRY`]); any other failure is logged with its stage,
//!   counted under that stage and retried after the object's own back-off.
//!
//! A controller supplies its stages and what it keeps per object
//! ([`Reconciler`]); the Scheduler's, the WarmPool's and the in-use
//! guard's two (a Secret's, the operator's RoleBinding's) do.

use std::{future::Future, sync::Arc};

use kube::{runtime::controller::Action, Resource, ResourceExt};

use super::{
    guard::{self, Stopped},
    server::Progress,
};
use crate::{
    backoff::PerObject,
    fence::{MaybeFenced, FENCED_RETRY},
};

/// What one controller supplies to the shell: its stages, and what it
/// keeps and says of each object. Implemented by its context.
pub trait Reconciler: Send + Sync + Sized + 'static {
    /// The kind reconciled, as the log and the in-flight list name it.
    const KIND: &'static str;
    /// The object reconciled.
    type Object: Resource + Send + Sync + 'static;
    /// Why a reconcile failed, by stage.
    type Error: std::error::Error + Send + Sync + 'static;

    /// One reconcile of `object`, unguarded: the controller's own stages.
    fn stages(
        ctx: Arc<Self>,
        object: Arc<Self::Object>,
    ) -> impl Future<Output = Result<Action, Self::Error>> + Send;

    /// The error of a reconcile of `object` that was stopped (a panic, or
    /// its deadline), after dropping what was kept of it (it may be
    /// half-changed: the next pass starts afresh).
    fn stopped(&self, object: &Self::Object, stop: Stopped) -> Self::Error;

    /// The stop `error` is, if it is one.
    fn stopped_of(error: &Self::Error) -> Option<&Stopped>;

    /// The stage that failed: the `stage` label of the failure metric and
    /// of the log.
    fn stage(error: &Self::Error) -> &'static str;

    /// Says on `object` what only its user can see to: `Degraded` with
    /// `reason` and `message`, and a Warning Event when that is news. Best
    /// effort: the write itself may be what is forbidden (the log has it).
    fn degraded(
        &self,
        object: &Self::Object,
        reason: &'static str,
        message: String,
    ) -> impl Future<Output = ()> + Send;

    /// What `/healthz` counts in flight.
    fn progress(&self) -> &Progress;

    /// Each object's failures in a row.
    fn backoff(&self) -> &PerObject;

    /// Counts a failed reconcile of `namespace/name` at `stage`.
    fn count_failed(&self, namespace: &str, name: &str, stage: &'static str);

    /// Whether `error` is no failure of the object but a race this
    /// replica lost to itself (a write of its own a moment before): looked
    /// at again in [`RACE_RETRY`], neither counted nor backed off. None is,
    /// unless the controller says so.
    fn lost_race(_error: &Self::Error) -> bool {
        false
    }
}

/// When an object whose reconcile lost a race to this replica's own write
/// is looked at again.
pub const RACE_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// One reconcile of `object` by `ctx`'s controller, in the shell (see the
/// module's doc).
pub async fn reconcile<R: Reconciler>(
    object: Arc<R::Object>,
    ctx: Arc<R>,
) -> Result<Action, R::Error> {
    let what = format!(
        "{} {}/{}",
        R::KIND,
        crate::crd::namespace_of(object.as_ref()),
        object.name_any()
    );
    let stages = R::stages(ctx.clone(), object.clone());
    let failed = match guard::guarded(ctx.progress(), what, stages).await {
        Ok(Ok(action)) => return Ok(action),
        Ok(Err(e)) => e,
        Err(stop) => ctx.stopped(&object, stop),
    };
    let said = match R::stopped_of(&failed) {
        Some(stop) => Some((stop.reason(), stop.to_string())),
        None if failed.is_fenced() => None,
        None => guard::forbidden(&failed).map(|m| (guard::FORBIDDEN, m)),
    };
    if let Some((reason, message)) = said {
        ctx.degraded(&object, reason, message).await;
    }
    Err(failed)
}

/// What follows a failed reconcile of `object` (see the module's doc).
pub fn error_policy<R: Reconciler>(
    object: Arc<R::Object>,
    error: &R::Error,
    ctx: Arc<R>,
) -> Action {
    if error.is_fenced() {
        // No failure of the object: this replica may not act.
        tracing::debug!(error = %error, "fenced");
        return Action::requeue(FENCED_RETRY);
    }
    if R::lost_race(error) {
        tracing::debug!(kind = R::KIND, error = %error, "looking again");
        return Action::requeue(RACE_RETRY);
    }
    let ns = crate::crd::namespace_of(object.as_ref());
    let name = object.name_any();
    let stage = R::stage(error);
    let delay = ctx.backoff().failed(&ns, &name);
    tracing::warn!(kind = R::KIND, namespace = %ns, name = %name, stage, retry_in = ?delay,
        "{} reconcile failed: {error}", R::KIND);
    ctx.count_failed(&ns, &name, stage);
    Action::requeue(delay)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    use super::*;
    use crate::fence::Fenced;

    /// How the test controller's stages end.
    #[derive(Clone, Copy)]
    enum Ends {
        Done,
        Fails,
        Fenced,
        LostRace,
        Panics,
    }

    #[derive(Debug, thiserror::Error)]
    enum TestError {
        #[error("the stage failed")]
        Failed,
        #[error("fenced stage: {0}")]
        Fenced(#[source] Fenced),
        #[error("{0}")]
        Stopped(Stopped),
        #[error("changed since it was read")]
        Raced,
    }

    struct Test {
        ends: Ends,
        progress: Progress,
        backoff: PerObject,
        /// What the shell asked of it, in order.
        calls: Mutex<Vec<String>>,
    }

    impl Test {
        fn new(ends: Ends) -> Arc<Test> {
            Arc::new(Test {
                ends,
                progress: Progress::default(),
                backoff: PerObject::default(),
                calls: Mutex::new(Vec::new()),
            })
        }

        fn calls(&self) -> Vec<String> {
            self.calls.lock().unwrap().clone()
        }

        fn call(&self, what: String) {
            self.calls.lock().unwrap().push(what);
        }
    }

    impl Reconciler for Test {
        const KIND: &'static str = "ConfigMap";
        type Object = ConfigMap;
        type Error = TestError;

        async fn stages(ctx: Arc<Self>, _: Arc<ConfigMap>) -> Result<Action, TestError> {
            match ctx.ends {
                Ends::Done => Ok(Action::await_change()),
                Ends::Fails => Err(TestError::Failed),
                Ends::Fenced => Err(TestError::Fenced(Fenced)),
                Ends::LostRace => Err(TestError::Raced),
                Ends::Panics => panic!("a bug met an input\nsecond line"),
            }
        }

        fn stopped(&self, object: &ConfigMap, stop: Stopped) -> TestError {
            self.call(format!("forget {}", object.name_any()));
            TestError::Stopped(stop)
        }

        fn stopped_of(error: &TestError) -> Option<&Stopped> {
            match error {
                TestError::Stopped(p) => Some(p),
                _ => None,
            }
        }

        fn stage(error: &TestError) -> &'static str {
            match error {
                TestError::Stopped(_) => "panic",
                _ => "stage",
            }
        }

        async fn degraded(&self, _: &ConfigMap, reason: &'static str, message: String) {
            self.call(format!("degraded {reason}: {message}"));
        }

        fn progress(&self) -> &Progress {
            &self.progress
        }

        fn backoff(&self) -> &PerObject {
            &self.backoff
        }

        fn count_failed(&self, namespace: &str, name: &str, stage: &'static str) {
            self.call(format!("failed {namespace}/{name} at {stage}"));
        }

        fn lost_race(error: &TestError) -> bool {
            matches!(error, TestError::Raced)
        }
    }

    fn object() -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some("c".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    /// Each way a reconcile ends, and what the shell does about it: a
    /// panic is that object's error, said on it as `InternalError` (its
    /// first line) after what was kept of it is dropped; a failure is
    /// retried after the object's back-off and counted by stage; a fenced
    /// pass is neither said nor counted, and looked at again in
    /// `FENCED_RETRY`; nor is a race lost to the replica's own write (in
    /// `RACE_RETRY`).
    #[tokio::test]
    async fn each_end_of_a_reconcile_is_dealt_with_as_its_kind() {
        let panicked = "degraded InternalError: the operator panicked while reconciling it: \
                        a bug met an input";
        let table: [(Ends, bool, Vec<&str>, Option<std::time::Duration>); 5] = [
            (Ends::Done, true, vec![], None),
            (
                Ends::Fails,
                false,
                vec!["failed ns/c at stage"],
                Some(std::time::Duration::from_secs(5)),
            ),
            (Ends::Fenced, false, vec![], Some(FENCED_RETRY)),
            (Ends::LostRace, false, vec![], Some(RACE_RETRY)),
            (
                Ends::Panics,
                false,
                vec!["forget c", panicked, "failed ns/c at panic"],
                Some(std::time::Duration::from_secs(5)),
            ),
        ];
        for (ends, ok, calls, retry) in table {
            let ctx = Test::new(ends);
            let outcome = reconcile(object(), ctx.clone()).await;
            assert_eq!(outcome.is_ok(), ok);
            if let Err(e) = &outcome {
                let action = error_policy(object(), e, ctx.clone());
                assert_eq!(Some(action), retry.map(Action::requeue), "{e}");
            }
            assert_eq!(ctx.calls(), calls, "{e:?}", e = outcome.err());
        }
    }
}
