//! Tables of (plan, what the world answers) → what the act step did:
//! launch, capacity fall-back, throttling, lost answers, retirement and
//! the counting of failed boots,
//! in-process against a table of answers (moto and a real PostgreSQL take
//! the same paths end to end in `tests/tests/warm_pool/`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};

use crate::crd::WarmPoolSpec;
use crate::warmpool::act::{Actuator, Orders};
use crate::warmpool::ec2::{classify, client_token, Ec2Error, Ownership, RunRequest};
use crate::warmpool::plan::{End, LaunchBatch, Offering, PoolPlan, Reason, Retirement, Snapshot};
use crate::warmpool::world::World;
use crate::warmpool::{
    pass_report::{PassReport, PoolError},
    tuning::Tuning,
};

/// How EC2 answers one `RunInstances` call.
#[derive(Clone, Copy, Debug)]
enum Answer {
    Launch,
    NoCapacity,
    Throttled,
    Refused,
    Lost,
    /// `IdempotentParameterMismatch`: the token named another request.
    Mismatch,
    /// Termination protection (`OperationNotPermitted`).
    Protected,
    /// The credentials may not make the call (`UnauthorizedOperation`).
    Denied,
    /// Refused with this code.
    Code(&'static str),
}

/// The world as a table: EC2's answers in order (then `Launch`), the idle
/// rows a hand-out took first, the instances whose agent wrote a row
/// first; and what was asked of it.
#[derive(Default)]
struct Table {
    run: VecDeque<Answer>,
    terminate: VecDeque<Answer>,
    stop: VecDeque<Answer>,
    handed_out: HashSet<i64>,
    agent_first: HashSet<String>,
    launched: u32,
    /// `(instance type, count, token)` of each `RunInstances`.
    runs: Vec<(String, u32, String)>,
    terminated: Vec<String>,
    ended_claims: Vec<i64>,
    start: VecDeque<Answer>,
    /// Reserved rows whose agent came back first (idle): not claimed.
    came_back: HashSet<i64>,
    started: Vec<String>,
    stopped: Vec<String>,
    woken: Vec<i64>,
    unwoken: Vec<i64>,
    /// For each preflight asked: the instance its calls on instances were
    /// asked about, if any.
    preflights: Vec<Option<String>>,
    /// The subnet of each `RunInstances`, in turn.
    subnets: Vec<String>,
    /// Preflights find the launch allowed (else `TerminateInstances`
    /// missing).
    allows_dry_runs: bool,
    /// Instances whose agent once wrote a row.
    had_rows: HashSet<String>,
    /// What each instance's console ends with; `None`: the operator's
    /// policy lacks `ec2:GetConsoleOutput`.
    consoles: Option<HashMap<String, String>>,
}

fn refusal(answer: Answer, action: &'static str, offering: Option<&Offering>) -> Ec2Error {
    match answer {
        Answer::NoCapacity => Ec2Error::Capacity {
            action,
            offering: offering
                .cloned()
                .expect("invariant: only RunInstances and StartInstances answer no capacity"),
            code: "InsufficientInstanceCapacity".into(),
            message: "none left".into(),
        },
        Answer::Throttled => Ec2Error::Throttled { action },
        Answer::Refused => Ec2Error::Refused {
            action,
            code: "InvalidParameterValue".into(),
            message: "no such image".into(),
        },
        Answer::Mismatch => Ec2Error::Refused {
            action,
            code: "IdempotentParameterMismatch".into(),
            message: "the token was used with other parameters".into(),
        },
        Answer::Protected => Ec2Error::Refused {
            action,
            code: "OperationNotPermitted".into(),
            message: "disableApiTermination".into(),
        },
        Answer::Denied => Ec2Error::Denied {
            action,
            code: "UnauthorizedOperation".into(),
            message: "You are not authorized to perform this operation.".into(),
        },
        // Sorted as EC2's answers are.
        Answer::Code(code) => classify(action, offering, code, "refused"),
        Answer::Lost | Answer::Launch => Ec2Error::Transport {
            action,
            source: "connection reset".into(),
        },
    }
}

/// A call on `ids` answered with `answer` (`Launch` when the table has none
/// left): done, and the ids added to `record`, or refused.
fn done(
    answer: Option<Answer>,
    ids: &[String],
    record: &mut Vec<String>,
    action: &'static str,
    offering: Option<&Offering>,
) -> Result<(), Ec2Error> {
    match answer.unwrap_or(Answer::Launch) {
        Answer::Launch => {
            record.extend(ids.iter().cloned());
            Ok(())
        }
        other => Err(refusal(other, action, offering)),
    }
}

impl World for Table {
    async fn end_idle_rows(&mut self, rows: &[i64]) -> Result<HashSet<i64>, PoolError> {
        Ok(rows
            .iter()
            .copied()
            .filter(|r| !self.handed_out.contains(r))
            .collect())
    }

