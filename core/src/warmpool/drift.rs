//! Drift (docs/architecture.md#warmpool-controller-decide): whether an
//! instance was launched from the launch spec the WarmPool has now. Pure.
//!
//! Each instance carries, in the tag `TAG_LAUNCH` (the operator's `warmpool::ec2`), a
//! hash of the launch fields it came from that an instance cannot change
//! once running — the AMI, the launch template and its version, security
//! groups, instance profile, and what its user-data runs (agent path, run
//! command, database file) — and in `TAG_IMAGE` which
//! image that was, for people. An instance whose hash is not the spec's,
//! or whose instance type or subnet the spec no longer lists, has drifted.
//! A hash of a later release's scheme (an instance it launched, met after
//! a rollback to this one) is not known to drift by it
//! ([`crate::spec_hash::same`]).
//!
//! One launched before instances carried the hash (by release 0.1.0 as of
//! d589380) is known to drift by its AMI alone, as EC2 reports it: on a
//! pool that names an `imageId`, another AMI has drifted. Its other fields
//! are not known: it goes by `idleSeconds` and `maxUses` as before.
//!
//! A launch template's version as written (`$Latest`, `$Default`) is in
//! the hash as written; what it resolves to is not. Each pass resolves it
//! (`DescribeLaunchTemplateVersions`), each launch uses and tags the
//! number (`TAG_TEMPLATE_VERSION`), and an instance
//! tagged with another number than the one the template resolves to now
//! has drifted: a new version published under `$Latest` (or made the
//! default) replaces the pool's instances, within the disruption budget
//! and the maintenance windows, as any drift does.

use super::instance::Ec2Instance;
use crate::crd::{Launch, WarmPoolSpec};

/// The hash of `launch`'s fields that make an instance what it is: 12 hex
/// digits, the same across releases ([`crate::spec_hash`]).
pub fn launch_hash(launch: &Launch) -> String {
    crate::spec_hash::hex_of(launch_fields(launch), 6)
}

/// What [`launch_hash`] hashes.
pub fn launch_fields(launch: &Launch) -> serde_json::Value {
    let mut groups = launch.security_group_ids.clone();
    groups.sort();
    serde_json::json!({
        "launchTemplate": launch.launch_template,
        "imageId": launch.image_id,
        "securityGroupIds": groups,
        "iamInstanceProfile": launch.iam_instance_profile,
        "agentPath": launch.agent_path,
        "runCommand": launch.run_command,
        "databaseUrlFile": launch.database_url_file,
    })
}

/// Which image `launch` launches, for people: the AMI, or the launch
/// template and its version.
pub fn image_label(launch: &Launch) -> String {
    match (&launch.image_id, &launch.launch_template) {
        (Some(image), _) => image.clone(),
        (None, Some(t)) => format!(
            "{}:{}",
            t.id.as_deref().or(t.name.as_deref()).unwrap_or("template"),
            t.version.as_deref().unwrap_or("$Default")
        ),
        (None, None) => "template".into(),
    }
}

/// Whether instance `i` has drifted from `spec`, whose launch hash is
/// `hash` ([`launch_hash`]) and whose launch template's version resolves
/// to `template_version` now (if known).
pub fn drifted(
    spec: &WarmPoolSpec,
    hash: &str,
    template_version: Option<&str>,
    i: &Ec2Instance,
) -> bool {
    let launch = &spec.launch;
    let spec_changed = match (&i.launch(), &launch.image_id) {
        // A later release's scheme (met after a rollback): not known.
        (Some(h), _) => crate::spec_hash::same(h, hash) == Some(false),
        // From before the hash: its AMI ([`Ec2Instance::image`]) alone.
        (None, Some(ami)) => i.image().is_some_and(|a| a != ami),
        (None, None) => false,
    };
    // Known on both sides only: an instance launched before the tag, or a
    // version that could not be resolved, is not known to drift.
    let version_changed = launch.launch_template.is_some()
        && matches!((i.template_version(), template_version), (Some(a), Some(b)) if a != b);
    // An empty type or subnet is the launch template's: not known.
    let type_gone = !launch.instance_types.is_empty()
        && !i.offering().instance_type().is_empty()
        && !launch
            .instance_types
            .iter()
            .any(|t| t == i.offering().instance_type());
    let subnet_gone = !launch.subnet_ids.is_empty()
        && !i.offering().subnet().is_empty()
        && !launch.subnet_ids.iter().any(|s| s == i.offering().subnet());
    spec_changed || version_changed || type_gone || subnet_gone
}

