//! The act step of a pass: retire (the race-free end or the claim first,
//! then batched `TerminateInstances`), then launch (batched `RunInstances`
//! with a `ClientToken` each, the next offering on a capacity error, and
//! back-off on `RequestLimitExceeded`). The stopped reserve's part is in
//! `reserve.rs`, the preflight's in `preflight.rs`: children of this
//! module, the only files but this one that see the actuator's fields.
//!
//! What it does to the world goes through [`World`], which the loop owns
//! and lends to each of the act step's calls: the loop's [`crate::warmpool::Live`]
//! world fences each statement and EC2 call (a fenced one ends the pass);
//! the act step's tests answer from a table (`tests.rs`).
//!
//! The [`Actuator`] keeps what the calls teach: the capacity holds, the
//! credentials' denials, the launches (their ids, times and tokens), the
//! class's grants and the boots that keep failing.
//!
//! Retire and launch, the two halves of the act
//! step that share the per-id retry.
//!
//! The map, one line a file:

// preflight — when a pool's loop asks its preflight, and what it does with the answers.
pub(super) mod preflight;
// reserve — the act stage for the stopped reserve: starts, stops, and what will not.
mod reserve;

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    fmt,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};

use crate::{
    backoff::Backoff,
    crd::{WarmPoolSpec, WarmPoolStatus},
    fence::MaybeFenced,
};

use crate::warmpool::{
    boot::BootFailures,
    budget::Budget,
    ec2::{client_token, Ec2Error, Ownership, RunRequest, PASSING_CODES, SUBNET_CODES},
    holds::Holds,
    metrics::PoolMetrics,
    pass_report::{Denials, PassReport, PoolError, PoolEvent, UNAUTHORIZED},
    plan::{offerings, Ec2Instance, End, Offering, PoolPlan, Reason, Snapshot},
    ssm, tags,
    tuning::Tuning,
    userdata::{self, DatabaseSource, UserData},
    world::World,
};

/// An EC2 call on a list of instances.
#[derive(Clone, Copy)]
pub(super) enum Call<'a> {
    Terminate,
    Stop,
    Start(&'a Offering),
}

/// The URL text as the user-data needs it; never shown.
#[derive(Clone)]
pub(super) struct SecretUrl(pub(super) String);

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretUrl(***)")
    }
}

/// What the pool launched, as its loop knows it.
#[derive(Debug, Default)]
pub(super) struct Launches {
    /// Instances this loop launched, and when it learnt their ids.
    ours: HashMap<String, Instant>,
    /// When this loop launched each of `ours` (by its own clock), and in
    /// which offering: the status lists an instance so from the pass that
    /// launched it on, and the listing's own time does not change it again.
    times: HashMap<String, (DateTime<Utc>, Offering)>,
    /// What names this pool's launches in their `ClientToken`s: its uid
    /// once remembered, else one of this loop's own.
    id: String,
    /// Launch batches EC2 answered (`status.launchBatches`): the number of
    /// the next one.
    batches: u64,
}

impl Launches {
    /// When this loop launched each instance it launched, and in which
    /// offering.
    pub(super) fn times(&self) -> &HashMap<String, (DateTime<Utc>, Offering)> {
        &self.times
    }

    /// What names the pool's launches in their `ClientToken`s (the loop's
    /// tests read it).
    #[cfg(test)]
    pub(super) fn id(&self) -> &str {
        &self.id
    }

    /// Launch batches EC2 answered: the number of the next one.
    pub(super) fn batches(&self) -> u64 {
        self.batches
    }

    /// The instances this loop launched, as it still counts them.
    pub(super) fn ours(&self) -> impl Iterator<Item = &str> {
        self.ours.keys().map(String::as_str)
    }

    /// What this loop launched among `ids`, which the loop of the place the
    /// pool moved to has (the same EC2): no longer counted as this loop's.
    pub(super) fn hand_over(&mut self, ids: &HashSet<String>) {
        self.ours.retain(|id, _| !ids.contains(id));
        self.times.retain(|id, _| !ids.contains(id));
    }

    /// Of what this loop launched, what a listing of `instances` shows:
    /// an id stays ours while EC2 lists it present, or for a few minutes
    /// before it does; the rest are forgotten.
    pub(super) fn listed(&mut self, instances: &[Ec2Instance]) {
        self.ours.retain(|id, at| {
            instances
                .iter()
                .any(|i| i.id() == id && i.state().is_present())
                || at.elapsed() < Duration::from_secs(300)
        });
        let ours = &self.ours;
        self.times.retain(|id, _| ours.contains_key(id));
    }
}

/// What the act stage lends the observe stage ([`Actuator::lend`]): the
/// pool's name, owner, knobs and metrics to read, and the lessons it keeps
/// (its launches, whose fate the observer learns; the credentials'
/// denials, to which its own calls add; the capacity holds; the class's
/// book).
pub(super) struct Lessons<'a> {
    pool: &'a str,
    owner: &'a Ownership,
    tuning: &'a Tuning,
    metrics: Option<&'a PoolMetrics>,
    launches: &'a mut Launches,
    denials: &'a mut Denials,
    holds: &'a Holds,
    budget: Option<&'a Budget>,
}

