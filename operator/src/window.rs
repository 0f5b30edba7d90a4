//! Periods read: when a cron expression's period is under way and when the
//! next one starts, in its time zone (see [`crate::crd::Period`]). Pure;
//! the WarmPool's idle schedules and the Scheduler's maintenance windows
//! both ask it.
//!
//! Periods are user input read at every pass, so nothing here may panic or
//! take long whatever the spec says: a period is at most
//! [`MAX_PERIOD_DAYS`] long (a longer one is refused, naming the field), and
//! each question is one search of the cron expression, never a walk over
//! the starts within a period.

use std::str::FromStr;

use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;
use croner::Cron;

use crate::crd::Period;

/// The longest period: a year and a day. Longer ones are refused (the CRD
/// already refuses most), so that no time computed from a period can leave
/// chrono's range.
pub const MAX_PERIOD_DAYS: i64 = 366;

/// A field of a period the operator cannot read; the field's name is the
/// caller's to add (`spec.schedules[0].`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WindowError {
    #[error("cron: {value:?} is not a cron expression: {reason}")]
    Cron { value: String, reason: String },
    #[error("timezone: {value:?} is not a time zone of the IANA database (e.g. Europe/Berlin)")]
    Timezone { value: String },
    #[error("duration: {value:?} is not a duration (e.g. 10h, 30m, 1h30m): {reason}")]
    Duration { value: String, reason: String },
}

/// A period, read.
#[derive(Debug, Clone)]
pub struct Window {
    cron: Cron,
    tz: Tz,
    duration: Duration,
}

impl Window {
    /// `p` read, or the first of its fields that cannot be.
    pub fn parse(p: &Period) -> Result<Window, WindowError> {
        let cron = Cron::from_str(&p.cron).map_err(|e| WindowError::Cron {
            value: p.cron.clone(),
            reason: e.to_string(),
        })?;
        if let Some(why) = never_fires(&p.cron) {
            return Err(WindowError::Cron {
                value: p.cron.clone(),
                reason: why,
            });
        }
        let tz = Tz::from_str(&p.timezone).map_err(|_| WindowError::Timezone {
            value: p.timezone.clone(),
        })?;
        let bad_duration = |reason: String| WindowError::Duration {
            value: p.duration.clone(),
            reason,
        };
        let std =
            humantime::parse_duration(&p.duration).map_err(|e| bad_duration(e.to_string()))?;
        let duration = Duration::from_std(std).map_err(|e| bad_duration(e.to_string()))?;
        if duration <= Duration::zero() {
            return Err(bad_duration("it must be longer than zero".into()));
        }
        if duration > Duration::days(MAX_PERIOD_DAYS) {
            return Err(bad_duration(format!(
                "a period lasts at most {MAX_PERIOD_DAYS} days"
            )));
        }
        Ok(Window { cron, tz, duration })
    }

    /// When the period under way at `now` ends, if one is: its latest
    /// start at or before `now` is less than its duration ago. Of the
    /// periods under way that latest one ends last.
    pub fn under_way(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = now.with_timezone(&self.tz);
        // No start at all before now (say, the 31st of February).
        let start = self.cron.find_previous_occurrence(&local, true).ok()?;
        // Past chrono's last year: not a period of this world.
        let until = start.checked_add_signed(self.duration)?;
        (until > local).then(|| until.with_timezone(&Utc))
    }

    /// When the next period starts after `now`; none if it never does.
    pub fn next_start(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = now.with_timezone(&self.tz);
        self.cron
            .find_next_occurrence(&local, false)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }
}

/// Why `cron` never fires, if it is one of the expressions that cannot:
/// days of the month none of its months has (`0 0 31 2,4 *`), with any
/// day of the week. A search for such an expression's next or last start
/// walks the calendar for centuries before it gives up, at every pass.
/// Only plain numbers are looked at; anything else fires.
fn never_fires(cron: &str) -> Option<String> {
    const DAYS: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    const NAMES: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let fields: Vec<&str> = cron.split_whitespace().collect();
    let [_, _, dom, month, dow] = fields.as_slice() else {
        return None;
    };
    if !matches!(*dow, "*" | "?") {
        return None;
    }
    let days: Vec<u32> = dom
        .split(',')
        .map(|d| d.parse().ok())
        .collect::<Option<_>>()?;
    let months: Vec<usize> = month
        .split(',')
        .map(|m| {
            m.parse::<usize>().ok().or_else(|| {
                NAMES
                    .iter()
                    .position(|n| n.eq_ignore_ascii_case(m))
                    .map(|i| i + 1)
            })
        })
        .collect::<Option<_>>()?;
    let fits = |d: u32, m: usize| (1..=12).contains(&m) && d <= DAYS[m - 1];
    let never = months.iter().all(|&m| days.iter().all(|&d| !fits(d, m)));
    never.then(|| format!("it never fires: none of its months has day {dom}"))
}

/// Where `now` stands among a list of periods (`spec.maintenanceWindows`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Standing {
    /// One of them is under way.
    pub open: bool,
    /// When the next one starts; none if none ever starts again.
    pub next: Option<DateTime<Utc>>,
}

/// Where `now` stands among `periods`, or the first that cannot be read
/// (its place in the list, and why).
pub fn standing(periods: &[Period], now: DateTime<Utc>) -> Result<Standing, (usize, WindowError)> {
    let mut next: Option<DateTime<Utc>> = None;
    let mut open = false;
    for (i, p) in periods.iter().enumerate() {
        let w = Window::parse(p).map_err(|e| (i, e))?;
        open |= w.under_way(now).is_some();
        if let Some(start) = w.next_start(now) {
            next = Some(next.map_or(start, |n| n.min(start)));
        }
    }
    Ok(Standing { open, next })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn period(cron: &str) -> Period {
        Period {
            cron: cron.into(),
            timezone: "UTC".into(),
            duration: "1h".into(),
        }
    }

    #[test]
    fn an_expression_that_never_fires_is_refused_without_a_search() {
        for cron in [
            "* * 31 4,2 *",
            "38 */20 31 6,11 *",
            "0 0 30 feb *",
            "0 0 31 2,4,6 ?",
        ] {
            let e = Window::parse(&period(cron)).expect_err(cron);
            assert!(e.to_string().contains("never fires"), "{cron}: {e}");
        }
        for cron in [
            "0 0 29 2 *",
            "0 0 31 1,2 *",
            "0 0 31 2 1",
            "0 0 L 2 *",
            "0 0 30 */2 *",
        ] {
            assert!(Window::parse(&period(cron)).is_ok(), "{cron}");
        }
    }
}
