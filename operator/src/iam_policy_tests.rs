//! The rendered policies, held to what they are for: each request one
//! cluster's operator (or instance) makes is allowed, and the same request
//! about another cluster's instances or parameters is not. A small
//! evaluator of the condition operators the policies use stands in for
//! IAM; the linter (`tests/tests/iam_policy.rs`) checks the keys and
//! actions against AWS's own lists.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::iam_policy::*;
use crate::warmpool::ssm::parameter_name;
use crate::warmpool::tags::{
    TAG_CLASS, TAG_CLUSTER, TAG_NAMESPACE, TAG_OPERATOR, TAG_POOL, TAG_SCHEDULER,
};

/// One request as IAM sees it: the action, the resource and the context's
/// keys (`aws:TagKeys` may have several values).
struct Request {
    action: &'static str,
    resource: String,
    context: BTreeMap<String, Vec<String>>,
}

fn request(action: &'static str, resource: &str) -> Request {
    Request {
        action,
        resource: resource.to_string(),
        context: BTreeMap::new(),
    }
}

impl Request {
    fn with(mut self, key: impl Into<String>, values: &[&str]) -> Self {
        self.context
            .insert(key.into(), values.iter().map(|v| v.to_string()).collect());
        self
    }

    /// The ownership tags an instance of `cluster` carries (or the request
    /// sets, with `prefix` `aws:RequestTag/`).
    fn owned(self, prefix: &str, cluster: Option<&str>) -> Self {
        let mut r = self
            .with(format!("{prefix}{TAG_POOL}"), &["team/pool"])
            .with(format!("{prefix}{TAG_SCHEDULER}"), &["team/morca"])
            .with(format!("{prefix}{TAG_OPERATOR}"), &["orca-operator"]);
        if let Some(c) = cluster {
            r = r.with(format!("{prefix}{TAG_CLUSTER}"), &[c]);
        }
        r
    }
}

/// IAM's wildcard match: `*` any run of characters ('/' too), `?` one.
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // matched[j]: the pattern so far matches text[..j].
    let mut matched = vec![false; t.len() + 1];
    matched[0] = true;
    for &pc in &p {
        let mut next = vec![false; t.len() + 1];
        for j in 0..=t.len() {
            next[j] = match pc {
                '*' => matched[j] || (j > 0 && next[j - 1]),
                '?' => j > 0 && matched[j - 1],
                c => j > 0 && matched[j - 1] && t[j - 1] == c,
            };
        }
        matched = next;
    }
    matched[t.len()]
}

