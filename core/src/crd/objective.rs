//! A WarmPool's time-to-start objective: its spec (how long a run may wait
//! for its instance, for what share of runs) and what its status shows
//! (how close the pool is, what it keeps and why).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Size the pool to how long runs may wait for an instance, rather than to
/// a count: for each coming hour, from the pool's own demand history (the
/// same hour of the last four weeks, runs counted within one cold start of
/// each other) and the start times it has measured from each source (an
/// idle hand-out, a start from the stopped reserve, a cold launch), the
/// operator keeps the idle and stopped instances that start the given
/// share of runs within the target at the least cost. idle, stopped,
/// schedules and the forecast stay floors and ceilings: the objective only
/// adds within them, and within maxInstances and the class's limits.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Objective {
    pub time_to_start: StartTarget,
    /// What a stopped instance costs a second against a running one (its
    /// volumes' price against the instance's), for choosing between idle
    /// instances and the stopped reserve. 0.001 to 1. Default 0.05 (a small
    /// instance with a 20 GiB gp3 volume).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.001, max = 1.0))]
    pub stopped_cost_ratio: Option<f64>,
    /// What the instance types cost, by type name (e.g. `m7i.large`), in
    /// any one currency an hour: the objective weighs an idle instance
    /// against a stopped one at the prices of the type the next launch
    /// goes to (stoppedCostRatio for a type not listed), and the status
    /// shows what it expects to spend against the static floor. At most
    /// 100 types.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 100))]
    pub prices: BTreeMap<String, TypePrice>,
}

/// One instance type's prices an hour.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TypePrice {
    /// Running, on demand. More than 0.
    #[schemars(range(min = 0.0))]
    pub on_demand: f64,
    /// Running, on spot; on-demand's when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub spot: Option<f64>,
    /// Stopped: its volumes. At least 0.
    #[schemars(range(min = 0.0))]
    pub stopped: f64,
}

impl TypePrice {
    /// Running, on spot or on demand.
    pub fn running(&self, spot: bool) -> f64 {
        match (spot, self.spot) {
            (true, Some(p)) => p,
            _ => self.on_demand,
        }
    }
}

/// The objective's target.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartTarget {
    /// The share of runs, in percent, that must start within `seconds`. 50
    /// to 100. Default 95.
    #[serde(default = "default_percentile")]
    #[schemars(range(min = 50, max = 100))]
    pub percentile: i32,
    /// The longest wait that counts as met, in seconds: from a run's first
    /// ask that found no instance to its hand-out. 1 to 3600.
    #[schemars(range(min = 1, max = 3600))]
    pub seconds: i64,
}

fn default_percentile() -> i32 {
    95
}

impl Objective {
    /// [`Objective::stopped_cost_ratio`], defaulted and within its range.
    pub fn stopped_cost(&self) -> f64 {
        self.stopped_cost_ratio.unwrap_or(0.05).clamp(0.001, 1.0)
    }

    /// The prices of `instance_type` with a running price above 0, if
    /// listed.
    pub fn price_of(&self, instance_type: &str) -> Option<&TypePrice> {
        self.prices
            .get(instance_type)
            .filter(|p| p.on_demand > 0.0 && p.spot.is_none_or(|s| s > 0.0))
    }

    /// What a stopped instance of `instance_type` (on spot or not) costs
    /// against a running one: its prices' ratio if listed, else
    /// [`Objective::stopped_cost`]; within 0.001 to 1.
    pub fn stopped_cost_of(&self, instance_type: &str, spot: bool) -> f64 {
        self.price_of(instance_type)
            .map_or(self.stopped_cost(), |p| p.stopped / p.running(spot))
            .clamp(0.001, 1.0)
    }

    /// The share of runs to start within the target, 0.5 to 1.
    pub fn goal(&self) -> f64 {
        f64::from(self.time_to_start.percentile.clamp(50, 100)) / 100.0
    }
}

/// How a pool with an objective is doing.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectiveStatus {
    /// The share of the last hour's runs, in percent, that started within
    /// the target; absent without runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attained_percent: Option<f64>,
    /// How many runs that share counts.
    #[serde(default)]
    pub runs: i64,
    /// What the pool keeps for the objective now: idle instances.
    pub idle: i32,
    /// And stopped ones.
    pub stopped: i32,
    /// What that was planned from: the busiest slices of the hour in past
    /// weeks, and the share of each source's starts within the target (a
    /// cold launch's of the instance type and subnet the next launch goes
    /// to, named, once three were measured there in the hour).
    pub planned_from: String,
    /// The share of the planned hour's runs, in percent, that those holdings
    /// would have started within the target.
    pub expected_percent: f64,
    /// The share of the last 24 hours' runs, in percent, that started
    /// within the target (read every five minutes); absent without runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub day_attained_percent: Option<f64>,
    /// How many runs that share counts.
    #[serde(default)]
    pub day_runs: i64,
    /// What the objective plans to hold over the next 24 hours, in
    /// instance-hours of a running instance (a stopped hour counts at
    /// stoppedCostRatio), with the floors of the moment it was planned
    /// (hourly, with the history).
    #[serde(default)]
    pub expected_instance_hours: f64,
    /// The static floor that would meet the same objective, to set against
    /// it; absent when no idle.min within idle.max and maxInstances would.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub static_floor: Option<StaticFloor>,
    /// With `spec.objective.prices` for the type the next launch goes to:
    /// expectedInstanceHours at its price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_cost: Option<f64>,
    /// The instance type whose price the costs are at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priced_as: Option<String>,
}

/// The fewest idle instances that, kept at every hour, would have started
/// the objective's share of the last four weeks' runs within its target.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StaticFloor {
    /// The `idle.min` it takes.
    pub idle: i32,
    /// What that holds over 24 hours, in instance-hours.
    pub instance_hours: f64,
    /// And at the price of the type the next launch goes to, with
    /// `spec.objective.prices`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_types_prices_weigh_a_stopped_instance_against_a_running_one() {
        let o: Objective = serde_yaml::from_str(
            "timeToStart: {seconds: 20}\nstoppedCostRatio: 0.2\nprices:\n  \
             m7i.large: {onDemand: 0.1008, spot: 0.04, stopped: 0.0032}\n  \
             free.nano: {onDemand: 0, stopped: 0.01}\n",
        )
        .unwrap();
        assert!((o.stopped_cost_of("m7i.large", false) - 0.0317).abs() < 1e-4);
        assert!((o.stopped_cost_of("m7i.large", true) - 0.08).abs() < 1e-9);
        // Not listed, or priced at nothing running: stoppedCostRatio.
        assert_eq!(o.stopped_cost_of("t3.micro", false), 0.2);
        assert_eq!(o.stopped_cost_of("free.nano", false), 0.2);
        assert_eq!(o.price_of("m7i.large").map(|p| p.running(true)), Some(0.04));
    }
}
