//! A WarmPool's forecast warm-up: its spec (how the pool's own demand
//! history raises the idle floor) and what its status shows (the floor of
//! the hours ahead).

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Warm instances before the load arrives: from the pool's own hand-out
/// history, the runs that needed an instance within one leadSeconds in
/// each hour of the week (the peak of the hour) are counted, week by week;
/// the chosen percentile of those weeks raises the idle floor for that
/// hour, from leadSeconds before it, within idle.max (and maxInstances).
/// Never below idle.min or an active schedule's.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Forecast {
    /// The percentile of the weeks' peaks for an hour that the floor is raised
    /// to: 50 (a typical week) to 100 (the busiest one seen). Default 90.
    #[serde(default = "default_percentile")]
    #[schemars(range(min = 50, max = 100))]
    pub percentile: i32,
    /// Whole weeks of history read, back from now; weeks without a single
    /// hand-out (before the pool existed) do not count. 1 to 12. Default 4.
    #[serde(default = "default_weeks")]
    #[schemars(range(min = 1, max = 12))]
    pub weeks: i32,
    /// Seconds from a launch until the instance is idle (its boot): the floor
    /// of an hour is kept from this long before it, and demand is counted in
    /// slices this long (runs within one boot of each other are the ones a
    /// replacement cannot serve). 30 to 3600. Default 300.
    #[serde(default = "default_lead")]
    #[schemars(range(min = 30, max = 3600))]
    pub lead_seconds: i64,
    /// The IANA time zone whose hours of the week demand is counted in, e.g.
    /// Europe/Berlin: a daily cycle follows local time across DST. Default
    /// UTC.
    #[serde(default = "default_timezone")]
    #[x_kube(validation = Rule::new(r"self.matches('^[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*$')").message("timezone must be an IANA time zone name, e.g. Europe/Berlin"))]
    #[schemars(length(max = 64))]
    pub timezone: String,
}

fn default_percentile() -> i32 {
    90
}
fn default_weeks() -> i32 {
    4
}
fn default_lead() -> i64 {
    300
}
fn default_timezone() -> String {
    "UTC".into()
}

impl Default for Forecast {
    fn default() -> Self {
        Forecast {
            percentile: default_percentile(),
            weeks: default_weeks(),
            lead_seconds: default_lead(),
            timezone: default_timezone(),
        }
    }
}

/// What the forecast keeps for the hours ahead.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ForecastStatus {
    /// Weeks of history the forecast was made from (those with hand-outs).
    pub weeks: i32,
    /// The idle floor of each of the next hours, as the pool will keep it:
    /// the forecast within idle.max, and never below idle.min or the
    /// schedule's for that hour.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub next: Vec<ForecastHour>,
}

/// One hour ahead.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ForecastHour {
    /// When the hour starts (RFC 3339).
    pub from: String,
    /// The idle floor kept in it.
    pub idle_min: i32,
}
