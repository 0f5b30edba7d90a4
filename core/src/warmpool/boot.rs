//! Boot failures (docs/operations.md#warmpool-conditions): an AMI without
//! the agent, a wrong `agentPath`, an agent of an older release, a role
//! that may not read the database URL, a subnet without a way to SSM or
//! the database — each instance dies, timed out or powered off by its own
//! script, and would be replaced for ever. However it ends before its agent
//! reported (its boot timed out; it powered itself off, was stopped or
//! terminated by someone else, or went from EC2's listing), it counts; once
//! a few in a row did, the pool says so (`Degraded`, `BootFailing`, with
//! the cause its script printed on the last one's console) and its launches
//! back off, doubling up to a cap, until an instance it launched reports.

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};

use super::plan::{Ec2State, Snapshot};
use crate::backoff::doubling;

/// How long after its launch an instance EC2 does not list at all counts
/// as gone (EC2's listings lag a launch by seconds).
pub const UNLISTED_FOR: chrono::TimeDelta = chrono::TimeDelta::seconds(120);

/// Boot time-outs in a row after which the pool is `BootFailing`.
pub const FAILING_AFTER: u32 = 3;

/// The pool's boot failures in a row, and the launch back-off they earn.
#[derive(Debug, Default)]
pub struct BootFailures {
    /// Instances retired as `BootTimeout` since one launched by this loop
    /// last reported.
    in_a_row: u32,
    /// The last of them, and what its console said last, if anything.
    last: Option<(String, String)>,
    /// No launch before this.
    launch_after: Option<Instant>,
    /// The launch EC2 refused outright, the last time (a `Degraded` reason
    /// and its message), and how many in a row: a launch that cannot work
    /// backs off as failing boots do, until one works or the spec changes.
    refused: Option<(&'static str, String)>,
    refused_in_a_row: u32,
    /// Instances the loop ended itself (terminated): never boot failures.
    ended: HashSet<String>,
    /// Instances already counted as lost.
    lost: HashSet<String>,
}

/// Of the instances this loop launched (`launched`: when, by id), those
/// that ended before their agent reported — shutting down or terminated,
/// stopping or stopped, or not listed at all [`UNLISTED_FOR`] after their
/// launch — that `booted` (they reported) and `failures` (ended by the loop
/// itself, or counted already) do not account for. Whether each ever had
/// a row is the database's to say; these are the candidates.
pub fn ended_unreported(
    snap: &Snapshot,
    launched: &HashMap<String, DateTime<Utc>>,
    booted: &HashSet<String>,
    failures: &BootFailures,
    now: DateTime<Utc>,
) -> Vec<String> {
    let mut out: Vec<String> = launched
        .iter()
        .filter(|(id, _)| {
            !booted.contains(*id) && !failures.ended.contains(*id) && !failures.lost.contains(*id)
        })
        .filter(
            |(id, at)| match snap.instances().iter().find(|i| i.id() == *id) {
                Some(i) => !matches!(i.state(), Ec2State::Pending | Ec2State::Running),
                None => now - **at > UNLISTED_FOR,
            },
        )
        .map(|(id, _)| id.clone())
        .collect();
    out.sort();
    out
}

impl BootFailures {
    /// `timed_out` instances were retired as `BootTimeout` this pass, the
    /// last of them `last` with `console` its console's last lines;
    /// `reported`: an instance this loop launched has a row (its agent
    /// reported) — the boots work. Whether the pool just became, or got
    /// worse at, failing: worth a Warning.
    pub fn record(
        &mut self,
        timed_out: u32,
        last: Option<(String, String)>,
        reported: bool,
        base: Duration,
        cap: Duration,
    ) -> bool {
        if reported && timed_out == 0 {
            *self = BootFailures::default();
            return false;
        }
        if timed_out == 0 {
            return false;
        }
        self.in_a_row += timed_out;
        if last.is_some() {
            self.last = last;
        }
        if self.in_a_row < FAILING_AFTER {
            return false;
        }
        let wait = doubling(base, self.in_a_row - FAILING_AFTER, cap);
        self.launch_after = Some(Instant::now() + wait);
        true
    }

