//! The Kubernetes API for the Kubernetes-mode tests: kube's `Client` over
//! `tower_test::mock`, and an `ApiServerVerifier` that answers each call
//! the reconcile makes, in order, asserting its method, path and body (the
//! pattern of kube-rs's controller-rs). Every request body is kept, so a
//! test can assert that no secret went out.
//!
//! Used by the `k8s_mode` and `warm_pool_k8s` tests, for what a real API
//! server cannot show quickly (a fence closing mid-reconcile, the election
//! under a paused clock, fields an older writer left); what a user does on a
//! cluster is tested on a real one (`real_cluster`).

use std::sync::{
    atomic::{AtomicBool, Ordering},
    Arc, Mutex,
};
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::{batch::v1::Job, core::v1::Pod, core::v1::Secret};
use k8s_openapi::ByteString;
use kube::{client::Body, Client};
use orca_operator::crd::Scheduler;
use serde_json::{json, Value};
use tower_test::mock::{self, Handle, SendResponse};

pub const NS: &str = "default";
pub const NAME: &str = "orca";

/// One request the operator made.
pub struct Call {
    method: Method,
    path: String,
    query: String,
    content_type: String,
    body: Value,
    reply: SendResponse<Response<Body>>,
}

impl Call {
    /// The request's method.
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The request's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The request's query string.
    pub fn query(&self) -> &str {
        &self.query
    }

    /// The request's content type.
    pub fn content_type(&self) -> &str {
        &self.content_type
    }

    /// The request's body.
    pub fn body(&self) -> &Value {
        &self.body
    }
}

impl Call {
    /// Asserts that this is a server-side apply of a status, as
    /// `orca-operator`, forced, of a `kind` object named `name`; its
    /// `status`, which is the whole status the operator wants.
    pub fn applied_status(&self, kind: &str, name: &str) -> Value {
        assert_eq!(
            self.content_type, "application/apply-patch+yaml",
            "a status write that is not a server-side apply: {} {}",
            self.content_type, self.body
        );
        assert!(
            self.query.contains("fieldManager=orca-operator"),
            "{}",
            self.query
        );
        assert!(self.query.contains("force=true"), "{}", self.query);
        assert_eq!(
            self.body["apiVersion"], "orca.dev/v1alpha1",
            "{}",
            self.body
        );
        assert_eq!(self.body["kind"], kind, "{}", self.body);
        assert_eq!(self.body["metadata"]["name"], name, "{}", self.body);
        let status = self.body["status"].clone();
        assert!(status.is_object(), "{}", self.body);
        assert!(
            !has_null(&status),
            "an applied status leaves fields out, it does not null them: {status}"
        );
        status
    }
}

/// Whether `v` holds a `null` anywhere.
fn has_null(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.values().any(has_null),
        Value::Array(a) => a.iter().any(has_null),
        _ => false,
    }
}

impl Call {
    /// Answers the call with `code` and `body` as JSON.
    pub fn answer(self, code: StatusCode, body: &Value) {
        let bytes = serde_json::to_vec(body).unwrap();
        self.reply.send_response(
            Response::builder()
                .status(code)
                .body(Body::from(bytes))
                .unwrap(),
        );
    }
}

pub struct ApiServerVerifier {
    handle: Handle<Request<Body>, Response<Body>>,
    /// Every request body seen, as text.
    bodies: Vec<String>,
}

impl ApiServerVerifier {
    /// Every request body seen, as text.
    pub fn bodies(&self) -> &Vec<String> {
        &self.bodies
    }
}

/// A client whose every request the verifier answers.
pub fn mock_client() -> (Client, ApiServerVerifier) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (
        Client::new(service, NS),
        ApiServerVerifier {
            handle,
            bodies: Vec::new(),
        },
    )
}

