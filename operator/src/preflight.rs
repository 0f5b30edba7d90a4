//! `orca-operator preflight`: asks AWS, with the credentials the operator
//! would use, whether each action this release calls for its pools is
//! allowed (see [`crate::warmpool::preflight`]), prints what is missing with
//! the statements of `orca-operator iam-policy` that grant it, and exits
//! non-zero when anything is. Run before an upgrade, with the policy about
//! to be applied, and it tells whether the new release can work.

use std::process::ExitCode;

use crate::crd::Launch;
use crate::fence::Fence;
use crate::iam_policy::operator_policy;
use crate::warmpool::ec2::{
    Ec2, Ec2Config, Ownership, RunRequest, TAG_CLASS, TAG_CLUSTER, TAG_NAMESPACE,
};
use crate::warmpool::preflight::{self, Check, Outcome, Probe};
use crate::warmpool::preflight_aws;
use crate::warmpool::ssm::Ssm;
use crate::warmpool::tags::cluster_name;
use crate::warmpool::Offering;

/// The arguments of `orca-operator preflight`.
#[derive(clap::Args, Clone, Debug)]
pub struct PreflightArgs {
    /// The cluster's name, as the chart's `clusterName`.
    #[arg(long, value_parser = cluster_name)]
    cluster_name: String,
    /// The region the pools run in.
    #[arg(long)]
    region: String,
    /// EC2's endpoint, when not AWS's own (a pool's `endpoint`).
    #[arg(long)]
    endpoint: Option<String>,
    /// SSM's endpoint, when not AWS's own (a pool's `ssmEndpoint`).
    #[arg(long)]
    ssm_endpoint: Option<String>,
    /// An image a pool launches: with `--subnet`, the launch is dry run as
    /// a pool's would be (its tags, network and instance profile).
    #[arg(long, requires = "subnet")]
    image: Option<String>,
    /// A subnet a pool launches into (tagged for this cluster).
    #[arg(long, requires = "image")]
    subnet: Option<String>,
    /// A security group of the launch; repeat for several.
    #[arg(long = "security-group", value_name = "ID")]
    security_groups: Vec<String>,
    /// The instance profile the launch passes (its role must be one the
    /// policy lets the operator pass).
    #[arg(long)]
    instance_profile: Option<String>,
    /// The instance type of the launch.
    #[arg(long, default_value = "t3.micro")]
    instance_type: String,
}

/// Runs the checks and prints them; exit 1 when an action is missing or
/// could not be asked about.
pub async fn command(args: &PreflightArgs) -> anyhow::Result<ExitCode> {
    // Run by hand, once: no election, so its calls are not fenced.
    let ec2 = Ec2::new(
        &Ec2Config::new(&args.region, args.endpoint.as_deref()),
        Fence::always(),
    )
    .await;
    let ssm = Ssm::new(
        &Ec2Config::new(&args.region, args.ssm_endpoint.as_deref()),
        Fence::always(),
    )
    .await;
    // One of this cluster's instances, for the calls on instances (their
    // conditions are on its tags).
    let tagged = ec2
        .describe_tagged(&[(TAG_CLUSTER, &args.cluster_name)])
        .await
        .unwrap_or_default();
    let instance = tagged
        .iter()
        .find(|t| t.instance().is_some_and(|i| i.state().is_present()));
    let id = instance
        .and_then(|t| t.instance())
        .map(|i| i.id().to_string());
    let namespace = instance
        .and_then(|t| {
            t.namespace()
                .map(String::from)
                .or_else(|| t.pool()?.split_once('/').map(|(ns, _)| ns.to_string()))
        })
        .unwrap_or_default();
    let class = instance
        .and_then(|t| t.class())
        .unwrap_or("preflight")
        .to_string();
    let launch = Launch {
        image_id: args.image.clone(),
        security_group_ids: args.security_groups.clone(),
        iam_instance_profile: args.instance_profile.clone(),
        ..Launch::default()
    };
    let offering = Offering::new(
        args.instance_type.clone(),
        args.subnet.clone().unwrap_or_default(),
        false,
    );
    let owner = Ownership::new(
        "preflight",
        "preflight",
        "preflight",
        "orca-operator",
        &args.cluster_name,
    );
    let user_data = "#!/bin/sh\npoweroff\n".into();
    let probe = Probe::new(
        args.image.is_some().then_some(RunRequest::new(
            &launch,
            &offering,
            1,
            "orca-preflight",
            &user_data,
            &owner,
        )),
        id.as_deref(),
        if id.is_some() {
            vec![
                (TAG_CLASS, class.as_str()),
                (TAG_NAMESPACE, namespace.as_str()),
            ]
        } else {
            Vec::new()
        },
        Some(&args.instance_type),
    );
    let mut checks = preflight_aws::ec2_checks(&ec2, &probe).await;
    let tags = [(TAG_CLUSTER, args.cluster_name.as_str())];
    checks.extend(preflight_aws::ssm_checks(&ssm, &args.cluster_name, &tags).await);
    let (text, ok) = report(&checks, &args.cluster_name, &args.region, id.as_deref());
    print!("{text}");
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// What `checks` say, as the command prints it, and whether nothing is
/// missing or unknown.
pub fn report(
    checks: &[Check],
    cluster: &str,
    region: &str,
    instance: Option<&str>,
) -> (String, bool) {
    let mut out = format!(
        "orca-operator preflight: cluster {cluster}, region {region}{}\n",
        instance.map_or(String::new(), |i| format!(", asking about instance {i}"))
    );
    let mut ok = true;
    for c in checks {
        let line = match &c.outcome() {
            Outcome::Allowed => format!("  allowed      {}\n", c.name()),
            Outcome::Missing(why) => {
                ok = false;
                format!("  MISSING      {}: {why}\n", c.name())
            }
            Outcome::Unknown(why) => {
                ok = false;
                format!("  UNKNOWN      {}: {why}\n", c.name())
            }
            Outcome::NotChecked(why) => format!("  not checked  {}: {why}\n", c.name()),
        };
        out.push_str(&line);
    }
    let policy = operator_policy(cluster, &[], true);
    let granting = preflight::granting(checks, &policy);
    if !granting.is_empty() {
        out.push_str(&format!(
            "The statements that grant what is missing (`orca-operator iam-policy --cluster-name {cluster}` prints the whole policy; give it --pass-role and --launch-from-anywhere as you installed it):\n"
        ));
        let statements: Vec<_> = policy
            .statements()
            .iter()
            .filter(|s| granting.contains(&s.sid().to_string()))
            .collect();
        out.push_str(&serde_json::to_string_pretty(&statements).unwrap_or_default());
        out.push('\n');
    }
    (out, ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_names_each_missing_action_and_its_statement() {
        let checks = [
            Check::new("ec2", "DescribeInstances", Outcome::Allowed),
            Check::new(
                "ssm",
                "PutParameter",
                Outcome::Missing("PutParameter: may not".into()),
            ),
            Check::new(
                "ec2",
                "StopInstances",
                Outcome::NotChecked(preflight::NO_INSTANCE),
            ),
        ];
        let (text, ok) = report(&checks, "prod", "eu-west-1", None);
        assert!(!ok);
        assert!(
            text.contains("  MISSING      ssm:PutParameter: PutParameter: may not\n"),
            "{text}"
        );
        assert!(
            text.contains("\"Sid\": \"KeepTheDatabaseUrlParameters\""),
            "{text}"
        );
        assert!(!text.contains("ActOnOwnedInstances"), "{text}");
        let (_, ok) = report(&checks[..1], "prod", "eu-west-1", None);
        assert!(ok);
    }
}