/// Whether `new` moves a pool away from where `old` ran it: another
/// Scheduler, region or EC2 endpoint, where its listing no longer sees the
/// instances of the old one.
pub fn moved(old: &WarmPoolSpec, new: &WarmPoolSpec) -> bool {
    old.scheduler != new.scheduler || old.region != new.region || old.endpoint != new.endpoint
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::warmpool::plan::{Ec2State, Offering};

    fn inst(launch: Option<&str>, t: &str, subnet: &str) -> Ec2Instance {
        Ec2Instance::bare("i-1", Ec2State::Running, Utc::now())
            .with_offering(Offering::new(t.into(), subnet.into(), false))
            .with_launch(launch.map(String::from))
    }

    #[test]
    fn what_drifts() {
        let spec = crate::test_support::pool_spec(1, 1, 3);
        let hash = launch_hash(&spec.launch);
        let mut other = spec.launch.clone();
        other.image_id = Some("ami-2".into());
        assert_ne!(launch_hash(&other), hash, "another AMI");
        let mut same = spec.launch.clone();
        same.tags.insert("team".into(), "data".into());
        same.instance_types.reverse();
        assert_eq!(
            launch_hash(&same),
            hash,
            "tags and the types' order change no instance"
        );
        let cases = [
            (
                "up to date",
                inst(Some(&hash), "t3.small", "subnet-a"),
                false,
            ),
            (
                "another launch spec",
                inst(Some("0123456789ab"), "t3.small", "subnet-a"),
                true,
            ),
            (
                "launched before the hash",
                inst(None, "t3.small", "subnet-a"),
                false,
            ),
            (
                "a type no longer listed",
                inst(Some(&hash), "m5.large", "subnet-a"),
                true,
            ),
            (
                "a subnet no longer listed",
                inst(Some(&hash), "t3.small", "subnet-z"),
                true,
            ),
            ("the template's type", inst(Some(&hash), "", ""), false),
            (
                "launched before the hash, from the spec's AMI",
                inst(None, "t3.small", "subnet-a").with_image(spec.launch.image_id.clone()),
                false,
            ),
            (
                "launched before the hash, from another AMI",
                inst(None, "t3.small", "subnet-a").with_image(Some("ami-older".into())),
                true,
            ),
            (
                "tagged by a later release's scheme",
                inst(Some(&format!("{hash}-s2")), "t3.small", "subnet-a"),
                false,
            ),
        ];
        for (what, i, want) in cases {
            assert_eq!(drifted(&spec, &hash, None, &i), want, "{what}");
        }
        // On a launch template, such an instance's AMI says nothing.
        let mut templated = spec.clone();
        templated.launch.image_id = None;
        let older = inst(None, "t3.small", "subnet-a").with_image(Some("ami-older".into()));
        assert!(!drifted(&templated, &hash, None, &older));
    }

    #[test]
    fn a_template_version_drifts_when_the_template_resolves_to_another() {
        let mut spec = crate::test_support::pool_spec(1, 1, 3);
        spec.launch.image_id = None;
        spec.launch.launch_template = Some(crate::crd::LaunchTemplateRef {
            id: Some("lt-1".into()),
            name: None,
            version: Some("$Latest".into()),
        });
        let hash = launch_hash(&spec.launch);
        let at = |version: Option<&str>| {
            inst(Some(&hash), "t3.small", "subnet-a")
                .with_template_version(version.map(String::from))
        };
        let cases = [
            (
                "the version it resolves to",
                at(Some("4")),
                Some("4"),
                false,
            ),
            ("a version published since", at(Some("4")), Some("5"), true),
            ("launched before the tag", at(None), Some("5"), false),
            ("not resolved this pass", at(Some("4")), None, false),
        ];
        for (what, i, now, want) in cases {
            assert_eq!(drifted(&spec, &hash, now, &i), want, "{what}");
        }
        // Without a template the tag means nothing.
        let plain = crate::test_support::pool_spec(1, 1, 3);
        let hash = launch_hash(&plain.launch);
        let i = inst(Some(&hash), "t3.small", "subnet-a").with_template_version(Some("4".into()));
        assert!(!drifted(&plain, &hash, Some("5"), &i));
    }

    #[test]
    fn the_image_says_which() {
        let spec = crate::test_support::pool_spec(1, 1, 3);
        assert_eq!(image_label(&spec.launch), "ami-1");
        let mut t = spec.launch.clone();
        t.image_id = None;
        t.launch_template = Some(crate::crd::LaunchTemplateRef {
            id: Some("lt-1".into()),
            name: None,
            version: Some("4".into()),
        });
        assert_eq!(image_label(&t), "lt-1:4");
    }

    #[test]
    fn a_move_is_another_scheduler_region_or_endpoint() {
        let spec: WarmPoolSpec = serde_json::from_value(serde_json::json!({
            "scheduler": "orca", "region": "us-east-1", "idle": {"min": 1, "max": 1},
            "maxInstances": 3, "launch": {"imageId": "ami-1", "instanceTypes": ["t3.micro"],
            "subnetIds": ["subnet-a"], "runCommand": "true"}
        }))
        .unwrap();
        let same = WarmPoolSpec {
            idle: crate::crd::IdleRange { min: 2, max: 2 },
            ..spec.clone()
        };
        assert!(!moved(&spec, &same));
        for other in [
            WarmPoolSpec {
                scheduler: "other".into(),
                ..spec.clone()
            },
            WarmPoolSpec {
                region: "eu-west-1".into(),
                ..spec.clone()
            },
            WarmPoolSpec {
                endpoint: Some("http://moto".into()),
                ..spec.clone()
            },
        ] {
            assert!(moved(&spec, &other));
        }
    }
}
