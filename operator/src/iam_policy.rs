//! The least IAM policies of one cluster, rendered (`orca-operator
//! iam-policy`; `docs/iam-policy.json` is its output for the docs' example
//! cluster, `docs/iam-instance-policy.json` that of `--instance-role`).
//!
//! The operator's policy keeps clusters that share an AWS account apart by
//! IAM itself, not only by the operator's own filters: it may act on an
//! instance only where `orca.dev/cluster` is this cluster's name, launch or
//! tag at launch only with that name in the request, launch only into the
//! subnets, security groups and launch templates tagged for this cluster,
//! adopt only an instance no cluster has claimed yet (the one-time
//! adoption after an upgrade from a version that did not set the tag), add
//! to its own instances only the tags its classes count by, pass only
//! this cluster's roles (or those it is given), and keep the Schedulers'
//! database URLs only under this cluster's path of the SSM Parameter
//! Store. The pool instances' role may read one Scheduler's parameter, one
//! namespace's (a role per team), or the cluster's, decrypted only through
//! SSM.
//!
//! Pure: names in, JSON out; nothing here calls AWS.
//!
//! The policies of one cluster and the arguments
//! that name them (their tables are `iam_policy_tests.rs`).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{json, Value};

use crate::warmpool::ssm::parameter_name;
use crate::warmpool::tags::{
    cluster_name, TAG_CLASS, TAG_CLUSTER, TAG_NAMESPACE, TAG_OPERATOR, TAG_POOL, TAG_SCHEDULER,
};

/// The roles the operator may pass to EC2 when no `--pass-role` names
/// them: any account's roles under the path `/orca/<cluster>/` — this
/// cluster's, whatever their names (e.g. one per team,
/// `/orca/prod-eu-1/orca-pool-team-a`).
pub fn default_pass_role(cluster: &str) -> String {
    format!("arn:aws:iam::*:role/orca/{cluster}/*")
}

/// The tag that marks a subnet, security group or launch template this
/// cluster's pools may launch into (any value): its key names the cluster,
/// so one subnet may serve several clusters.
pub fn launch_from_tag(cluster: &str) -> String {
    format!("orca.dev/launch-from/{cluster}")
}

/// The arguments of `orca-operator iam-policy`.
#[derive(clap::Args, Clone, Debug)]
pub struct IamPolicyArgs {
    /// The cluster's name, as the chart's `clusterName` (`--cluster-name`
    /// of `orca-operator run`).
    #[arg(long, value_parser = cluster_name)]
    cluster_name: String,
    /// A role the operator may pass to EC2 (the role of a WarmPool's
    /// instance profile), as an ARN; repeat for several. None: this
    /// cluster's roles, those under the path `/orca/<cluster>/`.
    #[arg(long = "pass-role", value_name = "ARN", value_parser = role_arn,
          conflicts_with = "instance_role")]
    pass_roles: Vec<String>,
    /// Launch into any subnet, security group and launch template of the
    /// account, as the releases before 0.2 allowed; without it, only into
    /// those tagged `orca.dev/launch-from/<cluster>`.
    #[arg(long, conflicts_with = "instance_role")]
    launch_from_anywhere: bool,
    /// Print the pool instances' role's policy instead of the operator's.
    #[arg(long)]
    instance_role: bool,
    /// With `--instance-role`: the namespace whose Schedulers' database
    /// URLs the role reads (the role of that team's instances; a class's
    /// `launch.iamInstanceProfile` of `...{namespace}` gives each its own);
    /// with `--scheduler`, that Scheduler's alone. Without either, the
    /// cluster's every Scheduler.
    #[arg(long, value_parser = dns_label, requires = "instance_role")]
    namespace: Option<String>,
    /// With `--instance-role`: the Scheduler whose database URL the
    /// instances read (with `--namespace`).
    #[arg(long, value_parser = dns_subdomain, requires_all = ["instance_role", "namespace"])]
    scheduler: Option<String>,
}

impl IamPolicyArgs {
    /// The policy these arguments ask for, rendered.
    pub fn render(&self) -> String {
        let policy = if self.instance_role {
            let reads = match (&self.namespace, &self.scheduler) {
                (Some(ns), Some(s)) => Reads::Scheduler(ns, s),
                (Some(ns), None) => Reads::Namespace(ns),
                _ => Reads::Cluster,
            };
            instance_policy(&self.cluster_name, reads)
        } else {
            operator_policy(
                &self.cluster_name,
                &self.pass_roles,
                !self.launch_from_anywhere,
            )
        };
        render(&policy)
    }
}