fn values(v: &Value) -> Vec<&str> {
    match v {
        Value::String(s) => vec![s.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        other => panic!("a condition value is a string or a list: {other}"),
    }
}

/// Whether every condition of `statement` holds for `req`.
fn conditions_hold(statement: &Statement, req: &Request) -> bool {
    statement.conditions.iter().all(|(operator, keys)| {
        keys.iter().all(|(key, want)| {
            let want = values(want);
            let have = req.context.get(key);
            match *operator {
                "StringEquals" => {
                    have.is_some_and(|h| h.iter().any(|v| want.contains(&v.as_str())))
                }
                "StringLike" => {
                    have.is_some_and(|h| h.iter().any(|v| want.iter().any(|w| glob(w, v))))
                }
                "Null" => (want == ["true"]) == have.is_none(),
                "ForAllValues:StringEquals" => {
                    have.is_none_or(|h| h.iter().all(|v| want.contains(&v.as_str())))
                }
                other => panic!("the evaluator does not know {other}: teach it"),
            }
        })
    })
}

/// Whether `policy` allows `req` (it has no Deny).
fn allows(policy: &Policy, req: &Request) -> bool {
    policy.statements.iter().any(|s| {
        s.effect == "Allow"
            && s.actions.contains(&req.action)
            && s.resources.iter().any(|r| glob(r, &req.resource))
            && conditions_hold(s, req)
    })
}

const INSTANCE: &str = "arn:aws:ec2:eu-west-1:111122223333:instance/i-0123456789abcdef0";

fn blue() -> Policy {
    operator_policy("blue", &[], true)
}

#[test]
fn the_operator_acts_only_on_its_own_clusters_instances() {
    for action in [
        "ec2:TerminateInstances",
        "ec2:StopInstances",
        "ec2:StartInstances",
        "ec2:GetConsoleOutput",
    ] {
        let own = request(action, INSTANCE).owned("aws:ResourceTag/", Some("blue"));
        assert!(allows(&blue(), &own), "{action} on its own");
        let other = request(action, INSTANCE).owned("aws:ResourceTag/", Some("green"));
        assert!(!allows(&blue(), &other), "{action} on another cluster's");
        // A prefix of the name is another name.
        let longer = request(action, INSTANCE).owned("aws:ResourceTag/", Some("blue-2"));
        assert!(!allows(&blue(), &longer), "{action} on blue-2's");
        let unclaimed = request(action, INSTANCE).owned("aws:ResourceTag/", None);
        assert!(
            !allows(&blue(), &unclaimed),
            "{action} on one no cluster claimed"
        );
        let foreign =
            request(action, INSTANCE).with(format!("aws:ResourceTag/{TAG_CLUSTER}"), &["blue"]);
        assert!(
            !allows(&blue(), &foreign),
            "{action} on one without a pool's tags"
        );
    }
}

#[test]
fn a_launch_needs_this_clusters_name_and_the_other_ownership_tags() {
    let launch = || request("ec2:RunInstances", INSTANCE);
    assert!(allows(
        &blue(),
        &launch().owned("aws:RequestTag/", Some("blue"))
    ));
    assert!(!allows(
        &blue(),
        &launch().owned("aws:RequestTag/", Some("green"))
    ));
    assert!(!allows(&blue(), &launch().owned("aws:RequestTag/", None)));
    for tag in [TAG_POOL, TAG_SCHEDULER, TAG_OPERATOR] {
        let mut r = launch().owned("aws:RequestTag/", Some("blue"));
        r.context.remove(&format!("aws:RequestTag/{tag}"));
        assert!(!allows(&blue(), &r), "launched without {tag}");
        let empty = launch()
            .owned("aws:RequestTag/", Some("blue"))
            .with(format!("aws:RequestTag/{tag}"), &[""]);
        assert!(!allows(&blue(), &empty), "launched with an empty {tag}");
    }
    // What it launches from carries no tags of the request; a spot request
    // neither (the operator tags the instance alone). The network and the
    // template are held to the platform team's tag (see
    // launches_go_only_into_the_network_tagged_for_this_cluster).
    for from in [
        "arn:aws:ec2:eu-west-1::image/ami-0123",
        "arn:aws:ec2:eu-west-1:111122223333:network-interface/eni-1",
        "arn:aws:ec2:eu-west-1:111122223333:volume/vol-1",
        "arn:aws:ec2:eu-west-1:111122223333:spot-instances-request/sir-1",
    ] {
        assert!(
            allows(&blue(), &request("ec2:RunInstances", from)),
            "{from}"
        );
    }
}

#[test]
fn tags_at_launch_only_with_this_clusters_name() {
    let tag = |cluster: &str| {
        request("ec2:CreateTags", INSTANCE)
            .with("ec2:CreateAction", &["RunInstances"])
            .owned("aws:RequestTag/", Some(cluster))
            .with(
                "aws:TagKeys",
                &[TAG_POOL, TAG_SCHEDULER, TAG_OPERATOR, TAG_CLUSTER],
            )
    };
    assert!(allows(&blue(), &tag("blue")));
    assert!(!allows(&blue(), &tag("green")));
}

#[test]
fn adoption_only_of_an_unclaimed_instance_and_only_with_this_clusters_name() {
    let adopt = |claimed: Option<&str>, name: &str, keys: &[&str]| {
        request("ec2:CreateTags", INSTANCE)
            .owned("aws:ResourceTag/", claimed)
            .with(format!("aws:RequestTag/{TAG_CLUSTER}"), &[name])
            .with("aws:TagKeys", keys)
    };
    assert!(allows(&blue(), &adopt(None, "blue", &[TAG_CLUSTER])));
    // Another cluster's instance is not taken over, nor is one renamed.
    assert!(!allows(
        &blue(),
        &adopt(Some("green"), "blue", &[TAG_CLUSTER])
    ));
    assert!(!allows(
        &blue(),
        &adopt(Some("blue"), "blue", &[TAG_CLUSTER])
    ));
    // Only this cluster's name, and no other tag.
    assert!(!allows(&blue(), &adopt(None, "green", &[TAG_CLUSTER])));
    assert!(!allows(
        &blue(),
        &adopt(None, "blue", &[TAG_CLUSTER, "Name"])
    ));
    // Not an instance that is no pool's.
    let stray = request("ec2:CreateTags", INSTANCE)
        .with(format!("aws:RequestTag/{TAG_CLUSTER}"), &["blue"])
        .with("aws:TagKeys", &[TAG_CLUSTER]);
    assert!(!allows(&blue(), &stray));
}

#[test]
fn only_the_roles_named_are_passed_and_only_to_ec2() {
    let pass =
        |role: &str, to: &str| request("iam:PassRole", role).with("iam:PassedToService", &[to]);
    // By default, this cluster's roles: those under /orca/blue/.
    let pool_role = "arn:aws:iam::111122223333:role/orca/blue/orca-pool-team-a";
    assert!(allows(&blue(), &pass(pool_role, "ec2.amazonaws.com")));
    assert!(!allows(&blue(), &pass(pool_role, "lambda.amazonaws.com")));
    for theirs in [
        "arn:aws:iam::111122223333:role/admin",
        "arn:aws:iam::111122223333:role/orca-pool-team-a",
        "arn:aws:iam::111122223333:role/orca/green/orca-pool-team-a",
        "arn:aws:iam::111122223333:role/orca/blue-2/orca-pool-team-a",
    ] {
        assert!(
            !allows(&blue(), &pass(theirs, "ec2.amazonaws.com")),
            "{theirs}"
        );
    }
    let pool_role = "arn:aws:iam::111122223333:role/orca-pool-blue";
    let named = operator_policy("blue", &[pool_role.to_string()], true);
    assert!(allows(&named, &pass(pool_role, "ec2.amazonaws.com")));
    let other = "arn:aws:iam::111122223333:role/orca-pool-green";
    assert!(!allows(&named, &pass(other, "ec2.amazonaws.com")));
}

fn parameter(name: &str) -> String {
    format!("arn:aws:ssm:eu-west-1:111122223333:parameter{name}")
}

#[test]
fn the_operator_keeps_parameters_only_under_its_clusters_path() {
    let own = parameter(&parameter_name("blue", "team", "morca"));
    for action in [
        "ssm:PutParameter",
        "ssm:DeleteParameter",
        "ssm:AddTagsToResource",
    ] {
        assert!(allows(&blue(), &request(action, &own)), "{action}");
        for other in [
            parameter_name("green", "team", "morca"),
            parameter_name("blue-2", "team", "morca"),
            "/orca/blue".to_string(),
            "/orca/other".to_string(),
        ] {
            assert!(
                !allows(&blue(), &request(action, &parameter(&other))),
                "{action} {other}"
            );
        }
    }
    // The path is the names' own.
    assert!(
        own.contains(&format!("parameter{}/", parameter_path("blue"))),
        "{own}"
    );
    // It never reads a value back, nor lists them.
    assert!(!allows(&blue(), &request("ssm:GetParameter", &own)));
    let list = request("ssm:GetParametersByPath", &parameter("/orca/blue"));
    assert!(!allows(&blue(), &list));
}

/// A KMS call SSM makes for a parameter: through `service`, for `name`.
fn via(action: &'static str, service: &str, name: &str) -> Request {
    request(action, "arn:aws:kms:eu-west-1:111122223333:key/1234abcd")
        .with("kms:ViaService", &[service])
        .with("kms:EncryptionContext:PARAMETER_ARN", &[&parameter(name)])
}

#[test]
fn keys_are_used_only_through_ssm_for_this_clusters_parameters() {
    let own = parameter_name("blue", "team", "morca");
    let ssm = "ssm.eu-west-1.amazonaws.com";
    assert!(allows(&blue(), &via("kms:Encrypt", ssm, &own)));
    assert!(!allows(
        &blue(),
        &via("kms:Encrypt", "s3.eu-west-1.amazonaws.com", &own)
    ));
    let theirs = parameter_name("green", "team", "morca");
    assert!(!allows(&blue(), &via("kms:Encrypt", ssm, &theirs)));
    assert!(!allows(&blue(), &via("kms:Decrypt", ssm, &own)));
    let direct = request(
        "kms:Encrypt",
        "arn:aws:kms:eu-west-1:111122223333:key/1234abcd",
    );
    assert!(!allows(&blue(), &direct));
}

#[test]
fn an_instance_reads_its_schedulers_url_only() {
    let one = instance_policy("blue", Reads::Scheduler("team", "morca"));
    let all = instance_policy("blue", Reads::Cluster);
    let get = |c: &str, ns: &str, s: &str| {
        request("ssm:GetParameter", &parameter(&parameter_name(c, ns, s)))
    };
    assert!(allows(&one, &get("blue", "team", "morca")));
    assert!(!allows(&one, &get("blue", "team", "other")));
    assert!(!allows(&one, &get("blue", "other", "morca")));
    assert!(!allows(&one, &get("green", "team", "morca")));
    assert!(allows(&all, &get("blue", "other", "other")));
    assert!(!allows(&all, &get("green", "team", "morca")));
    assert!(!allows(&all, &get("blue-2", "team", "morca")));
    let ssm = "ssm.eu-west-1.amazonaws.com";
    let own = parameter_name("blue", "team", "morca");
    for policy in [&one, &all] {
        assert!(allows(policy, &via("kms:Decrypt", ssm, &own)));
        let theirs = parameter_name("green", "team", "morca");
        assert!(!allows(policy, &via("kms:Decrypt", ssm, &theirs)));
        assert!(!allows(
            policy,
            &via("kms:Decrypt", "s3.eu-west-1.amazonaws.com", &own)
        ));
        // Another Scheduler's of the same cluster: only with the cluster's
        // policy.
        let sibling = parameter_name("blue", "team", "other");
        let decrypts = allows(policy, &via("kms:Decrypt", ssm, &sibling));
        assert_eq!(decrypts, std::ptr::eq(policy, &all), "{sibling}");
        // Nothing of EC2, nothing written.
        assert!(!allows(
            policy,
            &request("ssm:PutParameter", &parameter(&own))
        ));
        assert!(policy
            .statements
            .iter()
            .all(|s| s.actions.iter().all(|a| !a.starts_with("ec2:"))));
    }
}

#[test]
fn statements_are_named_once_each_in_camel_case() {
    for policy in [
        blue(),
        operator_policy(
            "blue",
            &["arn:aws:iam::111122223333:role/x".to_string()],
            true,
        ),
        operator_policy("blue", &[], false),
        instance_policy("blue", Reads::Cluster),
        instance_policy("blue", Reads::Namespace("team")),
        instance_policy("blue", Reads::Scheduler("team", "morca")),
    ] {
        let mut sids: Vec<&str> = policy.statements.iter().map(|s| s.sid).collect();
        assert!(sids
            .iter()
            .all(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric())));
        sids.sort();
        let before = sids.len();
        sids.dedup();
        assert_eq!(sids.len(), before, "a Sid twice");
        assert_eq!(policy.version, "2012-10-17");
    }
}

