//! The pool's Prometheus metrics (docs/operations.md#pool-metrics):
//! launches, terminations by reason, idle instances, runs' time to start,
//! capacity errors and throttling. Registered into the registry the
//! `/metrics` server owns.

use std::sync::atomic::AtomicU64;

use orca_db::pool::{Served, Source};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::{counter::Counter, family::Family, gauge::Gauge};
use prometheus_client::registry::Registry;

use super::cost::{market, Use};

/// A metric's labels, as its family keys them.
pub type Labels = Vec<(String, String)>;

fn wait_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.05, 2.0, 14))
}

/// A pass's counts, for [`PoolMetrics::counts`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    idle: i32,
    busy: i32,
    stopped: i32,
    launching: i32,
    /// The idle floor the pass kept to.
    idle_min: i32,
}

impl Counts {
    /// The pool's instances by state, and the idle minimum in force.
    pub fn new(idle: i32, busy: i32, stopped: i32, launching: i32, idle_min: i32) -> Self {
        Counts {
            idle,
            busy,
            stopped,
            launching,
            idle_min,
        }
    }
}

/// Cheap to clone: every family is shared.
#[derive(Clone, Debug)]
pub struct PoolMetrics {
    launches: Family<Labels, Counter>,
    terminations: Family<Labels, Counter>,
    idle: Family<Labels, Gauge>,
    busy: Family<Labels, Gauge>,
    stopped: Family<Labels, Gauge>,
    launching: Family<Labels, Gauge>,
    idle_min: Family<Labels, Gauge>,
    degraded: Family<Labels, Gauge>,
    objective_attained: Family<Labels, Gauge<f64, AtomicU64>>,
    objective_goal: Family<Labels, Gauge<f64, AtomicU64>>,
    objective_day: Family<Labels, Gauge<f64, AtomicU64>>,
    starts: Family<Labels, Counter>,
    instance_seconds: Family<Labels, Counter<f64, AtomicU64>>,
    served: Family<Labels, Counter>,
    stops: Family<Labels, Counter>,
    time_to_start: Family<Labels, Histogram, fn() -> Histogram>,
    capacity_errors: Family<Labels, Counter>,
    throttled: Family<Labels, Counter>,
    reconcile_errors: Family<Labels, Counter>,
}

fn pool(pool: &str) -> Labels {
    vec![("pool".into(), pool.into())]
}

impl PoolMetrics {
    /// The pool metrics, registered under `orca_pool` in `registry`, all at
    /// zero.
    pub fn register(registry: &mut Registry) -> Self {
        let m = PoolMetrics {
            launches: Family::default(),
            terminations: Family::default(),
            idle: Family::default(),
            busy: Family::default(),
            stopped: Family::default(),
            launching: Family::default(),
            idle_min: Family::default(),
            degraded: Family::default(),
            objective_attained: Family::default(),
            objective_goal: Family::default(),
            objective_day: Family::default(),
            starts: Family::default(),
            instance_seconds: Family::default(),
            served: Family::default(),
            stops: Family::default(),
            time_to_start: Family::new_with_constructor(wait_histogram),
            capacity_errors: Family::default(),
            throttled: Family::default(),
            reconcile_errors: Family::default(),
        };
        let r = registry.sub_registry_with_prefix("orca_pool");
        r.register("launches", "Instances launched", m.launches.clone());
        r.register(
            "terminations",
            "Instances terminated, by reason",
            m.terminations.clone(),
        );
        r.register("idle_instances", "Idle instances", m.idle.clone());
        r.register("busy_instances", "Busy instances", m.busy.clone());
        r.register(
            "launching_instances",
            "Instances launched or started and not yet idle",
            m.launching.clone(),
        );
        r.register(
            "idle_min",
            "The idle floor the last pass kept to (idle.min, or a schedule's)",
            m.idle_min.clone(),
        );
        r.register(
            "degraded",
            "1 while the WarmPool's Degraded condition is True",
            m.degraded.clone(),
        );
        m.register_objective(r);
        r.register(
            "stopped_instances",
            "Instances in the stopped reserve",
            m.stopped.clone(),
        );
        r.register(
            "starts",
            "Instances started from the stopped reserve",
            m.starts.clone(),
        );
        r.register(
            "instance_seconds",
            "Instance-seconds seen, by instance type, capacity type and use (idle, busy, stopped, booting)",
            m.instance_seconds.clone(),
        );
        r.register(
            "runs_served",
            "Runs handed an instance, by where it came from (idle, reserve, cold)",
            m.served.clone(),
        );
        r.register(
            "stops",
            "Idle instances stopped into the reserve",
            m.stops.clone(),
        );
        r.register(
            "time_to_start_seconds",
            "How long a run waited for an instance (first ask that found none to the hand-out), by where it came from (idle, reserve, cold)",
            m.time_to_start.clone(),
        );
        r.register(
            "capacity_errors",
            "Launches refused for capacity, by instance type, subnet and code",
            m.capacity_errors.clone(),
        );
        r.register(
            "reconcile_errors",
            "WarmPool reconciles that failed, by stage (api, secret, start, status, finalizer, ec2, panic)",
            m.reconcile_errors.clone(),
        );
        r.register(
            "throttled",
            "EC2 calls answered RequestLimitExceeded",
            m.throttled.clone(),
        );
        m
    }

