//! One reconcile of a Scheduler, stage by stage, as the controllers'
//! shell ([`crate::runtime::shell`]) runs it: observe (`observe.rs`) → the
//! pure [`crate::scheduler::decide()`] → act (each action, in order,
//! `act.rs`) → an Event per step and the status, applied only when it
//! changed (`report.rs`). A write the API server refuses for good is said
//! on the Scheduler instead (`refused`).

use std::sync::Arc;

use kube::{runtime::controller::Action as Requeue, ResourceExt};
use tracing::{warn, Instrument};

use super::{
    act::{act, ActError},
    deletion,
    observe::observe,
    refusal,
    report::{apply_status, publish},
    Context, ReconcileError,
};
use crate::backoff::PerObject;
use crate::crd::Scheduler;
use crate::runtime::{guard, server::Progress, shell::Reconciler};
use crate::scheduler::{self, decide, Decision, Observed};

/// The Scheduler controller's part in the controllers' shell: its stages
/// are `run_stages`; a panic drops what was kept of the Scheduler (its
/// connection, its status memory, what the watch was told to expect).
impl Reconciler for Context {
    const KIND: &'static str = "Scheduler";
    type Object = Scheduler;
    type Error = ReconcileError;

    fn stages(
        ctx: Arc<Self>,
        scheduler: Arc<Scheduler>,
    ) -> impl std::future::Future<Output = Result<Requeue, ReconcileError>> + Send {
        let ns = crate::crd::namespace_of(scheduler.as_ref());
        let name = scheduler.name_any();
        let span = tracing::info_span!("reconcile", scheduler = %name, namespace = %ns);
        run_stages(scheduler, ctx, ns, name).instrument(span)
    }

    fn stopped(&self, scheduler: &Scheduler, stop: guard::Stopped) -> ReconcileError {
        let (ns, name) = (crate::crd::namespace_of(scheduler), scheduler.name_any());
        self.connections().forget(&ns, &name);
        self.memory().forget(&ns, &name);
        self.watched().forget(&ns, &name);
        ReconcileError::Stopped(stop)
    }

    fn stopped_of(error: &ReconcileError) -> Option<&guard::Stopped> {
        match error {
            ReconcileError::Stopped(p) => Some(p),
            _ => None,
        }
    }

    fn stage(error: &ReconcileError) -> &'static str {
        error.stage()
    }

    async fn degraded(&self, scheduler: &Scheduler, reason: &'static str, message: String) {
        degraded(scheduler, self, reason, message).await
    }

    fn progress(&self) -> &Progress {
        // The context's own (inherent) accessor.
        Context::progress(self)
    }

    fn backoff(&self) -> &PerObject {
        Context::backoff(self)
    }

    fn count_failed(&self, namespace: &str, name: &str, stage: &'static str) {
        self.metrics().failed(namespace, name, stage);
    }
}

/// Says on `scheduler` what only its user can see to: `Degraded` with
/// `reason` and `message`, and a Warning Event when that is news. Best
/// effort — the write itself may be what is forbidden; the log has it all.
async fn degraded(scheduler: &Scheduler, ctx: &Context, reason: &str, message: String) {
    let ns = crate::crd::namespace_of(scheduler);
    let name = scheduler.name_any();
    let before = ctx.memory().status(
        &ns,
        &name,
        scheduler.metadata.resource_version.as_deref(),
        &scheduler.status.clone().unwrap_or_default(),
    );
    let news = !crate::crd::degraded_already(&before.conditions, reason, &message);
    if !news {
        return;
    }
    let mut status = before.clone();
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    refusal::degrade(
        &mut status,
        reason,
        &message,
        now,
        scheduler.metadata.generation,
    );
    warn!(scheduler = %name, namespace = %ns, reason, "{message}");
    let decision = Decision::new(
        Vec::new(),
        vec![scheduler::Event::warning(reason, message)],
        status,
        scheduler::BUSY,
    );
    publish(scheduler, ctx, &decision).await;
    if let Err(e) = apply_status(scheduler, ctx, &ns, decision.status()).await {
        warn!(scheduler = %name, namespace = %ns, reason, "cannot say it in the status: {e}");
    } else {
        ctx.metrics().status(&ns, &name, &before, decision.status());
    }
}