    async fn claim(&mut self, instance: &str, _pool: &str) -> Result<Option<i64>, PoolError> {
        Ok((!self.agent_first.contains(instance)).then_some(900))
    }

    async fn end_busy_row(&mut self, row: i64) -> Result<bool, PoolError> {
        Ok(!self.handed_out.contains(&row))
    }

    async fn end_claim(&mut self, row: i64) -> Result<(), PoolError> {
        self.ended_claims.push(row);
        Ok(())
    }

    async fn end_rows_of_gone(&mut self, rows: &[i64]) -> Result<Vec<i64>, PoolError> {
        Ok(rows.to_vec())
    }

    async fn terminate(&mut self, ids: &[String]) -> Result<(), Ec2Error> {
        let answer = self.terminate.pop_front();
        done(
            answer,
            ids,
            &mut self.terminated,
            "TerminateInstances",
            None,
        )
    }

    async fn reserve_idle_rows(&mut self, rows: &[i64]) -> Result<HashSet<i64>, PoolError> {
        self.end_idle_rows(rows).await
    }

    async fn wake_rows(&mut self, rows: &[i64]) -> Result<HashSet<i64>, PoolError> {
        self.woken.extend(rows);
        Ok(rows.iter().copied().collect())
    }

    async fn unwake_rows(&mut self, rows: &[i64]) -> Result<(), PoolError> {
        self.unwoken.extend(rows);
        Ok(())
    }

    async fn claim_reserved(&mut self, row: i64) -> Result<Option<i64>, PoolError> {
        Ok((!self.came_back.contains(&row)).then_some(901))
    }

    async fn stop(&mut self, ids: &[String]) -> Result<(), Ec2Error> {
        let answer = self.stop.pop_front();
        done(answer, ids, &mut self.stopped, "StopInstances", None)
    }

    async fn start(&mut self, ids: &[String], offering: &Offering) -> Result<(), Ec2Error> {
        let answer = self.start.pop_front();
        done(
            answer,
            ids,
            &mut self.started,
            "StartInstances",
            Some(offering),
        )
    }

    async fn run(&mut self, req: &RunRequest<'_>) -> Result<Vec<String>, Ec2Error> {
        let t = req.offering().instance_type().to_string();
        self.runs.push((t, req.count(), req.token().to_string()));
        self.subnets.push(req.offering().subnet().to_string());
        match self.run.pop_front().unwrap_or(Answer::Launch) {
            Answer::Launch => Ok((0..req.count())
                .map(|_| {
                    self.launched += 1;
                    format!("i-{:04}", self.launched)
                })
                .collect()),
            other => Err(refusal(other, "RunInstances", Some(req.offering()))),
        }
    }

    async fn publish(
        &mut self,
        _name: &str,
        _value: &str,
        _tags: &[(&str, &str)],
        _endpoint: Option<&str>,
    ) -> Result<bool, crate::warmpool::ssm::SsmError> {
        Ok(false)
    }

    async fn preflight(
        &mut self,
        probe: &crate::warmpool::preflight::Probe<'_>,
    ) -> Vec<crate::warmpool::preflight::Check> {
        self.preflights.push(probe.instance().map(String::from));
        if self.allows_dry_runs {
            return vec![crate::warmpool::preflight::Check::new(
                "ec2",
                "RunInstances",
                crate::warmpool::preflight::Outcome::Allowed,
            )];
        }
        vec![crate::warmpool::preflight::Check::new(
            "ec2",
            "TerminateInstances",
            crate::warmpool::preflight::Outcome::Missing("may not".into()),
        )]
    }

    async fn had_rows(
        &mut self,
        _pool: &str,
        instances: &[String],
    ) -> Result<HashSet<String>, PoolError> {
        Ok(instances
            .iter()
            .filter(|i| self.had_rows.contains(*i))
            .cloned()
            .collect())
    }

