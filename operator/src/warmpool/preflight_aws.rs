//! The asking of a preflight (see `preflight.rs`): each EC2 action dry
//! run — the launch as given, the calls on an instance on that instance —
//! and, for the command, the SSM calls on a parameter of its own; what
//! each answer says of the credentials.

use aws_sdk_ec2::error::ProvideErrorMetadata;

use super::ec2::{classify, Ec2, Ec2Error};
use super::preflight::{probe_parameter, Check, Outcome, Probe, IGNORES_DRY_RUN, NO_INSTANCE};
use super::ssm::{Ssm, SsmError};

/// The calls asked about one instance.
const ON_INSTANCE: [&str; 5] = [
    "TerminateInstances",
    "StopInstances",
    "StartInstances",
    "GetConsoleOutput",
    "CreateTags",
];

/// Each EC2 action of `probe`, dry run. An endpoint that answers the
/// first dry run as a real call is asked nothing more: it would launch,
/// stop and terminate for real.
pub async fn ec2_checks(ec2: &Ec2, probe: &Probe<'_>) -> Vec<Check> {
    // Behind the fence as every EC2 call is: a replica that lost the
    // Lease asks nothing.
    let Ok(c) = ec2.fenced_client("DescribeInstances") else {
        return none_asked(FENCED);
    };
    let first = c.describe_instances().dry_run(true).send().await;
    if first.is_ok() {
        return none_asked(IGNORES_DRY_RUN);
    }
    let mut checks = vec![ec2_check("DescribeInstances", first)];
    if let Some(instance_type) = probe.describes() {
        checks.push(ec2_check(
            "DescribeInstanceTypes",
            c.describe_instance_types()
                .instance_types(instance_type.into())
                .dry_run(true)
                .send()
                .await,
        ));
        checks.push(ec2_check(
            "DescribeLaunchTemplateVersions",
            c.describe_launch_template_versions()
                .versions("$Latest")
                .dry_run(true)
                .send()
                .await,
        ));
    }
    checks.push(match &probe.launch() {
        Some(req) => ec2_check("RunInstances", ec2.run_call(req).dry_run(true).send().await),
        None => Check::new(
            "ec2",
            "RunInstances",
            Outcome::NotChecked("no launch to try (give --image and --subnet)"),
        ),
    });
    match probe.instance() {
        Some(id) => checks.extend(on_instance(ec2, id, probe.tenancy_tags()).await),
        None => checks.extend(
            ON_INSTANCE
                .into_iter()
                .map(|action| Check::new("ec2", action, Outcome::NotChecked(NO_INSTANCE))),
        ),
    }
    checks
}

/// Why nothing was asked of a replica whose fence has closed.
const FENCED: &str = "this replica no longer leads";

/// Every EC2 action, not asked, for `why`.
fn none_asked(why: &'static str) -> Vec<Check> {
    [
        "DescribeInstances",
        "DescribeInstanceTypes",
        "DescribeLaunchTemplateVersions",
        "RunInstances",
    ]
    .into_iter()
    .chain(ON_INSTANCE)
    .map(|action| Check::new("ec2", action, Outcome::NotChecked(why)))
    .collect()
}

/// The calls on instance `id`, dry run; `CreateTags` with `tenancy_tags`,
/// if any.
async fn on_instance(ec2: &Ec2, id: &str, tenancy_tags: &[(&str, &str)]) -> Vec<Check> {
    let Ok(c) = ec2.fenced_client("TerminateInstances") else {
        return ON_INSTANCE
            .into_iter()
            .map(|action| Check::new("ec2", action, Outcome::NotChecked(FENCED)))
            .collect();
    };
    let ids = Some(vec![id.to_string()]);
    let mut checks = vec![
        ec2_check(
            "TerminateInstances",
            c.terminate_instances()
                .set_instance_ids(ids.clone())
                .dry_run(true)
                .send()
                .await,
        ),
        ec2_check(
            "StopInstances",
            c.stop_instances()
                .set_instance_ids(ids.clone())
                .dry_run(true)
                .send()
                .await,
        ),
        ec2_check(
            "StartInstances",
            c.start_instances()
                .set_instance_ids(ids.clone())
                .dry_run(true)
                .send()
                .await,
        ),
        ec2_check(
            "GetConsoleOutput",
            c.get_console_output()
                .instance_id(id)
                .dry_run(true)
                .send()
                .await,
        ),
    ];
    if !tenancy_tags.is_empty() {
        let tags = tenancy_tags
            .iter()
            .map(|(k, v)| aws_sdk_ec2::types::Tag::builder().key(*k).value(*v).build())
            .collect();
        checks.push(ec2_check(
            "CreateTags",
            c.create_tags()
                .set_resources(ids)
                .set_tags(Some(tags))
                .dry_run(true)
                .send()
                .await,
        ));
    }
    checks
}

/// The check of EC2 action `action` from its dry run's answer.
fn ec2_check<T, E>(
    action: &'static str,
    outcome: Result<T, aws_sdk_ec2::error::SdkError<E>>,
) -> Check
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    Check::new("ec2", action, answer(action, outcome))
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

/// The SSM actions of the database URL's parameter: write
/// ([`probe_parameter`], encrypted as the real ones are), tag, delete.
pub async fn ssm_checks(ssm: &Ssm, cluster: &str, tags: &[(&str, &str)]) -> Vec<Check> {
    let name = probe_parameter(cluster);
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
