//! The operator's HTTP endpoints: `/metrics` (Prometheus text), `/healthz`
//! (the process runs) and `/readyz` (this replica knows its part: it runs
//! the controllers, or it is a standby waiting for the lease).

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
};

use axum::{extract::State, http::StatusCode, response::IntoResponse, routing::get, Router};
use prometheus_client::registry::Registry;

/// Whether this replica is ready; shared with the leader loop.
#[derive(Clone, Default, Debug)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Relaxed);
    }

    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
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
        .route("/healthz", get(|| async { "ok\n" }))
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
    if s.ready.get() {
        (StatusCode::OK, "ready\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the lease is not settled yet\n",
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
        let m = crate::k8s::Metrics::register(&mut registry);
        m.reconciled("jobs", "orca");
        let ready = Readiness::default();
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
    }
}
