//! The WarmPool's plan (docs/architecture.md#the-warmpool-controller): the
//! pure decide stage of a pool's pass — one snapshot of its EC2 instances,
//! rows and demand in, the launches, starts, stops and retirements that
//! bring it back to its spec out — and what it decides with: the class's
//! bounds and book, schedules, the objective, the forecast, drift, holds
//! and boots. The operator's `warmpool/` observes and acts around it.
//!
//! The map, one line a file:

// admission — the chart's admission rules for WarmPools, rendered from the operator's own checks.
pub mod admission;
// boot — failed boots counted, and the launch back-off they earn.
pub mod boot;
// budget — each WarmPoolClass's book: the one place launches are granted against its limits.
pub mod budget;
// class — a WarmPool on its class: what the class resolves, refuses and bounds.
pub mod class;
// drain — the drain of a pool being deleted or moved.
pub mod drain;
// drift — which instances drifted from the spec.
pub mod drift;
// forecast — the forecast warm-up's arithmetic (`spec.forecast`).
pub mod forecast;
// holds — capacity holds: how far one refused launch or start reaches.
pub mod holds;
// instance — what the pool is made of, as EC2 sees it.
pub mod instance;
// objective — sizing a pool to a time-to-start objective (`spec.objective`).
pub mod objective;
// plan — the decide stage: the pure plan of a pass.
pub mod plan;
// roster — the status's list of instances.
pub mod roster;
// schedule — which of `spec.schedules` is active, and so which idle range the plan keeps.
pub mod schedule;
// starts — time to start: cold starts measured, by offering.
pub mod starts;

pub use drain::{drain_of, DRAIN};
pub use plan::{plan, Ec2Instance, Ec2State, Limits, Offering, PoolPlan, Reason, Snapshot};
