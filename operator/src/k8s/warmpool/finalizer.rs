//! The WarmPool's finalizer [`FINALIZER`], added and removed by JSON
//! patches that test what they change (the uid, the list read), as kube's
//! finalizer helper does: another writer's finalizer added meanwhile is
//! not lost, and a WarmPool made since under the same name is left alone.

use kube::{
    api::{Patch, PatchParams},
    Api, Client, ResourceExt,
};
use serde_json::{json, Value};

use crate::{
    crd::WarmPool,
    k8s::{
        leader::{Fence, Fenced},
        MANAGER,
    },
};

/// The WarmPool controller's finalizer: the WarmPool stays until its
/// instances are terminated (`onDelete: Terminate`) or let go (`Orphan`).
pub const FINALIZER: &str = "orca.dev/warm-pool";

/// Why the finalizer could not be added or removed.
#[derive(Debug, thiserror::Error)]
pub enum FinalizerError {
    #[error("reading it before removing its finalizer: {0}")]
    Read(#[source] kube::Error),
    #[error("patching its finalizers: {0}")]
    Patch(#[source] kube::Error),
    #[error("building the JSON patch of its finalizers: {0}")]
    Build(#[source] serde_json::Error),
    #[error(transparent)]
    Fenced(#[from] Fenced),
}

pub(super) fn has(wp: &WarmPool) -> bool {
    wp.finalizers().iter().any(|f| f == FINALIZER)
}

/// Adds [`FINALIZER`] to `wp`; a conflict is retried by the next
/// reconcile.
pub(super) async fn add(
    client: &Client,
    fence: &Fence,
    wp: &WarmPool,
) -> Result<(), FinalizerError> {
    let finalizers = wp.finalizers();
    let add = if finalizers.is_empty() {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        ])
    } else {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
            {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
        ])
    };
    patch(client, fence, wp, add).await
}

/// Removes [`FINALIZER`] from the WarmPool `wp` is (its uid): read afresh,
/// then a JSON patch that tests the entry it removes. Whether this call
/// removed it (not when the WarmPool or its finalizer is gone already).
pub(super) async fn remove(
    client: &Client,
    fence: &Fence,
    wp: &WarmPool,
) -> Result<bool, FinalizerError> {
    let api = super::pools_api(client, wp);
    fence.check()?;
    let Some(now) = api
        .get_opt(&wp.name_any())
        .await
        .map_err(FinalizerError::Read)?
    else {
        return Ok(false);
    };
    let Some(at) = now.finalizers().iter().position(|f| f == FINALIZER) else {
        return Ok(false);
    };
    if now.metadata.uid != wp.metadata.uid {
        return Ok(false);
    }
    let remove = json!([
        {"op": "test", "path": format!("/metadata/finalizers/{at}"), "value": FINALIZER},
        {"op": "remove", "path": format!("/metadata/finalizers/{at}")},
    ]);
    match patch(client, fence, wp, remove).await {
        Err(FinalizerError::Patch(kube::Error::Api(e))) if e.code == 404 => Ok(false),
        other => other.map(|()| true),
    }
}

/// Applies the JSON patch `ops` of `metadata.finalizers` to `wp`, testing
/// its uid first (a WarmPool of the same name made since is another one).
async fn patch(
    client: &Client,
    fence: &Fence,
    wp: &WarmPool,
    ops: Value,
) -> Result<(), FinalizerError> {
    let mut all = vec![json!({"op": "test", "path": "/metadata/uid", "value": wp.metadata.uid})];
    all.extend(ops.as_array().into_iter().flatten().cloned());
    let patch = serde_json::from_value(Value::Array(all)).map_err(FinalizerError::Build)?;
    let params = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..PatchParams::default()
    };
    fence.check()?;
    let api: Api<WarmPool> = super::pools_api(client, wp);
    api.patch(&wp.name_any(), &params, &Patch::<()>::Json(patch))
        .await
        .map_err(FinalizerError::Patch)?;
    Ok(())
}
