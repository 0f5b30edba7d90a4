//! Permissions before they are needed: each AWS action this release calls
//! for a pool, asked without doing it — EC2's `DryRun` (EC2 answers
//! `DryRunOperation` when the call would be allowed), and for SSM a
//! parameter of no Scheduler's written, tagged and deleted under this
//! cluster's path. `orca-operator preflight` runs it for a region; each
//! pool's loop runs it with its own launch and instance when it starts
//! and after its spec changes, so that a missing action is `Unauthorized`
//! from the start, not on the day it is first needed.

use aws_sdk_ec2::error::ProvideErrorMetadata;
use chrono::{DateTime, Utc};

use super::act::Actuator;
use super::ec2::{
    classify, Ec2, Ec2Error, RunRequest, TAG_CLASS, TAG_CLUSTER, TAG_NAMESPACE, TAG_OPERATOR,
    TAG_SCHEDULER,
};
use super::instance::offerings;
use super::pass_report::{PassReport, PoolEvent};
use super::plan::Snapshot;
use super::ssm::{Ssm, SsmError};
use super::userdata::{self, DatabaseSource};
use super::world::World;
use crate::crd::WarmPoolSpec;

/// What asking said of one action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The credentials may make the call.
    Allowed,
    /// They may not: the `Unauthorized` message, naming the action and
    /// what grants it.
    Missing(String),
    /// The answer said nothing of the policy (unreachable, or another
    /// error first): why.
    Unknown(String),
    /// Not asked: why (no instance to ask about, no launch to try).
    NotChecked(&'static str),
}

/// One action asked about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// `ec2` or `ssm`.
    pub service: &'static str,
    /// `RunInstances`, `PutParameter`, ...: as the pool's record of
    /// refusals keys it.
    pub action: &'static str,
    pub outcome: Outcome,
}

impl Check {
    pub fn new(service: &'static str, action: &'static str, outcome: Outcome) -> Self {
        Check {
            service,
            action,
            outcome,
        }
    }

    /// `service:Action`, as IAM names it.
    pub fn name(&self) -> String {
        format!("{}:{}", self.service, self.action)
    }
}

/// What a pool's preflight asks with: its launch as the next pass would
/// make it, and one of its instances for the calls on instances.
#[derive(Clone, Debug, Default)]
pub struct Probe<'a> {
    /// The launch (`RunInstances` with its tags, network, profile): `None`
    /// to leave it unasked.
    pub launch: Option<RunRequest<'a>>,
    /// An instance of this cluster's, for `TerminateInstances`,
    /// `StopInstances`, `StartInstances`, `GetConsoleOutput` and
    /// `CreateTags` (their conditions are on its tags): `None` to leave
    /// them unasked.
    pub instance: Option<&'a str>,
    /// The tags a class's census adds to older instances, asked of
    /// `CreateTags` on `instance`.
    pub tenancy_tags: Vec<(&'a str, &'a str)>,
    /// Whether to ask the describe calls besides `DescribeInstances`
    /// (`DescribeInstanceTypes` of this type, `DescribeLaunchTemplateVersions`):
    /// the command asks them; a pool's passes make them whenever they need
    /// them, so its refusals show there.
    pub describes: Option<&'a str>,
    /// The SSM calls of the database URL's parameter: `None` to leave them
    /// unasked (a pool whose URL is not in a parameter).
    pub ssm: Option<SsmProbe<'a>>,
}

/// Where and as whom the SSM calls are asked.
#[derive(Clone, Copy, Debug)]
pub struct SsmProbe<'a> {
    /// The cluster, whose path the parameter is under.
    pub cluster: &'a str,
    /// Who asks: see [`probe_parameter`].
    pub asker: &'a str,
    /// SSM's endpoint, when not the region's own.
    pub endpoint: Option<&'a str>,
    /// The tags the operator gives its parameters.
    pub tags: &'a [(&'a str, &'a str)],
}

