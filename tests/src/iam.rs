//! IAM on moto's EC2 server: users with a policy of their own, then moto
//! made to enforce every caller's policy; the operator's policy
//! (`docs/iam-policy.json`) cut down to what moto can check; and the
//! documented policies with the `orca-operator iam-policy` arguments that
//! print them.
//!
//! moto evaluates a policy's actions, but for EC2 it checks every call
//! against the resource `*` and with no condition keys, so a statement
//! scoped by ARN or condition would allow nothing there. [`as_moto_checks`]
//! keeps each statement's EC2 and SSM actions and drops the scoping: what
//! these tests prove is the set of actions, exactly. The statements of
//! other services (passing the instance role, the parameters' KMS keys)
//! go: moto asks for none of them.

use std::path::PathBuf;

use serde_json::{json, Value};

use crate::moto::Moto;

/// An IAM user's access key.
#[derive(Clone, Debug)]
pub struct AccessKey {
    id: String,
    secret: String,
}

impl AccessKey {
    /// The access key's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The secret access key.
    pub fn secret(&self) -> &str {
        &self.secret
    }
}

/// The cluster the documented policies are rendered for: the docs'
/// example `clusterName`.
pub const DOCS_CLUSTER: &str = "prod-eu-1";

/// Each documented policy: its file under `docs/`, and the arguments of
/// `orca-operator` that print it (the operator's, and the instance role's
/// of the docs' example Scheduler, `pipelines/orca`).
pub const DOCUMENTED: [(&str, &[&str]); 2] = [
    (
        "iam-policy.json",
        &["iam-policy", "--cluster-name", DOCS_CLUSTER],
    ),
    (
        "iam-instance-policy.json",
        &[
            "iam-policy",
            "--instance-role",
            "--cluster-name",
            DOCS_CLUSTER,
            "--namespace",
            "pipelines",
        ],
    ),
];

/// The path of `docs/<file>`.
pub fn docs_file(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../docs")
        .join(file)
}

/// `docs/iam-policy.json`, the operator's policy as an operator installs it.
pub fn policy() -> Value {
    let path = docs_file("iam-policy.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every action `policy` allows (`ec2:RunInstances`, ...), sorted, each once.
pub fn actions(policy: &Value) -> Vec<String> {
    let mut all: Vec<String> = statements(policy)
        .iter()
        .flat_map(|s| strings(&s["Action"]))
        .collect();
    all.sort();
    all.dedup();
    all
}

/// `policy` as moto can check it: each statement's EC2 and SSM actions on
/// `*`, without conditions, and without `without` (`ec2:StopInstances`,
/// say); a statement with neither goes.
pub fn as_moto_checks(policy: &Value, without: Option<&str>) -> Value {
    let statements: Vec<Value> = statements(policy)
        .iter()
        .filter_map(|s| {
            let actions: Vec<String> = strings(&s["Action"])
                .into_iter()
                .filter(|a| {
                    (a.starts_with("ec2:") || a.starts_with("ssm:")) && Some(a.as_str()) != without
                })
                .collect();
            (!actions.is_empty()).then(
                || json!({"Sid": s["Sid"], "Effect": "Allow", "Action": actions, "Resource": "*"}),
            )
        })
        .collect();
    json!({"Version": "2012-10-17", "Statement": statements})
}

/// Every statement of `policy`.
pub fn statements(policy: &Value) -> Vec<Value> {
    policy["Statement"]
        .as_array()
        .cloned()
        .expect("a policy has a Statement list")
}

/// A string or a list of strings (as `Action` and `Resource` are).
pub fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .filter_map(|s| s.as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    }
}

/// Makes IAM user `name` with `policy` as its only (inline) policy, and an
/// access key for it. Only while moto does not enforce IAM yet.
pub fn user(moto: &Moto, name: &str, policy: &Value) -> AccessKey {
    iam(moto, &[("Action", "CreateUser"), ("UserName", name)]);
    put_user_policy(moto, name, policy);
    let answer = iam(moto, &[("Action", "CreateAccessKey"), ("UserName", name)]);
    AccessKey {
        id: element(&answer, "AccessKeyId"),
        secret: element(&answer, "SecretAccessKey"),
    }
}

/// Replaces user `name`'s policy with `policy` while moto enforces IAM,
/// as an administrator edits a role's policy: moto stops checking for the
/// moment the call takes (anyone's requests meanwhile go unchecked), then
/// checks every request again.
pub fn put_policy(moto: &Moto, name: &str, policy: &Value) {
    match moto.post("/moto-api/reset-auth", &[], "inf") {
        Some((200, _)) => {}
        other => panic!("moto would not stop checking IAM: {other:?}"),
    }
    put_user_policy(moto, name, policy);
    enforce(moto);
}

/// `policy` as user `name`'s only (inline) policy, unsigned.
fn put_user_policy(moto: &Moto, name: &str, policy: &Value) {
    let document = policy.to_string();
    iam(
        moto,
        &[
            ("Action", "PutUserPolicy"),
            ("UserName", name),
            ("PolicyName", "only"),
            ("PolicyDocument", &document),
        ],
    );
}

/// A policy that allows every action (the test's own calls, as the
/// account's administrator).
pub fn everything() -> Value {
    json!({"Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})
}

/// From here on moto checks every request's signature and its signer's
/// policies: a call the policy does not allow is refused (`AccessDenied`).
pub fn enforce(moto: &Moto) {
    match moto.post("/moto-api/reset-auth", &[], "0") {
        Some((200, _)) => {}
        other => panic!("moto would not enforce IAM: {other:?}"),
    }
}

/// One IAM query call, unsigned (moto does not check yet); its answer.
fn iam(moto: &Moto, params: &[(&str, &str)]) -> String {
    let body: Vec<String> = params
        .iter()
        .chain(&[("Version", "2010-05-08")])
        .map(|(k, v)| format!("{k}={}", form_encode(v)))
        .collect();
    // The credential scope tells moto's server which service is asked.
    let scope = "AWS4-HMAC-SHA256 Credential=AKIASETUP/20260101/us-east-1/iam/aws4_request, \
                 SignedHeaders=host, Signature=0";
    let headers = [
        ("Content-Type", "application/x-www-form-urlencoded"),
        ("Authorization", scope),
    ];
    match moto.post("/", &headers, &body.join("&")) {
        Some((200, answer)) => answer,
        other => panic!("moto's IAM refused {:?}: {other:?}", params[0]),
    }
}

/// `value` for an `application/x-www-form-urlencoded` body.
fn form_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The text of the first `<name>` element of an XML answer.
fn element(xml: &str, name: &str) -> String {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    xml.split_once(&open)
        .and_then(|(_, rest)| rest.split_once(&close))
        .map(|(text, _)| text.to_string())
        .unwrap_or_else(|| panic!("no <{name}> in moto's answer: {xml}"))
}