    async fn console_tail(&mut self, instance: &str) -> Result<String, Ec2Error> {
        match &self.consoles {
            Some(consoles) => Ok(consoles.get(instance).cloned().unwrap_or_default()),
            None => Err(crate::warmpool::ec2::classify(
                "GetConsoleOutput",
                None,
                "UnauthorizedOperation",
                "not authorized",
            )),
        }
    }
}

fn offering(t: &str) -> Offering {
    Offering::new(t.into(), "subnet-a".into(), false)
}

/// The act stage of a pool, the world it acts on and the spec: what the
/// loop lends it in a pass.
struct Stage {
    act: Actuator,
    world: Table,
    spec: WarmPoolSpec,
}

/// The act stage of a pool whose uid is remembered, on `table`.
fn stage(table: Table, url: &str, tuning: Tuning) -> Stage {
    let owner = Ownership::new("ns", "p", "sched", "orca-operator", "c");
    let mut act = Actuator::new(owner, url, tuning, "own".into());
    act.restore("uid-1/loop".into(), &Default::default());
    Stage {
        act,
        world: table,
        spec: crate::test_support::pool_spec(0, 0, 100),
    }
}

fn pool(table: Table) -> Stage {
    let tuning = Tuning::default()
        .with_backoff_base(Duration::from_millis(1))
        .with_backoff_cap(Duration::from_millis(2));
    stage(table, "postgres://orca@db/orca", tuning)
}

/// A pool whose EC2 answers its `RunInstances` calls with `answers` in turn,
/// then launches.
fn run_answered(answers: &[Answer]) -> Stage {
    pool(Table {
        run: answers.iter().copied().collect(),
        ..Table::default()
    })
}

/// A plan that retires `retirements` and does nothing else.
fn retiring(retirements: Vec<Retirement>) -> PoolPlan {
    PoolPlan::default().with_retirements(retirements)
}

/// A plan that starts `starts` from the reserve and does nothing else.
fn starting(starts: Vec<crate::warmpool::plan::WithRow>) -> PoolPlan {
    PoolPlan::default().with_starts(starts)
}

/// A retirement of `instance` for `reason`, ending `end`.
fn retirement(instance: &str, reason: Reason, end: End) -> Retirement {
    Retirement::new(instance, reason, end)
}

/// A plan that launches `count` on t3.small, t3.medium after it.
fn launching(count: u32) -> PoolPlan {
    PoolPlan::default()
        .with_launches(vec![LaunchBatch::new(offering("t3.small"), count)])
        .with_fallback(vec![offering("t3.medium")])
        .with_room(100)
}

/// The act step's orders: `plan` over `spec`, at the tables' time.
fn orders<'a>(spec: &'a WarmPoolSpec, plan: &'a PoolPlan) -> Orders<'a> {
    Orders {
        spec,
        plan,
        template_version: None,
        now: Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap(),
    }
}

async fn launch(lp: &mut Stage, plan: &PoolPlan, stayed: u32) -> PassReport {
    let mut report = PassReport::default();
    let spec = lp.spec.clone();
    let orders = orders(&spec, plan);
    lp.act
        .launch(&mut lp.world, orders, stayed, &mut report)
        .await
        .expect("the table never fails a statement");
    report
}

fn reasons(report: &PassReport) -> Vec<&'static str> {
    report.events().iter().map(|e| e.reason()).collect()
}

#[tokio::test]
async fn launches_go_to_the_next_offering_on_a_capacity_error_and_hold_the_first() {
    let mut lp = run_answered(&[Answer::NoCapacity]);
    let report = launch(&mut lp, &launching(3), 0).await;
    let runs: Vec<(&str, u32)> = lp
        .world
        .runs
        .iter()
        .map(|(t, n, _)| (t.as_str(), *n))
        .collect();
    assert_eq!(runs, [("t3.small", 3), ("t3.medium", 3)]);
    assert_eq!(report.launched().len(), 3);
    assert_eq!(reasons(&report), ["CapacityUnavailable", "Launched"]);
    let until = lp.act.holds.until()[&offering("t3.small")];
    assert_eq!(
        until,
        Utc.with_ymd_and_hms(2026, 1, 1, 12, 3, 0).unwrap(),
        "held for the capacity hold, 180 s"
    );
    // Two answered calls, two tokens, both used up.
    assert_eq!(lp.act.launches.batches, 2);
    assert_eq!(lp.world.runs[0].2, client_token(&lp.act.launches.id, 0));
    assert_eq!(lp.world.runs[1].2, client_token(&lp.act.launches.id, 1));
    assert!(
        lp.act.launches.id.starts_with("uid-1/"),
        "{}",
        lp.act.launches.id
    );
}