impl<'a> Lessons<'a> {
    /// The pool, `namespace/name`.
    pub(super) fn pool(&self) -> &'a str {
        self.pool
    }

    /// Whose instances the pool's are.
    pub(super) fn owner(&self) -> &'a Ownership {
        self.owner
    }

    /// The loop's knobs.
    pub(super) fn tuning(&self) -> &'a Tuning {
        self.tuning
    }

    /// The pool's metrics, when the operator keeps them.
    pub(super) fn metrics(&self) -> Option<&'a PoolMetrics> {
        self.metrics
    }

    /// What this loop launched; the observer learns their fate.
    pub(super) fn launches(&mut self) -> &mut Launches {
        self.launches
    }

    /// What a call of `action` the observer made answered: a refusal of
    /// the credentials stands in the pool's status (`Unauthorized`) as
    /// the act stage's do, a success ends it.
    pub(super) fn answered<T>(&mut self, action: &'static str, outcome: &Result<T, Ec2Error>) {
        self.denials.record(action, outcome);
    }

    /// Offerings without capacity, until when.
    pub(super) fn holds(&self) -> &'a Holds {
        self.holds
    }

    /// The class's book, for a pool with a class.
    pub(super) fn budget(&self) -> Option<&'a Budget> {
        self.budget
    }
}

/// The act step of one pool: its calls, on the world the loop lends them
/// (the [`crate::warmpool::Live`] world, or a table of answers in its tests), and
/// what they teach and later passes go by.
pub(super) struct Actuator {
    /// `namespace/name`.
    pool: String,
    /// Whose instances the pool's are: the tags it launches with.
    owner: Ownership,
    url: SecretUrl,
    tuning: Tuning,
    metrics: Option<PoolMetrics>,
    /// Offerings without capacity, until when, and why.
    holds: Holds,
    /// EC2 actions the credentials were refused and not allowed since.
    denials: Denials,
    launches: Launches,
    /// The class's book, for a pool with a class: every launch is granted
    /// by it first.
    budget: Option<Budget>,
    /// Boot time-outs in a row, and the launch back-off they earned.
    boot: BootFailures,
    /// Instances this loop launched that reported (had a row).
    booted: HashSet<String>,
    /// When the pool's preflight is next due (see [`crate::warmpool::preflight`]):
    /// at once for a new loop or spec, a minute on while an action it
    /// found missing stands, `None` once all were allowed.
    preflight_at: Option<DateTime<Utc>>,
    /// Whether it asked about the calls on instances (it needs one of
    /// the pool's): the first pass with an instance asks, if not, once
    /// for the loop (what they need does not change with the spec).
    preflight_instances: bool,
    /// When it last asked: asks are a minute apart (but for that once).
    preflight_asked: Option<DateTime<Utc>>,
}

/// The reason of a launch EC2 refused for its subnet (see
/// [`SUBNET_CODES`]), as the launch and every pass while that subnet is
/// held say it.
pub(crate) const SUBNET_REFUSED: &str = "SubnetRefused";

/// How long an action the pool's preflight found missing stands before it
/// asks again (and a launch the credentials were refused waits for it).
const ASK_AGAIN: chrono::Duration = chrono::Duration::seconds(60);

/// A launch refused that will not work until something changes, as the
/// `Degraded` reason and message it is: the credentials may not launch
/// (`Unauthorized`), the instance profile does not exist (a class's
/// `{namespace}` profile not made for this namespace, a role deleted), or
/// EC2 refused the launch's parameters (`LaunchRefused`: an image, a
/// subnet, a key pair gone, an account not opted in) — any refusal but
/// capacity, throttling and [`PASSING_CODES`] faults, which have their own
/// ways.
/// Launches wait for it, however the refusal is named: a code this list
/// does not know is a launch that cannot work, not one to repeat each pass.
fn refusal(e: &Ec2Error, spec: &WarmPoolSpec, namespace: &str) -> Option<(&'static str, String)> {
    let (code, message) = match e {
        Ec2Error::Denied { .. } => {
            let said = e.denial().unwrap_or_else(|| e.to_string());
            return Some((UNAUTHORIZED, said));
        }
        Ec2Error::Refused { code, message, .. } if !PASSING_CODES.contains(&code.as_str()) => {
            (code, message)
        }
        _ => return None,
    };
    let profile = spec.launch.iam_instance_profile.as_deref();
    let about_profile = code == "NoSuchEntity"
        || (code == "InvalidParameterValue" && message.contains("iamInstanceProfile"));
    if about_profile {
        let named = profile.unwrap_or("the launch template's");
        return Some((
            "InstanceProfileNotFound",
            format!(
                "EC2 refused the launch: the instance profile {named} does not exist ({code}: \
                 {message}); make it for namespace {namespace}, its role's policy from \
                 `orca-operator iam-policy --instance-role --namespace {namespace}`"
            ),
        ));
    }
    Some((
        "LaunchRefused",
        format!("EC2 refused the launch: {code}: {message}"),
    ))
}

