//! Boot failures (docs/operations.md#warmpool-conditions): an AMI without
//! the agent, a wrong `agentPath`, a database URL the instances cannot
//! resolve — each instance dies as `BootTimeout` and is replaced, for ever.
//! Once a few in a row never reported, the pool says so (`Degraded`,
//! `BootFailing`, with the last instance's console) and its launches back
//! off, doubling up to a cap, until an instance it launched reports.

use std::time::{Duration, Instant};

use crate::backoff::doubling;

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
        Some(format!(
            "{} instances in a row never reported within bootTimeoutSeconds{last}; {wait}. \
             Check the image has the agent at launch.agentPath, that the instances reach \
             the database, and idleSeconds",
            self.in_a_row
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
