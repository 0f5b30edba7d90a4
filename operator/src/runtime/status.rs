//! What both controllers write the same way: their status, whole, by
//! server-side apply ([`write_status`]), and their Events ([`post_event`],
//! with an `action` from [`event_action`]).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    api::{Patch, PatchParams},
    runtime::events::{Event, EventType, Recorder},
    Api, Resource,
};
use serde::{de::DeserializeOwned, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tracing::info;

use super::names::MANAGER;
use crate::fence::{Fence, Fenced};

/// Why a status could not be written (both controllers).
#[derive(Debug, thiserror::Error)]
pub enum StatusWriteError {
    #[error("applying it: {0}")]
    Apply(#[source] kube::Error),
    #[error("removing the fields an older writer left: {0}")]
    Leftovers(#[source] kube::Error),
    // Its source, not transparent: the fence is found among the causes
    // (see `MaybeFenced`).
    #[error("{0}")]
    Fenced(#[from] Fenced),
}

/// The Event's `action`. The Recorder folds Events of the same reason and
/// action into one series that keeps the first note, so two different
/// steps of one reason (two revisions' `Registering`, two `Launched` of
/// other instances) need two actions: the reason and a digest of the note.
/// The same step repeated is a series. The WarmPool controller's too.
pub fn event_action(reason: &str, note: &str) -> String {
    let digest = Sha256::digest(note.as_bytes());
    let short: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("{reason}-{short}")
}

/// The longest note an Event keeps (the API server refuses more than
/// 1 kB).
const NOTE_MAX: usize = 1000;

/// Posts one Event on `reference`, behind `fence`: `Err` once the fence is
/// closed, so that a caller with more to say stops there. One the API
/// server does not take is logged: what it says happened all the same.
pub async fn post_event(
    recorder: &Recorder,
    fence: &Fence,
    reference: &ObjectReference,
    warning: bool,
    reason: &str,
    message: &str,
) -> Result<(), Fenced> {
    let event = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.into(),
        note: Some(message.chars().take(NOTE_MAX).collect()),
        action: event_action(reason, message),
        secondary: None,
    };
    fence.check()?;
    if let Err(err) = recorder.publish(&event, reference).await {
        tracing::warn!(object = ?reference.name, reason, error = %err, "cannot post an event");
    }
    Ok(())
}

/// Writes `status` whole to the status of `K` `name` by server-side apply
/// as [`MANAGER`], behind `fence`: a field the operator no longer sets (a
/// leader that is gone, capacity errors that are over) is removed by the
/// API server. Unless another field manager owns it too — the merge
/// patches of an operator from before it applied statuses own what they
/// set: what the apply's answer still shows of those is removed by a merge
/// patch, once.
/// Returns the object's resourceVersion after the write.
pub async fn write_status<K, S>(
    api: &Api<K>,
    name: &str,
    status: &S,
    fence: &Fence,
) -> Result<Option<String>, StatusWriteError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
    S: Serialize,
{
    let body = status_apply::<K>(name, status);
    fence.check()?;
    let stored = api
        .patch_status(name, &status_apply_params(), &Patch::Apply(&body))
        .await
        .map_err(StatusWriteError::Apply)?;
    let stored = serde_json::to_value(&stored).unwrap_or(Value::Null);
    let version = stored["metadata"]["resourceVersion"]
        .as_str()
        .map(String::from);
    let Some(left) = leftovers(&stored["status"], &body["status"]) else {
        return Ok(version);
    };
    info!(kind = %K::kind(&()), name = %name, fields = %left, "removing status fields an older writer left");
    let params = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    fence.check()?;
    let stored = api
        .patch_status(name, &params, &Patch::Merge(&json!({ "status": left })))
        .await
        .map_err(StatusWriteError::Leftovers)?;
    Ok(stored.meta().resource_version.clone())
}

/// The merge patch that removes from `stored` each field `desired` does
/// not have, objects field by field (anything else the apply replaced
/// whole); `None` when nothing is left over.
pub fn leftovers(stored: &Value, desired: &Value) -> Option<Value> {
    let (Value::Object(stored), Value::Object(desired)) = (stored, desired) else {
        return None;
    };
    let mut patch = serde_json::Map::new();
    for (key, value) in stored {
        match desired.get(key) {
            None => {
                patch.insert(key.clone(), Value::Null);
            }
            Some(wanted) => {
                if let Some(inner) = leftovers(value, wanted) {
                    patch.insert(key.clone(), inner);
                }
            }
        }
    }
    (!patch.is_empty()).then_some(Value::Object(patch))
}

/// The body of a server-side apply of `status` to the status of `K`
/// `name`: the object's type and name, and the whole status the operator
/// wants. The WarmPool controller's too.
pub fn status_apply<K>(name: &str, status: &impl Serialize) -> Value
where
    K: Resource<DynamicType = ()>,
{
    json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": { "name": name },
        "status": status,
    })
}

/// Apply as [`MANAGER`], taking over any field another manager set.
pub fn status_apply_params() -> PatchParams {
    PatchParams::apply(MANAGER).force()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{Phase, Scheduler, SchedulerStatus};

    #[test]
    fn a_status_is_applied_whole_and_what_is_gone_is_left_out() {
        let status = SchedulerStatus {
            phase: Phase::Degraded,
            leader: None,
            aborted_revision: None,
            ..Default::default()
        };
        let body = status_apply::<Scheduler>("orca", &status);
        assert_eq!(body["apiVersion"], "orca.dev/v1alpha1");
        assert_eq!(body["kind"], "Scheduler");
        assert_eq!(body["metadata"]["name"], "orca");
        assert_eq!(body["status"]["phase"], "Degraded");
        // Not `null`: left out, so server-side apply removes them.
        let fields = body["status"].as_object().unwrap();
        assert!(!fields.contains_key("leader"), "{body}");
        assert!(!fields.contains_key("abortedRevision"), "{body}");
        let params = status_apply_params();
        assert_eq!(params.field_manager.as_deref(), Some(MANAGER));
        assert!(params.force);
    }

    #[test]
    fn what_an_older_writer_left_is_found_field_by_field() {
        let desired = json!({"phase": "Ready", "leader": {"instance": 2, "pod": "p"},
                             "revisions": [{"revision": "b"}]});
        assert_eq!(leftovers(&desired, &desired), None);
        let stored = json!({"phase": "Ready", "leader": {"instance": 2, "pod": "p", "since": "x"},
                            "abortedRevision": "a", "revisions": [{"revision": "a"}]});
        assert_eq!(
            leftovers(&stored, &desired),
            Some(json!({"leader": {"since": null}, "abortedRevision": null}))
        );
    }
}
