//! The notes helm prints after an install: the command that prints the
//! IAM policies names the release's `clusterName`, and prints that
//! cluster's policy.

use clap::Parser;
use orca_operator::iam_policy::{operator_policy, render, IamPolicyArgs};

use super::*;

/// The notes of an install with these `--set` values (a client-side dry
/// run: no cluster needed).
fn notes(sets: &[&str]) -> String {
    let mut cmd = Command::new(helm());
    cmd.current_dir(repo()).args([
        "install",
        RELEASE,
        "charts/orca-operator",
        "--namespace",
        RELEASE_NAMESPACE,
        "--dry-run=client",
    ]);
    for set in sets {
        cmd.args(["--set", set]);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", helm().display()));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "helm install --dry-run {sets:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, notes) = text
        .split_once("\nNOTES:\n")
        .unwrap_or_else(|| panic!("no NOTES in {text}"));
    notes.to_string()
}

#[derive(Parser)]
struct IamPolicy {
    #[command(flatten)]
    args: IamPolicyArgs,
}

#[test]
fn the_notes_print_the_iam_policy_command_for_the_release_cluster() {
    let notes = notes(&["clusterName=notes-test.eu_1"]);
    let commands: Vec<&str> = notes
        .lines()
        .filter_map(|l| l.split_once(" -- /orca-operator iam-policy "))
        .map(|(exec, args)| {
            assert_eq!(
                exec.trim(),
                format!("kubectl -n {RELEASE_NAMESPACE} exec deploy/{FULLNAME}"),
                "{notes}"
            );
            args
        })
        .collect();
    assert_eq!(commands.len(), 2, "{notes}");
    // The operator's, as it stands: the policy of this cluster.
    let args = IamPolicy::try_parse_from(
        std::iter::once("iam-policy").chain(commands[0].split_whitespace()),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", commands[0]))
    .args;
    assert_eq!(
        args.render(),
        render(&operator_policy("notes-test.eu_1", &[], true))
    );
    // The instance role's, for a Scheduler the reader names.
    assert_eq!(
        commands[1],
        "--instance-role --cluster-name notes-test.eu_1 --namespace <namespace> --scheduler <name>"
    );
}
