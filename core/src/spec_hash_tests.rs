//! Golden values of the hashes that must not change across releases
//! ([`crate::spec_hash`]): the revision of a corpus of Scheduler specs and
//! the launch hash of a corpus of WarmPool launch specs, as release 0.1.0
//! made them. A change here rolls every Scheduler, or replaces every
//! instance, of a user who upgrades: a test that fails here is a change
//! to undo, or a new scheme to introduce as `spec_hash` says.

use serde_json::{json, Value};

use super::{hex_of, same, scheme_of};
use crate::{
    crd::{Launch, SchedulerSpec},
    scheduler::{register_hash, revision_fields, revision_of},
    warmpool::drift::{launch_fields, launch_hash},
};

/// Scheduler specs (YAML) and the revision each has had since 0.1.0.
const SCHEDULERS: &[(&str, &str)] = &[
    (
        "image: registry.example.com/orca:v1\ndatabase: {urlSecretRef: {name: db, key: url}}",
        "14d27d4c6a",
    ),
    (
        "image: registry.example.com/morca/orca:v1\ncommand: [orca-sim, scheduler]\nargs: [--tick-ms, '500']\n\
         database: {urlSecretRef: {name: orca-db, key: url}}\nregister: {command: [sh, -c], args: [echo registered]}\n\
         handover: {joinTimeoutSeconds: 120, staleSeconds: 10}",
        "d41fe45aa6",
    ),
    (
        "image: orca:v2\nenv: [{name: RUST_LOG, value: info}, {name: TOKEN, valueFrom: {secretKeyRef: {name: t, key: k}}}]\n\
         resources: {requests: {cpu: 100m, memory: 128Mi}, limits: {memory: 1Gi}}\noverlap: false\n\
         database: {urlSecretRef: {name: db, key: url}}",
        "2a26afe38d",
    ),
    (
        "image: orca:v3\ndatabase: {urlSecretRef: {name: db, key: url}}\npodTemplate:\n  labels: {team: ci}\n\
         \x20 nodeSelector: {pool: orca}\n  tolerations: [{key: dedicated, operator: Equal, value: orca, effect: NoSchedule}]\n\
         \x20 serviceAccountName: orca\n  priorityClassName: high\n  securityContext: {runAsNonRoot: true, runAsUser: 1000}",
        "059a195ab4",
    ),
];

/// WarmPool launch specs (YAML) and the launch hash each has had since 0.1.0.
const LAUNCHES: &[(&str, &str)] = &[
    (
        "imageId: ami-0123456789abcdef0\ninstanceTypes: [m6i.large, m5.large]\nsubnetIds: [subnet-1]\n\
         securityGroupIds: [sg-2, sg-1]\nrunCommand: echo run\ndatabaseUrlFile: /etc/orca/database-url",
        "a4330fbb5ec9",
    ),
    (
        "launchTemplate: {id: lt-0abc, version: $Latest}\nrunCommand: run",
        "645dae89cb2c",
    ),
    (
        "launchTemplate: {name: orca-runners}\ninstanceTypes: [t3.small]\nsubnetIds: [subnet-a, subnet-b]\n\
         iamInstanceProfile: arn:aws:iam::111122223333:instance-profile/orca\nagentPath: /opt/orca/agent\n\
         runCommand: /opt/orca/run\ntags: {team: data}",
        "27f2144bd23d",
    ),
];

/// Scheme 1 as 0.1.0 computed it: the JSON as serialised, not normalised.
fn as_released(fields: &Value, bytes: usize) -> String {
    crate::spec_hash::digest_hex(&fields.to_string(), bytes)
}

fn scheduler(yaml: &str) -> SchedulerSpec {
    serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}: {yaml}"))
}

fn launch(yaml: &str) -> Launch {
    serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("{e}: {yaml}"))
}

/// Every value of `values` is of scheme 1 by its form.
fn says_scheme_1(values: &[String]) {
    for v in values {
        assert_eq!(crate::spec_hash::scheme_of(v), Some(1), "{v} says scheme 1");
    }
}

