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
//! (`k8s::warmpool`) runs one [`PoolLoop::pass`] per reconcile instead.
//!
//! In the Kubernetes mode every EC2 call, statement, status write and Event
//! checks the Lease's [`crate::fence::Fence`] first: no loop, EC2 or SSM client
//! is made without one ([`PoolLoop::new`], [`Ec2::new`]). The local mode has
//! no election and passes [`crate::fence::Fence::always`], by name.

mod act;
#[cfg(test)]
mod act_tests;
pub mod admission;
pub mod arch;
pub mod boot;
pub mod budget;
#[cfg(test)]
mod budget_tests;
pub mod class;
#[cfg(test)]
mod class_tests;
mod conditions;
pub mod cost;
pub mod drain;
pub mod drift;
pub mod ec2;
pub mod forecast;
pub mod holds;
pub mod instance;
pub mod listings;
mod live;
pub mod metrics;
pub mod objective;
mod observe;
mod pass;
mod pass_report;
pub mod plan;
mod pool_loop;
pub mod preflight;
pub(crate) mod preflight_aws;
mod preflight_pool;
mod reserve;
pub mod roster;
pub mod schedule;
pub mod ssm;
#[cfg(test)]
mod ssm_tests;
pub mod starts;
pub mod tags;
mod tuning;
pub mod userdata;
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