/// Why nothing more is asked of an EC2 endpoint that answered
/// `DescribeInstances`' dry run as a real call.
pub const IGNORES_DRY_RUN: &str = "the EC2 endpoint answers dry runs as real calls (not AWS's own)";

/// Why the calls on instances were not asked without one.
pub const NO_INSTANCE: &str = "no instance of this cluster to ask about yet";

/// Each EC2 action of `probe`, dry run.
pub async fn ec2_checks(ec2: &Ec2, probe: &Probe<'_>) -> Vec<Check> {
    let c = ec2.client();
    let first = c.describe_instances().dry_run(true).send().await;
    if first.is_ok() {
        // An endpoint that answers a dry run as a real call would launch,
        // stop and terminate for real: ask nothing more of it.
        return [
            "DescribeInstances",
            "DescribeInstanceTypes",
            "DescribeLaunchTemplateVersions",
            "RunInstances",
            "TerminateInstances",
            "StopInstances",
            "StartInstances",
            "GetConsoleOutput",
            "CreateTags",
        ]
        .into_iter()
        .map(|action| Check::new("ec2", action, Outcome::NotChecked(IGNORES_DRY_RUN)))
        .collect();
    }
    let mut checks = vec![Check::new(
        "ec2",
        "DescribeInstances",
        answer("DescribeInstances", first),
    )];
    if let Some(instance_type) = probe.describes {
        checks.push(Check::new(
            "ec2",
            "DescribeInstanceTypes",
            answer(
                "DescribeInstanceTypes",
                c.describe_instance_types()
                    .instance_types(instance_type.into())
                    .dry_run(true)
                    .send()
                    .await,
            ),
        ));
        checks.push(Check::new(
            "ec2",
            "DescribeLaunchTemplateVersions",
            answer(
                "DescribeLaunchTemplateVersions",
                c.describe_launch_template_versions()
                    .versions("$Latest")
                    .dry_run(true)
                    .send()
                    .await,
            ),
        ));
    }
    checks.push(Check::new(
        "ec2",
        "RunInstances",
        match &probe.launch {
            Some(req) => answer("RunInstances", ec2.run_call(req).dry_run(true).send().await),
            None => Outcome::NotChecked("no launch to try (give --image and --subnet)"),
        },
    ));
    let Some(id) = probe.instance else {
        for action in [
            "TerminateInstances",
            "StopInstances",
            "StartInstances",
            "GetConsoleOutput",
            "CreateTags",
        ] {
            checks.push(Check::new("ec2", action, Outcome::NotChecked(NO_INSTANCE)));
        }
        return checks;
    };
    let ids = vec![id.to_string()];
    let on = [
        (
            "TerminateInstances",
            answer(
                "TerminateInstances",
                c.terminate_instances()
                    .set_instance_ids(Some(ids.clone()))
                    .dry_run(true)
                    .send()
                    .await,
            ),
        ),
        (
            "StopInstances",
            answer(
                "StopInstances",
                c.stop_instances()
                    .set_instance_ids(Some(ids.clone()))
                    .dry_run(true)
                    .send()
                    .await,
            ),
        ),
        (
            "StartInstances",
            answer(
                "StartInstances",
                c.start_instances()
                    .set_instance_ids(Some(ids.clone()))
                    .dry_run(true)
                    .send()
                    .await,
            ),
        ),
        (
            "GetConsoleOutput",
            answer(
                "GetConsoleOutput",
                c.get_console_output()
                    .instance_id(id)
                    .dry_run(true)
                    .send()
                    .await,
            ),
        ),
    ];
    for (action, outcome) in on {
        checks.push(Check::new("ec2", action, outcome));
    }
    if !probe.tenancy_tags.is_empty() {
        let tags = probe
            .tenancy_tags
            .iter()
            .map(|(k, v)| aws_sdk_ec2::types::Tag::builder().key(*k).value(*v).build())
            .collect();
        checks.push(Check::new(
            "ec2",
            "CreateTags",
            answer(
                "CreateTags",
                c.create_tags()
                    .set_resources(Some(ids))
                    .set_tags(Some(tags))
                    .dry_run(true)
                    .send()
                    .await,
            ),
        ));
    }
    checks
}

