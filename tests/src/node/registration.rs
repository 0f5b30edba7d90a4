//! The Node object and its lease: registered Ready, then kept fresh by the
//! heartbeat.

use super::*;

pub(super) fn now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn node_status(name: &str, since: &str) -> Value {
    let heartbeat = now();
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": heartbeat,
            "lastTransitionTime": since,
        })
    };
    let resources = json!({"cpu": "64", "memory": "256Gi", "pods": "500"});
    json!({
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "the test node has memory"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "the test node has disk"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "the test node has PIDs"),
            condition("Ready", "True", "KubeletReady", "the test node runs pods as local processes"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": LOOPBACK},
            {"type": "Hostname", "address": name},
        ],
        "nodeInfo": {
            "operatingSystem": std::env::consts::OS,
            "architecture": arch(),
            "containerRuntimeVersion": "orca-test://0",
        },
    })
}

/// Go's name for this machine's architecture, as in `kubernetes.io/arch`.
fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

pub(super) fn node_object(name: &str, since: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": std::env::consts::OS,
                "kubernetes.io/arch": arch(),
            },
        },
        "status": node_status(name, since),
    })
}

/// Reports the node Ready, with a fresh heartbeat.
pub(super) async fn report_node(
    nodes: &Api<KubeNode>,
    name: &str,
    since: &str,
) -> kube::Result<()> {
    let patch = json!({"status": node_status(name, since)});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

/// Renews the node's lease in `kube-node-lease`, creating it if need be.
async fn renew_lease(ctx: &Ctx, node_uid: Option<&str>) -> anyhow::Result<()> {
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), "kube-node-lease");
    let spec = json!({
        "holderIdentity": ctx.node,
        "leaseDurationSeconds": LEASE_SECONDS,
        "renewTime": Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true),
    });
    let patch = json!({ "spec": spec });
    match leases
        .patch(&ctx.node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.is_not_found() => {
            let owner: Vec<Value> = node_uid
                .map(
                    |uid| json!({"apiVersion": "v1", "kind": "Node", "name": ctx.node, "uid": uid}),
                )
                .into_iter()
                .collect();
            let lease: Lease = serde_json::from_value(json!({
                "metadata": {
                    "name": ctx.node,
                    "namespace": "kube-node-lease",
                    "ownerReferences": owner,
                },
                "spec": spec,
            }))?;
            leases.create(&PostParams::default(), &lease).await?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Keeps the node's Ready condition and its lease fresh, so that the node
/// lifecycle controller never marks it NotReady nor evicts its pods.
pub(super) async fn heartbeat(ctx: Arc<Ctx>, node_uid: Option<String>, since: String) {
    let nodes: Api<KubeNode> = Api::all(ctx.client.clone());
    let mut tick = tokio::time::interval(HEARTBEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = report_node(&nodes, &ctx.node, &since).await {
            tracing::warn!(node = %ctx.node, error = %e, "node heartbeat failed");
        }
        if let Err(e) = renew_lease(&ctx, node_uid.as_deref()).await {
            tracing::warn!(node = %ctx.node, error = %e, "node lease renewal failed");
        }
    }
}
