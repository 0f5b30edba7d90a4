//! A revision is the hash of what goes into a scheduler pod; a change of
//! any of it (the image above all) is a rollout.

use sha2::{Digest, Sha256};

use crate::crd::SchedulerSpec;

/// The pod template's hash, 10 hex digits (label `orca.dev/revision`).
pub type Revision = String;

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

/// `<scheduler>-<revision>-<sequence>`, at most 63 characters: it is the
/// pod's host name, which the instance row records as `host`.
pub fn pod_name(scheduler: &str, revision: &str, sequence: u32) -> String {
    let suffix = format!("-{revision}-{sequence}");
    let keep = 63usize.saturating_sub(suffix.len()).min(scheduler.len());
    format!("{}{suffix}", scheduler[..keep].trim_end_matches('-'))
}

/// `<scheduler>-register-<revision>`.
pub fn job_name(scheduler: &str, revision: &str) -> String {
    let suffix = format!("-register-{revision}");
    let keep = 63usize.saturating_sub(suffix.len()).min(scheduler.len());
    format!("{}{suffix}", scheduler[..keep].trim_end_matches('-'))
}