/// What a dry run's answer says of the credentials.
fn answer<T, E>(
    action: &'static str,
    outcome: Result<T, aws_sdk_ec2::error::SdkError<E>>,
) -> Outcome
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match outcome {
        // Made for real, and allowed: an endpoint that honours some dry
        // runs and not others (moto's `GetConsoleOutput`, a read).
        Ok(_) => Outcome::Allowed,
        Err(e) => match e.code() {
            Some("DryRunOperation") => Outcome::Allowed,
            Some(code) => match classify(action, None, code, e.message().unwrap_or("")) {
                e @ Ec2Error::Denied { .. } => Outcome::Missing(e.to_string()),
                e => Outcome::Unknown(e.to_string()),
            },
            None => Outcome::Unknown(
                Ec2Error::Transport {
                    action,
                    source: Box::new(e),
                }
                .to_string(),
            ),
        },
    }
}

/// The name of the parameter the SSM checks of `asker` (a pool's
/// `namespace/name`, or `cli`) write and delete: under this cluster's
/// path, where the operator's policy lets it write, of no Scheduler's
/// (`_` is in no namespace's name), and one per asker, so that two asking
/// at once do not delete each other's.
pub fn probe_parameter(cluster: &str, asker: &str) -> String {
    format!("/orca/{cluster}/_preflight/{asker}")
}

/// The SSM actions of the database URL's parameter: write
/// ([`probe_parameter`], encrypted as the real ones are), tag, delete.
pub async fn ssm_checks(
    ssm: &Ssm,
    cluster: &str,
    asker: &str,
    tags: &[(&str, &str)],
) -> Vec<Check> {
    let name = probe_parameter(cluster, asker);
    ssm.probe(&name, tags)
        .await
        .into_iter()
        .map(|(action, outcome)| {
            Check::new(
                "ssm",
                action,
                match outcome {
                    Ok(()) => Outcome::Allowed,
                    Err(e) => ssm_outcome(&e),
                },
            )
        })
        .collect()
}

fn ssm_outcome(e: &SsmError) -> Outcome {
    e.denial()
        .map_or_else(|| Outcome::Unknown(e.to_string()), Outcome::Missing)
}

/// The `orca-operator iam-policy` statements that grant each missing
/// action of `checks` (by `Sid`), in the policy's order.
pub fn granting(checks: &[Check], policy: &crate::iam_policy::Policy) -> Vec<String> {
    policy
        .statements
        .iter()
        .filter(|s| {
            checks.iter().any(|c| {
                matches!(c.outcome, Outcome::Missing(_)) && s.actions.contains(&c.name().as_str())
            })
        })
        .map(|s| s.sid.to_string())
        .collect()
}

/// How long a missing action stands before the preflight asks again.
const ASK_AGAIN: chrono::Duration = chrono::Duration::seconds(60);

