//! Permissions before they are needed: what is asked of AWS for each
//! action this release calls for a pool, without doing it, and what the
//! answers said. EC2's `DryRun` asks each EC2 action (EC2 answers
//! `DryRunOperation` when the call would be allowed); for SSM
//! `orca-operator preflight` writes, tags and deletes a parameter of no
//! Scheduler's under this cluster's path. The asking is
//! `preflight_aws.rs`; a pool's loop asks its EC2 calls when it starts and
//! after its spec changes, at most once a minute (`act/preflight.rs`),
//! so that a missing action is `Unauthorized` from the start, not on the
//! day it is first needed.

use super::ec2::RunRequest;

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
    service: &'static str,
    /// `RunInstances`, `PutParameter`, ...: as the pool's record of
    /// refusals keys it.
    action: &'static str,
    outcome: Outcome,
}

impl Check {
    /// `RunInstances`, `PutParameter`, ...: as the pool's record of
    /// refusals keys it.
    pub fn action(&self) -> &'static str {
        self.action
    }

    /// What asking said.
    pub fn outcome(&self) -> &Outcome {
        &self.outcome
    }

    /// `action` of `service` (`ec2`, `ssm`), and what asking said.
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
    launch: Option<RunRequest<'a>>,
    /// An instance of this cluster's, for `TerminateInstances`,
    /// `StopInstances`, `StartInstances`, `GetConsoleOutput` and
    /// `CreateTags` (their conditions are on its tags): `None` to leave
    /// them unasked.
    instance: Option<&'a str>,
    /// The tags a class's census adds to older instances, asked of
    /// `CreateTags` on `instance`.
    tenancy_tags: Vec<(&'a str, &'a str)>,
    /// Whether to ask the describe calls besides `DescribeInstances`
    /// (`DescribeInstanceTypes` of this type, `DescribeLaunchTemplateVersions`):
    /// the command asks them; a pool's passes make them whenever they need
    /// them, so its refusals show there.
    describes: Option<&'a str>,
}

impl<'a> Probe<'a> {
    /// The calls to ask: the launch, the calls on `instance` and the
    /// tags for it, and the describe calls of `describes` (each `None` or
    /// empty: left unasked).
    pub fn new(
        launch: Option<RunRequest<'a>>,
        instance: Option<&'a str>,
        tenancy_tags: Vec<(&'a str, &'a str)>,
        describes: Option<&'a str>,
    ) -> Self {
        Probe {
            launch,
            instance,
            tenancy_tags,
            describes,
        }
    }

    /// The launch (`RunInstances` with its tags, network, profile): `None`
    /// to leave it unasked.
    pub fn launch(&self) -> &Option<RunRequest<'a>> {
        &self.launch
    }

    /// An instance of this cluster's, for `TerminateInstances`,
    /// `StopInstances`, `StartInstances`, `GetConsoleOutput` and
    /// `CreateTags` (their conditions are on its tags): `None` to leave
    /// them unasked.
    pub fn instance(&self) -> Option<&'a str> {
        self.instance
    }

    /// The tags a class's census adds to older instances, asked of
    /// `CreateTags` on `instance`.
    pub fn tenancy_tags(&self) -> &Vec<(&'a str, &'a str)> {
        &self.tenancy_tags
    }

    /// Whether to ask the describe calls besides `DescribeInstances`
    /// (`DescribeInstanceTypes` of this type, `DescribeLaunchTemplateVersions`):
    /// the command asks them; a pool's passes make them whenever they need
    /// them, so its refusals show there.
    pub fn describes(&self) -> Option<&'a str> {
        self.describes
    }
}

/// Why nothing more is asked of an EC2 endpoint that answered
/// `DescribeInstances`' dry run as a real call.
pub const IGNORES_DRY_RUN: &str = "the EC2 endpoint answers dry runs as real calls (not AWS's own)";

/// Why the calls on instances were not asked without one.
pub const NO_INSTANCE: &str = "no instance of this cluster to ask about yet";

/// The parameter `orca-operator preflight`'s SSM checks write, tag and
/// delete: under this cluster's path, where the operator's policy lets it
/// write, and of no Scheduler's (`_` is in no namespace's name).
pub fn probe_parameter(cluster: &str) -> String {
    format!("/orca/{cluster}/_preflight/check")
}

/// The `orca-operator iam-policy` statements that grant each missing
/// action of `checks` (by `Sid`), in the policy's order.
pub fn granting(checks: &[Check], policy: &crate::iam_policy::Policy) -> Vec<String> {
    policy
        .statements()
        .iter()
        .filter(|s| {
            checks.iter().any(|c| {
                matches!(c.outcome, Outcome::Missing(_)) && s.actions().contains(&c.name().as_str())
            })
        })
        .map(|s| s.sid().to_string())
        .collect()
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
    fn the_probe_parameter_is_no_schedulers() {
        let name = probe_parameter("prod");
        assert!(name.starts_with(&crate::iam_policy::parameter_path("prod")));
        // A Scheduler's is /orca/<cluster>/<namespace>/<name>/database-url,
        // its namespace a DNS label.
        assert!(!name.ends_with("/database-url"));
        assert!(name.contains("/_"));
    }
}