/// An IAM policy document.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Policy {
    /// Always `2012-10-17`, the version that allows policy variables.
    #[serde(rename = "Version")]
    version: &'static str,
    /// The statements, each an `Allow`.
    #[serde(rename = "Statement")]
    statements: Vec<Statement>,
}

impl Policy {
    /// Its statements, in order.
    pub fn statements(&self) -> &Vec<Statement> {
        &self.statements
    }
}

/// One `Allow` statement.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Statement {
    /// What the statement is for, in CamelCase.
    #[serde(rename = "Sid")]
    sid: &'static str,
    /// Always `Allow`: nothing here denies.
    #[serde(rename = "Effect")]
    effect: &'static str,
    /// The actions, `service:Action`.
    #[serde(rename = "Action")]
    actions: Vec<&'static str>,
    /// The resources' ARNs (or `*`).
    #[serde(rename = "Resource")]
    resources: Vec<String>,
    /// Operator → condition key → value(s); sorted, so the output is
    /// stable.
    #[serde(rename = "Condition", skip_serializing_if = "BTreeMap::is_empty")]
    conditions: BTreeMap<&'static str, BTreeMap<String, Value>>,
}

impl Statement {
    /// The statement's `Sid`.
    pub fn sid(&self) -> &'static str {
        self.sid
    }

    /// The actions it allows.
    pub fn actions(&self) -> &Vec<&'static str> {
        &self.actions
    }

    fn allow(sid: &'static str, actions: &[&'static str], resources: Vec<String>) -> Self {
        Statement {
            sid,
            effect: "Allow",
            actions: actions.to_vec(),
            resources,
            conditions: BTreeMap::new(),
        }
    }

    /// Adds `key` `value` under `operator`.
    fn when(mut self, operator: &'static str, key: impl Into<String>, value: Value) -> Self {
        self.conditions
            .entry(operator)
            .or_default()
            .insert(key.into(), value);
        self
    }
}

/// The ARN of an EC2 resource of `kind` (`instance`, `subnet`, …) in any
/// region and account; images have no account in their ARN.
fn ec2(kind: &str) -> String {
    let account = if kind == "image" { "" } else { "*" };
    format!("arn:aws:ec2:*:{account}:{kind}/*")
}

/// The SSM path under which the operator keeps `cluster`'s parameters
/// (each Scheduler's database URL, [`parameter_name`]).
pub fn parameter_path(cluster: &str) -> String {
    format!("/orca/{cluster}")
}

/// The ARN of SSM parameter `name` (which starts with '/') in any region
/// and account.
fn parameter_arn(name: &str) -> String {
    format!("arn:aws:ssm:*:*:parameter{name}")
}

/// Any KMS key of any region and account: which key encrypts a parameter
/// is the parameter's choice, and the conditions keep the use to SSM.
fn any_key() -> Vec<String> {
    vec!["arn:aws:kms:*:*:key/*".to_string()]
}

/// `statement` allowed only as SSM's own call (`kms:ViaService`), for the
/// parameters `parameters` names (SSM's encryption context carries the
/// parameter's ARN).
fn via_ssm(statement: Statement, parameters: &str) -> Statement {
    statement
        .when("StringLike", "kms:ViaService", json!("ssm.*.amazonaws.com"))
        .when(
            "StringLike",
            "kms:EncryptionContext:PARAMETER_ARN",
            json!(parameter_arn(parameters)),
        )
}

/// The operator's least policy for `cluster`: it may pass `pass_roles` to
/// EC2 (none: [`default_pass_role`]), and launch into the subnets,
/// security groups and launch templates tagged [`launch_from_tag`] only
/// (`tagged_network`; else into any).
pub fn operator_policy(cluster: &str, pass_roles: &[String], tagged_network: bool) -> Policy {
    let roles = if pass_roles.is_empty() {
        vec![default_pass_role(cluster)]
    } else {
        pass_roles.to_vec()
    };
    let list = Statement::allow(
        "ListInstances",
        &[
            "ec2:DescribeInstances",
            "ec2:DescribeInstanceTypes",
            "ec2:DescribeLaunchTemplateVersions",
        ],
        vec!["*".to_string()],
    );
    let pass = Statement::allow("PassTheInstanceRole", &["iam:PassRole"], roles).when(
        "StringEquals",
        "iam:PassedToService",
        json!("ec2.amazonaws.com"),
    );
    Policy {
        version: "2012-10-17",
        statements: std::iter::once(list)
            .chain(launch_statements(cluster, tagged_network))
            .chain(tag_statements(cluster))
            .chain([act_statement(cluster), pass])
            .chain(parameter_statements(&parameter_path(cluster)))
            .collect(),
    }
}