/// Applies a JSON merge patch (RFC 7386) to `target`, as the API server
/// does: `null` removes, an array replaces the whole array.
pub fn merge(target: &mut Value, patch: &Value) {
    match (target.is_object(), patch) {
        (true, Value::Object(p)) => {
            let t = target.as_object_mut().unwrap();
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

fn stamp(mut object: Value) -> Value {
    let meta = object["metadata"].as_object_mut().unwrap();
    meta.insert(
        "uid".into(),
        json!(format!("uid-{}", meta["name"].as_str().unwrap_or("?"))),
    );
    meta.insert("creationTimestamp".into(), json!(now()));
    meta.insert("resourceVersion".into(), json!("1"));
    object
}

/// Now, as the API server writes times.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

impl ApiServerVerifier {
    /// The next call, within a few seconds.
    pub async fn next(&mut self, expected: &str) -> Call {
        let next = tokio::time::timeout(Duration::from_secs(10), self.handle.next_request())
            .await
            .unwrap_or_else(|_| panic!("the operator made no call; expected {expected}"))
            .unwrap_or_else(|| panic!("the client is gone; expected {expected}"));
        let (request, reply) = next;
        let method = request.method().clone();
        let path = request.uri().path().to_string();
        let query = request.uri().query().unwrap_or("").to_string();
        let content_type = request
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let bytes = request.into_body().collect_bytes().await.unwrap();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::String(text.clone()))
        };
        self.bodies.push(format!("{method} {path}?{query} {text}"));
        Call {
            method,
            path,
            query,
            content_type,
            body,
            reply,
        }
    }

    /// Within `within`, every clone of the client is dropped — no task
    /// that could call the API server is left — and no call came before.
    pub async fn client_dropped(&mut self, within: Duration) {
        let next = tokio::time::timeout(within, self.handle.next_request())
            .await
            .unwrap_or_else(|_| panic!("the client is still held after {within:?}"));
        if let Some((request, _)) = next {
            panic!(
                "a call, where none was expected: {} {}",
                request.method(),
                request.uri()
            );
        }
    }

    async fn expect(&mut self, method: Method, path: &str) -> Call {
        let what = format!("{method} {path}");
        let call = self.next(&what).await;
        assert_eq!(
            (call.method.as_str(), call.path.as_str()),
            (method.as_str(), path),
            "expected {what}, the operator sent {} {}?{} {}",
            call.method,
            call.path,
            call.query,
            call.body
        );
        call
    }

    /// The observe stage: the Scheduler's pods and Jobs (by its label), then
    /// its Secret (`None`: 404).
    pub async fn observe(&mut self, pods: &[Pod], jobs: &[Job], secret: Option<&Secret>) {
        self.observe_until_secret(pods, jobs, secret, || {}).await
    }

    /// [`Self::observe`], with `before` run as the Secret is asked for,
    /// before it is answered.
    pub async fn observe_until_secret(
        &mut self,
        pods: &[Pod],
        jobs: &[Job],
        secret: Option<&Secret>,
        before: impl FnOnce(),
    ) {
        let selector = "labelSelector=orca.dev%2Fscheduler%3Dorca";
        let call = self
            .expect(Method::GET, "/api/v1/namespaces/default/pods")
            .await;
        assert!(call.query.contains(selector), "{}", call.query);
        call.answer(
            StatusCode::OK,
            &json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": pods}),
        );
        let call = self
            .expect(Method::GET, "/apis/batch/v1/namespaces/default/jobs")
            .await;
        assert!(call.query.contains(selector), "{}", call.query);
        call.answer(
            StatusCode::OK,
            &json!({"apiVersion": "batch/v1", "kind": "JobList", "metadata": {"resourceVersion": "1"}, "items": jobs}),
        );
        let call = self
            .expect(Method::GET, "/api/v1/namespaces/default/secrets/orca-db")
            .await;
        before();
        match secret {
            Some(s) => call.answer(StatusCode::OK, &serde_json::to_value(s).unwrap()),
            None => call.answer(
                StatusCode::NOT_FOUND,
                &json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                        "message": "secrets \"orca-db\" not found", "reason": "NotFound", "code": 404}),
            ),
        }
    }

    /// A pod created; the pod as the API server stores it.
    pub async fn create_pod(&mut self) -> Pod {
        let call = self
            .expect(Method::POST, "/api/v1/namespaces/default/pods")
            .await;
        let stored = stamp(call.body.clone());
        call.answer(StatusCode::CREATED, &stored);
        serde_json::from_value(stored).unwrap()
    }

    pub async fn delete_pod(&mut self, name: &str) {
        let call = self
            .expect(
                Method::DELETE,
                &format!("/api/v1/namespaces/default/pods/{name}"),
            )
            .await;
        assert_eq!(
            call.body["propagationPolicy"], "Background",
            "{}",
            call.body
        );
        call.answer(
            StatusCode::OK,
            &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS,
                    "deletionTimestamp": now()}}),
        );
    }

    pub async fn create_job(&mut self) -> Job {
        let call = self
            .expect(Method::POST, "/apis/batch/v1/namespaces/default/jobs")
            .await;
        let stored = stamp(call.body.clone());
        call.answer(StatusCode::CREATED, &stored);
        serde_json::from_value(stored).unwrap()
    }

    pub async fn delete_job(&mut self, name: &str) {
        let call = self
            .expect(
                Method::DELETE,
                &format!("/apis/batch/v1/namespaces/default/jobs/{name}"),
            )
            .await;
        call.answer(
            StatusCode::OK,
            &json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success"}),
        );
    }

    /// An Event on the Scheduler: (type, reason, note).
    pub async fn event(&mut self) -> (String, String, String) {
        let call = self.next("an Event").await;
        assert_eq!(
            call.method,
            Method::POST,
            "expected an Event, got {} {} {}",
            call.method,
            call.path,
            call.body
        );
        assert_eq!(
            call.path,
            "/apis/events.k8s.io/v1/namespaces/default/events"
        );
        let e = call.body.clone();
        assert_eq!(e["regarding"]["kind"], "Scheduler", "{e}");
        assert_eq!(e["regarding"]["name"], NAME);
        assert_eq!(e["reportingController"], "orca-operator");
        let got = (
            e["type"].as_str().unwrap_or_default().to_string(),
            e["reason"].as_str().unwrap_or_default().to_string(),
            e["note"].as_str().unwrap_or_default().to_string(),
        );
        call.answer(StatusCode::CREATED, &e);
        got
    }

    /// The reasons of the next `n` Events.
    pub async fn events(&mut self, n: usize) -> Vec<String> {
        let mut reasons = Vec::new();
        for _ in 0..n {
            reasons.push(self.event().await.1);
        }
        reasons
    }

    /// A server-side apply of the Scheduler's whole status, by
    /// `orca-operator`: stored in `scheduler` as the API server would (the
    /// operator is the status's only manager, so what it no longer sets is
    /// gone), so the next reconcile sees it; the applied `status`.
    pub async fn patch_status(&mut self, scheduler: &mut Scheduler) -> Value {
        let call = self
            .expect(
                Method::PATCH,
                "/apis/orca.dev/v1alpha1/namespaces/default/schedulers/orca/status",
            )
            .await;
        let status = call.applied_status("Scheduler", NAME);
        let mut whole = serde_json::to_value(&*scheduler).unwrap();
        whole["status"] = status.clone();
        *scheduler = serde_json::from_value(whole.clone()).unwrap();
        call.answer(StatusCode::OK, &whole);
        status
    }
}

