//! A WarmPool's instances one by one, as its status lists them for
//! `kubectl orca status warmpool`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One instance of the pool as the last pass saw it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolInstance {
    /// The EC2 instance id.
    pub id: String,
    /// booting (launched or started, its agent not idle yet), idle, busy,
    /// draining (busy, asked to drain: retired after its run), stopped (in the reserve, or being stopped), or retiring (the pass
    /// retired it, or EC2 is shutting it down).
    pub state: String,
    /// When EC2 launched it (RFC 3339).
    pub launched: String,
    /// The instance type; empty for the launch template's.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub instance_type: String,
    /// A spot instance.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub spot: bool,
    /// Runs it was handed; counted only with spec.maxUses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses: Option<i64>,
    /// Launched from an out-of-date launch spec: it is replaced.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drifted: bool,
}