    /// EC2 refused a launch outright (`reason`, `message`): launches wait,
    /// a minute and then doubling with each refusal more, up to `cap`.
    pub fn refuse(&mut self, reason: &'static str, message: String, base: Duration, cap: Duration) {
        self.refused_in_a_row += 1;
        let wait = doubling(base, self.refused_in_a_row - 1, cap);
        self.launch_after = Some(Instant::now() + wait);
        self.refused = Some((reason, message));
    }

    /// The loop terminated `ids` itself: their ends are no boot failures.
    pub fn ended_by_loop(&mut self, ids: &[String]) {
        self.ended.extend(ids.iter().cloned());
    }

    /// `ids` ended before their agents reported, counted now (see
    /// [`ended_unreported`]); `known` is every id the loop still knows,
    /// and nothing is kept of the others.
    pub fn counted_lost(&mut self, ids: &[String], known: &HashSet<String>) {
        self.lost.extend(ids.iter().cloned());
        self.lost.retain(|id| known.contains(id));
        self.ended.retain(|id| known.contains(id));
    }

    /// A launch worked: a refusal is over.
    pub fn launched(&mut self) {
        self.refused = None;
        self.refused_in_a_row = 0;
        if self.in_a_row < FAILING_AFTER {
            self.launch_after = None;
        }
    }

    /// The spec changed: what EC2 refused may work now; try at once.
    pub fn spec_changed(&mut self) {
        self.lift_refusal();
    }

    /// A refusal for `reason` was mended without a launch (the
    /// credentials refused the launch, and its dry run is allowed now):
    /// launches go on at once. A refusal for another reason stands.
    pub fn lift(&mut self, reason: &str) {
        if self.refused.as_ref().is_some_and(|(r, _)| *r == reason) {
            self.lift_refusal();
        }
    }

    fn lift_refusal(&mut self) {
        if self.refused.take().is_some() {
            self.refused_in_a_row = 0;
            self.launch_after = None;
        }
    }

    /// The `Degraded` reason and message of the last refused launch, while
    /// launches wait for it.
    pub fn refusal(&self) -> Option<(&'static str, String)> {
        let (reason, message) = self.refused.as_ref()?;
        let wait = match self.holding() {
            Some(d) => format!("launches wait {}s", d.as_secs().max(1)),
            None => "the next launch is a try".to_string(),
        };
        Some((reason, format!("{message}; {wait}")))
    }

    /// Whether launches wait now, and until when.
    pub fn holding(&self) -> Option<Duration> {
        self.launch_after
            .and_then(|at| at.checked_duration_since(Instant::now()))
            .filter(|d| !d.is_zero())
    }