#[tokio::test]
async fn a_throttled_call_is_retried_with_its_token_and_throttled_to_the_end_keeps_it() {
    let mut lp = run_answered(&[Answer::Throttled, Answer::Throttled]);
    let report = launch(&mut lp, &launching(2), 0).await;
    assert_eq!(report.launched().len(), 2);
    assert!(!report.throttled());
    let tokens: HashSet<&str> = lp.world.runs.iter().map(|r| r.2.as_str()).collect();
    assert_eq!(
        (lp.world.runs.len(), tokens.len()),
        (3, 1),
        "one token, three calls"
    );
    assert_eq!(lp.act.launches.batches, 1);

    // Five throttled answers: the pass gives up, throttled; the token is
    // kept for the next pass's retry.
    let mut lp = run_answered(&[Answer::Throttled; 5]);
    let report = launch(&mut lp, &launching(2), 0).await;
    assert!(report.throttled() && report.launched().is_empty());
    assert_eq!(reasons(&report), ["Throttled"]);
    assert_eq!(lp.world.runs.len(), 5);
    assert_eq!(lp.act.launches.batches, 0);
    let report = launch(&mut lp, &launching(2), 0).await;
    assert_eq!(report.launched().len(), 2);
    assert_eq!(
        lp.world.runs[5].2, lp.world.runs[0].2,
        "the retry repeats it"
    );
}

#[tokio::test]
async fn a_lost_answer_keeps_its_token_and_a_refusal_uses_it_up() {
    let mut lp = run_answered(&[Answer::Lost]);
    let report = launch(&mut lp, &launching(1), 0).await;
    assert_eq!(reasons(&report), ["LaunchFailed"]);
    assert_eq!(
        lp.act.launches.batches, 0,
        "the next pass asks again with it"
    );

    // A launch that cannot work (its image gone): said, and launches
    // wait rather than ask again every pass.
    let mut lp = run_answered(&[Answer::Refused]);
    let report = launch(&mut lp, &launching(1), 0).await;
    assert_eq!(reasons(&report), ["LaunchRefused"]);
    assert!(report.events()[0].is_warning());
    assert_eq!(report.degraded().map(|d| d.0), Some("LaunchRefused"));
    assert!(lp.act.boot.holding().is_some(), "launches wait");
    assert_eq!(lp.act.launches.batches, 1);
    assert!(
        lp.act.holds.until().is_empty(),
        "a refusal is not a capacity error"
    );
}

#[tokio::test]
async fn a_launch_refused_by_any_code_waits_and_only_ec2s_own_faults_are_tried_again_at_once() {
    // Whatever EC2 names the refusal — codes the act stage has no word of
    // its own for among them — the launch cannot work as it is: said, and
    // the next pass makes no call.
    for (answer, reason) in [
        (Answer::Code("InvalidKeyPair.NotFound"), "LaunchRefused"),
        (Answer::Code("OptInRequired"), "LaunchRefused"),
        (
            Answer::Code("InvalidSecurityGroupID.NotFound"),
            "LaunchRefused",
        ),
        (Answer::Denied, "Unauthorized"),
    ] {
        let mut lp = run_answered(&[answer]);
        let report = launch(&mut lp, &launching(1), 0).await;
        assert_eq!(reasons(&report), [reason], "{answer:?}");
        assert_eq!(report.degraded().map(|d| d.0), Some(reason), "{answer:?}");
        assert!(lp.act.boot.holding().is_some(), "{answer:?}: launches wait");
        let report = launch(&mut lp, &launching(1), 0).await;
        assert_eq!(lp.world.runs.len(), 1, "{answer:?}: asked again at once");
        assert!(report.launched().is_empty());
    }
    // A fault of EC2's own: said, and the next pass tries again.
    for code in ["InternalError", "Unavailable"] {
        let mut lp = run_answered(&[Answer::Code(code)]);
        let report = launch(&mut lp, &launching(1), 0).await;
        assert_eq!(reasons(&report), ["LaunchFailed"], "{code}");
        assert!(lp.act.boot.holding().is_none(), "{code}");
        let report = launch(&mut lp, &launching(1), 0).await;
        assert_eq!(
            (lp.world.runs.len(), report.launched().len()),
            (2, 1),
            "{code}"
        );
    }
}