fn request_tag(tag: &str) -> String {
    format!("aws:RequestTag/{tag}")
}

fn resource_tag(tag: &str) -> String {
    format!("aws:ResourceTag/{tag}")
}

/// Any value but an empty one.
fn present() -> Value {
    json!("?*")
}

/// What `cluster`'s operator may launch: an instance with its ownership
/// tags, from what the launch names, into the network (and template)
/// tagged for the cluster (`tagged_network`; else any).
fn launch_statements(cluster: &str, tagged_network: bool) -> [Statement; 3] {
    // Where the instances go: the network and the template, tagged for
    // this cluster by the platform team. (Images are not held so: public
    // AMIs carry no tags of the account's; the classes name them.)
    let network = ["subnet", "security-group", "launch-template"]
        .map(ec2)
        .to_vec();
    let launch_into = if tagged_network {
        Statement::allow("LaunchIntoTaggedNetwork", &["ec2:RunInstances"], network).when(
            "Null",
            resource_tag(&launch_from_tag(cluster)),
            json!("false"),
        )
    } else {
        Statement::allow("LaunchIntoAnyNetwork", &["ec2:RunInstances"], network)
    };
    [
        Statement::allow(
            "LaunchOwnedInstances",
            &["ec2:RunInstances"],
            vec![ec2("instance")],
        )
        .when("StringEquals", request_tag(TAG_CLUSTER), json!(cluster))
        .when("StringLike", request_tag(TAG_POOL), present())
        .when("StringLike", request_tag(TAG_SCHEDULER), present())
        .when("StringLike", request_tag(TAG_OPERATOR), present()),
        // The launch's other resources. The tags go on the instance
        // alone (a request's tags are asked of the resource type they are
        // given for), so none of these can be held to them; the instance,
        // which every launch makes, is. What the launch makes beside it
        // (its interface, volumes, spot request) is new: nothing to hold
        // it to.
        Statement::allow(
            "LaunchFrom",
            &["ec2:RunInstances"],
            [
                "image",
                "network-interface",
                "volume",
                "spot-instances-request",
            ]
            .map(ec2)
            .to_vec(),
        ),
        launch_into,
    ]
}

/// The tags `cluster`'s operator may put on instances: at launch, with the
/// cluster's name; the cluster's own on an unclaimed one (adoption); and
/// the class's and namespace's on its own.
fn tag_statements(cluster: &str) -> [Statement; 3] {
    let ours = json!(cluster);
    [
        Statement::allow("TagAtLaunch", &["ec2:CreateTags"], vec![ec2("instance")])
            .when("StringEquals", "ec2:CreateAction", json!("RunInstances"))
            .when("StringEquals", request_tag(TAG_CLUSTER), ours.clone()),
        Statement::allow(
            "AdoptUnclaimedInstances",
            &["ec2:CreateTags"],
            vec![ec2("instance")],
        )
        .when("Null", resource_tag(TAG_CLUSTER), json!("true"))
        .when("StringLike", resource_tag(TAG_POOL), present())
        .when("StringLike", resource_tag(TAG_OPERATOR), present())
        .when(
            "ForAllValues:StringEquals",
            "aws:TagKeys",
            json!([TAG_CLUSTER]),
        )
        .when("StringEquals", request_tag(TAG_CLUSTER), ours.clone()),
        // The tags a class's census counts by, added to instances launched
        // before them: on this cluster's instances only, and only those two
        // keys.
        Statement::allow(
            "TagOwnedInstancesTenancy",
            &["ec2:CreateTags"],
            vec![ec2("instance")],
        )
        .when("StringEquals", resource_tag(TAG_CLUSTER), ours)
        .when("StringLike", resource_tag(TAG_POOL), present())
        .when(
            "ForAllValues:StringEquals",
            "aws:TagKeys",
            json!([TAG_CLASS, TAG_NAMESPACE]),
        ),
    ]
}

/// What `cluster`'s operator may do to its own instances.
fn act_statement(cluster: &str) -> Statement {
    Statement::allow(
        "ActOnOwnedInstances",
        &[
            "ec2:TerminateInstances",
            "ec2:StopInstances",
            "ec2:StartInstances",
            "ec2:GetConsoleOutput",
        ],
        vec![ec2("instance")],
    )
    .when("StringEquals", resource_tag(TAG_CLUSTER), json!(cluster))
    .when("StringLike", resource_tag(TAG_POOL), present())
    .when("StringLike", resource_tag(TAG_OPERATOR), present())
}

