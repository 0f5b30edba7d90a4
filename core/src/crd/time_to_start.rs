//! How long runs waited for an instance, as a WarmPool's status shows it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Time to start — from a run's first ask that found no instance to the
/// hand-out — over the last hour, by where the instance came from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimeToStart {
    /// The hand-outs counted are those of the last this many seconds.
    pub window_seconds: i64,
    /// Runs handed an instance that was idle already (their wait is 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<StartFigures>,
    /// Runs handed an instance started from the stopped reserve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve: Option<StartFigures>,
    /// Runs that waited for a cold launch (or for an instance that went idle
    /// meanwhile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold: Option<StartFigures>,
}

/// The waits of one source's runs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartFigures {
    /// How many runs.
    pub runs: i64,
    /// The median wait, in milliseconds.
    pub p50_millis: i64,
    /// The 95th percentile wait, in milliseconds.
    pub p95_millis: i64,
    /// The longest wait, in milliseconds.
    pub max_millis: i64,
}
