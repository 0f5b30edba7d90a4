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

// The plan and what it decides with are the core's (`orca_core::warmpool`),
// under the names they always had here.
pub use orca_core::warmpool::{
    admission, boot, budget, class, drain, drain_of, drift, forecast, holds, instance, objective,
    plan, roster, schedule, starts, Ec2Instance, Ec2State, Limits, Offering, PoolPlan, Reason,
    Snapshot, DRAIN,
};

// act — retire, launch, start and stop: the act stage of a pass, through `World`, and its preflight.
mod act;
// arch — the agent's architecture against a pool's instance types.
pub(crate) mod arch;
// conditions — a pass's status conditions.
mod conditions;
// cost — what the pool costs.
pub mod cost;
// ec2 — every EC2 call the pool makes, each fenced.
pub mod ec2;
// k8s — the WarmPool controller: one pass a reconcile, its stages, the classes' controller.
pub mod k8s;
// listings — one EC2 listing for many pools.
pub(crate) mod listings;
// live — the world a loop acts on for real: EC2, SSM and the database, behind the fence.
mod live;
// metrics — the pool's Prometheus metrics.
pub(crate) mod metrics;
// observe — the observe stage: EC2 first, then the rows and the demand.
mod observe;
// pass_report — what a pass says: its status, its Events, its errors.
mod pass_report;
// pool_loop — a pool's loop: what it keeps between passes.
mod pool_loop;
// preflight — permissions asked before they are needed.
pub(crate) mod preflight;
// preflight_aws — how a preflight asks AWS.
pub(crate) mod preflight_aws;
// ssm — the database URL in SSM Parameter Store.
pub mod ssm;
// tags — whose an instance is: the ownership tags.
pub(crate) mod tags;
// tuning — the loop's knobs that are not in the spec.
mod tuning;
// userdata — the user-data script of a pool instance.
pub mod userdata;
// world — what the act stage does to the world, as a trait.
mod world;

pub use ec2::{Ec2, Ec2Config, Ec2Error, Ownership};
pub use listings::Listings;
pub use live::Live;
pub use metrics::{Counts, PoolMetrics};
pub use pass_report::{Deletion, PassReport, PoolError, PoolEvent, UNAUTHORIZED};
pub use pool_loop::PoolLoop;
pub use tuning::Tuning;
pub use world::World;
