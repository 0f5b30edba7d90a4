//! The API server as the WarmPool controller meets it: the `Cluster`
//! harness, answering the controller's calls and reconciling again as its
//! requeue would.

use super::*;

/// The API server as the WarmPool controller meets it: one WarmPool (its
/// status merged from the patches, as the API server would), the Scheduler
/// and the Secret when they exist, and a record of what was written.
pub(crate) struct Cluster {
    pub(crate) api: ApiServerVerifier,
    pub(crate) pool: WarmPool,
    pub(crate) deleted: bool,
    pub(crate) scheduler: Option<Scheduler>,
    pub(crate) secret: Option<Secret>,
    /// The `status` of every status patch, in order.
    pub(crate) statuses: Vec<Value>,
    /// Every Event as posted, or as patched when it repeats (a series).
    pub(crate) events: Vec<Value>,
    /// The paths read (GET).
    pub(crate) reads: Vec<String>,
    /// Watches of WarmPools, never answered (nothing changes).
    watches: Vec<Call>,
    /// Every JSON patch of the WarmPool (its finalizers), as sent.
    pub(crate) patches: Vec<Value>,
    /// The context of the last [`Cluster::reconcile`]: reconciled again, as
    /// the controller's requeue would, while the harness waits.
    ctx: Option<Arc<Context>>,
    /// Why no call may write now, if none may.
    no_writes: Option<String>,
    /// Status writes are refused (403), as when the operator's RBAC lacks
    /// `warmpools/status`.
    pub(crate) status_refused: bool,
}

impl Cluster {
    pub(crate) fn new(
        pool: WarmPool,
        scheduler: Option<Scheduler>,
        secret: Option<Secret>,
    ) -> (Self, kube::Client) {
        let (client, api) = mock_client();
        let cluster = Cluster {
            api,
            pool,
            deleted: false,
            scheduler,
            secret,
            statuses: Vec::new(),
            events: Vec::new(),
            reads: Vec::new(),
            watches: Vec::new(),
            patches: Vec::new(),
            ctx: None,
            no_writes: None,
            status_refused: false,
        };
        (cluster, client)
    }