/// What the operator may do with the database URL parameters under
/// `path`: write, tag and delete them, encrypted through SSM.
fn parameter_statements(path: &str) -> [Statement; 2] {
    [
        Statement::allow(
            "KeepTheDatabaseUrlParameters",
            &[
                "ssm:PutParameter",
                "ssm:AddTagsToResource",
                "ssm:DeleteParameter",
            ],
            vec![parameter_arn(&format!("{path}/*"))],
        ),
        via_ssm(
            Statement::allow("EncryptParametersViaSsm", &["kms:Encrypt"], any_key()),
            &format!("{path}/*"),
        ),
    ]
}

/// Whose database URLs an instance role reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reads<'a> {
    /// One Scheduler's: `namespace`, `name`.
    Scheduler(&'a str, &'a str),
    /// Every Scheduler's of one namespace: that team's instances' role.
    Namespace(&'a str),
    /// Every Scheduler's of the cluster: one role for all teams, which lets
    /// any team's instance read any team's URL.
    Cluster,
}

/// The pool instances' least policy: read the database URLs `reads` says
/// of `cluster`, decrypted through SSM.
pub fn instance_policy(cluster: &str, reads: Reads<'_>) -> Policy {
    let parameter = match reads {
        Reads::Scheduler(namespace, name) => parameter_name(cluster, namespace, name),
        Reads::Namespace(namespace) => {
            format!("{}/{namespace}/*", parameter_path(cluster))
        }
        Reads::Cluster => format!("{}/*", parameter_path(cluster)),
    };
    Policy {
        version: "2012-10-17",
        statements: vec![
            Statement::allow(
                "ReadTheDatabaseUrl",
                &["ssm:GetParameter"],
                vec![parameter_arn(&parameter)],
            ),
            via_ssm(
                Statement::allow("DecryptTheDatabaseUrlViaSsm", &["kms:Decrypt"], any_key()),
                &parameter,
            ),
        ],
    }
}

/// `policy` as the command prints it: pretty JSON, two spaces an indent, a
/// newline at the end.
pub fn render(policy: &Policy) -> String {
    let mut text = serde_json::to_string_pretty(policy).expect("invariant: a policy is plain JSON");
    text.push('\n');
    text
}

/// A role ARN for `--pass-role`: `arn:aws:iam::<account>:role/<name>`,
/// the account 12 digits (or `*`), the name with its path, `*` and `?`
/// allowed.
fn role_arn(s: &str) -> Result<String, String> {
    let ok = s
        .strip_prefix("arn:aws:iam::")
        .and_then(|rest| rest.split_once(":role/"))
        .is_some_and(|(account, name)| {
            (account == "*" || (account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit())))
                && !name.is_empty()
                && name.len() <= 512
                && !name.starts_with('/')
                && !name.ends_with('/')
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+=,.@_-/*?".contains(c))
        });
    checked(s, ok, "an IAM role ARN: arn:aws:iam::<account>:role/<name>")
}

/// A namespace: a DNS label, 1 to 63 of lowercase letters, digits and
/// '-', starting and ending with a letter or digit.
fn dns_label(s: &str) -> Result<String, String> {
    let ok = s.len() <= 63 && dns_name(s, false);
    checked(
        s,
        ok,
        "a namespace: 1 to 63 of lowercase letters, digits and '-'",
    )
}

/// A Scheduler's name: a DNS subdomain, 1 to 253 of lowercase letters,
/// digits, '-' and '.', starting and ending with a letter or digit.
fn dns_subdomain(s: &str) -> Result<String, String> {
    let ok = s.len() <= 253 && dns_name(s, true);
    checked(
        s,
        ok,
        "a Scheduler's name: 1 to 253 of lowercase letters, digits, '-' and '.'",
    )
}

/// `s` if `ok`, else the one line that says it is not `what`.
fn checked(s: &str, ok: bool, what: &str) -> Result<String, String> {
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!("{s:?} is not {what}"))
    }
}

/// Lowercase letters, digits, '-' (and '.' if `dots`), starting and ending
/// with a letter or digit; not empty.
fn dns_name(s: &str, dots: bool) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    s.chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (dots && c == '.'))
        && edge(s.chars().next())
        && edge(s.chars().last())
}

#[cfg(test)]
#[path = "iam_policy_tests.rs"]
mod tests;
