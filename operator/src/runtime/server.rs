//! The operator's HTTP endpoints: `/metrics` (Prometheus text), `/healthz`
//! (the replica makes progress: its election looks at the Lease, and no
//! reconcile has hung — else the kubelet restarts it) and `/readyz` (this
//! replica knows its part: it runs the controllers, or it is a standby
//! waiting for the lease).

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex, PoisonError,
    },
    time::{Duration, Instant},
};

use axum::{extract::State, http::StatusCode, response::IntoResponse, routing::get, Router};
use prometheus_client::registry::Registry;

/// Whether this replica is ready, and its [`Progress`]; shared with the
/// leader loop, which marks each look at the Lease.
#[derive(Clone, Default, Debug)]
pub struct Readiness {
    ready: Arc<AtomicBool>,
    /// Why this replica holds back from everything, if it does.
    held: Arc<Mutex<Option<String>>>,
    progress: Progress,
}

impl Readiness {
    /// Readiness whose `/healthz` judges `progress`.
    pub fn with_progress(progress: Progress) -> Self {
        Readiness {
            ready: Arc::default(),
            held: Arc::default(),
            progress,
        }
    }

    /// This replica holds back from the election and every controller
    /// because of `why` (one line, with what to do), or no longer does:
    /// `/readyz` fails saying so meanwhile.
    pub fn hold(&self, why: Option<String>) {
        *self.held.lock().unwrap_or_else(PoisonError::into_inner) = why;
    }

    /// Why this replica holds back, if it does ([`Readiness::hold`]).
    pub fn held(&self) -> Option<String> {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether `/readyz` answers ready: this replica knows whether it
    /// leads or stands by.
    pub fn set(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Whether this replica is ready, as `/readyz` answers.
    pub fn get(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// The election loop looked at the Lease, whatever it found.
    pub fn looked(&self) {
        self.progress.looked();
    }

    /// The [`Progress`] that `/healthz` judges.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }
}

/// Whether this replica makes progress, for `/healthz`: the election loop
/// looks at the Lease every few seconds (whatever the answer), and every
/// reconcile ends — each call in one has a time limit, so one that runs for
/// [`Progress::stuck_after`] has hung, and only a restart frees it.
#[derive(Clone, Debug)]
pub struct Progress(Arc<ProgressInner>);

#[derive(Debug)]
struct ProgressInner {
    stuck_after: Duration,
    started: Instant,
    /// Milliseconds since `started` of the election's last look; 0: none yet.
    last_look: AtomicU64,
    next: AtomicU64,
    in_flight: Mutex<HashMap<u64, (String, Instant)>>,
}

/// The election loop looks every 2 s; this long without a look, it hangs.
const LOOK_STALE: Duration = Duration::from_secs(60);

impl Default for Progress {
    fn default() -> Self {
        Progress::new(Duration::from_secs(300))
    }
}

impl Progress {
    /// A reconcile running `stuck_after` or longer has hung.
    pub fn new(stuck_after: Duration) -> Self {
        Progress(Arc::new(ProgressInner {
            stuck_after,
            started: Instant::now(),
            last_look: AtomicU64::new(0),
            next: AtomicU64::new(0),
            in_flight: Mutex::new(HashMap::new()),
        }))
    }

    /// How long a reconcile may run before it counts as hung.
    pub fn stuck_after(&self) -> Duration {
        self.0.stuck_after
    }

    /// How long a reconcile may run before it is stopped
    /// ([`super::guard::guarded`]): a fifth of [`Progress::stuck_after`]
    /// (a minute by default), at least a second, so that a slow tenant's
    /// object is given up long before `/healthz` would restart the replica.
    pub fn deadline(&self) -> Duration {
        (self.0.stuck_after / 5).max(Duration::from_secs(1))
    }

    /// The election loop looked at the Lease (with any outcome).
    pub fn looked(&self) {
        let ms = self.0.started.elapsed().as_millis().max(1) as u64;
        self.0.last_look.store(ms, Ordering::Relaxed);
    }

    /// `what` (a reconcile of one object) begins; it ends when the guard
    /// is dropped, however the reconcile ends.
    pub fn begin(&self, what: String) -> InFlight {
        let id = self.0.next.fetch_add(1, Ordering::Relaxed);
        self.in_flight().insert(id, (what, Instant::now()));
        InFlight {
            progress: self.clone(),
            id,
        }
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (String, Instant)>> {
        // A panic while holding this lock leaves a map still whole.
        self.0.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Why this replica makes no progress, if it makes none.
    pub fn check(&self) -> Result<(), String> {
        let look = self.0.last_look.load(Ordering::Relaxed);
        if look > 0 {
            let since = self
                .0
                .started
                .elapsed()
                .saturating_sub(Duration::from_millis(look));
            if since > LOOK_STALE {
                return Err(format!(
                    "the election has not looked at the Lease for {}s",
                    since.as_secs()
                ));
            }
        }
        let in_flight = self.in_flight();
        let stuck = in_flight
            .values()
            .filter(|(_, at)| at.elapsed() >= self.0.stuck_after)
            .max_by_key(|(_, at)| at.elapsed());
        match stuck {
            Some((what, at)) => Err(format!(
                "the reconcile of {what} has run for {}s (a hung call: only a restart frees it)",
                at.elapsed().as_secs()
            )),
            None => Ok(()),
        }
    }
}

/// A reconcile in flight (see [`Progress::begin`]).
pub struct InFlight {
    progress: Progress,
    id: u64,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.progress.in_flight().remove(&self.id);
    }
}

#[derive(Clone)]
struct Shared {
    registry: Arc<Registry>,
    ready: Readiness,
}

/// The routes, for [`serve`] and for tests.
pub fn router(registry: Arc<Registry>, ready: Readiness) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(Shared { registry, ready })
}

/// Serves [`router`] on `listen` until the process ends.
pub async fn serve(
    listen: SocketAddr,
    registry: Arc<Registry>,
    ready: Readiness,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    tracing::info!(%listen, "serving /metrics, /healthz and /readyz");
    axum::serve(listener, router(registry, ready)).await
}

async fn healthz(State(s): State<Shared>) -> impl IntoResponse {
    match s.ready.progress().check() {
        Ok(()) => (StatusCode::OK, "ok\n".to_string()),
        Err(why) => {
            tracing::warn!("/healthz: {why}");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("unhealthy: {why}\n"),
            )
        }
    }
}

async fn metrics(State(s): State<Shared>) -> impl IntoResponse {
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, &s.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                "content-type",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [("content-type", "text/plain; charset=utf-8")],
            format!("encoding the metrics: {e}\n"),
        ),
    }
}