    /// Counts `n` instances of pool `p` launched (`orca_pool_launches`).
    pub fn launched(&self, p: &str, n: u32) {
        self.launches.get_or_create(&pool(p)).inc_by(u64::from(n));
    }

    /// Counts `n` instances of pool `p` terminated for `reason`
    /// (`orca_pool_terminations`).
    pub fn terminated(&self, p: &str, reason: &str, n: usize) {
        let mut l = pool(p);
        l.push(("reason".into(), reason.into()));
        self.terminations.get_or_create(&l).inc_by(n as u64);
    }

    /// Sets pool `p`'s counts as the last pass found them
    /// (`orca_pool_{idle,busy,stopped,launching}_instances`) and the idle
    /// floor it kept to (`orca_pool_idle_min`).
    pub fn counts(&self, p: &str, c: Counts) {
        let set = |f: &Family<Labels, Gauge>, n: i32| f.get_or_create(&pool(p)).set(i64::from(n));
        set(&self.idle, c.idle);
        set(&self.busy, c.busy);
        set(&self.stopped, c.stopped);
        set(&self.launching, c.launching);
        set(&self.idle_min, c.idle_min);
    }

    /// Whether pool `p`'s `Degraded` condition is True now
    /// (`orca_pool_degraded`).
    pub fn degraded(&self, p: &str, degraded: bool) {
        self.degraded
            .get_or_create(&pool(p))
            .set(i64::from(degraded));
    }

    /// The objective's gauges, under `r`.
    fn register_objective(&self, r: &mut Registry) {
        r.register(
            "objective_attained_ratio",
            "With spec.objective: the share of the last hour's runs that started within its target",
            self.objective_attained.clone(),
        );
        r.register(
            "objective_goal_ratio",
            "With spec.objective: the share of runs it asks to start within its target",
            self.objective_goal.clone(),
        );
        r.register(
            "objective_day_attained_ratio",
            "With spec.objective: the share of the last 24 hours' runs that started within its target",
            self.objective_day.clone(),
        );
    }

    /// Pool `p`'s objective: the share of the last hour's and of the last
    /// day's runs that started within the target (`hour`, `day`; without
    /// runs none) and the share it asks for
    /// (`orca_pool_objective_{attained,day_attained,goal}_ratio`).
    pub fn objective(&self, p: &str, hour: Option<f64>, day: Option<f64>, goal: f64) {
        self.objective_goal.get_or_create(&pool(p)).set(goal);
        for (gauge, share) in [(&self.objective_attained, hour), (&self.objective_day, day)] {
            match share {
                Some(a) => {
                    gauge.get_or_create(&pool(p)).set(a);
                }
                None => {
                    gauge.remove(&pool(p));
                }
            }
        }
    }