#[test]
fn rendered_as_pretty_json_with_a_final_newline_the_same_every_time() {
    let text = render(&blue());
    assert_eq!(text, render(&blue()));
    assert!(text.ends_with("}\n") && !text.ends_with("\n\n"), "{text}");
    assert!(text.starts_with(
        "{\n  \"Version\": \"2012-10-17\",\n  \"Statement\": [\n    {\n      \"Sid\""
    ));
    let parsed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        parsed["Statement"].as_array().unwrap().len(),
        blue().statements.len()
    );
    // Statements without conditions have no Condition at all.
    assert!(parsed["Statement"][0].get("Condition").is_none());
}

#[test]
fn the_args_render_the_policy_they_name() {
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: IamPolicyArgs,
    }
    // The arguments, split at spaces.
    let parse = |argv: &str| {
        Cli::try_parse_from(std::iter::once("iam-policy").chain(argv.split_whitespace()))
            .map(|c| c.args)
    };
    let role = "arn:aws:iam::111122223333:role/orca-pool-blue";
    let named = operator_policy("blue", &[role.to_string()], true);
    let one = instance_policy("blue", Reads::Scheduler("team", "morca"));
    for (argv, policy) in [
        (format!("--cluster-name blue --pass-role {role}"), &named),
        ("--cluster-name blue".to_string(), &blue()),
        (
            "--cluster-name blue --launch-from-anywhere".to_string(),
            &operator_policy("blue", &[], false),
        ),
        (
            "--instance-role --cluster-name blue".to_string(),
            &instance_policy("blue", Reads::Cluster),
        ),
        (
            "--instance-role --cluster-name blue --namespace team".to_string(),
            &instance_policy("blue", Reads::Namespace("team")),
        ),
        (
            "--instance-role --cluster-name blue --namespace team --scheduler morca".to_string(),
            &one,
        ),
    ] {
        let args = parse(&argv).unwrap_or_else(|e| panic!("{argv}: {e}"));
        assert_eq!(args.render(), render(policy), "{argv}");
    }

    // Refused: each with what is wrong.
    let instance = "--instance-role --cluster-name blue";
    for (argv, said) in [
        ("--cluster-name a/b".to_string(), "is not a cluster name"),
        (
            format!("--cluster-name {}", "x".repeat(64)),
            "is not a cluster name",
        ),
        (
            "--cluster-name blue --pass-role orca-pool-blue".to_string(),
            "is not an IAM role ARN",
        ),
        (
            "--cluster-name blue --pass-role arn:aws:iam::1234:role/x".to_string(),
            "is not an IAM role ARN",
        ),
        (
            "--cluster-name blue --pass-role arn:aws:iam::111122223333:user/x".to_string(),
            "is not an IAM role ARN",
        ),
        (
            format!("{instance} --namespace Team --scheduler s"),
            "is not a namespace",
        ),
        (
            format!("{instance} --namespace team --scheduler S_1"),
            "is not a Scheduler's name",
        ),
        (format!("{instance} --scheduler morca"), "--namespace"),
        (
            "--cluster-name blue --namespace team --scheduler s".to_string(),
            "--instance-role",
        ),
        (
            format!("{instance} --pass-role {role}"),
            "cannot be used with",
        ),
    ] {
        let e = parse(&argv)
            .err()
            .unwrap_or_else(|| panic!("{argv} was taken"));
        assert!(e.to_string().contains(said), "{argv}: {e}");
    }
    // A role ARN with a path, or a pattern, is one.
    for ok in [
        "arn:aws:iam::111122223333:role/pools/orca-pool-blue",
        "arn:aws:iam::*:role/orca-pool-*",
    ] {
        assert!(
            parse(&format!("--cluster-name blue --pass-role {ok}")).is_ok(),
            "{ok}"
        );
    }
}

