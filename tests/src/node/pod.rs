//! A pod's life: bound to this node, its containers run (see `running`),
//! or reported lost if an earlier agent started them, and removed from the
//! API once deleted.

use super::*;

pub(super) type Updates = watch::Receiver<Option<Pod>>;

/// The latest version of the pod; `None` once it is gone from the API.
pub(super) fn latest(rx: &mut Updates) -> Option<Pod> {
    rx.borrow_and_update().clone()
}

pub(super) fn deleting(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// How long a deleted pod's processes have between SIGTERM and SIGKILL.
pub(super) fn grace(pod: &Pod) -> Duration {
    let seconds = pod
        .metadata
        .deletion_grace_period_seconds
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(DEFAULT_GRACE_SECONDS);
    Duration::from_secs(seconds.max(0) as u64)
}

/// One pod, from binding to its removal from the API.
pub(super) async fn run_pod(ctx: Arc<Ctx>, mut rx: Updates) {
    let Some(first) = latest(&mut rx) else {
        return;
    };
    let namespace = first.metadata.namespace.clone().unwrap_or_default();
    let name = first.metadata.name.clone().unwrap_or_default();
    let uid = first.metadata.uid.clone().unwrap_or_default();
    let pod = PodApi {
        api: Api::namespaced(ctx.client.clone(), &namespace),
        namespace,
        name,
        uid,
    };
    let Some(bound) = bind(&ctx, &pod, &mut rx).await else {
        return;
    };
    let phase = bound.status.as_ref().and_then(|s| s.phase.as_deref());
    let started_before = phase == Some("Running")
        || bound
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.state
                        .as_ref()
                        .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
                })
            });
    if matches!(phase, Some("Succeeded" | "Failed")) {
        // Ended before this agent: only its deletion is left to do.
    } else if started_before {
        pod.lost(&bound).await;
    } else if image_pod::of_images(&ctx, &bound) {
        if !image_pod::run(&ctx, &pod, &mut rx).await {
            return;
        }
    } else if !run(&ctx, &pod, &mut rx).await {
        return;
    }
    if await_deletion(&mut rx).await {
        pod.delete(&mut rx).await;
    }
}

/// A pod's name, uid and API, for its task.
pub(super) struct PodApi {
    api: Api<Pod>,
    namespace: String,
    name: String,
    uid: String,
}

impl PodApi {
    /// The pod's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The pod's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The pod's uid.
    pub fn uid(&self) -> &str {
        &self.uid
    }
}

/// Waits until the pod is bound to this node, binding it if it is bound to
/// none; the pod as bound, or `None` if it is another node's or gone.
async fn bind(ctx: &Ctx, pod: &PodApi, rx: &mut Updates) -> Option<Pod> {
    loop {
        let mut current = latest(rx)?;
        let node_name = current.spec.as_ref().and_then(|s| s.node_name.clone());
        match node_name.as_deref() {
            Some(node) if node == ctx.node => return Some(current),
            Some(_) => return None,
            // An unbound pod being deleted is removed by the API server.
            None if deleting(&current) => {}
            None => {
                let binding = json!({
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": ctx.node},
                });
                match pod
                    .api
                    .create_subresource::<_, Value>(
                        "binding",
                        &pod.name,
                        &PostParams::default(),
                        &binding,
                    )
                    .await
                {
                    Ok(_) => {
                        tracing::info!(pod = %pod.key(), node = %ctx.node, "bound");
                        current.spec.get_or_insert_with(Default::default).node_name =
                            Some(ctx.node.clone());
                        return Some(current);
                    }
                    Err(e) => {
                        tracing::warn!(pod = %pod.key(), error = %e, "cannot bind; retrying");
                    }
                }
            }
        }
        tokio::select! {
            changed = rx.changed() => changed.ok()?,
            _ = tokio::time::sleep(RETRY) => {}
        }
    }
}

/// Waits until the pod is deleted: true, or gone from the API: false.
async fn await_deletion(rx: &mut Updates) -> bool {
    loop {
        match latest(rx) {
            None => return false,
            Some(pod) if deleting(&pod) => return true,
            Some(_) => {}
        }
        if rx.changed().await.is_err() {
            return false;
        }
    }
}

impl PodApi {
    pub(super) fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    pub(super) fn dir(&self, ctx: &Ctx) -> PathBuf {
        pod_dir(&ctx.work_dir, &self.namespace, &self.name)
    }

    /// Patches the pod's status (tried a few times: a pod left `Running`
    /// would hang a test); false if the pod is gone.
    pub(super) async fn report(&self, status: &Value) -> bool {
        for _ in 0..10 {
            match self
                .api
                .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(status))
                .await
            {
                Ok(_) => return true,
                Err(kube::Error::Api(s)) if s.is_not_found() => return false,
                Err(e) => {
                    tracing::warn!(pod = %self.key(), error = %e, "cannot report the pod's status; retrying");
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
        true
    }

    /// Removes the pod from the API (grace 0: its processes have ended),
    /// unless it is gone or was replaced by another of the same name.
    async fn delete(&self, rx: &mut Updates) {
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        loop {
            match self.api.delete(&self.name, &params).await {
                Ok(_) => {
                    tracing::info!(pod = %self.key(), "deleted");
                    return;
                }
                Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() => return,
                Err(e) => {
                    tracing::warn!(pod = %self.key(), error = %e, "cannot delete; retrying");
                }
            }
            tokio::select! {
                changed = rx.changed() => if changed.is_err() || latest(rx).is_none() { return },
                _ = tokio::time::sleep(RETRY) => {}
            }
        }
    }

    /// A pod started by an earlier agent on this node: its processes died
    /// with that agent, so it failed, as a kubelet reports a container it
    /// can no longer find.
    async fn lost(&self, pod: &Pod) {
        let containers: Vec<ContainerStatus> = pod
            .spec
            .iter()
            .flat_map(|s| &s.containers)
            .map(|c| {
                ContainerStatus::of(
                    c,
                    State::Terminated {
                        code: 137,
                        reason: "ContainerStatusUnknown".into(),
                        message: "The container could not be located when the pod was terminated"
                            .into(),
                        started: None,
                        finished: now(),
                    },
                )
            })
            .collect();
        let start = pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .and_then(|t| serde_json::to_value(t).ok())
            .and_then(|t| t.as_str().map(str::to_string))
            .unwrap_or_else(now);
        tracing::info!(pod = %self.key(), "started by an earlier agent: failed");
        self.report(&pod_status("Failed", &start, &containers))
            .await;
    }
}