/// Each value `value_of` computes from a pinned YAML is the one pinned
/// (`changed` says what a difference would do), of scheme 1 by its form,
/// and what 0.1.0 computed from the same YAML (`as_released_of`).
#[track_caller]
fn still_what_they_were(
    pinned: &[(&str, &str)],
    value_of: impl Fn(&str) -> String,
    as_released_of: impl Fn(&str) -> String,
    changed: &str,
) {
    let got: Vec<String> = pinned.iter().map(|(yaml, _)| value_of(yaml)).collect();
    let want: Vec<&str> = pinned.iter().map(|(_, v)| *v).collect();
    assert_eq!(got, want, "{changed}");
    says_scheme_1(&got);
    for (yaml, _) in pinned {
        assert_eq!(value_of(yaml), as_released_of(yaml), "{yaml}");
    }
}

#[test]
fn revisions_are_what_they_were() {
    // The register step's hash, of each spec that has one, too.
    for (yaml, _) in SCHEDULERS {
        if let Some(register) = &scheduler(yaml).register {
            let fields = json!({"command": register.command, "args": register.args});
            assert_eq!(register_hash(register), as_released(&fields, 5));
        }
    }
    still_what_they_were(
        SCHEDULERS,
        |yaml| revision_of(&scheduler(yaml)),
        |yaml| as_released(&revision_fields(&scheduler(yaml)), 5),
        "a revision changed: every such Scheduler would roll on upgrade",
    );
}

#[test]
fn launch_hashes_are_what_they_were() {
    still_what_they_were(
        LAUNCHES,
        |yaml| launch_hash(&launch(yaml)),
        |yaml| as_released(&launch_fields(&launch(yaml)), 6),
        "a launch hash changed: every such instance would drift on upgrade",
    );
}

/// `v` with a field added, unset (null, `[]`, `{}` in turn), to every
/// object below the top level: what a later release's new field with such
/// a default serialises as.
fn with_a_field_added(v: &Value, unset: &Value, depth: usize) -> Value {
    match v {
        Value::Object(map) => {
            let mut map: serde_json::Map<String, Value> = map
                .iter()
                .map(|(k, v)| (k.clone(), with_a_field_added(v, unset, depth + 1)))
                .collect();
            if depth > 0 {
                map.insert("addedLater".into(), unset.clone());
            }
            Value::Object(map)
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|i| with_a_field_added(i, unset, depth + 1))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[test]
fn a_field_added_with_an_unset_default_changes_no_hash() {
    for unset in [Value::Null, json!([]), json!({})] {
        for (yaml, want) in SCHEDULERS {
            let fields = with_a_field_added(&revision_fields(&scheduler(yaml)), &unset, 0);
            assert_ne!(
                fields,
                revision_fields(&scheduler(yaml)),
                "nothing added: {yaml}"
            );
            assert_eq!(
                crate::spec_hash::hex_of(fields, 5),
                *want,
                "{unset} added: {yaml}"
            );
        }
        for (yaml, want) in LAUNCHES {
            let fields = with_a_field_added(&launch_fields(&launch(yaml)), &unset, 0);
            assert_eq!(
                crate::spec_hash::hex_of(fields, 6),
                *want,
                "{unset} added: {yaml}"
            );
        }
    }
}

#[test]
fn a_value_says_its_scheme() {
    for (value, scheme) in [
        ("70f80a93cb", Some(1)),
        ("0123456789ab", Some(1)),
        ("70f80a93cb-s2", Some(2)),
        ("70f80a93cb-s17", Some(17)),
        ("70f80a93cb-s1", None),
        ("70f80a93cb-s02", None),
        ("70f80a93cb-s", None),
        ("70F80A93CB", None),
        ("-s2", None),
        ("", None),
        ("orca-70f80a93cb", None),
    ] {
        assert_eq!(scheme_of(value), scheme, "{value:?}");
    }
}

#[test]
fn a_value_of_a_later_scheme_is_not_known_to_differ() {
    let ours = hex_of(serde_json::json!({"image": "v1"}), 5);
    assert_eq!(same(&ours, &ours), Some(true));
    assert_eq!(same("0000000000", &ours), Some(false));
    assert_eq!(same(&format!("{ours}-s2"), &ours), None);
    assert_eq!(same("not a hash", &ours), Some(false));
}