#[test]
fn a_team_role_reads_its_namespaces_urls_and_no_other_teams() {
    let team_a = instance_policy("blue", Reads::Namespace("team-a"));
    let get = |c: &str, ns: &str, s: &str| {
        request("ssm:GetParameter", &parameter(&parameter_name(c, ns, s)))
    };
    assert!(allows(&team_a, &get("blue", "team-a", "orca")));
    assert!(allows(&team_a, &get("blue", "team-a", "another")));
    for (c, ns) in [
        ("blue", "team-b"),
        ("blue", "team-a-2"),
        ("green", "team-a"),
    ] {
        assert!(!allows(&team_a, &get(c, ns, "orca")), "{c}/{ns}");
    }
    let ssm = "ssm.eu-west-1.amazonaws.com";
    assert!(allows(
        &team_a,
        &via(
            "kms:Decrypt",
            ssm,
            &parameter_name("blue", "team-a", "orca")
        )
    ));
    assert!(!allows(
        &team_a,
        &via(
            "kms:Decrypt",
            ssm,
            &parameter_name("blue", "team-b", "orca")
        )
    ));
}

#[test]
fn launches_go_only_into_the_network_tagged_for_this_cluster() {
    let into = |kind: &str, tag: Option<&str>| {
        let r = request(
            "ec2:RunInstances",
            &format!("arn:aws:ec2:eu-west-1:111122223333:{kind}/x-1"),
        );
        match tag {
            Some(t) => r.with(format!("aws:ResourceTag/{t}"), &["yes"]),
            None => r,
        }
    };
    for kind in ["subnet", "security-group", "launch-template"] {
        assert!(
            allows(&blue(), &into(kind, Some(&launch_from_tag("blue")))),
            "{kind}"
        );
        assert!(!allows(&blue(), &into(kind, None)), "{kind} untagged");
        assert!(
            !allows(&blue(), &into(kind, Some(&launch_from_tag("green")))),
            "{kind} tagged for another cluster"
        );
        assert!(
            !allows(&blue(), &into(kind, Some(&launch_from_tag("blue-2")))),
            "{kind} tagged for a cluster whose name starts with this one's"
        );
        let anywhere = operator_policy("blue", &[], false);
        assert!(allows(&anywhere, &into(kind, None)), "{kind} anywhere");
    }
    // What the launch makes beside the instance, and the image: any.
    for arn in [
        "arn:aws:ec2:eu-west-1::image/ami-1",
        "arn:aws:ec2:eu-west-1:111122223333:network-interface/eni-1",
        "arn:aws:ec2:eu-west-1:111122223333:volume/vol-1",
    ] {
        let r = request("ec2:RunInstances", arn);
        assert!(allows(&blue(), &r), "{arn}");
    }
}