impl ApiServerVerifier {
    /// [`Self::patch_status`] on a Scheduler whose status an older
    /// operator wrote by merge patches: the fields it set stay theirs too,
    /// so the apply's answer still has what the operator left out; then
    /// the operator's merge patch that removes exactly those. The applied
    /// status, and that patch's.
    pub async fn patch_status_over_legacy(&mut self, scheduler: &mut Scheduler) -> (Value, Value) {
        let path = "/apis/orca.dev/v1alpha1/namespaces/default/schedulers/orca/status";
        let call = self.expect(Method::PATCH, path).await;
        let applied = call.applied_status("Scheduler", NAME);
        let mut whole = serde_json::to_value(&*scheduler).unwrap();
        if whole.get("status").is_none_or(Value::is_null) {
            whole["status"] = json!({});
        }
        merge(&mut whole["status"], &applied);
        call.answer(StatusCode::OK, &whole);
        let call = self.expect(Method::PATCH, path).await;
        assert_eq!(
            call.content_type, "application/merge-patch+json",
            "{}",
            call.body
        );
        let removal = call.body["status"].clone();
        merge(&mut whole["status"], &removal);
        *scheduler = serde_json::from_value(whole.clone()).unwrap();
        call.answer(StatusCode::OK, &whole);
        (applied, removal)
    }
}

/// The API server's 404 for `resource` `name`.
pub fn not_found(resource: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
           "message": format!("{resource} \"{name}\" not found"), "reason": "NotFound", "code": 404})
}

/// A Secret `orca-db` with `data`.
pub fn secret(data: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("orca-db".into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    }
}

/// The Lease part of an API server, for the leader-election tests: one
/// Lease, read (`GET`), created (`POST`) and merge-patched (`PATCH`, `null`
/// removes) as the API server would — a patch naming a `resourceVersion`
/// that is not the stored one is a 409, and each write gets a new one.
/// Every call is logged as "METHOD content-type body"; while `failing`,
/// every call is answered 503.
#[derive(Clone, Default)]
pub struct LeaseServer {
    lease: Arc<Mutex<Option<Value>>>,
    log: Arc<Mutex<Vec<String>>>,
    failing: Arc<AtomicBool>,
    version: Arc<Mutex<u64>>,
}