async fn readyz(State(s): State<Shared>) -> impl IntoResponse {
    if let Some(why) = s.ready.held() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        )
    } else if s.ready.get() {
        (StatusCode::OK, "ready\n".to_string())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the lease is not settled yet\n".to_string(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let code = out[9..12].parse().unwrap();
        (code, out)
    }

    #[tokio::test]
    async fn health_readiness_and_metrics_answer() {
        let mut registry = Registry::default();
        let m = crate::scheduler::k8s::Metrics::register(&mut registry);
        m.reconciled("jobs", "orca");
        let progress = Progress::new(Duration::from_millis(200));
        let ready = Readiness::with_progress(progress.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = router(Arc::new(registry), ready.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });

        assert_eq!(get(addr, "/healthz").await.0, 200);
        assert_eq!(get(addr, "/readyz").await.0, 503);
        ready.set(true);
        assert_eq!(get(addr, "/readyz").await.0, 200);
        let (code, body) = get(addr, "/metrics").await;
        assert_eq!(code, 200);
        assert!(
            body.contains(
                r#"orca_scheduler_reconciles_total{namespace="jobs",scheduler="orca"} 1"#
            ),
            "{body}"
        );

        // A reconcile that does not end makes the replica unhealthy, naming
        // it; once it ends the replica is healthy again.
        let hung = progress.begin("Scheduler jobs/orca".into());
        assert_eq!(get(addr, "/healthz").await.0, 200, "not hung yet");
        tokio::time::sleep(Duration::from_millis(250)).await;
        let (code, body) = get(addr, "/healthz").await;
        assert_eq!(code, 503);
        assert!(body.contains("Scheduler jobs/orca has run for"), "{body}");
        drop(hung);
        assert_eq!(get(addr, "/healthz").await.0, 200);
    }
}