/// One reconcile of `scheduler`, unguarded: the deletion, or observe →
/// decide → act → Events → status.
async fn run_stages(
    scheduler: Arc<Scheduler>,
    ctx: Arc<Context>,
    ns: String,
    name: String,
) -> Result<Requeue, ReconcileError> {
    ctx.metrics().reconciled(&ns, &name);
    if scheduler.metadata.deletion_timestamp.is_some() {
        if !deletion::has_finalizer(&scheduler) {
            // Its pods and Jobs go with it (owner references).
            ctx.connections().forget(&ns, &name);
            ctx.memory().forget(&ns, &name);
            ctx.watched().forget(&ns, &name);
            return Ok(Requeue::await_change());
        }
        let (observed, db) = observe(&scheduler, &ctx, &ns).await?;
        let requeue = deletion::reconcile(scheduler.clone(), &ctx, &ns, observed, db).await?;
        if !deletion::has_finalizer(&scheduler) {
            ctx.connections().forget(&ns, &name);
        }
        return Ok(requeue);
    }
    if !deletion::has_finalizer(&scheduler) && !scheduler.spec.paused {
        let seen = scheduler.metadata.resource_version.as_deref();
        let version = deletion::add_finalizer(&ctx, &scheduler, &ns).await?;
        // The patch is a write of this replica's too: a later pass whose
        // cache shows the object at its version has not seen the status
        // this pass writes after it, and must start from that.
        let status = scheduler.status.clone().unwrap_or_default();
        let status = ctx.memory().status(&ns, &name, seen, &status);
        ctx.memory().wrote(&ns, &name, seen, version, &status);
    }
    let (observed, db) = observe(&scheduler, &ctx, &ns).await?;
    let decision = decide(&observed);
    if let Err(e) = act(&scheduler, &ctx, &ns, db.as_deref(), &decision).await {
        if matches!(&e, ActError::AskDrain { source, .. } if source.is_connection()) {
            ctx.connections().forget(&ns, &name);
        }
        let Some((reason, message)) = refusal::refusal(&e) else {
            return Err(e.into());
        };
        return refused(&scheduler, &ctx, &observed, decision, reason, message).await;
    }
    publish(&scheduler, &ctx, &decision).await;
    if decision.status() != observed.status() {
        apply_status(&scheduler, &ctx, &ns, decision.status()).await?;
    }
    // Every pass, not only a changed status: a replica that has just taken
    // the lead exports the phase of Schedulers whose status it left as it
    // was (the alerts on a Degraded one read the leader's series).
    ctx.metrics()
        .status(&ns, &name, observed.status(), decision.status());
    ctx.backoff().succeeded(&ns, &name);
    Ok(Requeue::requeue(decision.requeue()))
}

/// The API server refused a write for good: `Degraded` with its message,
/// a Warning Event when that is news, the status written all the same,
/// and a long pause before the next try (see [`refusal`]).
async fn refused(
    scheduler: &Scheduler,
    ctx: &Context,
    observed: &Observed,
    decision: Decision,
    reason: &str,
    message: String,
) -> Result<Requeue, ReconcileError> {
    let ns = crate::crd::namespace_of(scheduler);
    let name = scheduler.name_any();
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let news = !crate::crd::degraded_already(&observed.status().conditions, reason, &message);
    // What was decided did not happen: nothing is done, and the status
    // stays what it was (the same pod is tried again, under the same
    // name), only Degraded.
    let mut status = observed.status().clone();
    refusal::degrade(&mut status, reason, &message, now, observed.generation());
    let events = if news {
        warn!(scheduler = %name, namespace = %ns, reason, "{message}");
        vec![scheduler::Event::warning(reason, message)]
    } else {
        Vec::new()
    };
    let decision = Decision::new(Vec::new(), events, status, decision.requeue());
    publish(scheduler, ctx, &decision).await;
    if decision.status() != observed.status() {
        apply_status(scheduler, ctx, &ns, decision.status()).await?;
    }
    ctx.metrics()
        .status(&ns, &name, observed.status(), decision.status());
    ctx.metrics().failed(&ns, &name, "act");
    Ok(Requeue::requeue(refusal::REFUSED_RETRY))
}