#[tokio::test]
async fn a_subnet_ec2_does_not_know_is_held_whole_and_the_pool_launches_in_its_others() {
    // The spec's subnets are subnet-a and subnet-b; EC2 knows no subnet-a
    // (deleted under a class that still lists it).
    let mut lp = run_answered(&[Answer::Code("InvalidSubnetID.NotFound")]);
    let in_b = Offering::new("t3.small".into(), "subnet-b".into(), false);
    let plan = launching(2).with_fallback(vec![offering("t3.medium"), in_b]);
    let report = launch(&mut lp, &plan, 0).await;
    assert_eq!(
        lp.world.subnets,
        ["subnet-a", "subnet-b"],
        "t3.medium in subnet-a is not asked: held with it"
    );
    assert_eq!(report.launched().len(), 2);
    assert_eq!(reasons(&report), ["SubnetRefused", "Launched"]);
    assert!(report.events()[0].message().contains("subnet-a"));
    assert!(lp.act.boot.holding().is_none(), "the pool's launches go on");
    let now = Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap();
    let until = Utc.with_ymd_and_hms(2026, 1, 1, 12, 30, 0).unwrap();
    let held: Vec<(&str, &str, DateTime<Utc>)> = lp
        .act
        .holds
        .until()
        .iter()
        .map(|(o, u)| (o.instance_type(), o.subnet(), *u))
        .collect();
    assert_eq!(
        held,
        [
            ("t3.medium", "subnet-a", until),
            ("t3.small", "subnet-a", until)
        ],
        "every type in it, for the back-off's cap (waiting does not mend it)"
    );
    let refused: Vec<&str> = lp.act.holds.refused_subnets(now).into_keys().collect();
    assert_eq!(refused, ["subnet-a"]);
    assert!(lp
        .act
        .holds
        .status(now)
        .iter()
        .all(|c| c.code == "InvalidSubnetID.NotFound"));
}

#[tokio::test]
async fn a_launch_the_credentials_were_refused_goes_on_once_its_dry_run_is_allowed() {
    let mut lp = pool(Table {
        run: [Answer::Denied].into(),
        allows_dry_runs: true,
        ..Table::default()
    });
    lp.act.preflight_at = None;
    launch(&mut lp, &launching(1), 0).await;
    assert!(lp.act.boot.holding().is_some());
    // The preflight is due a minute on, not before; its dry run of the
    // launch is allowed now.
    let spec = lp.spec.clone();
    let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap();
    ask(&mut lp, &spec, Snapshot::default(), t0, 59).await;
    assert!(lp.world.preflights.is_empty(), "asked before the minute");
    ask(&mut lp, &spec, Snapshot::default(), t0, 60).await;
    assert_eq!(lp.world.preflights.len(), 1);
    assert!(lp.act.boot.holding().is_none(), "the policy was mended");
    let report = launch(&mut lp, &launching(1), 0).await;
    assert_eq!(report.launched().len(), 1);
    assert_eq!(lp.act.denials.standing(), None, "a launch made ends it");
}

#[tokio::test]
async fn only_what_was_ended_or_claimed_is_terminated_and_each_miss_takes_back_a_launch() {
    let mut lp = pool(Table {
        handed_out: [2].into(),
        agent_first: ["i-late".to_string()].into(),
        ..Table::default()
    });
    let retire = |instance: &str, end| retirement(instance, Reason::IdleBeyondMax, end);
    let plan = launching(2).with_room(2).with_retirements(vec![
        retire("i-idle", End::Idle(1)),
        retire("i-handed", End::Idle(2)),
        retire("i-bare", End::Claim),
        retire("i-late", End::Claim),
    ]);
    let mut report = PassReport::default();
    let stayed = lp
        .act
        .retire(&mut lp.world, &plan, &mut report)
        .await
        .unwrap();
    assert_eq!(stayed, 2, "the handed-out one and the late agent's");
    assert_eq!(lp.world.terminated, ["i-idle", "i-bare"]);
    assert_eq!(
        lp.world.ended_claims,
        [900],
        "the claim, after the termination"
    );
    assert_eq!(
        reasons(&report),
        ["RetirementLost", "RetirementLost", "Terminated"]
    );
    // Two places the plan counted free are taken back: nothing launches.
    let report = launch(&mut lp, &plan, stayed).await;
    assert!(report.launched().is_empty() && lp.world.runs.is_empty());
}

#[tokio::test]
async fn a_throttled_termination_leaves_the_claims_for_the_next_pass() {
    let mut lp = pool(Table {
        terminate: [Answer::Throttled].into(),
        ..Table::default()
    });
    let plan = retiring(vec![retirement("i-bare", Reason::Leaked, End::Claim)]);
    let mut report = PassReport::default();
    let stayed = lp
        .act
        .retire(&mut lp.world, &plan, &mut report)
        .await
        .unwrap();
    assert_eq!(stayed, 1);
    assert!(report.throttled());
    assert_eq!(reasons(&report), ["TerminateFailed"]);
    assert!(
        lp.world.ended_claims.is_empty(),
        "the claim stays for the retry"
    );
}