/// What one pass's act step goes by.
#[derive(Clone, Copy)]
pub(super) struct Orders<'a> {
    /// The pass's spec (see `pass.rs`): the plan's, with the moment's idle
    /// range and drain time-out.
    spec: &'a WarmPoolSpec,
    plan: &'a PoolPlan,
    /// The number the launch template's version resolves to, if any.
    template_version: Option<&'a str>,
    now: DateTime<Utc>,
}

impl<'a> Orders<'a> {
    /// The `plan` of the pass at `now` over `spec`, launching with the
    /// launch template's version `template_version`.
    pub(super) fn new(
        spec: &'a WarmPoolSpec,
        plan: &'a PoolPlan,
        template_version: Option<&'a str>,
        now: DateTime<Utc>,
    ) -> Orders<'a> {
        Orders {
            spec,
            plan,
            template_version,
            now,
        }
    }

    /// What the pass decided.
    pub(super) fn plan(&self) -> &'a PoolPlan {
        self.plan
    }
}

impl Actuator {
    /// The act stage of the pool `owner` names, launching with the
    /// database URL `database_url` in its user-data; `launch_id` names its
    /// launches until the loop remembers the pool's uid.
    pub(super) fn new(
        owner: Ownership,
        database_url: &str,
        tuning: Tuning,
        launch_id: String,
    ) -> Actuator {
        Actuator {
            pool: owner.pool().clone(),
            owner,
            url: SecretUrl(database_url.to_string()),
            tuning,
            metrics: None,
            holds: Holds::default(),
            denials: Denials::default(),
            launches: Launches {
                id: launch_id,
                ..Launches::default()
            },
            budget: None,
            boot: Default::default(),
            booted: HashSet::new(),
            preflight_at: Some(DateTime::<Utc>::MIN_UTC),
            preflight_instances: false,
            preflight_asked: None,
        }
    }

    /// `namespace/name`.
    pub(super) fn pool(&self) -> &str {
        &self.pool
    }

    /// The database URL the pool's user-data carries; never shown.
    pub(super) fn database_url(&self) -> &str {
        &self.url.0
    }

    /// Whose instances the pool's are.
    pub(super) fn owner(&self) -> &Ownership {
        &self.owner
    }

    /// The pool's instances are now `owner`'s (a class or namespace tag
    /// learnt): its launches are tagged so from the next.
    pub(super) fn set_owner(&mut self, owner: Ownership) {
        self.owner = owner;
    }

    /// The loop's knobs.
    pub(super) fn tuning(&self) -> &Tuning {
        &self.tuning
    }

    /// The pool's metrics, unless the loop keeps none.
    pub(super) fn metrics(&self) -> Option<&PoolMetrics> {
        self.metrics.as_ref()
    }

    /// Counts into `metrics` from now (`None`: into none).
    pub(super) fn set_metrics(&mut self, metrics: Option<PoolMetrics>) {
        self.metrics = metrics;
    }

    /// The class's book, for a pool with a class.
    pub(super) fn budget(&self) -> Option<&Budget> {
        self.budget.as_ref()
    }

    /// The class's book from now (`None`: no class).
    pub(super) fn set_budget(&mut self, budget: Option<Budget>) {
        self.budget = budget;
    }

    /// The offerings without capacity, and until when.
    pub(super) fn holds(&self) -> &Holds {
        &self.holds
    }

    /// The holds, to add to or let expire.
    pub(super) fn holds_mut(&mut self) -> &mut Holds {
        &mut self.holds
    }

    /// The EC2 actions the credentials were refused.
    pub(super) fn denials(&self) -> &Denials {
        &self.denials
    }

    /// What the pool launched, as the loop knows it.
    pub(super) fn launches(&self) -> &Launches {
        &self.launches
    }

    /// Of what this loop launched, `ids` are another loop's now (see
    /// [`Launches::hand_over`]).
    pub(super) fn hand_over(&mut self, ids: &HashSet<String>) {
        self.launches.hand_over(ids);
    }

    /// What a status restored says: the pool's `uid` names its launches
    /// (with a value of this loop's own), the launch batches counted so
    /// far, and the capacity holds it showed.
    pub(super) fn restore(&mut self, launch_id: String, status: &WarmPoolStatus) {
        self.launches.id = launch_id;
        self.launches.batches = status.launch_batches.max(0) as u64;
        for until in self.holds.restore(&status.capacity_errors) {
            tracing::warn!(pool = %self.pool, until = %until,
                "a capacity hold in the status has no valid time; dropped");
        }
    }

    /// A new spec: what the credentials were refused is asked again at
    /// once, and boot failures counted under the old spec no longer back
    /// launches off.
    pub(super) fn spec_changed(&mut self) {
        self.denials.clear();
        self.preflight_at = Some(DateTime::<Utc>::MIN_UTC);
        self.boot.spec_changed();
    }