impl<W: World> Actuator<W> {
    /// The pool's preflight, when due (the loop's first pass, a new spec,
    /// its first pass with an instance, a minute after one that found
    /// something missing): its launch as the next pass would make it (the
    /// first offering, its tags, network, profile and user-data), one of
    /// its instances for the calls on instances, and the database URL's
    /// parameter. What is missing stands as a refused
    /// call does (`Degraded` `Unauthorized`) and is said in an Event; it is
    /// asked again a minute on, so that a policy mended is seen.
    pub(super) async fn preflight(
        &mut self,
        spec: &WarmPoolSpec,
        snap: &Snapshot,
        template_version: Option<&str>,
        now: DateTime<Utc>,
        report: &mut PassReport,
    ) {
        // One this pass did not just terminate: the dry runs of stop and
        // start on an ended one would answer its state, not the policy.
        let instance = snap
            .instances
            .iter()
            .find(|i| i.state.is_present() && !report.terminated.contains(&i.id))
            .map(|i| i.id.as_str());
        let due = self.preflight_at.is_some_and(|at| now >= at)
            || (!self.preflight_instances && instance.is_some());
        if !due {
            return;
        }
        self.preflight_instances |= instance.is_some();
        let offering = offerings(&spec.launch)
            .into_iter()
            .next()
            .unwrap_or_default();
        let parameter = self.parameter_name(spec);
        let source = DatabaseSource::for_spec(spec, &self.url.0, &parameter);
        let in_parameter = matches!(source, DatabaseSource::Parameter { .. });
        let user_data = userdata::render(spec, &self.pool, source);
        let namespace = self.owner.namespace.clone();
        let class = self.budget.as_ref().map(|b| b.class().to_string());
        let parameter_tags = [
            (TAG_CLUSTER, self.owner.cluster.as_str()),
            (TAG_SCHEDULER, self.owner.scheduler.as_str()),
            (TAG_OPERATOR, self.owner.operator.as_str()),
        ];
        let probe = Probe {
            launch: Some(RunRequest {
                launch: &spec.launch,
                offering: &offering,
                count: 1,
                token: "orca-preflight",
                user_data: &user_data,
                owner: &self.owner,
                class: class.as_deref(),
                template_version,
            }),
            instance,
            tenancy_tags: match &class {
                Some(c) => vec![(TAG_CLASS, c.as_str()), (TAG_NAMESPACE, namespace.as_str())],
                None => Vec::new(),
            },
            describes: None,
            ssm: in_parameter.then_some(SsmProbe {
                cluster: &self.tuning.cluster,
                asker: &self.pool,
                endpoint: spec.ssm_endpoint.as_deref(),
                tags: &parameter_tags,
            }),
        };
        let checks = self.world.preflight(&probe).await;
        for c in &checks {
            self.denials.note(c.action, &c.outcome);
        }
        let missing: Vec<String> = checks
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Missing(_)))
            .map(Check::name)
            .collect();
        if missing.is_empty() {
            tracing::info!(pool = %self.pool, "preflight: every action this pool calls is allowed");
            self.preflight_at = None;
            return;
        }
        let said = format!(
            "the operator's AWS credentials may not call {} (asked before they are needed: \
             `orca-operator preflight` lists them with the statements that grant them)",
            missing.join(", ")
        );
        tracing::warn!(pool = %self.pool, "preflight: {said}");
        report
            .events
            .push(PoolEvent::new(super::pass_report::UNAUTHORIZED, said, true));
        self.preflight_at = Some(now + ASK_AGAIN);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statements_that_grant_what_is_missing() {
        let policy = crate::iam_policy::operator_policy("prod", &[], true);
        let checks = [
            Check::new("ec2", "TerminateInstances", Outcome::Missing("no".into())),
            Check::new("ssm", "PutParameter", Outcome::Missing("no".into())),
            Check::new("ec2", "DescribeInstances", Outcome::Allowed),
            Check::new("ec2", "StopInstances", Outcome::NotChecked(NO_INSTANCE)),
        ];
        assert_eq!(
            granting(&checks, &policy),
            ["ActOnOwnedInstances", "KeepTheDatabaseUrlParameters"]
        );
        assert_eq!(checks[0].name(), "ec2:TerminateInstances");
    }

    #[test]
    fn a_preflight_clears_what_it_found_and_not_what_a_call_met() {
        use super::super::pass_report::Denials;
        let mut denials = Denials::default();
        denials.note("TerminateInstances", &Outcome::Missing("may not".into()));
        assert_eq!(denials.standing(), Some("may not"));
        denials.note("TerminateInstances", &Outcome::Unknown("no answer".into()));
        assert_eq!(
            denials.standing(),
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

    #[test]
    fn the_probe_parameter_is_no_schedulers() {
        let name = probe_parameter("prod", "team-a/builds");
        assert!(name.starts_with(&crate::iam_policy::parameter_path("prod")));
        // A Scheduler's is /orca/<cluster>/<namespace>/<name>/database-url,
        // its namespace a DNS label.
        assert!(!name.ends_with("/database-url"));
        assert!(name.contains("/_"));
    }
}