fn with_row(instance: &str, row: i64) -> crate::warmpool::plan::WithRow {
    crate::warmpool::plan::WithRow::new(instance, row, offering("t3.small"))
}

async fn reserve(lp: &mut Stage, plan: &PoolPlan) -> PassReport {
    let mut report = PassReport::default();
    let spec = lp.spec.clone();
    let orders = orders(&spec, plan);
    lp.act
        .reserve(&mut lp.world, orders, &mut report)
        .await
        .expect("the table never fails a statement");
    report
}

#[tokio::test]
async fn only_idle_rows_taken_into_the_reserve_are_stopped_and_running_reserved_ones_again() {
    let mut lp = pool(Table {
        handed_out: [2].into(),
        ..Table::default()
    });
    let plan = PoolPlan::default()
        .with_stops(vec![with_row("i-1", 1), with_row("i-2", 2)])
        .with_restops(vec![with_row("i-3", 3)]);
    let report = reserve(&mut lp, &plan).await;
    // i-2 was handed a run before its row was taken: it keeps running.
    assert_eq!(lp.world.stopped, ["i-1", "i-3"]);
    assert_eq!(reasons(&report), ["Stopped"]);
}

#[tokio::test]
async fn a_start_without_capacity_puts_the_rows_back_and_holds_the_offering() {
    let mut lp = pool(Table {
        start: [Answer::NoCapacity].into(),
        ..Table::default()
    });
    let plan = starting(vec![with_row("i-1", 1), with_row("i-2", 2)]);
    let report = reserve(&mut lp, &plan).await;
    assert_eq!(lp.world.woken, [1, 2], "woken before the start");
    assert!(lp.world.started.is_empty());
    assert_eq!(lp.world.unwoken, [1, 2], "back into the reserve");
    assert!(report.started().is_empty());
    assert_eq!(reasons(&report), ["StartFailed"]);
    assert!(
        lp.act.holds.until().contains_key(&offering("t3.small")),
        "the next pass launches instead of starting there"
    );

    let report = reserve(&mut lp, &plan).await;
    assert_eq!(lp.world.started, ["i-1", "i-2"]);
    assert_eq!(report.started(), ["i-1", "i-2"]);
    assert_eq!(reasons(&report), ["Started"]);
}

#[tokio::test]
async fn a_reserve_instance_whose_agent_came_back_is_not_terminated() {
    let mut lp = pool(Table {
        came_back: [2].into(),
        ..Table::default()
    });
    let plan = retiring(vec![
        retirement("i-1", Reason::ReserveBeyondMax, End::Reserved(1)),
        retirement("i-2", Reason::ReserveBeyondMax, End::Reserved(2)),
    ]);
    let mut report = PassReport::default();
    let stayed = lp
        .act
        .retire(&mut lp.world, &plan, &mut report)
        .await
        .unwrap();
    assert_eq!(stayed, 1);
    assert_eq!(lp.world.terminated, ["i-1"]);
    assert_eq!(
        lp.world.ended_claims,
        [901],
        "the claim ended after the terminate"
    );
}

/// A token EC2 knows for another request is replaced by the next one in
/// the same pass, once; the launch is not lost to it.
#[tokio::test]
async fn an_idempotent_parameter_mismatch_takes_the_next_token_at_once() {
    let mut lp = run_answered(&[Answer::Mismatch]);
    let report = launch(&mut lp, &launching(2), 0).await;
    assert_eq!(report.launched().len(), 2, "{:?}", report.events());
    assert_eq!(lp.world.runs.len(), 2);
    assert_ne!(lp.world.runs[0].2, lp.world.runs[1].2);
    assert_eq!(lp.act.launches.batches, 2);
}

