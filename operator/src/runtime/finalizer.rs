//! Adding and removing one finalizer of any object by JSON patches that
//! test what they change — the object's uid, the list read, the entry
//! removed — as kube's finalizer helper does: another writer's finalizer
//! added meanwhile is not lost, and an object made since under the same
//! name is left alone. Behind the Lease's fence.

use std::fmt::Debug;

use kube::{
    api::{ObjectMeta, Patch, PatchParams},
    Api, Resource,
};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::names::MANAGER;
use crate::fence::{Fence, Fenced};

/// Why a finalizer could not be added or removed.
#[derive(Debug, thiserror::Error)]
pub enum FinalizerError {
    #[error("reading it before removing its finalizer: {0}")]
    Read(#[source] kube::Error),
    #[error("patching its finalizers: {0}")]
    Patch(#[source] kube::Error),
    #[error("its finalizers changed since it was read: {0}")]
    Changed(#[source] kube::Error),
    #[error("building the JSON patch of its finalizers: {0}")]
    Build(#[source] serde_json::Error),
    // Its source, not transparent: the fence is found among the causes
    // (see `MaybeFenced`).
    #[error("{0}")]
    Fenced(#[from] Fenced),
}

/// Whether `meta` lists `finalizer`.
pub fn has(meta: &ObjectMeta, finalizer: &str) -> bool {
    meta.finalizers.iter().flatten().any(|f| f == finalizer)
}

/// Adds `finalizer` to the object of `api` that `meta` describes, unless
/// its list changed since `meta` was read (a conflict the next reconcile
/// retries): the object's resourceVersion after the patch.
pub async fn add<K>(
    api: &Api<K>,
    fence: &Fence,
    meta: &ObjectMeta,
    finalizer: &str,
) -> Result<Option<String>, FinalizerError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let finalizers = meta.finalizers.clone().unwrap_or_default();
    let add = if finalizers.is_empty() {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]},
        ])
    } else {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
            {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer},
        ])
    };
    patch(api, fence, meta, add).await
}

/// Removes `finalizer` from the object `meta` describes (its uid): its
/// metadata read afresh, then a JSON patch that tests the entry it removes.
/// Whether this call removed it (not when the object or its finalizer is
/// gone already).
pub async fn remove<K>(
    api: &Api<K>,
    fence: &Fence,
    meta: &ObjectMeta,
    finalizer: &str,
) -> Result<bool, FinalizerError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let name = meta.name.clone().unwrap_or_default();
    fence.check()?;
    let Some(now) = api
        .get_metadata_opt(&name)
        .await
        .map_err(FinalizerError::Read)?
    else {
        return Ok(false);
    };
    let Some(at) = now
        .metadata
        .finalizers
        .iter()
        .flatten()
        .position(|f| f == finalizer)
    else {
        return Ok(false);
    };
    if now.metadata.uid != meta.uid {
        return Ok(false);
    }
    let remove = json!([
        {"op": "test", "path": format!("/metadata/finalizers/{at}"), "value": finalizer},
        {"op": "remove", "path": format!("/metadata/finalizers/{at}")},
    ]);
    match patch(api, fence, meta, remove).await {
        Err(FinalizerError::Patch(kube::Error::Api(e))) if e.code == 404 => Ok(false),
        other => other.map(|_| true),
    }
}

/// Applies the JSON patch `ops` of `metadata.finalizers`, testing the
/// object's uid first (one of the same name made since is another one):
/// the resourceVersion it made.
async fn patch<K>(
    api: &Api<K>,
    fence: &Fence,
    meta: &ObjectMeta,
    ops: Value,
) -> Result<Option<String>, FinalizerError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut all = vec![json!({"op": "test", "path": "/metadata/uid", "value": meta.uid})];
    all.extend(ops.as_array().into_iter().flatten().cloned());
    let patch = serde_json::from_value(Value::Array(all)).map_err(FinalizerError::Build)?;
    let params = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..PatchParams::default()
    };
    fence.check()?;
    let name = meta.name.clone().unwrap_or_default();
    let patched = api
        .patch_metadata(&name, &params, &Patch::<()>::Json(patch))
        .await
        .map_err(|e| {
            if test_failed(&e) {
                FinalizerError::Changed(e)
            } else {
                FinalizerError::Patch(e)
            }
        })?;
    Ok(patched.metadata.resource_version)
}

/// A `test` of the JSON patch that failed: the object changed since it was
/// read (another pass of this replica's, whose write the watch had not
/// brought back yet). The API server answers 422 with no cause; a field it
/// finds invalid is named as the cause.
fn test_failed(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s)
        if s.code == 422 && s.details.as_ref().is_none_or(|d| d.causes.is_empty()))
}