    /// The `BootFailing` message, while the pool is failing.
    pub fn failing(&self) -> Option<String> {
        if self.in_a_row < FAILING_AFTER {
            return None;
        }
        let last = match &self.last {
            Some((id, console)) if !console.is_empty() => {
                format!(" (the last: {id}; its console ends: {console})")
            }
            Some((id, _)) => format!(" (the last: {id})"),
            None => String::new(),
        };
        let wait = match self.holding() {
            Some(d) => format!("launches wait {}s", d.as_secs().max(1)),
            None => "the next launch is a try".to_string(),
        };
        // What the instance's script said before it powered off, if it
        // did: the cause.
        let said = self
            .last
            .as_ref()
            .and_then(|(_, console)| {
                // The console's last lines, joined by " / " (see
                // `Ec2::console_tail`).
                console
                    .lines()
                    .flat_map(|l| l.split(" / "))
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .find_map(|l| l.trim().strip_prefix("orca: "))
            })
            .map(|cause| format!(" The last one said: {cause}."))
            .unwrap_or_default();
        Some(format!(
            "{} instances in a row ended or timed out before their agent reported{last}; \
             {wait}.{said} Check the image has this release's agent at launch.agentPath, \
             that its role may read the database URL's parameter, and that the instances \
             reach SSM and the database",
            self.in_a_row
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::warmpool::plan::Ec2Instance;

    fn instance(id: &str, state: Ec2State) -> Ec2Instance {
        Ec2Instance::bare(id, state, Utc::now())
    }

    #[test]
    fn an_instance_that_ends_before_it_reported_is_lost_however_it_ends() {
        let now = Utc::now();
        let snap = Snapshot::default().with_instances(vec![
            instance("i-booting", Ec2State::Running),
            instance("i-pending", Ec2State::Pending),
            instance("i-poweredoff", Ec2State::Terminated),
            instance("i-shutting", Ec2State::ShuttingDown),
            instance("i-stopped", Ec2State::Stopped),
            instance("i-reported", Ec2State::Terminated),
            instance("i-retired", Ec2State::Terminated),
        ]);
        let at = |secs: i64| now - chrono::TimeDelta::seconds(secs);
        let launched: HashMap<String, DateTime<Utc>> = [
            ("i-booting", 30),
            ("i-pending", 5),
            ("i-poweredoff", 30),
            ("i-shutting", 30),
            ("i-stopped", 30),
            ("i-reported", 30),
            ("i-retired", 30),
            ("i-unlisted-new", 10),
            ("i-unlisted-old", 300),
        ]
        .into_iter()
        .map(|(id, secs)| (id.to_string(), at(secs)))
        .collect();
        let booted: HashSet<String> = ["i-reported".to_string()].into();
        let mut failures = BootFailures::default();
        failures.ended_by_loop(&["i-retired".to_string()]);
        let lost = ended_unreported(&snap, &launched, &booted, &failures, now);
        assert_eq!(
            lost,
            ["i-poweredoff", "i-shutting", "i-stopped", "i-unlisted-old"]
        );
        // Counted once.
        let known: HashSet<String> = launched.keys().cloned().collect();
        failures.counted_lost(&lost, &known);
        assert!(ended_unreported(&snap, &launched, &booted, &failures, now).is_empty());
    }

    #[test]
    fn the_failing_message_carries_what_the_script_said() {
        let (base, cap) = (Duration::from_secs(60), Duration::from_secs(600));
        let mut b = BootFailures::default();
        let console =
            "cloud-init: running\norca: the image's orca-pool-agent has no database-url command\n";
        b.record(3, Some(("i-9".into(), console.into())), false, base, cap);
        let said = b.failing().unwrap();
        assert!(
            said.contains(
                "The last one said: the image's orca-pool-agent has no database-url command."
            ),
            "{said}"
        );
    }

    #[test]
    fn a_refused_launch_backs_off_until_one_works_or_the_spec_changes() {
        let (base, cap) = (Duration::from_secs(60), Duration::from_secs(600));
        let mut b = BootFailures::default();
        b.refuse(
            "InstanceProfileNotFound",
            "no such profile".into(),
            base,
            cap,
        );
        assert!(b.holding().is_some_and(|d| d <= base));
        let (reason, said) = b.refusal().expect("refused");
        assert_eq!(reason, "InstanceProfileNotFound");
        assert!(said.starts_with("no such profile; launches wait"), "{said}");
        b.refuse(
            "InstanceProfileNotFound",
            "no such profile".into(),
            base,
            cap,
        );
        assert!(b.holding().unwrap() > base, "doubled");
        b.spec_changed();
        assert!(b.holding().is_none() && b.refusal().is_none());
        b.refuse("LaunchRefused", "gone".into(), base, cap);
        b.launched();
        assert!(b.holding().is_none() && b.refusal().is_none());
    }

    #[test]
    fn failures_in_a_row_back_off_and_a_report_clears_them() {
        let (base, cap) = (Duration::from_secs(60), Duration::from_secs(1800));
        let mut b = BootFailures::default();
        assert!(!b.record(2, Some(("i-1".into(), String::new())), false, base, cap));
        assert!(b.failing().is_none() && b.holding().is_none());
        assert!(b.record(1, Some(("i-3".into(), "no agent".into())), false, base, cap));
        let held = b.holding().expect("launches wait");
        assert!(
            held <= base && held > base - Duration::from_secs(5),
            "{held:?}"
        );
        let said = b.failing().expect("failing");
        assert!(
            said.starts_with("3 instances in a row")
                && said.contains("i-3")
                && said.contains("no agent"),
            "{said}"
        );
        // Each one more doubles the wait, up to the cap.
        b.record(1, None, false, base, cap);
        assert!(b.holding().unwrap() > base);
        b.record(20, None, false, base, cap);
        assert!(b.holding().unwrap() <= cap);
        // A pass with no time-out changes nothing; a report clears it all.
        assert!(!b.record(0, None, false, base, cap));
        assert!(b.failing().is_some());
        assert!(!b.record(0, None, true, base, cap));
        assert!(b.failing().is_none() && b.holding().is_none());
    }
}
