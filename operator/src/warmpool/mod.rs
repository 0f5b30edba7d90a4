//! The WarmPool controller (docs/architecture.md#the-warmpool-controller): keeps EC2 instances warm
//! for a Scheduler's runs, launches for demand, and terminates idle, stale
//! and leaked instances — never one that was just handed a run.
//!
//! Every pass is observe → decide → act:
//! - observe: `DescribeInstances` by the ownership tags *first* ([`ec2`];
//!   one listing for the operator's pools of a region, see [`listings`]),
//!   then the pool's live `orca.instances` rows and unserved demand
//!   (`orca_db::pool`), so anything seen in the database is at least as new;
//! - decide: the pure [`plan::plan`];
//! - act ([`PoolLoop::pass`]): the race-free end (or the claim) of each
//!   instance to retire, then batched `TerminateInstances`; batched
//!   `RunInstances` with capacity fall-back and throttling back-off;
//!   status, events and metrics.
//!
//! [`PoolLoop::run`] drives passes on `LISTEN orca_pool` with a periodic
//! resync (the local mode); the Kubernetes mode's controller
//! (`warmpool::k8s`) runs one [`PoolLoop::pass`] per reconcile instead.
//!
//! In the Kubernetes mode every EC2 call, statement, status write and Event
//! checks the Lease's [`crate::fence::Fence`] first: no loop, EC2 or SSM client
//! is made without one ([`PoolLoop::new`], [`Ec2::new`]). The local mode has
//! no election and passes [`crate::fence::Fence::always`], by name.

// act — retire and launch: the act stage of a pass, through `World`.
mod act;
// admission — the chart's admission rules for WarmPools, rendered from the operator's own checks.
pub mod admission;
// arch — the agent's architecture against a pool's instance types.
pub(crate) mod arch;
// boot — failed boots counted, and the launch back-off they earn.
pub(crate) mod boot;
// budget — each WarmPoolClass's book: the one place launches are granted against its limits.
pub mod budget;
// class — a WarmPool on its class: what the class resolves, refuses and bounds.
pub mod class;
// conditions — a pass's status conditions.
mod conditions;
// cost — what the pool costs.
pub mod cost;
// drain — the drain of a pool being deleted or moved.
pub(crate) mod drain;
// drift — which instances drifted from the spec.
pub mod drift;
// ec2 — every EC2 call the pool makes, each fenced.
pub mod ec2;
// forecast — the forecast warm-up's arithmetic (`spec.forecast`).
pub mod forecast;
// holds — capacity holds: how far one refused launch or start reaches.
pub(crate) mod holds;
// instance — what the pool is made of, as EC2 sees it.
pub(crate) mod instance;
// k8s — the WarmPool controller: one pass a reconcile, its stages, the classes' controller.
pub mod k8s;
// listings — one EC2 listing for many pools.
pub(crate) mod listings;
// live — the world a loop acts on for real: EC2, SSM and the database, behind the fence.
mod live;
// metrics — the pool's Prometheus metrics.
pub(crate) mod metrics;
// objective — sizing a pool to a time-to-start objective (`spec.objective`).
pub mod objective;
// observe — the observe stage: EC2 first, then the rows and the demand.
mod observe;
// pass — one pass: observe → plan → act, and what it reports.
mod pass;
// pass_report — what a pass says: its status, its Events, its errors.
mod pass_report;
// plan — the decide stage: the pure plan of a pass.
pub mod plan;
// pool_loop — a pool's loop: what it keeps between passes.
mod pool_loop;
// preflight — permissions asked before they are needed.
pub(crate) mod preflight;
// preflight_aws — how a preflight asks AWS.
pub(crate) mod preflight_aws;
// preflight_pool — when a pool's loop asks its preflight, and what it does with the answers.
mod preflight_pool;
// reserve — the act stage for the stopped reserve.
mod reserve;
// roster — the status's list of instances.
pub(crate) mod roster;
// schedule — which of `spec.schedules` is active, and so which idle range the plan keeps.
pub mod schedule;
// ssm — the database URL in SSM Parameter Store.
pub mod ssm;
// starts — time to start: cold starts measured, by offering.
pub(crate) mod starts;
// tags — whose an instance is: the ownership tags.
pub(crate) mod tags;
// tuning — the loop's knobs that are not in the spec.
mod tuning;
// userdata — the user-data script of a pool instance.
pub mod userdata;
// world — what the act stage does to the world, as a trait.
mod world;

pub use drain::{drain_of, DRAIN};
pub use ec2::{Ec2, Ec2Config, Ec2Error, Ownership};
pub use listings::Listings;
pub use live::Live;
pub use metrics::{Counts, PoolMetrics};
pub use pass_report::{Deletion, PassReport, PoolError, PoolEvent, UNAUTHORIZED};
pub use plan::{plan, Ec2Instance, Ec2State, Limits, Offering, PoolPlan, Reason, Snapshot};
pub use pool_loop::PoolLoop;
pub use tuning::Tuning;
pub use world::World;
