//! The Scheduler controller's Prometheus metrics
//! (docs/operations.md#scheduler-metrics): reconciles,
//! reconcile errors by stage, handover durations (`lastHandover` started →
//! drained) and the phase of each Scheduler. Registered into the registry
//! the `/metrics` server owns, beside the pool's (`crate::k8s::metrics`).

use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::{counter::Counter, family::Family, gauge::Gauge};
use prometheus_client::registry::Registry;

use crate::crd::{Phase, SchedulerStatus};

/// A series' labels, in the order they are written.
type Labels = Vec<(String, String)>;

const PHASES: [Phase; 8] = [
    Phase::Pending,
    Phase::Starting,
    Phase::HandingOver,
    Phase::Registering,
    Phase::Draining,
    Phase::Ready,
    Phase::Degraded,
    Phase::Paused,
];

fn handover_histogram() -> Histogram {
    // 1 s … ~4.5 h: a handover lasts as long as the old runs drain.
    Histogram::new(exponential_buckets(1.0, 2.0, 15))
}

/// Cheap to clone: every family is shared.
#[derive(Clone, Debug)]
pub struct Metrics {
    reconciles: Family<Labels, Counter>,
    errors: Family<Labels, Counter>,
    handovers: Family<Labels, Histogram, fn() -> Histogram>,
    phase: Family<Labels, Gauge>,
}

fn of(namespace: &str, name: &str) -> Labels {
    vec![
        ("namespace".into(), namespace.into()),
        ("scheduler".into(), name.into()),
    ]
}

impl Metrics {
    /// The Scheduler metrics, registered under `orca_scheduler` in
    /// `registry`, all at zero.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Metrics {
            reconciles: Family::default(),
            errors: Family::default(),
            handovers: Family::new_with_constructor(handover_histogram),
            phase: Family::default(),
        };
        let r = registry.sub_registry_with_prefix("orca_scheduler");
        r.register(
            "reconciles",
            "Reconciles of a Scheduler",
            m.reconciles.clone(),
        );
        r.register(
            "reconcile_errors",
            "Reconciles that failed, by stage (observe, act, status, finalizer)",
            m.errors.clone(),
        );
        r.register(
            "handover_duration_seconds",
            "Handovers from the new pod's start to the old instances drained",
            m.handovers.clone(),
        );
        r.register(
            "phase",
            "1 for the phase a Scheduler is in, 0 for the others",
            m.phase.clone(),
        );
        m
    }

    /// Counts one reconcile of Scheduler `namespace/name`
    /// (`orca_scheduler_reconciles`), at the start of each pass.
    pub fn reconciled(&self, namespace: &str, name: &str) {
        self.reconciles.get_or_create(&of(namespace, name)).inc();
    }

    /// Counts a failed reconcile of Scheduler `namespace/name` at `stage`
    /// (`orca_scheduler_reconcile_errors`).
    pub fn failed(&self, namespace: &str, name: &str, stage: &str) {
        let mut l = of(namespace, name);
        l.push(("stage".into(), stage.into()));
        self.errors.get_or_create(&l).inc();
    }

    /// Records what a reconcile's status says: the phase, and a handover
    /// that has just finished draining (`before` had not).
    pub fn status(
        &self,
        namespace: &str,
        name: &str,
        before: &SchedulerStatus,
        after: &SchedulerStatus,
    ) {
        for p in PHASES {
            let mut l = of(namespace, name);
            l.push(("phase".into(), p.as_str().into()));
            self.phase
                .get_or_create(&l)
                .set(i64::from(p == after.phase));
        }
        let was_drained = before
            .last_handover
            .as_ref()
            .and_then(|h| h.drained.as_ref());
        let Some(h) = after.last_handover.as_ref() else {
            return;
        };
        if let (None, Some(started), Some(drained)) = (was_drained, &h.started, &h.drained) {
            let (Ok(s), Ok(d)) = (
                chrono::DateTime::parse_from_rfc3339(started),
                chrono::DateTime::parse_from_rfc3339(drained),
            ) else {
                return;
            };
            let seconds = (d - s).num_milliseconds().max(0) as f64 / 1000.0;
            self.handovers
                .get_or_create(&of(namespace, name))
                .observe(seconds);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::HandoverStatus;

    #[test]
    fn the_phase_and_a_finished_handover_are_exported() {
        let before = SchedulerStatus {
            last_handover: Some(HandoverStatus {
                from: "v1".into(),
                to: "v2".into(),
                started: Some("2026-01-01T00:00:00Z".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut after = before.clone();
        after.phase = Phase::Ready;
        if let Some(h) = after.last_handover.as_mut() {
            h.drained = Some("2026-01-01T00:01:30Z".into());
        }
        let text = crate::warmpool::metrics::exported(Metrics::register, |m| {
            m.reconciled("jobs", "orca");
            m.failed("jobs", "orca", "act");
            m.status("jobs", "orca", &before, &after);
            m.status("jobs", "orca", &after, &after);
        });
        assert!(
            text.contains(
                r#"orca_scheduler_phase{namespace="jobs",scheduler="orca",phase="Ready"} 1"#
            ),
            "{text}"
        );
        assert!(text.contains(
            r#"orca_scheduler_phase{namespace="jobs",scheduler="orca",phase="Degraded"} 0"#
        ));
        assert!(text.contains(r#"orca_scheduler_handover_duration_seconds_sum{namespace="jobs",scheduler="orca"} 90.0"#), "{text}");
        assert!(text.contains(
            r#"orca_scheduler_handover_duration_seconds_count{namespace="jobs",scheduler="orca"} 1"#
        ));
        assert!(text.contains(r#"orca_scheduler_reconcile_errors_total{namespace="jobs",scheduler="orca",stage="act"} 1"#));
    }
}
