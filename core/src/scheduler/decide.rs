//! `decide`: one snapshot in, the next steps of the rollout out
//! (docs/architecture.md#scheduler-controller-decide).
//!
//! With overlap on, a new revision goes: pod created → its instance joined
//! and live (else, past joinTimeout, abort: delete it; the old instance,
//! never asked to drain, keeps leading) → the older live instances asked to
//! drain → `wait_for_lead`, verified in `pg_locks` (else, past leadTimeout,
//! `Degraded`) → the register Job (a failed one retried as a new Job, in
//! `register.rs`) → each old pod deleted once its row has ended and it has
//! exited (or past drainTimeout). Exit 75 from the new pod
//! (overlap refused) → stop-the-world: the old drain and end first, then the
//! new starts. Overlap off → recreate: the old pods go, and once they are
//! gone the new one starts; it writes no row, so it is up (and registers)
//! once it has run `settleSeconds`. Old revisions are never restarted: a
//! restarted old image would be the newest instance and take the lead.
//! Rows of `orca.schedulers` that are not this Scheduler's (another
//! Scheduler on the same database) are never touched: nothing starts while
//! one is live (`DatabaseShared`).
//!
//! The steps themselves, each with what it says, are in `steps/`; this
//! file composes them in the order they run (start, exits, join → lead →
//! drain, settle, remove old pods) over what they share ([`Steps`]).

use super::{
    draft::StatusDraft,
    revision::revision_of,
    snapshot::*,
    steps::{exits, join, lead, remove, start, Steps},
    window,
};

/// The pure decision of one Scheduler reconcile: from the snapshot `o`, the
/// actions to take, the events to post, the status that follows from them
/// and when to look again. No I/O, no clock but `o.now`: the same snapshot
/// gives the same decision.
pub fn decide(o: &Observed) -> Decision {
    let mut d = StatusDraft::new(o);
    if o.spec().paused {
        return d.finish_paused();
    }
    let rows = match &o.instances() {
        Ok(rows) => rows.as_slice(),
        Err(problem) => return d.finish_unobserved(problem),
    };
    let target = revision_of(o.spec());
    if let Some(deferral) = window::deferral(o, &target) {
        return d.finish_deferred(&target, &deferral);
    }
    d.begin(&target);
    let mut steps = Steps::new(o, rows, &target, &mut d);
    start::start(&mut steps, &mut d);
    exits::current_exited(&mut steps, &mut d);
    exits::cannot_run(&steps, &mut d);
    if o.spec().overlap {
        join_drain_lead(&mut steps, &mut d);
    } else {
        lead::settle(&steps, &mut d);
    }
    remove::remove_old(&steps, &mut d);
    remove::supersede_jobs(&steps, &mut d);
    d.finish(
        steps.instances(),
        &target,
        o.spec().handover.progress_deadline_seconds,
    )
}

/// Overlap on, the current pod runs: its instance joins (else, past
/// the join time-out, the rollout aborts), the older live instances are
/// asked to drain, it leads (else, past the lead time-out, `Degraded`),
/// then it registers.
fn join_drain_lead(s: &mut Steps<'_>, d: &mut StatusDraft) {
    let Some(pod) = s.current() else {
        return;
    };
    match s.instance_of(pod) {
        // It joined once and looks stale now: a database blip, or a hung
        // process. Never a join time-out: wait for it to beat again.
        Some(me) if !me.live() => join::instance_stale(d, pod, me),
        None => join::join(s, pod, d),
        Some(me) => {
            let me = me.clone();
            lead::drain_and_lead(s, pod, &me, d);
        }
    }
}