    /// The loop ended these instances itself: their boots are not failures.
    pub(super) fn ended_by_loop(&mut self, terminated: &[String]) {
        self.boot.ended_by_loop(terminated);
    }

    /// What the observe stage reads of the act stage's lessons, lent to it
    /// for the stage: the pool, its owner, the knobs, the metrics, the
    /// launches (whose listing it records), the denials (its calls' add to
    /// them), the holds and the class's book.
    pub(super) fn lend(&mut self) -> Lessons<'_> {
        Lessons {
            pool: &self.pool,
            owner: &self.owner,
            tuning: &self.tuning,
            metrics: self.metrics.as_ref(),
            launches: &mut self.launches,
            denials: &mut self.denials,
            holds: &self.holds,
            budget: self.budget.as_ref(),
        }
    }
    /// Boot time-outs in a row (`plan`'s `BootTimeout` retirements, none of
    /// this loop's instances reporting): past a few, a Warning, the pool
    /// `Degraded` (`BootFailing`, with the last one's console, scrubbed of
    /// the database URL) and launches backing off (see [`crate::warmpool::boot`]).
    pub(super) async fn count_boot_failures(
        &mut self,
        world: &mut impl World,
        plan: &PoolPlan,
        snap: &Snapshot,
        now: DateTime<Utc>,
        report: &mut PassReport,
    ) -> Result<(), PoolError> {
        let mut timed_out: Vec<String> = plan
            .retirements()
            .iter()
            .filter(|r| r.reason() == crate::warmpool::plan::Reason::BootTimeout)
            .map(|r| r.instance().to_string())
            .collect();
        // A boot worked: an instance this loop launched reported (a row),
        // for the first time.
        self.booted.retain(|id| snap.ours().contains(id));
        let mut reported = false;
        for r in snap
            .rows()
            .iter()
            .filter(|r| snap.ours().contains(r.instance()))
        {
            reported |= self.booted.insert(r.instance().to_string());
        }
        // And those that ended before they reported, however: powered off
        // by their own script, stopped or terminated by someone else, gone.
        let launched: HashMap<String, DateTime<Utc>> = self
            .launches
            .times
            .iter()
            .map(|(id, (at, _))| (id.clone(), *at))
            .collect();
        let candidates =
            crate::warmpool::boot::ended_unreported(snap, &launched, &self.booted, &self.boot, now);
        if !candidates.is_empty() {
            let had = world.had_rows(&self.pool, &candidates).await?;
            let lost: Vec<String> = candidates
                .into_iter()
                .filter(|id| !had.contains(id))
                .collect();
            let known: HashSet<String> = launched.keys().cloned().collect();
            self.boot.counted_lost(&lost, &known);
            if !lost.is_empty() {
                tracing::warn!(pool = %self.pool, instances = ?lost,
                    "instances ended before their agents reported");
            }
            timed_out.extend(lost);
        }
        let last = match timed_out.last() {
            Some(id) => {
                let console = match world.console_tail(id).await {
                    Ok(console) => console,
                    // Said, so that a policy without the action is noticed.
                    Err(e) if e.denial().is_some() => {
                        "(not read: ec2:GetConsoleOutput is not allowed)".into()
                    }
                    Err(_) => String::new(),
                };
                Some((id.to_string(), orca_db::url::scrub(&console, &self.url.0)))
            }
            None => None,
        };
        let worse = self.boot.record(
            timed_out.len() as u32,
            last,
            reported,
            self.tuning.boot_backoff_base(),
            self.tuning.boot_backoff_cap(),
        );
        if let Some(message) = self.boot.failing() {
            if worse {
                tracing::warn!(pool = %self.pool, "{message}");
                report.say(PoolEvent::new("BootFailing", message.clone(), true));
            }
            report.set_degraded(Some(("BootFailing", message)));
        }
        if let Some(refused) = self.boot.refusal() {
            report.set_degraded(Some(refused));
        }
        Ok(())
    }

    /// Ends or claims each instance to retire, terminates those it got;
    /// returns how many stay (a hand-out or an agent came first, or EC2
    /// refused), each of which takes back a place the plan counted free.
    pub(super) async fn retire(
        &mut self,
        world: &mut impl World,
        plan: &PoolPlan,
        report: &mut PassReport,
    ) -> Result<u32, PoolError> {
        let mut going = self.end_rows(world, plan, report).await?;
        let mut stayed = (plan.retirements().len() - going.len()) as u32;
        if going.is_empty() {
            return Ok(stayed);
        }
        let mut ids: Vec<String> = going.iter().map(|(i, _, _)| i.to_string()).collect();
        match self
            .each_alone_if_refused(world, Call::Terminate, &ids)
            .await
        {
            Ok(refused) if !refused.is_empty() => {
                for (id, why) in &refused {
                    tracing::warn!(pool = %self.pool, instance = %id, error = %why, "terminate refused");
                    report.say(PoolEvent::new(
                        "TerminateFailed",
                        format!("{id} could not be terminated; the next pass tries again: {why}"),
                        true,
                    ));
                }
                stayed += refused.len() as u32;
                going.retain(|(i, _, _)| !refused.iter().any(|(r, _)| r == *i));
                ids.retain(|i| !refused.iter().any(|(r, _)| r == i));
                if ids.is_empty() {
                    return Ok(stayed);
                }
            }
            Ok(_) => {}
            Err(e @ Ec2Error::Fenced { .. }) => return Err(PoolError::ec2(&self.pool, e)),
            Err(e) => {
                // Ended rows and claims stay: the next pass sees the instances
                // without a live row (or with the claim) and tries again.
                if report.note_throttled(matches!(e, Ec2Error::Throttled { .. })) {
                    if let Some(m) = &self.metrics {
                        m.throttle(&self.pool);
                    }
                }
                tracing::warn!(pool = %self.pool, error = %e, count = ids.len(), "terminate failed");
                report.ec2_failed("TerminateFailed", &e);
                return Ok(stayed + ids.len() as u32);
            }
        }
        self.terminated(world, &going, report).await?;
        report.add_terminated(ids);
        Ok(stayed)
    }

    /// Ends the rows of the instances to retire first (or claims them),
    /// and the rows of instances gone: those to terminate, each with why
    /// and the claim to end after. One that stays (a hand-out or its agent
    /// came first) is said.
    async fn end_rows<'p>(
        &mut self,
        world: &mut impl World,
        plan: &'p PoolPlan,
        report: &mut PassReport,
    ) -> Result<Vec<(&'p str, Reason, Option<i64>)>, PoolError> {
        let mut going = Vec::new();
        // Idle rows: one race-free end for all of them.
        let idle: Vec<i64> = plan
            .retirements()
            .iter()
            .filter_map(|r| match r.end() {
                End::Idle(row) => Some(row),
                _ => None,
            })
            .collect();
        let ended = world.end_idle_rows(&idle).await?;
        for r in plan.retirements() {
            let outcome = match r.end() {
                End::Idle(row) => ended.contains(&row).then_some(None),
                End::Claim => world.claim(r.instance(), &self.pool).await?.map(Some),
                End::Claimed(row) => Some(Some(row)),
                End::Busy(row) => world.end_busy_row(row).await?.then_some(None),
                End::Reserved(row) => world.claim_reserved(row).await?.map(Some),
            };
            match outcome {
                Some(claim) => going.push((r.instance(), r.reason(), claim)),
                None => {
                    tracing::info!(pool = %self.pool, instance = %r.instance(), reason = r.reason().as_str(),
                        "not retired: it was handed a run or its agent reported first");
                    report.say(PoolEvent::new(
                        "RetirementLost",
                        format!(
                            "{} was not retired ({}): it was handed a run or its agent reported first",
                            r.instance(),
                            r.reason().as_str()
                        ),
                        false,
                    ));
                }
            }
        }
        for row in plan.ends() {
            world.end_claim(*row).await?;
        }
        // Rows of instances EC2 no longer runs: nothing to terminate.
        if !plan.gone().is_empty() {
            let ended = world.end_rows_of_gone(plan.gone()).await?;
            if !ended.is_empty() {
                tracing::info!(pool = %self.pool, rows = ?ended,
                    "ended the rows of instances EC2 no longer runs");
            }
        }
        Ok(going)
    }

    /// The instances of `going` EC2 terminated: their claims ended, and
    /// said by reason.
    async fn terminated(
        &mut self,
        world: &mut impl World,
        going: &[(&str, Reason, Option<i64>)],
        report: &mut PassReport,
    ) -> Result<(), PoolError> {
        let mut by_reason: BTreeMap<Reason, Vec<&str>> = BTreeMap::new();
        for (instance, reason, claim) in going {
            by_reason.entry(*reason).or_default().push(instance);
            if let Some(row) = claim {
                world.end_claim(*row).await?;
            }
        }
        for (reason, instances) in by_reason {
            tracing::info!(pool = %self.pool, reason = reason.as_str(), instances = ?instances, "terminated");
            if let Some(m) = &self.metrics {
                m.terminated(&self.pool, reason.as_str(), instances.len());
            }
            report.say(PoolEvent::new(
                "Terminated",
                format!("terminated {} ({})", instances.join(", "), reason.as_str()),
                false,
            ));
        }
        Ok(())
    }

    /// `call` on `ids` in one request; when EC2 refuses it (one id it
    /// refuses — termination or stop protection, an instance it does not
    /// know — fails the whole call), on each id alone, so the others go in
    /// this pass: the ids that failed alone, with why. A batch that failed
    /// otherwise (throttled, lost, fenced) is the error.
    pub(super) async fn each_alone_if_refused(
        &mut self,
        world: &mut impl World,
        call: Call<'_>,
        ids: &[String],
    ) -> Result<Vec<(String, Ec2Error)>, Ec2Error> {
        match self.call(world, call, ids).await {
            Ok(()) => Ok(Vec::new()),
            Err(e @ Ec2Error::Refused { .. }) if ids.len() == 1 => Ok(vec![(ids[0].clone(), e)]),
            Err(Ec2Error::Refused { .. }) => {
                let mut failed = Vec::new();
                for id in ids {
                    match self.call(world, call, std::slice::from_ref(id)).await {
                        Ok(()) => {}
                        Err(e @ Ec2Error::Fenced { .. }) => return Err(e),
                        Err(e) => failed.push((id.clone(), e)),
                    }
                }
                Ok(failed)
            }
            Err(e) => Err(e),
        }
    }

    async fn call(
        &mut self,
        world: &mut impl World,
        call: Call<'_>,
        ids: &[String],
    ) -> Result<(), Ec2Error> {
        let (action, outcome) = match call {
            Call::Terminate => ("TerminateInstances", world.terminate(ids).await),
            Call::Stop => ("StopInstances", world.stop(ids).await),
            Call::Start(offering) => ("StartInstances", world.start(ids, offering).await),
        };
        self.denials.record(action, &outcome);
        outcome
    }

    /// Launches the plan's batches, minus one instance for each retirement
    /// that did not happen (so `maxInstances` holds).
    pub(super) async fn launch(
        &mut self,
        world: &mut impl World,
        orders: Orders<'_>,
        stayed: u32,
        report: &mut PassReport,
    ) -> Result<(), PoolError> {
        let Orders {
            spec, plan, now, ..
        } = orders;
        let Some((mut budget, user_data)) = self.ready(world, spec, plan, stayed, report).await?
        else {
            return Ok(());
        };
        let chain: Vec<Offering> = plan
            .launches()
            .first()
            .map(|b| b.offering().clone())
            .into_iter()
            .chain(plan.fallback().iter().cloned())
            .collect();
        let mut at = 0usize;
        for batch in plan.launches() {
            let wanted = batch.count().min(budget);
            if wanted == 0 {
                break;
            }
            let mut mismatched = false;
            loop {
                let Some(offering) = chain.get(at) else {
                    report.say(PoolEvent::new(
                        "NoCapacity",
                        format!("no instance type and subnet has capacity for {budget} more"),
                        true,
                    ));
                    return Ok(());
                };
                let count = self.granted(offering, wanted, report);
                if count == 0 {
                    return Ok(());
                }
                let token = client_token(&self.launches.id, self.launches.batches);
                let answer = self
                    .run_batch(world, orders, offering, count, &token, &user_data)
                    .await;
                self.answered(offering, count, &answer);
                match answer {
                    // The token was EC2's already, for another request: the
                    // next token, at once (the count moved on above).
                    Err(Ec2Error::Refused { ref code, .. })
                        if code == "IdempotentParameterMismatch" && !mismatched =>
                    {
                        mismatched = true;
                        tracing::warn!(pool = %self.pool, token = %token,
                            "the launch token was used for another request; a new one");
                    }
                    Ok(ids) => {
                        tracing::info!(pool = %self.pool, offering = %offering, count, token = %token,
                            instances = ?ids, "launched");
                        self.boot.launched();
                        self.learn_launched(offering, count, ids, now, report);
                        budget -= count;
                        break;
                    }
                    Err(Ec2Error::Capacity { code, message, .. }) => {
                        self.no_capacity(spec, offering, &code, &message, now, report);
                        // The next offering not held (a quota error holds
                        // more than the one refused).
                        at += 1;
                        while chain.get(at).is_some_and(|o| self.holds.is_held(o, now)) {
                            at += 1;
                        }
                    }
                    Err(e @ Ec2Error::Fenced { .. }) => return Err(PoolError::ec2(&self.pool, e)),
                    Err(e @ Ec2Error::Throttled { .. }) => {
                        report.note_throttled(true);
                        report.say(PoolEvent::new("Throttled", e.to_string(), true));
                        return Ok(());
                    }
                    Err(e) => {
                        tracing::warn!(pool = %self.pool, offering = %offering, error = %e, "launch failed");
                        self.launch_failed(&e, spec, now, report);
                        return Ok(());
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether the pass launches, and how many at most, with which
    /// user-data: the database URL's parameter written first (it follows
    /// the URL, a rotated Secret, at every pass, launching or not: agents
    /// read it again when refused), and what keeps the launches back said.
    async fn ready(
        &mut self,
        world: &mut impl World,
        spec: &WarmPoolSpec,
        plan: &PoolPlan,
        stayed: u32,
        report: &mut PassReport,
    ) -> Result<Option<(u32, UserData)>, PoolError> {
        let parameter = self.parameter_name(spec);
        let source = DatabaseSource::for_spec(spec, &self.url.0, &parameter);
        let published = match source {
            DatabaseSource::Parameter { name, .. } => {
                let tags = [
                    (tags::TAG_CLUSTER, self.owner.cluster().as_str()),
                    (tags::TAG_SCHEDULER, self.owner.scheduler().as_str()),
                    (tags::TAG_OPERATOR, self.owner.operator().as_str()),
                ];
                let at = spec.ssm_endpoint.as_deref();
                Some(world.publish(name, &self.url.0, &tags, at).await)
            }
            _ => None,
        };
        // A refusal of the credentials is said in every pass, launching or
        // not (see `Denials`).
        if let Some(outcome) = &published {
            self.denials.record_ssm(outcome);
        }
        let budget = plan.launch_count().min(plan.room().saturating_sub(stayed));
        if plan.short() > 0 {
            let (reason, warning) = if plan.launches().is_empty() && plan.room() > 0 {
                ("NoCapacity", true)
            } else {
                ("MaxInstancesReached", false)
            };
            report.say(PoolEvent::new(
                reason,
                format!(
                    "{} more instances wanted, none launched for them",
                    plan.short()
                ),
                warning,
            ));
        }
        // Boots keep failing: launching more would only fail the same way.
        if budget == 0 || self.boot.holding().is_some() {
            return Ok(None);
        }
        if let Some(source) = published.as_ref().and_then(|p| p.as_ref().err()?.fenced()) {
            return Err(PoolError::Fenced {
                pool: self.pool.clone(),
                source,
            });
        }
        if let Some(Err(e)) = published {
            tracing::warn!(pool = %self.pool, error = %e, "no launch: the database URL parameter cannot be written");
            let reason = if e.denial().is_some() {
                UNAUTHORIZED
            } else {
                "DatabaseUrlParameter"
            };
            report.say(PoolEvent::new(
                reason,
                format!(
                    "{budget} launch(es) held: the database URL parameter cannot be written: {e}"
                ),
                true,
            ));
            return Ok(None);
        }
        if let DatabaseSource::Url(_) = source {
            report.say(PoolEvent::new(
                "DatabaseUrlInUserData",
                "the launch's user-data carries the database URL, password included \
                 (launch.databaseUrlIn: userData): anyone allowed ec2:DescribeInstanceAttribute \
                 and every process on the instances can read it"
                    .into(),
                true,
            ));
        }
        Ok(Some((budget, userdata::render(spec, &self.pool, source))))
    }

    /// What EC2's `answer` to a batch of `count` in `offering` uses up: a
    /// token it answered (one whose answer was lost, or throttled to the
    /// end, is retried by the next pass), and the class's grant settled:
    /// what EC2 launched counts by its ids, what it did not is given back,
    /// and an answer lost counts until the class's census says.
    fn answered(
        &mut self,
        offering: &Offering,
        count: u32,
        answer: &Result<Vec<String>, Ec2Error>,
    ) {
        if !matches!(
            answer,
            Err(Ec2Error::Transport { .. } | Ec2Error::Throttled { .. } | Ec2Error::Fenced { .. })
        ) {
            self.launches.batches += 1;
        }
        if let Some(b) = &self.budget {
            match answer {
                Ok(ids) => b.launched(offering.instance_type(), count, ids.clone()),
                Err(Ec2Error::Transport { .. }) => b.lost(offering.instance_type(), count),
                Err(_) => b.release(offering.instance_type(), count),
            }
        }
    }

    /// The instances `ids` EC2 launched in `offering` for a batch of
    /// `count`: the loop's own from `now`, counted and said.
    fn learn_launched(
        &mut self,
        offering: &Offering,
        count: u32,
        ids: Vec<String>,
        now: DateTime<Utc>,
        report: &mut PassReport,
    ) {
        let learnt = Instant::now();
        for id in &ids {
            self.launches.ours.insert(id.clone(), learnt);
            self.launches
                .times
                .insert(id.clone(), (now, offering.clone()));
        }
        if let Some(m) = &self.metrics {
            m.launched(&self.pool, count);
        }
        report.say(PoolEvent::new(
            "Launched",
            format!("launched {count} ({offering}): {}", ids.join(", ")),
            false,
        ));
        report.add_launched(ids);
    }

    /// A launch failed with `e` (not for capacity, throttling or the
    /// fence): one that cannot work backs off, and the pool says why until
    /// one works; any other is said and tried again by the next pass. A
    /// launch the credentials may not make is asked again by the
    /// preflight a minute on (at `now`), whose dry run allowed ends the
    /// wait: a policy mended is seen within a minute, not a back-off.
    fn launch_failed(
        &mut self,
        e: &Ec2Error,
        spec: &WarmPoolSpec,
        now: DateTime<Utc>,
        report: &mut PassReport,
    ) {
        match refusal(e, spec, self.owner.namespace()) {
            Some((reason, message)) => {
                if reason == UNAUTHORIZED {
                    let later = now + ASK_AGAIN;
                    self.preflight_at = Some(self.preflight_at.map_or(later, |at| at.min(later)));
                }
                report.say(PoolEvent::new(reason, message.clone(), true));
                self.boot.refuse(
                    reason,
                    message,
                    self.tuning.boot_backoff_base(),
                    self.tuning.boot_backoff_cap(),
                );
                report.set_degraded(self.boot.refusal());
            }
            None => report.ec2_failed("LaunchFailed", e),
        }
    }

    /// EC2 had no capacity in `offering` (`code`, `message`), or does not
    /// know its subnet: it is held, and with it those the same quota or
    /// subnet covers, and said.
    fn no_capacity(
        &mut self,
        spec: &WarmPoolSpec,
        offering: &Offering,
        code: &str,
        message: &str,
        now: DateTime<Utc>,
        report: &mut PassReport,
    ) {
        let (until, held) = self.hold(spec, offering, code, now);
        if let Some(m) = &self.metrics {
            m.capacity_error(
                &self.pool,
                offering.instance_type(),
                offering.subnet(),
                code,
            );
        }
        if SUBNET_CODES.contains(&code) {
            tracing::warn!(pool = %self.pool, offering = %offering, code = %code,
                %message, "subnet refused; trying the pool's other subnets");
            report.say(PoolEvent::new(
                SUBNET_REFUSED,
                format!(
                    "EC2 refused a launch in subnet {}: {code}: {message}; its {held} \
                     offering(s) skipped until {}, the pool's other subnets tried",
                    offering.subnet(),
                    until.to_rfc3339()
                ),
                true,
            ));
            return;
        }
        tracing::warn!(pool = %self.pool, offering = %offering, code = %code,
            %message, "no capacity; trying the next offering");
        let also = if held > 1 {
            format!(" with {} more offerings under the same quota", held - 1)
        } else {
            String::new()
        };
        report.say(PoolEvent::new(
            "CapacityUnavailable",
            format!(
                "{offering}: {code}; skipped{also} until {}",
                until.to_rfc3339()
            ),
            true,
        ));
    }

    /// Of `wanted` instances of `offering`, how many the pool's class
    /// grants (all of them without a class); fewer is said once a pass
    /// (`LimitReached`, a warning: the pool's `Degraded` condition names
    /// the limit and the usage).
    fn granted(&mut self, offering: &Offering, wanted: u32, report: &mut PassReport) -> u32 {
        let Some(budget) = &self.budget else {
            return wanted;
        };
        let grant = budget.grant(offering.instance_type(), wanted);
        if let Some(why) = grant.held_back() {
            if !report.events().iter().any(|e| e.reason() == "LimitReached") {
                tracing::info!(pool = %self.pool, wanted, granted = grant.count(), "{why}");
                report.say(PoolEvent::new("LimitReached", why.to_string(), true));
            }
        }
        grant.count()
    }

    /// Holds `offering`, refused with `code`, and with it every offering
    /// of the pool the same quota or subnet covers
    /// ([`crate::warmpool::holds::held_by`]): for the capacity hold, or
    /// for the launch back-off's cap if EC2 does not know the subnet
    /// (waiting does not mend it; the spec's next subnets launch
    /// meanwhile). Until when, and how many are held.
    pub(super) fn hold(
        &mut self,
        spec: &WarmPoolSpec,
        offering: &Offering,
        code: &str,
        now: DateTime<Utc>,
    ) -> (DateTime<Utc>, usize) {
        let hold = if SUBNET_CODES.contains(&code) {
            self.tuning.boot_backoff_cap()
        } else {
            self.tuning.capacity_hold()
        };
        let until = now + chrono::Duration::from_std(hold).unwrap_or(chrono::Duration::minutes(3));
        let held = self
            .holds
            .hold(offering, code, &offerings(&spec.launch), until);
        (until, held)
    }

    /// The SSM parameter of this pool's Scheduler's database URL.
    pub(super) fn parameter_name(&self, spec: &WarmPoolSpec) -> String {
        let namespace = self.pool.split_once('/').map_or("", |(ns, _)| ns);
        ssm::parameter_name(self.tuning.cluster(), namespace, &spec.scheduler)
    }

    /// One batch, retried with the same token while EC2 throttles.
    async fn run_batch(
        &mut self,
        world: &mut impl World,
        orders: Orders<'_>,
        offering: &Offering,
        count: u32,
        token: &str,
        user_data: &UserData,
    ) -> Result<Vec<String>, Ec2Error> {
        let mut backoff = Backoff::new(self.tuning.backoff_base(), self.tuning.backoff_cap());
        loop {
            let req = RunRequest::new(
                &orders.spec.launch,
                offering,
                count,
                token,
                user_data,
                &self.owner,
            )
            .with_class(self.budget.as_ref().map(|b| b.class()))
            .with_template_version(orders.template_version);
            let outcome = world.run(&req).await;
            self.denials.record("RunInstances", &outcome);
            match outcome {
                Err(Ec2Error::Throttled { action })
                    if backoff.attempts() + 1 < self.tuning.throttle_attempts() =>
                {
                    if let Some(m) = &self.metrics {
                        m.throttle(&self.pool);
                    }
                    let wait = backoff.next_wait();
                    tracing::info!(pool = %self.pool, action, ?wait, "throttled; backing off");
                    tokio::time::sleep(wait).await;
                }
                Err(e @ Ec2Error::Throttled { .. }) => {
                    if let Some(m) = &self.metrics {
                        m.throttle(&self.pool);
                    }
                    return Err(e);
                }
                other => return other,
            }
        }
    }
}

// tests — the act stage against a table of answers.
#[cfg(test)]
mod tests;
