//! What the act step does to the world, as a trait: the pool's rows (each
//! end race-free, by one statement) and EC2's calls, and what it reads
//! there to count failed boots (rows ever written, a console's last lines).
//! [`super::Live`] is the real world (`live.rs`); the act step's tests
//! answer from a table.

use std::{collections::HashSet, future::Future};

use super::{
    ec2::{Ec2Error, RunRequest},
    pass_report::PoolError,
    plan::Offering,
    preflight::{Check, Probe},
    ssm::SsmError,
};

/// Everything the act step does to the pool's rows and to EC2.
pub trait World {
    /// The race-free end of idle rows: those it ended.
    fn end_idle_rows(
        &mut self,
        rows: &[i64],
    ) -> impl Future<Output = Result<HashSet<i64>, PoolError>> + Send;
    /// The operator's claim on `instance` of `pool`, which has no live row;
    /// `None` if it has one now.
    fn claim(
        &mut self,
        instance: &str,
        pool: &str,
    ) -> impl Future<Output = Result<Option<i64>, PoolError>> + Send;
    /// Ends busy row `row`, only while it is busy: whether it did.
    fn end_busy_row(&mut self, row: i64) -> impl Future<Output = Result<bool, PoolError>> + Send;
    fn end_claim(&mut self, row: i64) -> impl Future<Output = Result<(), PoolError>> + Send;
    /// Ends the live rows of instances EC2 no longer runs: those it ended.
    fn end_rows_of_gone(
        &mut self,
        rows: &[i64],
    ) -> impl Future<Output = Result<Vec<i64>, PoolError>> + Send;
    fn terminate(&mut self, ids: &[String]) -> impl Future<Output = Result<(), Ec2Error>> + Send;
    /// Takes idle rows into the stopped reserve, race-free: those it took.
    fn reserve_idle_rows(
        &mut self,
        rows: &[i64],
    ) -> impl Future<Output = Result<HashSet<i64>, PoolError>> + Send;
    /// Marks reserved rows woken: those it marked.
    fn wake_rows(
        &mut self,
        rows: &[i64],
    ) -> impl Future<Output = Result<HashSet<i64>, PoolError>> + Send;
    /// Puts woken rows whose instances did not start back into the reserve.
    fn unwake_rows(&mut self, rows: &[i64]) -> impl Future<Output = Result<(), PoolError>> + Send;
    /// Turns a reserved or woken row into the operator's claim; `None` if
    /// its agent marked it idle first.
    fn claim_reserved(
        &mut self,
        row: i64,
    ) -> impl Future<Output = Result<Option<i64>, PoolError>> + Send;
    fn stop(&mut self, ids: &[String]) -> impl Future<Output = Result<(), Ec2Error>> + Send;
    fn start(
        &mut self,
        ids: &[String],
        offering: &Offering,
    ) -> impl Future<Output = Result<(), Ec2Error>> + Send;
    /// `RunInstances`: the ids launched.
    fn run(
        &mut self,
        req: &RunRequest<'_>,
    ) -> impl Future<Output = Result<Vec<String>, Ec2Error>> + Send;
    /// Makes the SSM parameter `name` of the pool's region (at SSM's
    /// `endpoint`, if not the region's own) hold `value` (the database
    /// URL), tagged `tags` when created: whether it wrote.
    fn publish(
        &mut self,
        name: &str,
        value: &str,
        tags: &[(&str, &str)],
        endpoint: Option<&str>,
    ) -> impl Future<Output = Result<bool, SsmError>> + Send;
    /// Asks, without acting, whether the credentials may make each call
    /// of `probe` (see [`super::preflight`]).
    fn preflight(&mut self, probe: &Probe<'_>) -> impl Future<Output = Vec<Check>> + Send;
    /// Which of `instances` ever had a row in `pool` (their agents
    /// reported once, whatever came after).
    fn had_rows(
        &mut self,
        pool: &str,
        instances: &[String],
    ) -> impl Future<Output = Result<HashSet<String>, PoolError>> + Send;
    /// The last lines of `instance`'s console (`GetConsoleOutput`).
    fn console_tail(
        &mut self,
        instance: &str,
    ) -> impl Future<Output = Result<String, Ec2Error>> + Send;
}