#[test]
fn the_operator_adds_only_the_class_and_namespace_tags_and_only_to_its_own_instances() {
    let tag = |cluster: &str, keys: &[&str]| {
        request("ec2:CreateTags", INSTANCE)
            .owned("aws:ResourceTag/", Some(cluster))
            .with("aws:TagKeys", keys)
    };
    assert!(allows(&blue(), &tag("blue", &[TAG_CLASS, TAG_NAMESPACE])));
    assert!(allows(&blue(), &tag("blue", &[TAG_CLASS])));
    assert!(!allows(&blue(), &tag("green", &[TAG_CLASS])));
    assert!(!allows(&blue(), &tag("blue", &[TAG_CLASS, TAG_POOL])));
    assert!(!allows(&blue(), &tag("blue", &["Name"])));
}

#[test]
fn the_glob_matches_as_iam_does() {
    assert!(glob("a*c", "abbc") && glob("a*c", "ac") && glob("a*", "a/b/c"));
    assert!(glob("?*", "x") && !glob("?*", ""));
    assert!(!glob("a*c", "abd") && !glob("abc", "abcd"));
}

/// The previous release's operator (before classes and the parameter
/// store) runs under this release's policy, so that the policy can be
/// applied before the upgrade and serve both while they overlap: every
/// request that operator makes is allowed once its pools' roles are named
/// with `--pass-role` (its docs made them `orca-pool-*`, outside this
/// cluster's path) and its network carries the launch-from tag — and
/// refused without either, which is why the upgrade's order says so.
#[test]
fn the_previous_releases_requests_are_allowed_so_the_policy_can_go_first() {
    let old_roles = operator_policy("blue", &["arn:aws:iam::*:role/orca-pool-*".into()], true);
    let tagged = |kind: &str| {
        request(
            "ec2:RunInstances",
            &format!("arn:aws:ec2:eu-west-1:111122223333:{kind}/x-1"),
        )
        .with(
            format!("aws:ResourceTag/{}", launch_from_tag("blue")),
            &["yes"],
        )
    };
    let mut previous = vec![
        request("ec2:DescribeInstances", "*"),
        request("ec2:RunInstances", INSTANCE).owned("aws:RequestTag/", Some("blue")),
        request(
            "ec2:RunInstances",
            "arn:aws:ec2:eu-west-1:111122223333:spot-instances-request/sir-1",
        ),
        request("ec2:RunInstances", "arn:aws:ec2:eu-west-1::image/ami-1"),
        request(
            "ec2:RunInstances",
            "arn:aws:ec2:eu-west-1:111122223333:network-interface/eni-1",
        ),
        request(
            "ec2:RunInstances",
            "arn:aws:ec2:eu-west-1:111122223333:volume/vol-1",
        ),
        tagged("subnet"),
        tagged("security-group"),
        tagged("launch-template"),
        request("ec2:CreateTags", INSTANCE)
            .with("ec2:CreateAction", &["RunInstances"])
            .owned("aws:RequestTag/", Some("blue"))
            .with(
                "aws:TagKeys",
                &[TAG_POOL, TAG_SCHEDULER, TAG_OPERATOR, TAG_CLUSTER],
            ),
        // Its one-time adoption of the release before it.
        request("ec2:CreateTags", INSTANCE)
            .owned("aws:ResourceTag/", None)
            .with(format!("aws:RequestTag/{TAG_CLUSTER}"), &["blue"])
            .with("aws:TagKeys", &[TAG_CLUSTER]),
        request(
            "iam:PassRole",
            "arn:aws:iam::111122223333:role/orca-pool-team-a",
        )
        .with("iam:PassedToService", &["ec2.amazonaws.com"]),
    ];
    for action in [
        "ec2:TerminateInstances",
        "ec2:StopInstances",
        "ec2:StartInstances",
        "ec2:GetConsoleOutput",
    ] {
        previous.push(request(action, INSTANCE).owned("aws:ResourceTag/", Some("blue")));
    }
    for r in &previous {
        assert!(
            allows(&old_roles, r),
            "{} on {} refused",
            r.action,
            r.resource
        );
    }
    // Without --pass-role its roles are not passed; untagged, its network
    // is not launched into.
    let pass = previous.iter().find(|r| r.action == "iam:PassRole");
    assert!(!allows(&blue(), pass.unwrap()));
    let untagged = request(
        "ec2:RunInstances",
        "arn:aws:ec2:eu-west-1:111122223333:subnet/x-1",
    );
    assert!(!allows(&old_roles, &untagged));
}
