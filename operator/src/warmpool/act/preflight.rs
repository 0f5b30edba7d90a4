//! When a pool's loop asks its preflight (see `preflight.rs`) and what
//! it does with the answers: at the loop's first pass, after a new spec,
//! on its first pass with an instance, and a minute after one that found
//! something missing; asked after the pass acted, so that asking never
//! delays what the pass does.

use chrono::{DateTime, Utc};

use super::{Actuator, ASK_AGAIN};
use crate::crd::WarmPoolSpec;
use crate::warmpool::ec2::{RunRequest, TAG_CLASS, TAG_NAMESPACE};
use crate::warmpool::instance::offerings;
use crate::warmpool::pass_report::{PassReport, PoolEvent, UNAUTHORIZED};
use crate::warmpool::plan::Snapshot;
use crate::warmpool::preflight::{Check, Outcome, Probe};
use crate::warmpool::userdata::{self, DatabaseSource};
use crate::warmpool::world::World;

/// The pool's preflight, when due (the loop's first pass, a new spec,
/// a minute after one that found something missing; and once, on its
/// first pass with an instance): its launch as the next pass would make
/// it (the first offering, its tags, network, profile and user-data), and
/// one of its instances for the calls on instances. What is missing
/// stands as a refused call does (`Degraded` `Unauthorized`) and is said
/// in an Event; it is asked again a minute on, so that a policy mended is
/// seen. At most once a minute besides that once, however often the spec
/// changes: an editor cannot spend the account's EC2 request budget by
/// editing. (The SSM calls are not asked here: each pass writes the
/// database URL's parameter and says a refusal then.)
pub(in crate::warmpool) async fn ask(
    world: &mut impl World,
    act: &mut Actuator,
    spec: &WarmPoolSpec,
    snap: &Snapshot,
    template_version: Option<&str>,
    now: DateTime<Utc>,
    report: &mut PassReport,
) {
    // One this pass did not just terminate: the dry runs of stop and
    // start on an ended one would answer its state, not the policy.
    let instance = snap
        .instances()
        .iter()
        .find(|i| i.state().is_present() && !report.terminated().iter().any(|t| t == i.id()))
        .map(|i| i.id());
    let spaced = act.preflight_asked.is_none_or(|at| now >= at + ASK_AGAIN);
    let due = (spaced && act.preflight_at.is_some_and(|at| now >= at))
        || (!act.preflight_instances && instance.is_some());
    if !due {
        return;
    }
    act.preflight_instances |= instance.is_some();
    act.preflight_asked = Some(now);
    let offering = offerings(&spec.launch)
        .into_iter()
        .next()
        .unwrap_or_default();
    let parameter = act.parameter_name(spec);
    let source = DatabaseSource::for_spec(spec, &act.url.0, &parameter);
    let user_data = userdata::render(spec, &act.pool, source);
    let namespace = act.owner.namespace().to_string();
    let class = act.budget.as_ref().map(|b| b.class().to_string());
    let probe = Probe::new(
        Some(
            RunRequest::new(
                &spec.launch,
                &offering,
                1,
                "orca-preflight",
                &user_data,
                &act.owner,
            )
            .with_class(class.as_deref())
            .with_template_version(template_version),
        ),
        instance,
        match &class {
            Some(c) => vec![(TAG_CLASS, c.as_str()), (TAG_NAMESPACE, namespace.as_str())],
            None => Vec::new(),
        },
        None,
    );
    let checks = world.preflight(&probe).await;
    for c in &checks {
        act.denials.note(c.action(), c.outcome());
    }
    // The launch as the next pass makes it, allowed: launches the
    // credentials were refused wait no longer.
    if checks
        .iter()
        .any(|c| c.action() == "RunInstances" && *c.outcome() == Outcome::Allowed)
    {
        act.boot.lift(UNAUTHORIZED);
    }
    let missing: Vec<String> = checks
        .iter()
        .filter(|c| matches!(c.outcome(), Outcome::Missing(_)))
        .map(Check::name)
        .collect();
    if missing.is_empty() {
        tracing::info!(pool = %act.pool, "preflight: every action this pool calls is allowed");
        act.preflight_at = None;
        return;
    }
    let said = format!(
        "the operator's AWS credentials may not call {} (asked before they are needed: \
         `orca-operator preflight` lists them with the statements that grant them)",
        missing.join(", ")
    );
    tracing::warn!(pool = %act.pool, "preflight: {said}");
    report.say(PoolEvent::new(UNAUTHORIZED, said, true));
    act.preflight_at = Some(now + ASK_AGAIN);
}

#[cfg(test)]
mod tests {
    use crate::warmpool::ec2::{classify, Ec2Error};
    use crate::warmpool::pass_report::Denials;
    use crate::warmpool::preflight::Outcome;

    #[test]
    fn a_preflight_clears_what_it_found_and_not_what_a_call_met() {
        let mut denials = Denials::default();
        denials.note("TerminateInstances", &Outcome::Missing("may not".into()));
        assert_eq!(denials.standing().as_deref(), Some("may not"));
        denials.note("TerminateInstances", &Outcome::Unknown("no answer".into()));
        assert_eq!(
            denials.standing().as_deref(),
            Some("may not"),
            "an unknown says nothing"
        );
        denials.note("TerminateInstances", &Outcome::Allowed);
        assert_eq!(denials.standing(), None, "mended");
        // A real call refused (on one instance) stands against a dry run
        // allowed (on another), until a call of it succeeds.
        let refused: Result<(), Ec2Error> = Err(classify(
            "StopInstances",
            None,
            "UnauthorizedOperation",
            "You are not authorized",
        ));
        denials.record("StopInstances", &refused);
        denials.note("StopInstances", &Outcome::Allowed);
        assert!(denials.standing().is_some());
        denials.record::<()>("StopInstances", &Ok(()));
        assert_eq!(denials.standing(), None);
    }
}