/// One instance EC2 will not terminate (termination protection) fails the
/// whole batch: each is then tried alone, the others go in this pass, and
/// the refused one is named and stays (its place taken back). Once, the
/// whole batch stayed, every pass.
#[tokio::test]
async fn one_refused_id_does_not_hold_up_a_termination_batch() {
    let mut lp = pool(Table {
        // The batch, then i-a, i-b and i-c one by one.
        terminate: [
            Answer::Protected,
            Answer::Launch,
            Answer::Protected,
            Answer::Launch,
        ]
        .into(),
        ..Table::default()
    });
    let retire = |instance: &str, row| retirement(instance, Reason::IdleBeyondMax, End::Idle(row));
    let plan =
        launching(0).with_retirements(vec![retire("i-a", 1), retire("i-b", 2), retire("i-c", 3)]);
    let mut report = PassReport::default();
    let stayed = lp
        .act
        .retire(&mut lp.world, &plan, &mut report)
        .await
        .unwrap();
    assert_eq!(stayed, 1, "the protected one");
    assert_eq!(lp.world.terminated, ["i-a", "i-c"]);
    assert_eq!(report.terminated(), ["i-a", "i-c"]);
    let failed: Vec<&str> = report
        .events()
        .iter()
        .filter(|e| e.reason() == "TerminateFailed")
        .map(|e| e.message())
        .collect();
    assert_eq!(failed.len(), 1, "{:?}", report.events());
    assert!(failed[0].starts_with("i-b ") && failed[0].contains("OperationNotPermitted"));
}

/// EC2 refuses to start a reserve instance for good (a missing IAM action,
/// say): kept, it would be parked for ever, never handed out nor retired.
/// It is retired instead, and the Warning says so.
#[tokio::test]
async fn a_start_refused_for_good_retires_the_reserve_instance() {
    let mut lp = pool(Table {
        start: [Answer::Refused].into(),
        ..Table::default()
    });
    let plan = starting(vec![with_row("i-1", 1)]);
    let report = reserve(&mut lp, &plan).await;
    assert!(lp.world.started.is_empty());
    assert!(lp.world.unwoken.is_empty(), "not put back into the reserve");
    assert_eq!(lp.world.terminated, ["i-1"]);
    assert_eq!(report.terminated(), ["i-1"]);
    let failed = report
        .events()
        .iter()
        .find(|e| e.reason() == "StartFailed")
        .unwrap();
    assert!(failed.is_warning() && failed.message().contains("i-1 retired (ReserveFailed)"));
}

/// The same for a stop EC2 refuses: once, the plan stopped it again every
/// pass and its agent waited for a stop that never came. One refused id
/// fails the whole call, so each is asked alone: only the one refused
/// alone is retired (once, the whole batch was).
#[tokio::test]
async fn a_stop_refused_for_good_retires_the_instance_refused_alone() {
    let mut lp = pool(Table {
        stop: [Answer::Refused, Answer::Refused].into(),
        ..Table::default()
    });
    let plan = PoolPlan::default()
        .with_stops(vec![with_row("i-1", 1)])
        .with_restops(vec![with_row("i-3", 3)]);
    let report = reserve(&mut lp, &plan).await;
    assert_eq!(lp.world.stopped, ["i-3"]);
    assert_eq!(lp.world.terminated, ["i-1"]);
    assert_eq!(reasons(&report), ["Stopped", "StopFailed", "Terminated"]);
}

/// The pool's preflight at `t0` and `secs` seconds: what the pass said.
async fn ask(
    lp: &mut Stage,
    spec: &WarmPoolSpec,
    snap: Snapshot,
    t0: chrono::DateTime<Utc>,
    secs: i64,
) -> PassReport {
    let now = t0 + chrono::Duration::seconds(secs);
    let mut report = PassReport::default();
    crate::warmpool::act::preflight::ask(
        &mut lp.world,
        &mut lp.act,
        spec,
        &snap,
        None,
        now,
        &mut report,
    )
    .await;
    report
}

/// A pool's preflight while an action stays missing: asked at the loop's
/// start, once more on its first pass with an instance, then a minute
/// apart however often the spec changes (an editor's edits cannot spend
/// the account's EC2 request budget); each ask keeps the pool
/// `Unauthorized` and says so in an Event.
#[tokio::test]
async fn the_preflight_asks_at_most_once_a_minute_however_often_the_spec_changes() {
    let mut lp = pool(Table::default());
    let spec = lp.spec.clone();
    let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap();
    let with_instance =
        Snapshot::default().with_instances(vec![crate::warmpool::instance::Ec2Instance::bare(
            "i-1",
            crate::warmpool::Ec2State::Running,
            t0,
        )]);
    let first = ask(&mut lp, &spec, Snapshot::default(), t0, 0).await;
    assert!(first.events().iter().any(|e| e.reason() == "Unauthorized"));
    assert!(lp.act.denials.standing().is_some());
    // The first pass with an instance asks about it, once.
    ask(&mut lp, &spec, with_instance.clone(), t0, 1).await;
    // Edits every second: none asked until a minute after the last ask.
    for s in 2..61 {
        lp.act.preflight_at = Some(chrono::DateTime::<Utc>::MIN_UTC);
        ask(&mut lp, &spec, with_instance.clone(), t0, s).await;
    }
    assert_eq!(
        lp.world.preflights,
        [None, Some("i-1".to_string())],
        "asked more than once a minute"
    );
    ask(&mut lp, &spec, with_instance, t0, 61).await;
    assert_eq!(lp.world.preflights.len(), 3);
}

