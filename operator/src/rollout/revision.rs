//! A revision is the hash of what goes into a scheduler pod; a change of
//! any of it (the image above all) is a rollout. And the names of a
//! revision's objects, which must be valid for every Scheduler name the API
//! server accepts (a DNS subdomain: dots, up to 253 characters) while pod,
//! Job and host names must be DNS-1123 labels (no dots, at most 63).

use sha2::{Digest, Sha256};

use crate::crd::SchedulerSpec;

/// The pod template's hash, 10 hex digits (label `orca.dev/revision`).
pub type Revision = String;

/// The longest DNS-1123 label, and the longest label value.
const LABEL_MAX: usize = 63;
/// Hex digits of the name's hash in a name that had to change.
const HASH_HEX: usize = 6;

pub fn revision_of(spec: &SchedulerSpec) -> Revision {
    let template = serde_json::json!({
        "image": spec.image,
        "command": spec.command,
        "args": spec.args,
        "env": spec.env,
        "resources": spec.resources,
        "overlap": spec.overlap,
        "database": spec.database,
        "podTemplate": spec.pod_template,
    });
    let digest = Sha256::digest(template.to_string().as_bytes());
    digest.iter().take(5).map(|b| format!("{b:02x}")).collect()
}

/// `<scheduler>-<revision>-<sequence>`: the pod's name and its host name,
/// which the instance row records as `host`, so a DNS-1123 label. A name
/// that is not one, or too long, gives `<readable>-<hash>-…` instead.
pub fn pod_name(scheduler: &str, revision: &str, sequence: u32) -> String {
    with_suffix(scheduler, &format!("-{revision}-{sequence}"))
}

/// `<scheduler>-register-<revision>`, a DNS-1123 label like the pod's: the
/// Job controller puts the Job's name in a label of its pods.
pub fn job_name(scheduler: &str, revision: &str) -> String {
    with_suffix(scheduler, &format!("-register-{revision}"))
}

/// The value of label `orca.dev/scheduler`, which selects a Scheduler's
/// pods and Jobs: the name itself whenever it is a valid label value (a
/// dotted name is), else `<readable>-<hash>`, at most 63 characters.
pub fn scheduler_label(scheduler: &str) -> String {
    if is_label_value(scheduler) {
        scheduler.to_string()
    } else {
        hashed(scheduler, LABEL_MAX)
    }
}

/// `scheduler` + `suffix` when that is a DNS-1123 label, as names always
/// were; else the name made readable and unique by its hash, so that
/// distinct Schedulers never share a pod or a Job.
fn with_suffix(scheduler: &str, suffix: &str) -> String {
    let room = LABEL_MAX.saturating_sub(suffix.len());
    if is_dns_label(scheduler) && scheduler.len() <= room {
        format!("{scheduler}{suffix}")
    } else {
        format!("{}{suffix}", hashed(scheduler, room))
    }
}

/// `<readable>-<hash>` in at most `max` characters: `name` lowercased,
/// each character a label can't hold (a dot) turned into '-', cut to fit,
/// then the first hex digits of the SHA-256 of the whole name.
fn hashed(name: &str, max: usize) -> String {
    let digest = Sha256::digest(name.as_bytes());
    let hash: String = digest
        .iter()
        .take(HASH_HEX / 2)
        .map(|b| format!("{b:02x}"))
        .collect();
    let keep = max.saturating_sub(HASH_HEX + 1);
    let readable: String = name
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(keep)
        .collect();
    let readable = readable.trim_matches('-');
    if readable.is_empty() {
        hash
    } else {
        format!("{readable}-{hash}")
    }
}

/// A DNS-1123 label: 1–63 of lowercase alphanumerics and '-', starting and
/// ending alphanumeric.
fn is_dns_label(s: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (1..=LABEL_MAX).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && edge(s.chars().next())
        && edge(s.chars().last())
}

/// A label value: empty, or at most 63 of alphanumerics, '-', '_' and '.',
/// starting and ending alphanumeric.
fn is_label_value(s: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    s.is_empty()
        || (s.len() <= LABEL_MAX
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && edge(s.chars().next())
            && edge(s.chars().last()))
}