    /// Adds `secs` of pool `p`'s instances of `instance_type`, spot or not,
    /// doing `u` (`orca_pool_instance_seconds`).
    pub fn instance_seconds(&self, p: &str, instance_type: &str, spot: bool, u: Use, secs: f64) {
        let mut l = pool(p);
        l.push(("instance_type".into(), instance_type.into()));
        l.push(("capacity_type".into(), market(spot).into()));
        l.push(("use".into(), u.as_str().into()));
        self.instance_seconds.get_or_create(&l).inc_by(secs);
    }

    /// Counts the runs of pool `p` handed an instance, by where each was
    /// served from (`orca_pool_runs_served`).
    pub fn served(&self, p: &str, s: Served) {
        for (from, n) in [
            ("idle", s.idle()),
            ("reserve", s.reserve()),
            ("cold", s.cold()),
        ] {
            let mut l = pool(p);
            l.push(("from".into(), from.into()));
            self.served.get_or_create(&l).inc_by(n);
        }
    }

    /// Counts `n` instances of pool `p` started from the stopped reserve
    /// (`orca_pool_starts`).
    pub fn started(&self, p: &str, n: usize) {
        self.starts.get_or_create(&pool(p)).inc_by(n as u64);
    }

    /// Counts `n` idle instances of pool `p` stopped into the reserve
    /// (`orca_pool_stops`).
    pub fn stopped(&self, p: &str, n: usize) {
        self.stops.get_or_create(&pool(p)).inc_by(n as u64);
    }

    /// Observes one run's time to start in pool `p`, by where its instance
    /// came from (`orca_pool_time_to_start_seconds`).
    pub fn time_to_start(&self, p: &str, source: Source, seconds: f64) {
        let mut l = pool(p);
        l.push(("from".into(), source.as_str().into()));
        self.time_to_start.get_or_create(&l).observe(seconds);
    }

    /// Counts a launch of pool `p` refused for capacity, by instance type,
    /// subnet and error code (`orca_pool_capacity_errors`).
    pub fn capacity_error(&self, p: &str, instance_type: &str, subnet: &str, code: &str) {
        let mut l = pool(p);
        l.push(("instance_type".into(), instance_type.into()));
        l.push(("subnet".into(), subnet.into()));
        l.push(("code".into(), code.into()));
        self.capacity_errors.get_or_create(&l).inc();
    }

    /// Counts an EC2 call of pool `p` answered `RequestLimitExceeded`
    /// (`orca_pool_throttled`).
    pub fn throttle(&self, p: &str) {
        self.throttled.get_or_create(&pool(p)).inc();
    }

    /// A reconcile of WarmPool `p` failed at `stage`.
    pub fn reconcile_failed(&self, p: &str, stage: &str) {
        let mut labels = pool(p);
        labels.push(("stage".into(), stage.into()));
        self.reconcile_errors.get_or_create(&labels).inc();
    }
}

/// What `/metrics` shows of the metrics `register` makes, once `change`
/// has been made to them (for the tests of either controller's metrics).
#[cfg(test)]
pub(crate) fn exported<M>(
    register: impl FnOnce(&mut Registry) -> M,
    change: impl FnOnce(&M),
) -> String {
    let mut registry = Registry::default();
    change(&register(&mut registry));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_reconcile_is_counted_by_pool_and_stage() {
        let text = exported(PoolMetrics::register, |m| {
            m.reconcile_failed("ns/p", "secret");
            m.reconcile_failed("ns/p", "secret");
        });
        assert!(
            text.contains(r#"orca_pool_reconcile_errors_total{pool="ns/p",stage="secret"} 2"#),
            "{text}"
        );
    }
}