    /// The stored WarmPool, deleted as the API server marks it (a
    /// deletion timestamp, the generation bumped) while finalizers hold it.
    pub(crate) fn delete(&mut self) -> WarmPool {
        let meta = &mut self.pool.metadata;
        meta.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        ));
        meta.generation = meta.generation.map(|g| g + 1);
        if meta.finalizers.as_ref().is_none_or(Vec::is_empty) {
            self.deleted = true;
        }
        self.pool.clone()
    }

    pub(crate) fn finalizers(&self) -> Vec<String> {
        self.pool.metadata.finalizers.clone().unwrap_or_default()
    }

    /// The WarmPool's stored status (`{}` when it has none).
    pub(crate) fn status(&self) -> Value {
        serde_json::to_value(&self.pool.status)
            .ok()
            .filter(|s| !s.is_null())
            .unwrap_or_else(|| json!({}))
    }

    pub(crate) fn events_of(&self, reason: &str) -> Vec<&Value> {
        self.events
            .iter()
            .filter(|e| e["reason"] == reason)
            .collect()
    }

    /// Answers `call` as the API server would.
    fn answer(&mut self, call: Call) {
        if let Some(why) = &self.no_writes {
            assert_eq!(
                call.method(),
                Method::GET,
                "{why}, but the operator sent {} {} {}",
                call.method(),
                call.path(),
                call.body()
            );
        }
        let path = call.path().to_string();
        let pool_path = format!("{API}/warmpools/{POOL}");
        match (call.method().as_str(), path.as_str()) {
            ("GET", p) if p.starts_with(&format!("{API}/schedulers/")) => {
                self.reads.push(path.to_string());
                match &self.scheduler {
                    Some(s)
                        if p.ends_with(&format!("/{}", s.metadata.name.as_deref().unwrap())) =>
                    {
                        call.answer(StatusCode::OK, &serde_json::to_value(s).unwrap())
                    }
                    _ => call.answer(
                        StatusCode::NOT_FOUND,
                        &not_found("schedulers.orca.dev", p.rsplit('/').next().unwrap()),
                    ),
                }
            }
            ("GET", p) if p.starts_with("/api/v1/namespaces/default/secrets/") => {
                self.reads.push(path.to_string());
                match &self.secret {
                    Some(s) if p.ends_with("/orca-db") => {
                        call.answer(StatusCode::OK, &serde_json::to_value(s).unwrap())
                    }
                    _ => call.answer(
                        StatusCode::NOT_FOUND,
                        &not_found("secrets", p.rsplit('/').next().unwrap()),
                    ),
                }
            }
            ("GET", p) if p == format!("{API}/schedulers") => {
                if call.query().contains("watch=true") {
                    self.watches.push(call);
                } else {
                    let items: Vec<Value> = self.scheduler.iter().map(|s| json!(s)).collect();
                    call.answer(
                        StatusCode::OK,
                        &json!({"apiVersion": "orca.dev/v1alpha1", "kind": "SchedulerList",
                                "metadata": {"resourceVersion": "1"}, "items": items}),
                    );
                }
            }
            ("GET", "/api/v1/namespaces/default/secrets") => {
                if call.query().contains("watch=true") {
                    self.watches.push(call);
                } else {
                    // Metadata only, as the operator asks.
                    let items: Vec<Value> = self
                        .secret
                        .iter()
                        .map(|s| {
                            json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                                   "metadata": s.metadata})
                        })
                        .collect();
                    call.answer(
                        StatusCode::OK,
                        &json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                                "metadata": {"resourceVersion": "1"}, "items": items}),
                    );
                }
            }
            ("GET", p) if p == format!("{API}/warmpools") => {
                if call.query().contains("watch=true") {
                    self.watches.push(call);
                } else {
                    let items = if self.deleted {
                        vec![]
                    } else {
                        vec![serde_json::to_value(&self.pool).unwrap()]
                    };
                    call.answer(
                        StatusCode::OK,
                        &json!({"apiVersion": "orca.dev/v1alpha1", "kind": "WarmPoolList",
                                "metadata": {"resourceVersion": "1"}, "items": items}),
                    );
                }
            }
            ("GET", p) if p == pool_path => {
                self.reads.push(path.to_string());
                if self.deleted {
                    call.answer(
                        StatusCode::NOT_FOUND,
                        &not_found("warmpools.orca.dev", POOL),
                    )
                } else {
                    call.answer(StatusCode::OK, &serde_json::to_value(&self.pool).unwrap())
                }
            }
            ("PATCH", p) if p == pool_path && !self.deleted => {
                assert_eq!(
                    call.content_type(),
                    "application/json-patch+json",
                    "{}",
                    call.body()
                );
                assert!(
                    call.query().contains("fieldManager=orca-operator"),
                    "{}",
                    call.query()
                );
                self.patches.push(call.body().clone());
                let mut whole = serde_json::to_value(&self.pool).unwrap();
                match json_patch(&mut whole, call.body()) {
                    Ok(()) => {
                        self.pool = serde_json::from_value(whole.clone()).unwrap();
                        // The last finalizer of a deleted object gone: so is it.
                        if self.pool.metadata.deletion_timestamp.is_some()
                            && self.finalizers().is_empty()
                        {
                            self.deleted = true;
                        }
                        call.answer(StatusCode::OK, &whole)
                    }
                    Err(why) => call.answer(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                "reason": "Invalid", "code": 422, "message": why}),
                    ),
                }
            }
            ("PATCH", p) if p == pool_path => call.answer(
                StatusCode::NOT_FOUND,
                &not_found("warmpools.orca.dev", POOL),
            ),
            ("PATCH", p) if p == format!("{pool_path}/status") && self.status_refused => call
                .answer(
                    StatusCode::FORBIDDEN,
                    &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "reason": "Forbidden", "code": 403,
                            "message": "warmpools.orca.dev \"warm\" is forbidden: cannot patch resource \"warmpools/status\""}),
                ),
            ("PATCH", p) if p == format!("{pool_path}/status") => {
                // Server-side apply of the whole status by the status's
                // only manager: what it leaves out is gone.
                let status = call.applied_status("WarmPool", POOL);
                let mut whole = serde_json::to_value(&self.pool).unwrap();
                whole["status"] = status.clone();
                self.pool = serde_json::from_value(whole.clone()).unwrap();
                self.statuses.push(status);
                call.answer(StatusCode::OK, &whole);
            }
            ("POST", EVENTS) => {
                self.event(call.body());
                let body = call.body().clone();
                call.answer(StatusCode::CREATED, &body);
            }
            ("PATCH", p) if p.starts_with(&format!("{EVENTS}/")) => {
                self.event(call.body());
                let body = call.body().clone();
                call.answer(StatusCode::OK, &body);
            }
            _ => panic!(
                "a call the WarmPool controller should not make: {} {}?{} {}",
                call.method(),
                call.path(),
                call.query(),
                call.body()
            ),
        }
    }

    fn event(&mut self, e: &Value) {
        assert_eq!(e["regarding"]["kind"], "WarmPool", "{e}");
        assert_eq!(e["regarding"]["name"], POOL, "{e}");
        assert_eq!(e["reportingController"], "orca-operator", "{e}");
        self.events.push(e.clone());
    }

    /// Runs `reconcile` of `wp`, answering its calls; what it returned.
    pub(crate) async fn reconcile(&mut self, ctx: &Arc<Context>, wp: WarmPool) -> Action {
        self.try_reconcile(ctx, wp)
            .await
            .unwrap_or_else(|e| panic!("reconcile failed: {e}"))
    }

    /// Runs `reconcile` of `wp`, answering its calls; what it returned.
    pub(crate) async fn try_reconcile(
        &mut self,
        ctx: &Arc<Context>,
        wp: WarmPool,
    ) -> Result<Action, ReconcileError> {
        self.ctx = Some(ctx.clone());
        let mut task = tokio::spawn(reconcile(Arc::new(wp), ctx.clone()));
        loop {
            let call = tokio::select! {
                biased;
                call = self.api.next("the reconcile's calls") => call,
                done = &mut task => return done.expect("reconcile panicked"),
            };
            self.answer(call);
        }
    }

    /// What the controller does between the harness's checks: reconcile the
    /// stored WarmPool again (unless it is gone) a moment later, or, with no
    /// context (the whole controller runs), answer its next call.
    pub(crate) async fn step(&mut self, what: &str) {
        match self.ctx.clone() {
            Some(ctx) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if !self.deleted {
                    let stored = self.pool.clone();
                    // A failed pass shows in the status and Events.
                    let _ = self.try_reconcile(&ctx, stored).await;
                }
            }
            None => {
                let call = self.api.next(what).await;
                self.answer(call);
            }
        }
    }

    /// Reconciles (or answers calls) until `done` holds; fails saying
    /// `what` if it does not within 20 s.
    pub(crate) async fn until(&mut self, what: &str, done: impl Fn(&Cluster) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done(self) {
            assert!(
                Instant::now() < deadline,
                "not within 20 s: {what}; status {}; events {:#?}",
                self.status(),
                self.events
            );
            self.step(what).await;
        }
    }

    /// No call at all for `quiet`, nothing reconciled.
    pub(crate) async fn quiet(&mut self, quiet: Duration, why: &str) {
        if let Ok(call) = tokio::time::timeout(quiet, self.api.next(why)).await {
            panic!(
                "{why}, but the operator sent {} {}?{} {}",
                call.method(),
                call.path(),
                call.query(),
                call.body()
            );
        }
    }

    /// Reconciles (or answers calls) for `quiet`; no call may write
    /// (PATCH, POST).
    pub(crate) async fn no_writes(&mut self, quiet: Duration, why: &str) {
        self.no_writes = Some(why.to_string());
        let end = tokio::time::Instant::now() + quiet;
        while tokio::time::Instant::now() < end {
            if self.ctx.is_some() {
                self.step(why).await;
            } else if let Ok(call) = tokio::time::timeout_at(end, self.api.next(why)).await {
                self.answer(call);
            }
        }
        self.no_writes = None;
    }

    /// No request body sent so far holds `secret`.
    pub(crate) fn never_sent(&self, secret: &str) {
        assert!(!self.api.bodies().is_empty());
        for body in self.api.bodies() {
            assert!(!body.contains(secret), "the password went out: {body}");
        }
    }
}
