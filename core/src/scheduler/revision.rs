//! A revision is the hash of what goes into a scheduler pod; a change of
//! any of it (the image above all) is a rollout. And the names of a
//! revision's objects, which must be valid for every Scheduler name the API
//! server accepts (a DNS subdomain: dots, up to 253 characters) while pod,
//! Job and host names must be DNS-1123 labels (no dots, at most 63).

use std::time::Duration;

use sha2::{Digest, Sha256};

use super::snapshot::{Action, Observed};
use crate::{
    backoff::doubling,
    crd::{Register, SchedulerSpec},
};

/// The pod template's hash, 10 hex digits (label `orca.dev/revision`).
pub type Revision = String;

/// The longest DNS-1123 label, and the longest label value.
const LABEL_MAX: usize = 63;
/// Hex digits of the name's hash in a name that had to change.
const HASH_HEX: usize = 6;

/// The revision `spec` gives its pods: a hash of the fields that make up a
/// pod (image, command, args, env, resources, overlap, database,
/// podTemplate); a change to any of them is a new revision to roll out.
/// The same across releases ([`crate::spec_hash`]).
pub fn revision_of(spec: &SchedulerSpec) -> Revision {
    crate::spec_hash::hex_of(revision_fields(spec), 5)
}

/// What [`revision_of`] hashes.
pub fn revision_fields(spec: &SchedulerSpec) -> serde_json::Value {
    serde_json::json!({
        "image": spec.image,
        "command": spec.command,
        "args": spec.args,
        "env": spec.env,
        "resources": spec.resources,
        "overlap": spec.overlap,
        "database": spec.database,
        "podTemplate": spec.pod_template,
    })
}

/// `<scheduler>-<revision>-<sequence>`: the pod's name, a DNS-1123 label. A
/// name that is not one, or too long, gives `<readable>-<hash>-…` instead.
/// (Pods made before host names carried the namespace have it as their
/// host name too; see [`host_name`].)
pub fn pod_name(scheduler: &str, revision: &str, sequence: u32) -> String {
    with_suffix(scheduler, &format!("-{revision}-{sequence}"))
}

/// `<scheduler>-register-<revision>`, a DNS-1123 label like the pod's: the
/// Job controller puts the Job's name in a label of its pods. The name of
/// a revision's first register Job.
pub fn job_name(scheduler: &str, revision: &str) -> String {
    with_suffix(scheduler, &format!("-register-{revision}"))
}

/// The name of a revision's `attempt`-th register Job: [`job_name`] for the
/// first, `<scheduler>-register-<revision>-<attempt>` after it. A retry is a
/// new Job (a failed Job is never run again), so each attempt needs a name
/// of its own.
pub fn register_job_name(scheduler: &str, revision: &str, attempt: u32) -> String {
    if attempt <= 1 {
        job_name(scheduler, revision)
    } else {
        with_suffix(scheduler, &format!("-register-{revision}-{attempt}"))
    }
}

/// Which attempt a register Job of `revision` named `name` is (see
/// [`register_job_name`]): 1 for the first, or a name it did not make.
pub fn register_attempt(name: &str, revision: &str) -> u32 {
    let marker = format!("-register-{revision}-");
    name.rfind(&marker)
        .and_then(|at| name[at + marker.len()..].parse().ok())
        .unwrap_or(1)
}

/// A hash of what a register Job runs (`spec.register`'s command and args),
/// 10 hex digits (label `orca.dev/register`): a Job of another hash ran an
/// older register step, and a change registers again.
pub fn register_hash(register: &Register) -> String {
    let what = serde_json::json!({
        "command": register.command,
        "args": register.args,
    });
    crate::spec_hash::hex_of(what, 5)
}

/// The host name a new pod of Scheduler `namespace/scheduler` gets, which
/// its instance records as `host`: `<namespace>-<scheduler>-<hash>-<revision>-<sequence>`,
/// shortened to a DNS-1123 label. The namespace is in it, so two Schedulers
/// of one name in two namespaces that share a database never take each
/// other's rows for their own; the pod's own name stays
/// [`pod_name`], which its namespace already makes unique.
pub fn host_name(namespace: &str, scheduler: &str, revision: &str, sequence: u32) -> String {
    // The dot makes it no label, so it is always the hashed form.
    with_suffix(
        &format!("{namespace}.{scheduler}"),
        &format!("-{revision}-{sequence}"),
    )
}

/// Whether `host` is a host name [`host_name`] gives Scheduler
/// `namespace/scheduler`: an instance of one of its pods, even of a pod
/// already gone, of a revision of any hashing scheme (a later release's,
/// `<hex>-s<N>`, too: see [`crate::spec_hash`]).
pub fn is_host_of(namespace: &str, scheduler: &str, host: &str) -> bool {
    let Some((rest, sequence)) = host.rsplit_once('-') else {
        return false;
    };
    let Ok(sequence) = sequence.parse::<u32>() else {
        return false;
    };
    // The revision is the last part before the sequence, or the last two
    // (`<hex>-s<N>`).
    let mut parts = rest.rsplit('-');
    let (last, before) = (parts.next(), parts.next());
    let revisions = [
        last.map(str::to_string),
        before.zip(last).map(|(hex, mark)| format!("{hex}-{mark}")),
    ];
    revisions.into_iter().flatten().any(|revision| {
        crate::spec_hash::scheme_of(&revision).is_some()
            && revision
                .split('-')
                .next()
                .is_some_and(|hex| hex.len() == 10)
            && host_name(namespace, scheduler, &revision, sequence) == host
    })
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
/// How long to wait after the `failures`-th register failure in a row
/// before the next attempt: 10 s × 2^(failures − 1), at most 5 min.
pub(super) fn register_backoff(failures: i32) -> Duration {
    let doublings = failures.saturating_sub(1).max(0) as u32;
    doubling(Duration::from_secs(10), doublings, Duration::from_secs(300))
}

/// A new pod of Scheduler `o`, named for its revision and sequence.
pub(super) fn new_pod(o: &Observed, revision: &str, sequence: u32, image: &str) -> Action {
    Action::CreatePod {
        name: pod_name(o.name(), revision, sequence),
        host: host_name(o.namespace(), o.name(), revision, sequence),
        revision: revision.to_string(),
        sequence,
        image: image.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_register_back_off_doubles_to_five_minutes() {
        let secs: Vec<u64> = (1..=8).map(|n| register_backoff(n).as_secs()).collect();
        assert_eq!(secs, [10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(register_backoff(0).as_secs(), 10);
        assert_eq!(register_backoff(i32::MAX).as_secs(), 300);
    }
}
