//! A client's requests, counted: a tower layer for a kube client
//! (`ClientBuilder::with_layer`), for the benches that say what a controller
//! asks of the API server.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    task::{Context, Poll},
};

/// Every request a client sent, as `METHOD path?query`.
#[derive(Clone, Default)]
pub struct Requests(Arc<Mutex<Vec<String>>>);

impl Requests {
    /// The requests sent since the last take.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl<S> tower::Layer<S> for Requests {
    type Service = Counted<S>;
    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            seen: self.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Counted<S> {
    inner: S,
    seen: Requests,
}

impl<S, B> tower::Service<http::Request<B>> for Counted<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let line = format!("{} {}", req.method(), req.uri());
        self.seen
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(line);
        self.inner.call(req)
    }
}

/// `requests` other than the watches' long-running GETs, as
/// `n METHOD path` by path (the query dropped), each count divided by
/// `per` (the Schedulers, say); "none" when there are none.
pub fn per_minute(requests: &[String], per: usize) -> String {
    let mut by: BTreeMap<String, usize> = BTreeMap::new();
    for r in requests.iter().filter(|r| !r.contains("watch=true")) {
        let (method, rest) = r.split_once(' ').unwrap_or((r, ""));
        let path = rest.split('?').next().unwrap_or(rest);
        *by.entry(format!("{method} {path}")).or_default() += 1;
    }
    if by.is_empty() {
        return "none".into();
    }
    by.iter()
        .map(|(p, n)| match per {
            0 | 1 => format!("{n} {p}"),
            per => format!("{:.2} {p}", *n as f64 / per as f64),
        })
        .collect::<Vec<_>>()
        .join(", ")
}
