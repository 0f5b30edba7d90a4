//! Every metric the Kubernetes mode exports, in the one registry the
//! `/metrics` server owns: the Scheduler controller's, the pools' and the
//! election's.

use std::sync::atomic::AtomicI64;

use prometheus_client::{metrics::gauge::Gauge, registry::Registry};

use crate::scheduler::k8s::Metrics;
use crate::warmpool::PoolMetrics;

/// Registers every metric in `registry`: the Scheduler's, the pools' and
/// `orca_operator_leader` (1 while this replica holds the Lease and runs
/// the controllers), which is returned last.
pub fn register_all(registry: &mut Registry) -> (Metrics, PoolMetrics, Gauge<i64, AtomicI64>) {
    let metrics = Metrics::register(registry);
    let pool = PoolMetrics::register(registry);
    let leading = Gauge::<i64, AtomicI64>::default();
    registry.register(
        "orca_operator_leader",
        "1 while this replica holds the Lease and runs the controllers",
        leading.clone(),
    );
    (metrics, pool, leading)
}