impl LeaseServer {
    /// What the server was asked, in order.
    pub fn log(&self) -> &Arc<Mutex<Vec<String>>> {
        &self.log
    }

    /// Whether it answers every request with an error.
    pub fn failing(&self) -> &Arc<AtomicBool> {
        &self.failing
    }
}

impl LeaseServer {
    /// Answers every call of `verifier`'s client until the client is gone.
    pub fn serve(&self, verifier: ApiServerVerifier) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        let mut handle = verifier.handle;
        tokio::spawn(async move {
            while let Some((request, reply)) = handle.next_request().await {
                let method = request.method().clone();
                let path = request.uri().path().to_string();
                let kind = request
                    .headers()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                let bytes = request.into_body().collect_bytes().await.unwrap();
                let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                me.log
                    .lock()
                    .unwrap()
                    .push(format!("{method} {kind} {body}"));
                assert!(
                    path.starts_with("/apis/coordination.k8s.io/v1/namespaces/ops/leases"),
                    "{path}"
                );
                let (code, answer) = if me.failing.load(Ordering::SeqCst) {
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                               "reason": "ServiceUnavailable", "code": 503}),
                    )
                } else {
                    me.answer(&method, body)
                };
                let call = Call {
                    method,
                    path,
                    query: String::new(),
                    content_type: String::new(),
                    body: Value::Null,
                    reply,
                };
                call.answer(code, &answer);
            }
        })
    }

    /// The next `resourceVersion`.
    fn bump(&self, lease: &mut Value) {
        let mut v = self.version.lock().unwrap();
        *v += 1;
        lease["metadata"]["resourceVersion"] = json!(v.to_string());
    }

    fn answer(&self, method: &Method, body: Value) -> (StatusCode, Value) {
        let mut lease = self.lease.lock().unwrap();
        let missing = json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                             "reason": "NotFound", "code": 404});
        let conflict = |reason: &str| {
            json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                   "reason": reason, "code": 409})
        };
        match (method.as_str(), lease.as_mut()) {
            ("GET", Some(l)) => (StatusCode::OK, l.clone()),
            ("GET", None) | ("PATCH", None) => (StatusCode::NOT_FOUND, missing),
            ("POST", None) => {
                let mut stored = stamp(body);
                self.bump(&mut stored);
                *lease = Some(stored.clone());
                (StatusCode::CREATED, stored)
            }
            ("POST", Some(_)) => (StatusCode::CONFLICT, conflict("AlreadyExists")),
            ("PATCH", Some(l)) => {
                let wanted = &body["metadata"]["resourceVersion"];
                if !wanted.is_null() && *wanted != l["metadata"]["resourceVersion"] {
                    return (StatusCode::CONFLICT, conflict("Conflict"));
                }
                merge(l, &json!({"spec": body["spec"]}));
                self.bump(l);
                (StatusCode::OK, l.clone())
            }
            (other, _) => panic!("a Lease call the operator should not make: {other}"),
        }
    }

    /// Another replica holds the lease (takes or renews it): a new record.
    pub fn taken_by(&self, identity: &str) {
        let mut lease = self.lease.lock().unwrap();
        let l = lease.as_mut().expect("the lease exists");
        merge(
            l,
            &json!({"spec": {"holderIdentity": identity, "renewTime": micro_now(),
                             "acquireTime": micro_now(), "leaseDurationSeconds": 2}}),
        );
        self.bump(l);
    }

    /// A Lease held by `identity`, renewed long ago by its own clock.
    pub fn held_by(&self, identity: &str) {
        let mut l = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "orca-operator", "namespace": "ops"},
            "spec": {"holderIdentity": identity, "leaseDurationSeconds": 2,
                     "acquireTime": "2000-01-01T00:00:00.000000Z",
                     "renewTime": "2000-01-01T00:00:00.000000Z", "leaseTransitions": 4},
        });
        self.bump(&mut l);
        *self.lease.lock().unwrap() = Some(l);
    }

    pub fn holder(&self) -> Option<String> {
        let lease = self.lease.lock().unwrap();
        lease.as_ref()?["spec"]["holderIdentity"]
            .as_str()
            .map(String::from)
    }

    /// The Lease's spec as stored.
    pub fn spec(&self) -> Value {
        let lease = self.lease.lock().unwrap();
        lease.as_ref().map_or(Value::Null, |l| l["spec"].clone())
    }
}

fn micro_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}