/// The pool's URL in these tables' boot tests: its password must never
/// reach a status or an Event, whatever a console prints.
const URL_WITH_PASSWORD: &str = "postgres://orca:s3cret-pw@db/orca";

/// A pool on `table` whose database URL holds a password.
fn pool_with_password(table: Table) -> Stage {
    stage(table, URL_WITH_PASSWORD, Tuning::default())
}

/// One pass's counting of failed boots: `plan`'s boot time-outs, over
/// `snap`, at the tables' time.
async fn count(lp: &mut Stage, plan: &PoolPlan, snap: &Snapshot) -> PassReport {
    let mut report = PassReport::default();
    let now = Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap();
    lp.act
        .count_boot_failures(&mut lp.world, plan, snap, now, &mut report)
        .await
        .expect("the table never fails a statement");
    report
}

fn timed_out(ids: &[&str]) -> PoolPlan {
    retiring(
        ids.iter()
            .map(|id| retirement(id, Reason::BootTimeout, End::Claim))
            .collect(),
    )
}

#[tokio::test]
async fn three_boot_time_outs_make_the_pool_boot_failing_with_the_last_console_scrubbed() {
    let console =
        format!("orca-pool-agent: cannot connect to {URL_WITH_PASSWORD}: refused / powering off");
    let mut lp = pool_with_password(Table {
        consoles: Some(HashMap::from([("i-3".to_string(), console)])),
        ..Table::default()
    });
    let snap = Snapshot::default();
    let two = count(&mut lp, &timed_out(&["i-1", "i-2"]), &snap).await;
    assert_eq!(two.degraded(), None, "two in a row are not yet failing");
    let three = count(&mut lp, &timed_out(&["i-3"]), &snap).await;
    let (reason, message) = three.degraded().cloned().expect("failing after three");
    assert_eq!(reason, "BootFailing");
    assert!(message.contains("the last: i-3"), "{message}");
    assert!(message.contains("powering off"), "{message}");
    assert!(!message.contains("s3cret-pw"), "the password in {message}");
    assert_eq!(reasons(&three), ["BootFailing"]);
    assert!(lp.act.boot.holding().is_some(), "launches back off");
}

#[tokio::test]
async fn a_console_the_policy_may_not_read_is_said_in_the_message() {
    let mut lp = pool_with_password(Table::default());
    let report = count(
        &mut lp,
        &timed_out(&["i-1", "i-2", "i-3"]),
        &Snapshot::default(),
    )
    .await;
    let (_, message) = report.degraded().expect("failing after three");
    assert!(
        message.contains("ec2:GetConsoleOutput is not allowed"),
        "{message}"
    );
}

#[tokio::test]
async fn an_instance_gone_before_it_reported_counts_unless_its_agent_ever_wrote_a_row() {
    // Four launched by this loop ten minutes ago, none listed now: gone;
    // the agents of two of them wrote a row once.
    let mut lp = pool_with_password(Table {
        had_rows: HashSet::from(["i-2".to_string(), "i-3".to_string()]),
        consoles: Some(HashMap::new()),
        ..Table::default()
    });
    let launched = Utc.with_ymd_and_hms(2026, 1, 1, 11, 50, 0).unwrap();
    for id in ["i-1", "i-2", "i-3", "i-4"] {
        lp.act
            .launches
            .times
            .insert(id.to_string(), (launched, offering("t3.small")));
    }
    let gone = count(&mut lp, &PoolPlan::default(), &Snapshot::default()).await;
    assert_eq!(gone.degraded(), None, "two lost boots, not four");
    // Counted once: the next pass finds none of them again, and one boot
    // time-out more makes three.
    let again = count(&mut lp, &PoolPlan::default(), &Snapshot::default()).await;
    assert_eq!(again.degraded(), None);
    let third = count(&mut lp, &timed_out(&["i-5"]), &Snapshot::default()).await;
    let (_, message) = third.degraded().expect("three failed boots in a row");
    assert!(message.contains("the last: i-5"), "{message}");
}
